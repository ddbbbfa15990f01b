#pragma once
// One engine's configuration under vLLM's names, the same for every backend, and the pieces of
// an engine that follow from it and the memory plan.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/engine.hpp"
#include "core/executor.hpp"
#include "core/kv_allocator.hpp"
#include "core/memory_plan.hpp"
#include "core/model_spec.hpp"
#include "core/scheduler.hpp"

namespace duet {

enum class AllocatorKind { Paged, Naive };
AllocatorKind allocator_kind_from_name(const std::string& name);  // "paged", "naive"
const char* allocator_kind_name(AllocatorKind kind);
ForkKv fork_kv_from_name(const std::string& name);  // "share", "prefix_cache"
const char* fork_kv_name(ForkKv fork_kv);

struct EngineConfig {
  std::string name = "llm";
  ModelSpec model;
  std::optional<double> gpu_memory_utilization = 0.9;
  std::optional<std::int64_t> budget_bytes;
  int block_size = 16;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  int max_model_len = 8192;
  bool enable_prefix_caching = true;
  bool enable_chunked_prefill = true;
  bool scheduler_reserve_full_isl = false;  // SchedulerConfig::reserve_full_prompt
  AllocatorKind allocator = AllocatorKind::Paged;
  ForkKv fork_kv = ForkKv::Share;  // how a fork's child gets its parent's KV (core/engine.hpp)
  std::int64_t runtime_overhead_bytes = kDefaultRuntimeOverheadBytes;
  std::optional<std::int32_t> num_gpu_blocks_override;
  KvLimits limits;  // shared pool: the floor and ceiling on the pages this engine holds
};

// A max_model_len beyond the model's max_position_embeddings is an error (duet::Error naming the
// engine); memory_request checks it, as the first thing every run asks of a configuration.
void check_model_len(const EngineConfig& config);
EngineMemoryRequest memory_request(const EngineConfig& config);
SchedulerConfig scheduler_config(const EngineConfig& config);
// The pages of a shared KV pool (plan.shared), engine i its tenant i with model id i, each with
// its floor and ceiling, and with KvEviction::Cost a block's recompute FLOPs as its eviction
// cost. Throws duet::Error naming the field when the limits cannot hold.
std::shared_ptr<BlockPool> make_shared_pool(const std::vector<EngineConfig>& configs, const MemoryPlan& plan,
                                            KvEviction eviction = KvEviction::Lru);
// The engine's allocator: over a pool of its own, or as tenant model_id of `shared`.
std::unique_ptr<KvAllocator> make_allocator(const EngineConfig& config, const EngineMemory& memory,
                                            std::uint32_t model_id,
                                            std::shared_ptr<BlockPool> shared = nullptr);
// The one place an Engine is put together from its configuration: every backend's engine is
// this, over its own executor (returned as a prvalue: Engine does not move).
Engine assemble_engine(const EngineConfig& config, const EngineMemory& memory, std::uint32_t model_id,
                       Executor& executor, SchedulerPolicy policy = {},
                       std::shared_ptr<BlockPool> shared = nullptr);

}  // namespace duet
