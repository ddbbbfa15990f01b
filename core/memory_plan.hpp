#pragma once
// Who gets which bytes of one GPU. Every engine is given an explicit byte budget (never "free
// memory measured on the device", which breaks when two engines share a GPU); its KV block count
// follows from the thesis formula
//   kv_bytes   = budget - (weights + activations + runtime overhead)
//   num_blocks = kv_bytes / (block_size * kv_bytes_per_token)
// where budget = total * gpu_memory_utilization in vLLM's form. The simulator and the real engine
// both take their block counts from here, so they agree by construction.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/gpu_spec.hpp"
#include "core/model_spec.hpp"

namespace duet {

// CUDA context, cuBLAS workspaces and CUDA graph pools of one engine. vLLM's profiler typically
// attributes a few hundred MiB to "non-torch" memory per process; 512 MiB is a conservative default.
inline constexpr std::int64_t kDefaultRuntimeOverheadBytes = 512LL * 1024 * 1024;

struct EngineMemoryRequest {
  std::string label;  // "llm", "prm": names the engine in errors
  ModelSpec model;
  // Exactly one of these two: vLLM's fraction of the GPU's total memory, or explicit bytes.
  std::optional<double> gpu_memory_utilization;
  std::optional<std::int64_t> budget_bytes;
  int block_size = 16;
  int max_num_batched_tokens = 8192;
  int max_num_seqs = 256;
  std::int64_t runtime_overhead_bytes = kDefaultRuntimeOverheadBytes;
  // vLLM's num_gpu_blocks_override: a what-if pool size (e.g. an unbounded prefix cache), used
  // instead of the block count the budget gives. The weights must still fit.
  std::optional<std::int32_t> num_blocks_override;
};

struct EngineMemory {
  std::string label;
  std::int64_t budget_bytes = 0;
  std::int64_t weight_bytes = 0;
  std::int64_t activation_bytes = 0;
  std::int64_t overhead_bytes = 0;
  std::int64_t kv_bytes = 0;  // what the KV pool may use: num_blocks * block_bytes <= this
  std::int64_t block_bytes = 0;
  int block_size = 0;
  std::int32_t num_blocks = 0;
};

struct MemoryPlan {
  GpuSpec gpu;
  std::vector<EngineMemory> engines;
  std::int64_t unassigned_bytes = 0;  // GPU memory in no engine's budget

  const EngineMemory& engine(const std::string& label) const;
};

// Peak activation memory of one forward pass over max_num_batched_tokens tokens, plus fp32
// logits for max_num_seqs rows (the sampler's input), as vLLM's profiling run would see it.
std::int64_t activation_bytes(const ModelSpec& model, int max_num_batched_tokens, int max_num_seqs);

// Throws duet::Error naming the engine and the figures when a budget is impossible.
MemoryPlan plan_memory(const GpuSpec& gpu, const std::vector<EngineMemoryRequest>& requests);

}  // namespace duet
