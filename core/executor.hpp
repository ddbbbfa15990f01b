#pragma once
// Runs a batch: the simulator prices it with a cost model, the CPU and CUDA engines compute it.
#include "core/batch.hpp"

namespace duet {

// The CUDA engine replays a CUDA graph for decode-only batches of up to this many sequences (its
// buckets end here) and runs larger ones kernel by kernel; the simulator's cost models price
// decode steps the same way.
inline constexpr int kMaxCudaGraphBatch = 256;

class Executor {
 public:
  virtual ~Executor() = default;
  // Performs batch.copies first, then one forward pass over the items.
  virtual StepResult execute(const Batch& batch) = 0;
};

}  // namespace duet
