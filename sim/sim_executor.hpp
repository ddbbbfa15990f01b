#pragma once
// The simulator's Executor: the step takes what the cost model says, sampled tokens follow each
// sequence's OutputScript (its length/stop model) and PRM scores its score model.
#include "core/executor.hpp"
#include "sim/cost_model.hpp"

namespace duet {

class SimExecutor final : public Executor {
 public:
  SimExecutor(const CostModel& cost, int vocab_size) : cost_(cost), vocab_size_(vocab_size) {}
  StepResult execute(const Batch& batch) override;

 private:
  const CostModel& cost_;
  int vocab_size_;
};

}  // namespace duet
