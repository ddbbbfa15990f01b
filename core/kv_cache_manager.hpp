#pragma once
// Paged KV for one model: per-sequence block tables over a BlockPool, longest-prefix reuse of
// cached blocks, copy-on-write forks. The pool is the model's own, or a pool of pages the
// managers of several models share (one tenant each; core/block_pool.hpp).
#include <cstdint>
#include <memory>
#include <vector>

#include "core/block_pool.hpp"
#include "core/kv_allocator.hpp"

namespace duet {

struct KvCacheConfig {
  std::int32_t num_blocks = 0;
  int block_size = 16;
  bool enable_prefix_caching = true;
  std::uint32_t model_id = 0;
  BlockHashFn hash_fn = hash_block;  // injectable so that tests can force collisions
};

class KvCacheManager final : public KvAllocator {
 public:
  // Over a pool of its own.
  explicit KvCacheManager(const KvCacheConfig& config);
  // As tenant `tenant` of a shared pool.
  KvCacheManager(std::shared_ptr<BlockPool> pool, int tenant, bool enable_prefix_caching);

  int lookup_prefix(Sequence& seq) override;
  bool allocate_slots(Sequence& seq, int num_new_tokens, int num_hit_tokens = 0,
                      int num_must_fit = 0) override;
  bool fork(const Sequence& src, Sequence& dst) override;
  void free(Sequence& seq) override;
  void set_priority(Sequence& seq, int priority, bool shared = false) override;
  std::vector<BlockCopy> take_copies() override;
  void set_limits(KvLimits limits) override { pool_->set_limits(tenant_, limits); }

  KvUsage usage() const override;
  KvCounters counters() const override;
  int block_size() const override { return pool_->block_size(tenant_); }

  const BlockPool& pool() const { return *pool_; }
  int tenant() const { return tenant_; }
  bool prefix_caching() const { return caching_; }

 private:
  void extend_hashes(Sequence& seq, int num_full_blocks) const;
  void cache_full_blocks(Sequence& seq, int num_slots);
  void take_block(BlockId b);     // touch, keeping the filled-token count
  void release_block(BlockId b);  // free, keeping the filled-token count

  std::shared_ptr<BlockPool> pool_;
  int tenant_;
  bool caching_;
  std::vector<std::int32_t> fill_;  // tokens written into each block
  std::int64_t filled_tokens_ = 0;  // sum of fill_ over used blocks
  std::vector<BlockCopy> copies_;
  // The pending copies' sources, flagged per block. The last holder's release of one waits in
  // held_ until take_copies: freed at once, it could become another copy's destination in the
  // same step (a GPU runs a step's copies at once).
  std::vector<char> copy_source_;
  std::vector<BlockId> copy_sources_;
  std::vector<BlockId> held_;
  std::vector<BlockId> hit_;  // blocks found by the last lookup_prefix
  SeqId hit_seq_ = 0;
  KvCounters counters_;
};

}  // namespace duet
