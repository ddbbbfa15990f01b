#pragma once
// The simulator's Executor: the step takes what the cost model says, sampled tokens follow each
// sequence's OutputScript (its length/stop model) and PRM scores its score model.
#include <cstdint>
#include <optional>

#include "core/executor.hpp"
#include "sim/cost_model.hpp"

namespace duet {

// The engines of one simulated device take turns on it; this is whose step ran last. A step of
// the engine that ran last finds its working set still in the caches and is priced warm
// (CostModel::warm_step_cost); the first step after another engine's is priced cold. On the CPU
// engine a generator that runs a dozen decode steps between two PRM steps pays for the caches
// once per turn, not once per step (docs/validation.md).
struct DeviceTurns {
  std::optional<std::uint32_t> last_engine;
};

class SimExecutor final : public Executor {
 public:
  // `turns`: shared with the other engines of the device; nullptr for an engine alone on one.
  SimExecutor(const CostModel& cost, int vocab_size, DeviceTurns* turns = nullptr, std::uint32_t engine = 0)
      : cost_(cost), vocab_size_(vocab_size), turns_(turns ? turns : &own_turns_), engine_(engine) {}
  SimExecutor(const SimExecutor&) = delete;
  SimExecutor& operator=(const SimExecutor&) = delete;
  StepResult execute(const Batch& batch) override;

 private:
  const CostModel& cost_;
  int vocab_size_;
  DeviceTurns own_turns_;
  DeviceTurns* turns_;
  std::uint32_t engine_;
};

}  // namespace duet
