#pragma once
// Runs a batch: the simulator prices it with a cost model, the CPU and CUDA engines compute it.
#include <algorithm>
#include <array>

#include "core/batch.hpp"

namespace duet {

// The CUDA engine's graph sizes: a decode-only batch of n sequences replays the CUDA graph of the
// smallest size that holds n, its rows padded to that size, and a larger batch runs kernel by
// kernel. The simulator's cost models price decode steps the same way.
inline constexpr std::array<int, 9> kCudaGraphBatchSizes = {1, 2, 4, 8, 16, 32, 64, 128, 256};
inline constexpr int kMaxCudaGraphBatch = kCudaGraphBatchSizes.back();

// The graph size the CUDA engine replays for a step of this shape; 0 where it runs the step eagerly
// (a prefill, or more sequences than the largest graph).
inline int cuda_graph_batch(const BatchShape& s) {
  if (s.prefill_tokens > 0 || s.decode_seqs < 1) return 0;
  const auto* it = std::lower_bound(kCudaGraphBatchSizes.begin(), kCudaGraphBatchSizes.end(), s.decode_seqs);
  return it == kCudaGraphBatchSizes.end() ? 0 : *it;
}

// The shape the CUDA engine's kernels run for a step: a graph step's is padded to the graph's size
// (exec/cuda_executor.cpp's write_graph_padding: the padding rows are decodes of one token with no
// cached context, and every row's logits are computed); any other step's is its own. The device
// time follows this shape (but for the operator model's decode attention, which the padding rows'
// one key each leaves at the real rows'); the host's follows the real one.
inline BatchShape cuda_graph_shape(const BatchShape& s) {
  const int graph_batch = cuda_graph_batch(s);
  if (graph_batch == 0) return s;
  BatchShape padded = s;
  padded.decode_seqs = padded.decode_tokens = padded.logit_rows = graph_batch;
  return padded;
}

class Executor {
 public:
  virtual ~Executor() = default;
  // Performs batch.copies first, then one forward pass over the items.
  virtual StepResult execute(const Batch& batch) = 0;
};

}  // namespace duet
