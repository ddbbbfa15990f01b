#include "core/block_pool.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "core/error.hpp"

namespace duet {

namespace {

// Whether free block a is evicted before b: the one worth less first. Uncached blocks (worth
// -inf) go most recently freed first, as the front of a list holds them; cached ones of equal
// worth least recently freed first.
bool evicts_before(const Block& a, const Block& b) {
  if (a.worth != b.worth) return a.worth < b.worth;
  return a.cached ? a.freed_at < b.freed_at : a.freed_at > b.freed_at;
}

}  // namespace

BlockPool::BlockPool(std::int32_t num_blocks, int block_size, std::uint32_t model_id, BlockHashFn hash_fn)
    : BlockPool(num_blocks, std::vector<PoolTenant>{PoolTenant{"model", model_id, block_size, hash_fn}}) {}

BlockPool::BlockPool(std::int32_t num_blocks, std::vector<PoolTenant> tenants)
    : by_hash_(std::size_t(std::max(num_blocks, 1))) {
  if (num_blocks <= 0)
    throw Error("BlockPool: num_blocks must be positive, got " + std::to_string(num_blocks));
  if (tenants.empty() || std::ssize(tenants) > kMaxTenants)
    throw Error("BlockPool: a pool serves 1 to " + std::to_string(kMaxTenants) + " models, got " +
                std::to_string(tenants.size()));
  for (PoolTenant& t : tenants) {
    if (t.block_size <= 0)
      throw Error("BlockPool: block_size must be positive, got " + std::to_string(t.block_size) + " for '" +
                  t.label + "'");
    if (!(t.eviction_cost >= 0) || !std::isfinite(t.eviction_cost))
      throw Error("BlockPool: eviction_cost must be finite and not negative, got " +
                  std::to_string(t.eviction_cost) + " for '" + t.label + "'");
    token_stride_ = std::max(token_stride_, t.block_size);
    tenants_.push_back(Tenant{std::move(t), {}, 0, 0, {}});
  }
  blocks_.resize(num_blocks);
  tokens_.resize(std::size_t(num_blocks) * std::size_t(token_stride_));
  for (BlockId b = 0; b < num_blocks; ++b) {
    blocks_[b].worth = -std::numeric_limits<double>::infinity();
    push_back(b, 0);
  }
  num_free_ = num_blocks;
}

void BlockPool::check_tenant(int tenant, const char* what) const {
  if (tenant < 0 || tenant >= num_tenants())
    throw std::logic_error(std::string("BlockPool::") + what + ": no tenant " + std::to_string(tenant));
}

std::int32_t BlockPool::reserved_for_others(int tenant) const {
  std::int32_t reserved = 0;
  for (int t = 0; t < num_tenants(); ++t)
    if (t != tenant)
      reserved += std::max(0, tenants_[std::size_t(t)].limits.min_blocks - tenants_[std::size_t(t)].used);
  return reserved;
}

std::int32_t BlockPool::available(int tenant) const {
  const Tenant& t = tenants_[std::size_t(tenant)];
  const std::int32_t below_ceiling = std::max(0, t.limits.max_blocks - t.used);
  const std::int32_t unreserved = std::max(0, num_free_ - reserved_for_others(tenant));
  return std::min(below_ceiling, unreserved);
}

std::optional<KvLimitsError> kv_limits_error(KvLimits limits) {
  if (limits.min_blocks < 0)
    return KvLimitsError{"min_blocks", "must not be negative, got " + std::to_string(limits.min_blocks)};
  if (limits.max_blocks < limits.min_blocks)
    return KvLimitsError{"max_blocks", std::to_string(limits.max_blocks) + " is below min_blocks (" +
                                           std::to_string(limits.min_blocks) + ")"};
  return std::nullopt;
}

void BlockPool::set_limits(int tenant, KvLimits limits) {
  check_tenant(tenant, "set_limits");
  const std::string who = "'" + label(tenant) + "'";
  if (const auto e = kv_limits_error(limits))
    throw Error(std::string(e->field) + " of " + who + ": " + e->reason);
  std::int64_t floors = limits.min_blocks;
  for (int t = 0; t < num_tenants(); ++t)
    if (t != tenant) floors += tenants_[std::size_t(t)].limits.min_blocks;
  if (floors > num_blocks())
    throw Error("min_blocks: the floors sum to " + std::to_string(floors) + " pages (" + who + " " +
                std::to_string(limits.min_blocks) + "), more than the pool's " +
                std::to_string(num_blocks()));
  tenants_[std::size_t(tenant)].limits = limits;
}

int BlockPool::list_of(const Block& blk) const {
  return (blk.cached ? blk.priority : 0) * kMaxTenants + blk.tenant;
}

void BlockPool::enlist(BlockId b) {
  Block& blk = blocks_[b];
  blk.freed_at = ++free_clock_;
  if (blk.cached) {
    blk.worth = inflation_ + tenants_[blk.tenant].spec.eviction_cost;
    push_back(b, list_of(blk));
  } else {
    blk.worth = -std::numeric_limits<double>::infinity();
    push_front(b, list_of(blk));
  }
}

BlockId BlockPool::eviction_head() const {
  const int first = std::countr_zero(nonempty_) / kMaxTenants * kMaxTenants;
  BlockId best = kNoBlock;
  for (int list = first; list < first + num_tenants(); ++list) {
    const BlockId head = lists_[list].head;
    if (head != kNoBlock && (best == kNoBlock || evicts_before(blocks_[head], blocks_[best]))) best = head;
  }
  return best;
}

void BlockPool::push_front(BlockId b, int list) {
  Block& blk = blocks_[b];
  List& l = lists_[list];
  blk.prev = kNoBlock;
  blk.next = l.head;
  if (l.head != kNoBlock) blocks_[l.head].prev = b;
  else l.tail = b;
  l.head = b;
  blk.in_free_list = true;
  nonempty_ |= std::uint64_t(1) << list;
}

void BlockPool::push_back(BlockId b, int list) {
  Block& blk = blocks_[b];
  List& l = lists_[list];
  blk.next = kNoBlock;
  blk.prev = l.tail;
  if (l.tail != kNoBlock) blocks_[l.tail].next = b;
  else l.head = b;
  l.tail = b;
  blk.in_free_list = true;
  nonempty_ |= std::uint64_t(1) << list;
}

void BlockPool::unlink(BlockId b) {
  Block& blk = blocks_[b];
  const int list = list_of(blk);
  List& l = lists_[list];
  if (blk.prev != kNoBlock) blocks_[blk.prev].next = blk.next;
  else l.head = blk.next;
  if (blk.next != kNoBlock) blocks_[blk.next].prev = blk.prev;
  else l.tail = blk.prev;
  if (l.head == kNoBlock) nonempty_ &= ~(std::uint64_t(1) << list);
  blk.prev = blk.next = kNoBlock;
  blk.in_free_list = false;
}

void BlockPool::uncache(BlockId b) {
  Block& blk = blocks_[b];
  BlockId* head = by_hash_.find(blk.hash);
  if (*head == b) {
    if (blk.hash_next == kNoBlock) by_hash_.erase(blk.hash);
    else *head = blk.hash_next;
  } else {
    BlockId p = *head;
    while (blocks_[p].hash_next != b) p = blocks_[p].hash_next;
    blocks_[p].hash_next = blk.hash_next;
  }
  blk.hash_next = kNoBlock;
  blk.cached = false;
  blk.copied = false;
  blk.content = kNoContent;
  blk.parent = {};
  --num_cached_;
  --tenants_[blk.tenant].cached;
}

BlockId BlockPool::allocate(int tenant) {
  check_tenant(tenant, "allocate");
  if (nonempty_ == 0 || available(tenant) <= 0) return kNoBlock;
  const BlockId b = eviction_head();
  unlink(b);
  Block& blk = blocks_[b];
  if (blk.cached) {
    inflation_ = std::max(inflation_, blk.worth);
    ++tenants_[blk.tenant].stats.evictions;
    ++blk.generation;
    uncache(b);
    ++stats_.evictions;
  }
  blk.ref_count = 1;
  blk.priority = kDefaultPriority;
  blk.tenant = static_cast<std::uint8_t>(tenant);
  --num_free_;
  ++tenants_[std::size_t(tenant)].used;
  ++tenants_[std::size_t(tenant)].stats.allocations;
  ++stats_.allocations;
  return b;
}

void BlockPool::free(BlockId b) {
  Block& blk = blocks_[b];
  if (blk.ref_count <= 0) throw std::logic_error("BlockPool::free of free block " + std::to_string(b));
  if (--blk.ref_count > 0) return;
  if (blk.copied) {
    if (const BlockId other = other_copy(b); other != kNoBlock) {  // the copy in use keeps the content
      drop_copy(b, other);
    } else {
      blk.copied = false;
    }
  }
  enlist(b);
  ++num_free_;
  --tenants_[blk.tenant].used;
}

void BlockPool::touch(BlockId b) {
  Block& blk = blocks_[b];
  if (blk.ref_count == 0) {
    unlink(b);
    --num_free_;
    ++tenants_[blk.tenant].used;
    // A hit makes the content live again: a pruned owner's low priority no longer says what it is
    // worth, while a pin (a priority above the default) stays.
    blk.priority = std::max(blk.priority, std::int8_t(kDefaultPriority));
  }
  ++blk.ref_count;
}

void BlockPool::set_priority(BlockId b, int priority) {
  if (priority < 0 || priority >= kNumPriorities)
    throw Error("retention priority must be in [0, " + std::to_string(kNumPriorities - 1) + "], got " +
                std::to_string(priority));
  Block& blk = blocks_[b];
  if (blk.in_free_list && blk.cached) {
    unlink(b);
    blk.priority = static_cast<std::int8_t>(priority);
    enlist(b);
  } else {
    blk.priority = static_cast<std::int8_t>(priority);
  }
}

BlockHash BlockPool::hash(BlockHash parent_hash, std::span<const TokenId> tokens, int tenant) const {
  const PoolTenant& t = tenants_[std::size_t(tenant)].spec;
  return t.hash_fn(parent_hash, tokens, t.model_id);
}

std::span<const TokenId> BlockPool::stored_tokens(BlockId b) const {
  return {tokens_.data() + std::size_t(b) * std::size_t(token_stride_),
          std::size_t(block_size(blocks_[b].tenant))};
}

BlockId BlockPool::lookup(BlockHash h, BlockRef parent, std::span<const TokenId> tokens, int tenant) const {
  const BlockId* head = by_hash_.find(h);
  if (!head || std::ssize(tokens) != block_size(tenant)) return kNoBlock;
  for (BlockId c = *head; c != kNoBlock; c = blocks_[c].hash_next) {
    const Block& blk = blocks_[c];
    if (blk.tenant == tenant && blk.parent == parent &&
        std::equal(tokens.begin(), tokens.end(), stored_tokens(c).begin()))
      return c;
  }
  return kNoBlock;
}

BlockId BlockPool::other_copy(BlockId b) const {
  const Block& blk = blocks_[b];
  for (BlockId c = *by_hash_.find(blk.hash); c != kNoBlock; c = blocks_[c].hash_next)
    if (c != b && blocks_[c].content == blk.content) return c;
  return kNoBlock;
}

void BlockPool::drop_copy(BlockId dropped, BlockId keeper) {
  blocks_[keeper].priority = std::max(blocks_[keeper].priority, blocks_[dropped].priority);
  uncache(dropped);
}

BlockRef BlockPool::cache(BlockId b, BlockHash h, BlockRef parent, std::span<const TokenId> tokens) {
  Block& blk = blocks_[b];
  if (std::ssize(tokens) != block_size(blk.tenant))
    throw std::logic_error("BlockPool::cache: only full blocks are cached");
  if (parent == kNoContent) throw std::logic_error("BlockPool::cache: the parent caches nothing");
  if (blk.cached) return blk.content;
  const BlockId same = lookup(h, parent, tokens, blk.tenant);
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + std::ptrdiff_t(b) * token_stride_);
  blk.hash = h;
  blk.content = same != kNoBlock ? blocks_[same].content : BlockRef{next_content_++};
  blk.copied = same != kNoBlock;
  blk.parent = parent;
  blk.cached = true;
  auto [head, inserted] = by_hash_.try_emplace(h, b);
  blk.hash_next = inserted ? kNoBlock : *head;
  *head = b;
  ++num_cached_;
  ++tenants_[blk.tenant].cached;
  ++tenants_[blk.tenant].stats.cached_inserts;
  ++stats_.cached_inserts;
  if (same != kNoBlock && blocks_[same].ref_count == 0) {  // a free copy: the one in use is enough
    unlink(same);
    drop_copy(same, b);
    enlist(same);
    blk.copied = false;  // a free block is its content's only copy: b is the only one now
  } else if (same != kNoBlock) {
    blocks_[same].copied = true;
  }
  return blk.content;
}

std::vector<BlockId> BlockPool::eviction_order() const {
  std::vector<BlockId> order;
  order.reserve(std::size_t(num_free_));
  for (int p = 0; p < kNumPriorities; ++p) {
    const std::size_t from = order.size();
    for (int list = p * kMaxTenants; list < (p + 1) * kMaxTenants; ++list)
      for (BlockId b = lists_[list].head; b != kNoBlock; b = blocks_[b].next) order.push_back(b);
    // The tenants' lists, each in order, merged as allocate() takes their heads.
    std::stable_sort(order.begin() + std::ptrdiff_t(from), order.end(),
                     [&](BlockId a, BlockId b) { return evicts_before(blocks_[a], blocks_[b]); });
  }
  return order;
}

void BlockPool::check_consistency() const {
  auto fail = [](const std::string& what) { throw std::logic_error("BlockPool: " + what); };
  std::vector<char> seen(blocks_.size(), 0);
  std::int32_t listed = 0;
  for (int p = 0; p < kNumPriorities * kMaxTenants; ++p) {
    const List& l = lists_[p];
    if (bool(nonempty_ & (std::uint64_t(1) << p)) != (l.head != kNoBlock))
      fail("non-empty mask disagrees with list " + std::to_string(p));
    BlockId prev = kNoBlock;
    for (BlockId b = l.head; b != kNoBlock; b = blocks_[b].next) {
      const Block& blk = blocks_[b];
      if (seen[b]++) fail("block " + std::to_string(b) + " listed twice");
      if (blk.prev != prev) fail("broken prev link at block " + std::to_string(b));
      if (!blk.in_free_list || blk.ref_count != 0) fail("listed block " + std::to_string(b) + " is in use");
      if (list_of(blk) != p) fail("block " + std::to_string(b) + " on the wrong list");
      if (prev != kNoBlock && evicts_before(blk, blocks_[prev]))
        fail("block " + std::to_string(b) + " is out of eviction order in list " + std::to_string(p));
      if (blk.cached != (blk.worth > -std::numeric_limits<double>::infinity()))
        fail("block " + std::to_string(b) + "'s worth disagrees with its being cached");
      prev = b;
      ++listed;
    }
    if (l.tail != prev) fail("bad tail of list " + std::to_string(p));
  }
  if (listed != num_free_)
    fail("free count " + std::to_string(num_free_) + " but " + std::to_string(listed) + " listed");
  std::int32_t cached = 0;
  std::vector<std::int32_t> used(tenants_.size(), 0), tenant_cached(tenants_.size(), 0);
  for (BlockId b = 0; b < num_blocks(); ++b) {
    const Block& blk = blocks_[b];
    if (!seen[b] && (blk.in_free_list || blk.ref_count <= 0))
      fail("block " + std::to_string(b) + " neither free nor used");
    if (blk.tenant >= tenants_.size()) fail("block " + std::to_string(b) + " names no tenant");
    cached += blk.cached;
    tenant_cached[blk.tenant] += blk.cached;
    used[blk.tenant] += blk.ref_count > 0;
  }
  if (cached != num_cached_) fail("cached count mismatch");
  for (std::size_t t = 0; t < tenants_.size(); ++t)
    if (used[t] != tenants_[t].used || tenant_cached[t] != tenants_[t].cached)
      fail("tenant " + std::to_string(t) + "'s used or cached count is off");
  auto same_content = [&](BlockId a, BlockId b) {
    const Block &x = blocks_[a], &y = blocks_[b];
    const auto ta = stored_tokens(a), tb = stored_tokens(b);
    return x.hash == y.hash && x.parent == y.parent && x.tenant == y.tenant &&
           std::equal(ta.begin(), ta.end(), tb.begin(), tb.end());
  };
  // Each content's first block seen: its copies must agree with it, and children find it.
  std::unordered_map<std::uint64_t, BlockId> holder;
  for (BlockId b = 0; b < num_blocks(); ++b) {
    const Block& blk = blocks_[b];
    if (!blk.cached) {
      if (blk.content != kNoContent || blk.copied)
        fail("uncached block " + std::to_string(b) + " names a content or a copy");
      continue;
    }
    if (blk.ref_count == 0 && blk.copied) fail("free block " + std::to_string(b) + " is marked copied");
    if (blk.content == kNoContent || blk.content.content == 0 || blk.content.content >= next_content_)
      fail("cached block " + std::to_string(b) + " has no content number of its own");
    if (blk.parent == kNoContent || blk.parent.content >= next_content_)
      fail("cached block " + std::to_string(b) + " is chained to no content the pool numbered");
    const auto [it, first] = holder.try_emplace(blk.content.content, b);
    if (first) continue;
    const Block& other = blocks_[it->second];
    if (!same_content(b, it->second))
      fail("blocks " + std::to_string(it->second) + " and " + std::to_string(b) +
           " share a content number but not their content");
    if (!blk.copied || !other.copied)
      fail("blocks " + std::to_string(it->second) + " and " + std::to_string(b) +
           " cache one content but are not both marked copied");
    if (blk.ref_count == 0 || other.ref_count == 0)
      fail("free block " + std::to_string(blk.ref_count == 0 ? b : it->second) + " caches a content that " +
           std::to_string(blk.ref_count == 0 ? it->second : b) + " also caches");
  }
  std::int32_t chained = 0;
  by_hash_.for_each([&](BlockHash h, BlockId head) {
    for (BlockId c = head; c != kNoBlock; c = blocks_[c].hash_next) {
      if (!blocks_[c].cached || blocks_[c].hash != h)
        fail("hash chain holds block " + std::to_string(c) + " wrongly");
      for (BlockId d = blocks_[c].hash_next; d != kNoBlock; d = blocks_[d].hash_next)
        if (blocks_[d].content != blocks_[c].content && same_content(c, d))
          fail("blocks " + std::to_string(c) + " and " + std::to_string(d) +
               " cache one content under two numbers");
      // A block's key must be the hash of its stored tokens after its parent's hash, whenever a
      // block still caches that parent.
      ++chained;
      BlockHash parent_hash = kRootHash;
      if (const BlockRef parent = blocks_[c].parent; parent.content != 0) {
        const auto p = holder.find(parent.content);
        if (p == holder.end()) continue;  // no block caches its parent any more: unreachable
        if (blocks_[p->second].tenant != blocks_[c].tenant)
          fail("block " + std::to_string(c) + " is chained to another tenant's block");
        parent_hash = blocks_[p->second].hash;
      }
      if (hash(parent_hash, stored_tokens(c), blocks_[c].tenant) != h)
        fail("block " + std::to_string(c) + " stores tokens that do not hash to its key");
    }
  });
  if (chained != num_cached_) fail("hash map does not hold every cached block exactly once");
}

}  // namespace duet
