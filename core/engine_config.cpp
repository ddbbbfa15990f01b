#include "core/engine_config.hpp"

#include "core/error.hpp"
#include "core/kv_cache_manager.hpp"
#include "core/naive_allocator.hpp"

namespace duet {

AllocatorKind allocator_kind_from_name(const std::string& name) {
  if (name == "paged") return AllocatorKind::Paged;
  if (name == "naive") return AllocatorKind::Naive;
  throw Error("unknown allocator '" + name + "' (valid: paged, naive)");
}

EngineMemoryRequest memory_request(const EngineConfig& c) {
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
  return SchedulerConfig{c.max_num_seqs, c.max_num_batched_tokens, c.enable_chunked_prefill, c.max_model_len};
}

std::unique_ptr<KvAllocator> make_allocator(const EngineConfig& c, const EngineMemory& m,
                                            std::uint32_t model_id) {
  if (c.allocator == AllocatorKind::Naive)
    return std::make_unique<NaiveAllocator>(m.num_blocks, c.block_size, c.max_model_len);
  return std::make_unique<KvCacheManager>(
      KvCacheConfig{m.num_blocks, c.block_size, c.enable_prefix_caching, model_id, hash_block});
}

Engine assemble_engine(const EngineConfig& c, const EngineMemory& m, std::uint32_t model_id,
                       Executor& executor, SchedulerPolicy policy) {
  return Engine(c.name, scheduler_config(c), make_allocator(c, m, model_id), executor, std::move(policy));
}

}  // namespace duet
