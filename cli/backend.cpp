#include "cli/backend.hpp"

#include "core/error.hpp"
#include "sim/sim_engine.hpp"

namespace duet {

namespace {

class SimBackendEngine final : public BuiltEngine {
 public:
  SimBackendEngine(const GpuSpec& gpu, const EngineConfig& c, const EngineMemory& m, std::uint32_t model_id,
                   const std::string& cost_model, SchedulerPolicy policy)
      : sim_(gpu, c, m, model_id, cost_model, std::move(policy)) {}
  Engine& engine() override { return sim_.engine; }
  std::string describe() const override { return sim_.cost->describe(); }

 private:
  SimEngine sim_;
};

}  // namespace

std::unique_ptr<BuiltEngine> build_engine(const BackendOptions& b, const GpuSpec& gpu, const EngineConfig& c,
                                          const EngineMemory& m, std::uint32_t model_id, SchedulerPolicy policy) {
  if (b.name == "sim") return std::make_unique<SimBackendEngine>(gpu, c, m, model_id, b.cost_model, std::move(policy));
  throw Error("unknown backend '" + b.name + "' (valid: sim)");
}

std::unique_ptr<Clock> make_clock(const std::string& backend) {
  if (backend == "sim") return std::make_unique<VirtualClock>();
  throw Error("unknown backend '" + backend + "' (valid: sim)");
}

}  // namespace duet
