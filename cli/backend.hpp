#pragma once
// Engines by backend: the simulator's (cost model) or the real ones (CPU reference; CUDA later).
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
};

struct BackendOptions {
  std::string name = "sim";       // sim or cpu
  std::string cost_model = "roofline";
  std::string load_format = "dummy";  // cpu: "dummy" or a checkpoint path
  std::uint64_t seed = 0;
  std::string source_dir = ".";       // the repository: the tokenizer for PRM label ids
};

std::unique_ptr<BuiltEngine> build_engine(const BackendOptions& backend, const GpuSpec& gpu, const EngineConfig& config,
                                          const EngineMemory& memory, std::uint32_t model_id, SchedulerPolicy policy);
// The clock a backend runs on: virtual time for the simulator, the wall clock for real engines.
std::unique_ptr<Clock> make_clock(const std::string& backend);

}  // namespace duet
