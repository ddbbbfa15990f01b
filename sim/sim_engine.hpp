#pragma once
// A simulated engine: core's Engine over the allocator its config names, priced by a cost model.
#include <memory>
#include <string>

#include "core/engine.hpp"
#include "core/engine_config.hpp"
#include "core/gpu_spec.hpp"
#include "sim/cost_model.hpp"
#include "sim/sim_executor.hpp"

namespace duet {

struct SimEngine {
  SimEngine(const GpuSpec& gpu, const EngineConfig& config, const EngineMemory& memory, std::uint32_t model_id,
            const std::string& cost_model, SchedulerPolicy policy = {});
  std::unique_ptr<CostModel> cost;
  SimExecutor executor;
  Engine engine;
};

}  // namespace duet
