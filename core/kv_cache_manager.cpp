#include "core/kv_cache_manager.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace duet {

namespace {

int ceil_div(int a, int b) { return (a + b - 1) / b; }

std::span<const TokenId> block_tokens(const Sequence& seq, int block_index, int block_size) {
  return {seq.tokens.data() + std::size_t(block_index) * block_size, std::size_t(block_size)};
}

}  // namespace

KvCacheManager::KvCacheManager(const KvCacheConfig& c)
    : KvCacheManager(std::make_shared<BlockPool>(c.num_blocks, c.block_size, c.model_id, c.hash_fn), 0,
                     c.enable_prefix_caching) {}

KvCacheManager::KvCacheManager(std::shared_ptr<BlockPool> pool, int tenant, bool enable_prefix_caching)
    : pool_(std::move(pool)), tenant_(tenant), caching_(enable_prefix_caching) {
  if (!pool_ || tenant < 0 || tenant >= pool_->num_tenants())
    throw std::logic_error("KvCacheManager: tenant " + std::to_string(tenant) + " is not one of the pool's");
  fill_.assign(std::size_t(pool_->num_blocks()), 0);
  copy_source_.assign(std::size_t(pool_->num_blocks()), 0);
}

void KvCacheManager::extend_hashes(Sequence& seq, int num_full_blocks) const {
  auto& hashes = seq.kv.hashes;
  const int bs = pool_->block_size(tenant_);
  for (int i = static_cast<int>(hashes.size()); i < num_full_blocks; ++i)
    hashes.push_back(pool_->hash(i == 0 ? kRootHash : hashes[i - 1], block_tokens(seq, i, bs), tenant_));
}

int KvCacheManager::lookup_prefix(Sequence& seq) {
  hit_.clear();
  hit_seq_ = seq.id;
  if (!caching_ || !seq.kv.blocks.empty() || seq.num_tokens() == 0) return 0;
  const int bs = pool_->block_size(tenant_);
  const int candidates = std::max(0, seq.max_prefix_hit_tokens()) / bs;
  extend_hashes(seq, candidates);
  // The last lookup's hits that still stand, as the pool's lookup would find them: a block still
  // caching the content (numbers are never reused) that no copy shares (the lookup might find the
  // copy first; copies are marked).
  auto& memo = seq.kv.prefix_memo;
  BlockRef parent;
  int i = 0;
  for (const int n = std::min(int(memo.size()), candidates); i < n; ++i) {
    const auto [b, content] = memo[std::size_t(i)];
    const Block& blk = pool_->block(b);
    if (!blk.cached || blk.content != content || blk.copied) break;
    hit_.push_back(b);
    parent = content;
  }
  memo.resize(std::size_t(i));
  for (; i < candidates; ++i) {
    const BlockId b = pool_->lookup(seq.kv.hashes[i], parent, block_tokens(seq, i, bs), tenant_);
    if (b == kNoBlock) break;
    hit_.push_back(b);
    parent = pool_->ref(b);
    memo.emplace_back(b, parent);
  }
  return static_cast<int>(hit_.size()) * bs;
}

void KvCacheManager::take_block(BlockId b) {
  if (pool_->block(b).ref_count == 0) filled_tokens_ += fill_[b];
  pool_->touch(b);
}

void KvCacheManager::release_block(BlockId b) {
  if (copy_source_[std::size_t(b)] && pool_->block(b).ref_count == 1) {
    held_.push_back(b);  // released by take_copies
    return;
  }
  pool_->free(b);
  if (pool_->block(b).ref_count == 0) filled_tokens_ -= fill_[b];
}

bool KvCacheManager::allocate_slots(Sequence& seq, int num_new_tokens, int num_hit_tokens, int num_must_fit) {
  const int bs = pool_->block_size(tenant_);
  KvState& kv = seq.kv;
  if (num_new_tokens < 0) throw std::logic_error("allocate_slots: negative token count");
  if (num_hit_tokens > 0 &&
      (hit_seq_ != seq.id || num_hit_tokens != int(hit_.size()) * bs || !kv.blocks.empty()))
    throw std::logic_error("allocate_slots: hits must come from lookup_prefix of this sequence");
  const int hit_blocks = num_hit_tokens / bs;
  const int start = std::max(kv.num_slots, num_hit_tokens);  // first slot written this step
  const int end = start + num_new_tokens;
  const int have = static_cast<int>(kv.blocks.size()) + hit_blocks;
  const int fresh = std::max(0, ceil_div(end, bs) - have);
  const int must_fit = std::max(fresh, ceil_div(start + num_must_fit, bs) - have);

  // Writing into a partly filled block that a fork shares needs a private copy first.
  const int write_block = start / bs;
  const bool cow = num_new_tokens > 0 && start % bs != 0 && write_block < int(kv.blocks.size()) &&
                   pool_->block(kv.blocks[write_block]).ref_count > 1;

  int reusable_free_hits = 0;  // hit blocks that sit on the free lists count against free space
  for (int i = 0; i < hit_blocks; ++i) reusable_free_hits += pool_->block(hit_[i]).ref_count == 0;
  // On a shared pool, what the other models' floors reserve and this model's ceiling are not free.
  if (must_fit + int(cow) > pool_->available(tenant_) - reusable_free_hits) return false;

  // An admission: the sequence stops waiting. As in vLLM V1's prefix-cache statistics, a
  // re-admission after a preemption is no query: its hits are mostly its own blocks, freed when it
  // was preempted, and the hit rate is meant to measure what requests share.
  const bool admission = kv.blocks.empty() && caching_;
  const bool counted = admission && seq.num_preemptions == 0;
  if (counted) counters_.query_tokens += seq.num_tokens();
  if (admission) std::vector<std::pair<BlockId, BlockRef>>().swap(kv.prefix_memo);
  if (hit_blocks > 0) {
    for (int i = 0; i < hit_blocks; ++i) {
      take_block(hit_[i]);
      kv.blocks.push_back(hit_[i]);
    }
    kv.num_slots = num_hit_tokens;
    kv.num_cached_blocks = hit_blocks;
    kv.last_cached = pool_->ref(hit_.back());
    if (counted) counters_.hit_tokens += num_hit_tokens;
    hit_.clear();
  }
  if (cow) {
    const BlockId old = kv.blocks[write_block];
    const BlockId copy = pool_->allocate(tenant_);
    fill_[copy] = fill_[old];
    filled_tokens_ += fill_[copy];
    release_block(old);
    if (!copy_source_[std::size_t(old)]) copy_sources_.push_back(old);
    copy_source_[std::size_t(old)] = 1;
    kv.blocks[write_block] = copy;
    copies_.push_back({old, copy});
    ++counters_.cow_copies;
  }
  for (int i = 0; i < fresh; ++i) {
    const BlockId b = pool_->allocate(tenant_);
    fill_[b] = 0;
    kv.blocks.push_back(b);
  }
  for (int pos = kv.num_slots; pos < end;) {  // account the new slots block by block
    const BlockId b = kv.blocks[pos / bs];
    const int take = std::min(end - pos, bs - pos % bs);
    fill_[b] = pos % bs + take;
    filled_tokens_ += take;
    pos += take;
  }
  kv.num_slots = std::max(kv.num_slots, end);
  if (caching_) cache_full_blocks(seq, kv.num_slots);
  return true;
}

void KvCacheManager::cache_full_blocks(Sequence& seq, int num_slots) {
  KvState& kv = seq.kv;
  const int bs = pool_->block_size(tenant_);
  // Only blocks whose token ids are known: a slot may be reserved ahead of its token.
  const int full = std::min(num_slots, seq.num_tokens()) / bs;
  if (full <= kv.num_cached_blocks) return;
  extend_hashes(seq, full);
  for (int i = kv.num_cached_blocks; i < full; ++i) {
    kv.last_cached = pool_->cache(kv.blocks[i], kv.hashes[i], kv.last_cached, block_tokens(seq, i, bs));
  }
  kv.num_cached_blocks = full;
}

bool KvCacheManager::fork(const Sequence& src, Sequence& dst) {
  if (!dst.kv.blocks.empty()) throw std::logic_error("fork: destination already holds blocks");
  const std::int32_t naive_region = dst.kv.naive_region;
  dst.kv = src.kv;
  dst.kv.naive_region = naive_region;
  for (BlockId b : dst.kv.blocks) take_block(b);
  return true;
}

void KvCacheManager::free(Sequence& seq) {
  KvState& kv = seq.kv;
  for (auto it = kv.blocks.rbegin(); it != kv.blocks.rend(); ++it) release_block(*it);
  kv.blocks.clear();
  kv.num_slots = 0;
  kv.num_cached_blocks = 0;
  kv.last_cached = {};
}

void KvCacheManager::set_priority(Sequence& seq, int priority, bool shared) {
  for (BlockId b : seq.kv.blocks)
    if (shared || pool_->block(b).ref_count == 1) pool_->set_priority(b, priority);
}

std::vector<BlockCopy> KvCacheManager::take_copies() {
  std::vector<BlockCopy> out;
  out.swap(copies_);
  for (BlockId b : copy_sources_) copy_source_[std::size_t(b)] = 0;
  copy_sources_.clear();
  for (BlockId b : held_) release_block(b);
  held_.clear();
  return out;
}

KvUsage KvCacheManager::usage() const {
  KvUsage u;
  u.total_blocks = pool_->num_blocks();
  u.used_blocks = pool_->tenant_used(tenant_);
  u.unavailable_blocks = u.total_blocks - u.used_blocks - pool_->available(tenant_);
  u.cached_blocks = pool_->tenant_cached(tenant_);
  u.filled_tokens = filled_tokens_;
  u.block_size = pool_->block_size(tenant_);
  u.limits = pool_->limits(tenant_);
  return u;
}

KvCounters KvCacheManager::counters() const {
  KvCounters c = counters_;
  c.evictions = pool_->tenant_stats(tenant_).evictions;
  return c;
}

}  // namespace duet
