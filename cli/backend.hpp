#pragma once
// Engines by backend: the simulator's (cost model) or the real ones (CPU reference; CUDA when the
// build has it).
// Every backend builds core's Engine over the allocator its config names, with block counts from
// the same MemoryPlan.
#include <memory>
#include <string>

#include "core/clock.hpp"
#include "core/engine.hpp"
#include "core/engine_config.hpp"
#include "core/gpu_spec.hpp"

namespace duet {

class BuiltEngine {
 public:
  virtual ~BuiltEngine() = default;
  virtual Engine& engine() = 0;
  virtual std::string describe() const = 0;
  // Host time of the last step spent preparing its batch (StepRecord::cpu_s); 0 where the backend
  // does not measure it (the simulator, the CPU reference).
  virtual double last_cpu_s() const { return 0.0; }
};

// The backends this build has, for messages: "sim, cpu" or "sim, cpu, cuda".
const char* backend_names();

struct BackendOptions {
  std::string name = "sim";       // sim, cpu or (DUET_HAVE_CUDA builds) cuda
  std::string cost_model = "roofline";
  std::string load_format = "dummy";  // cpu, cuda: "dummy" or a checkpoint path
  std::uint64_t seed = 0;
  std::string source_dir = ".";       // the repository: the tokenizer for PRM label ids
};

std::unique_ptr<BuiltEngine> build_engine(const BackendOptions& backend, const GpuSpec& gpu, const EngineConfig& config,
                                          const EngineMemory& memory, std::uint32_t model_id, SchedulerPolicy policy);
// The clock a backend runs on: virtual time for the simulator, the wall clock for real engines.
std::unique_ptr<Clock> make_clock(const std::string& backend);

}  // namespace duet
