#pragma once
// Runs a batch: the simulator prices it with a cost model, the CPU and CUDA engines compute it.
#include "core/batch.hpp"

namespace duet {

class Executor {
 public:
  virtual ~Executor() = default;
  // Performs batch.copies first, then one forward pass over the items.
  virtual StepResult execute(const Batch& batch) = 0;
};

}  // namespace duet
