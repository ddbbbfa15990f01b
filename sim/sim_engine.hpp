#pragma once
// The simulator's executor over a cost model: what the backend registry (exec/backend.hpp)
// builds an Engine on for the "sim" backend.
#include <memory>
#include <string>

#include "sim/cost_model.hpp"
#include "sim/sim_executor.hpp"

namespace duet {

struct SimExecution {
  SimExecution(std::unique_ptr<CostModel> cost_model, int vocab_size, DeviceTurns* turns = nullptr,
               std::uint32_t engine = 0)
      : cost(std::move(cost_model)), executor(*cost, vocab_size, turns, engine) {}
  std::unique_ptr<CostModel> cost;
  SimExecutor executor;
};

}  // namespace duet
