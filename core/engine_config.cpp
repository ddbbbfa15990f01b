#include "core/engine_config.hpp"

#include <stdexcept>

#include "core/error.hpp"
#include "core/kv_cache_manager.hpp"
#include "core/naive_allocator.hpp"

namespace duet {

AllocatorKind allocator_kind_from_name(const std::string& name) {
  if (name == "paged") return AllocatorKind::Paged;
  if (name == "naive") return AllocatorKind::Naive;
  throw Error("unknown allocator '" + name + "' (valid: paged, naive)");
}

const char* allocator_kind_name(AllocatorKind kind) {
  return kind == AllocatorKind::Paged ? "paged" : "naive";
}

ForkKv fork_kv_from_name(const std::string& name) {
  if (name == "share") return ForkKv::Share;
  if (name == "prefix_cache") return ForkKv::PrefixCache;
  throw Error("unknown fork_kv '" + name + "' (valid: share, prefix_cache)");
}

const char* fork_kv_name(ForkKv fork_kv) { return fork_kv == ForkKv::Share ? "share" : "prefix_cache"; }

void check_model_len(const EngineConfig& c) {
  // vLLM refuses a max_model_len beyond the model's context: positions past it have no trained
  // RoPE frequencies, and the run would price contexts the model cannot hold.
  const int model_len = c.model.max_position_embeddings;
  if (model_len > 0 && c.max_model_len > model_len)
    throw Error("engine '" + c.name + "': max_model_len " + std::to_string(c.max_model_len) + " exceeds " +
                c.model.name + "'s max_position_embeddings (" + std::to_string(model_len) + ")");
}

EngineMemoryRequest memory_request(const EngineConfig& c) {
  check_model_len(c);
  EngineMemoryRequest r;
  r.label = c.name;
  r.model = c.model;
  if (c.budget_bytes) r.budget_bytes = c.budget_bytes;
  else r.gpu_memory_utilization = c.gpu_memory_utilization;
  r.block_size = c.block_size;
  r.max_num_batched_tokens = c.max_num_batched_tokens;
  r.max_num_seqs = c.max_num_seqs;
  r.runtime_overhead_bytes = c.runtime_overhead_bytes;
  r.num_blocks_override = c.num_gpu_blocks_override;
  return r;
}

SchedulerConfig scheduler_config(const EngineConfig& c) {
  return SchedulerConfig{c.max_num_seqs, c.max_num_batched_tokens, c.enable_chunked_prefill, c.max_model_len,
                         c.scheduler_reserve_full_isl};
}

std::shared_ptr<BlockPool> make_shared_pool(const std::vector<EngineConfig>& configs, const MemoryPlan& plan,
                                            KvEviction eviction) {
  if (!plan.shared) throw std::logic_error("make_shared_pool: the plan has no shared pool");
  std::vector<PoolTenant> tenants;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    // What recomputing an evicted block costs: its tokens through the layers' projections and
    // MLP (no LM head: a recomputed prefix is not sampled; attention's share grows with the
    // context and is left out, the smaller part at these lengths).
    const double cost =
        eviction == KvEviction::Cost ? configs[i].block_size * configs[i].model.layer_flops_per_token() : 0.0;
    tenants.push_back({configs[i].name, std::uint32_t(i), configs[i].block_size, hash_block, cost});
  }
  auto pool = std::make_shared<BlockPool>(plan.shared->num_pages, std::move(tenants));
  for (std::size_t i = 0; i < configs.size(); ++i) pool->set_limits(int(i), configs[i].limits);
  return pool;
}

std::unique_ptr<KvAllocator> make_allocator(const EngineConfig& c, const EngineMemory& m,
                                            std::uint32_t model_id, std::shared_ptr<BlockPool> shared) {
  if (c.allocator == AllocatorKind::Naive) {
    if (shared)
      throw Error("engine '" + c.name +
                  "': allocator 'naive' reserves regions of a private pool; a shared pool " +
                  "needs allocator 'paged'");
    return std::make_unique<NaiveAllocator>(m.num_blocks, c.block_size, c.max_model_len);
  }
  if (shared)
    return std::make_unique<KvCacheManager>(std::move(shared), int(model_id), c.enable_prefix_caching);
  auto kv = std::make_unique<KvCacheManager>(
      KvCacheConfig{m.num_blocks, c.block_size, c.enable_prefix_caching, model_id, hash_block});
  kv->set_limits(c.limits);
  return kv;
}

Engine assemble_engine(const EngineConfig& c, const EngineMemory& m, std::uint32_t model_id,
                       Executor& executor, SchedulerPolicy policy, std::shared_ptr<BlockPool> shared) {
  std::unique_ptr<KvAllocator> kv = make_allocator(c, m, model_id, std::move(shared));
  try {
    return Engine(c.name, scheduler_config(c), std::move(kv), executor, std::move(policy), c.fork_kv,
                  cannot_generate_reason(c.model));
  } catch (const Error& e) {  // the scheduler's checks of its configuration name no engine
    throw Error("engine '" + c.name + "': " + e.what());
  }
}

}  // namespace duet
