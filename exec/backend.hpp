#pragma once
// The backends, in one place: the simulator ("sim", a cost model), the CPU reference engine
// ("cpu") and the CUDA engine ("cuda", in builds that have CUDA). Each turns an engine's
// configuration into core's Engine (assemble_engine) over its own executor, with block counts from
// the same MemoryPlan; this file is the only one outside exec/'s CUDA build that knows whether the
// build has CUDA.
#include <memory>
#include <string>
#include <vector>

#include "core/clock.hpp"
#include "core/engine.hpp"
#include "core/engine_config.hpp"
#include "core/gpu_spec.hpp"
#include "exec/vocabulary.hpp"
#include "sim/cost_model.hpp"
#include "sim/sim_executor.hpp"

namespace duet {

// Every backend duet knows, built or not, and the ones this build has ("sim, cpu[, cuda]").
const std::vector<std::string>& all_backends();
std::string backend_names();
// Throws a clear error for an unknown backend, or for "cuda" in a build without CUDA.
void check_backend(const std::string& name);
// Real engines run on the wall clock; the simulator on virtual time.
bool is_real_backend(const std::string& name);
// The clock a backend runs on.
std::unique_ptr<Clock> make_clock(const std::string& backend);

// The device a real backend measures, as a profile key (sim/profiles.hpp): "cpu-<model name>"
// from /proc/cpuinfo for "cpu", the detected GPU's spec ("h100-sxm") for "cuda". For "sim", the
// simulated GPU's key.
std::string device_key(const std::string& backend, const GpuSpec& gpu);
// The device's own name (the CPU's model name, the driver's GPU name; the spec's name for sim).
std::string device_name(const std::string& backend);

struct BackendOptions {
  std::string name = "sim";
  // sim: "auto" (the device's profile if one is committed, else the roofline), "roofline" or
  // "profile:PATH".
  std::string cost_model = "auto";
  std::string cost_device;              // sim: whose profile to look for (empty: the simulated GPU's)
  std::string profile_dir;              // sim: where profiles are looked up (empty: nowhere)
  DeviceTurns* device_turns = nullptr;  // sim: whose step ran last on the device (sim/sim_executor.hpp)
  std::string load_format = "dummy";    // cpu, cuda: "dummy" or a checkpoint path
  std::uint64_t seed = 0;
  std::string source_dir = ".";  // the repository: the tokenizer behind the vocabulary
};

// The engines of one shared KV pool (kv_pool = "shared"): its pages, and for a real backend the
// memory behind them, made by the first engine that needs it and borrowed by the others.
struct SharedKvPool {
  std::shared_ptr<BlockPool> pages;
  std::shared_ptr<std::vector<float>> host_arena;  // cpu: float32, KvLayout::total_elems()
  std::shared_ptr<void> device_arena;              // cuda: a CudaKvArena
};

// An Engine with what it runs on.
class BuiltEngine {
 public:
  virtual ~BuiltEngine() = default;
  virtual Engine& engine() = 0;
  virtual Executor& executor() = 0;
  virtual std::string describe() const = 0;
  // The simulator's cost model; nullptr for real engines.
  virtual const CostModel* cost_model() const { return nullptr; }
  const Vocabulary& vocabulary() const { return vocabulary_; }

 protected:
  explicit BuiltEngine(Vocabulary v) : vocabulary_(std::move(v)) {}

 private:
  Vocabulary vocabulary_;
};

// `shared`: the engine is tenant model_id of that pool (nullptr: a pool of its own).
std::unique_ptr<BuiltEngine> make_engine(const BackendOptions& backend, const GpuSpec& gpu,
                                         const EngineConfig& config, const EngineMemory& memory,
                                         std::uint32_t model_id, SchedulerPolicy policy = {},
                                         SharedKvPool* shared = nullptr);

}  // namespace duet
