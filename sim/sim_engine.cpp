#include "sim/sim_engine.hpp"

namespace duet {

SimEngine::SimEngine(const GpuSpec& gpu, const EngineConfig& config, const EngineMemory& memory,
                     std::uint32_t model_id, const std::string& cost_model, SchedulerPolicy policy)
    : cost(make_cost_model(cost_model, gpu, config.model)),
      executor(*cost, config.model.vocab_size),
      engine(config.name, scheduler_config(config), make_allocator(config, memory, model_id), executor,
             std::move(policy)) {}

}  // namespace duet
