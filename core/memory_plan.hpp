#pragma once
// Who gets which bytes of one GPU. Every engine is given an explicit byte budget (never "free
// memory measured on the device", which breaks when two engines share a GPU); its KV block count
// follows from the thesis formula
//   kv_bytes   = budget - (weights + activations + runtime overhead)
//   num_blocks = kv_bytes / (block_size * kv_bytes_per_token)
// where budget = total * gpu_memory_utilization in vLLM's form. The simulator and the real engine
// both take their block counts from here, so they agree by construction.
//
// A shared pool (kv_pool = "shared") pools what the budgets leave for KV: every engine's block
// must have the same bytes (a page), and
//   num_pages = sum over engines of kv_bytes / page_bytes
// so that a shared pool and a static split of the same budgets hold the same KV memory.
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

enum class KvPoolKind { Static, Shared };
KvPoolKind kv_pool_kind_from_name(const std::string& name);  // "static", "shared"
const char* kv_pool_kind_name(KvPoolKind kind);

// Bytes as "%.2f GiB", for messages. A double: a product of blocks and block bytes may exceed int64.
std::string gib(double bytes);

// Why a share of the GPU's memory (vLLM's gpu_memory_utilization) is none, "" when it is one:
// in (0, 1].
std::string memory_share_problem(double share);

// The default block size of the model with the fewest KV bytes per token on a shared pool (the
// generator, Llama-3.2-1B: vLLM's 16, so that Llama-3.1-8B gets 4). Against 64/16 on the thesis
// workload in the simulator (scripts/shared_pool.lua, H100 and A100-40GB): 16/4 gave 11% to 4.4x more
// problems/s at every point (bench/results/shared-pool.md), as its smaller generator blocks waste
// less of each beam's last block and the PRM's let its prefix cache hit more of each trajectory.
inline constexpr int kSharedPoolBlockSize = 16;

struct SharedPoolMemory {
  std::int64_t kv_bytes = 0;    // the engines' KV bytes together
  std::int64_t page_bytes = 0;  // every engine's block bytes
  std::int32_t num_pages = 0;
};

struct MemoryPlan {
  GpuSpec gpu;
  // Static: each engine's num_blocks is its own pool. Shared: each engine's num_blocks is the
  // shared pool's page count, and kv_bytes what its budget gives the pool.
  std::vector<EngineMemory> engines;
  std::optional<SharedPoolMemory> shared;
  std::int64_t unassigned_bytes = 0;  // GPU memory in no engine's budget

  const EngineMemory& engine(const std::string& label) const;
};

// Peak activation memory of one forward pass over max_num_batched_tokens tokens, plus fp32
// logits for max_num_seqs rows (the sampler's input), as vLLM's profiling run would see it.
std::int64_t activation_bytes(const ModelSpec& model, int max_num_batched_tokens, int max_num_seqs);

// Which cached page a shared pool evicts first (kv_eviction): the least recently freed whoever's
// it is (lru), or the one whose loss costs least, its recompute FLOPs aging GreedyDual-style
// (cost; see core/block_pool.hpp).
enum class KvEviction { Lru, Cost };
KvEviction kv_eviction_from_name(const std::string& name);  // "lru", "cost"
const char* kv_eviction_name(KvEviction eviction);

struct KvPoolRequest {
  KvPoolKind kind = KvPoolKind::Static;
  std::optional<std::int32_t> num_pages_override;  // shared: a what-if page count (kv_pool_blocks)
  KvEviction eviction = KvEviction::Lru;           // shared: kv_eviction
};

// Throws duet::Error naming the engine and the figures when a budget is impossible, and for a
// shared pool when the engines' block bytes differ.
MemoryPlan plan_memory(const GpuSpec& gpu, const std::vector<EngineMemoryRequest>& requests,
                       const KvPoolRequest& pool = {});

// Block sizes with equal bytes for models sharing one pool. A block must hold a whole number of each
// model's tokens, so its bytes are a multiple of the least common multiple of their KV bytes per
// token: the model with the fewest bytes per token gets the fewest tokens, at least
// `smallest_model_block_size`, that such a block holds, and every other one what fits in its bytes.
// Where the others' bytes divide the smallest's block that is exactly the size asked (Llama-3.2-1B
// at 16 gives Llama-3.1-8B 4); Llama-3.2-1B (32 KiB a token) beside Qwen2.5-Math-PRM-7B (56 KiB)
// gets 21 and 12. Throws duet::Error naming the models when no block of at most 1024 tokens fits.
std::vector<int> equal_byte_block_sizes(const std::vector<ModelSpec>& models, int smallest_model_block_size);

}  // namespace duet
