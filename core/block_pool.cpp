#include "core/block_pool.hpp"

#include <algorithm>
#include <bit>
#include <stdexcept>
#include <string>

#include "core/error.hpp"

namespace duet {

BlockPool::BlockPool(std::int32_t num_blocks, int block_size, std::uint32_t model_id, BlockHashFn hash_fn)
    : by_hash_(std::size_t(std::max(num_blocks, 1))),
      block_size_(block_size),
      model_id_(model_id),
      hash_fn_(hash_fn) {
  if (num_blocks <= 0)
    throw Error("BlockPool: num_blocks must be positive, got " + std::to_string(num_blocks));
  if (block_size <= 0)
    throw Error("BlockPool: block_size must be positive, got " + std::to_string(block_size));
  blocks_.resize(num_blocks);
  tokens_.resize(std::size_t(num_blocks) * block_size);
  for (BlockId b = 0; b < num_blocks; ++b) push_back(b, 0);
  num_free_ = num_blocks;
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
  nonempty_ |= 1u << list;
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
  nonempty_ |= 1u << list;
}

void BlockPool::unlink(BlockId b) {
  Block& blk = blocks_[b];
  // A block on the free lists is on the list of its priority, except uncached blocks, which
  // always sit at the front of list 0.
  const int list = blk.cached ? blk.priority : 0;
  List& l = lists_[list];
  if (blk.prev != kNoBlock) blocks_[blk.prev].next = blk.next;
  else l.head = blk.next;
  if (blk.next != kNoBlock) blocks_[blk.next].prev = blk.prev;
  else l.tail = blk.prev;
  if (l.head == kNoBlock) nonempty_ &= ~(1u << list);
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
  blk.parent = {};
  ++blk.generation;
  --num_cached_;
}

BlockId BlockPool::allocate() {
  if (nonempty_ == 0) return kNoBlock;
  const int list = std::countr_zero(nonempty_);
  const BlockId b = lists_[list].head;
  unlink(b);
  Block& blk = blocks_[b];
  if (blk.cached) {
    uncache(b);
    ++stats_.evictions;
  }
  blk.ref_count = 1;
  blk.priority = kDefaultPriority;
  --num_free_;
  ++stats_.allocations;
  return b;
}

void BlockPool::free(BlockId b) {
  Block& blk = blocks_[b];
  if (blk.ref_count <= 0) throw std::logic_error("BlockPool::free of free block " + std::to_string(b));
  if (--blk.ref_count > 0) return;
  if (blk.cached) push_back(b, blk.priority);
  else push_front(b, 0);
  ++num_free_;
}

void BlockPool::touch(BlockId b) {
  Block& blk = blocks_[b];
  if (blk.ref_count == 0) {
    unlink(b);
    --num_free_;
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
    push_back(b, priority);
  } else {
    blk.priority = static_cast<std::int8_t>(priority);
  }
}

BlockHash BlockPool::hash(BlockHash parent_hash, std::span<const TokenId> tokens) const {
  return hash_fn_(parent_hash, tokens, model_id_);
}

std::span<const TokenId> BlockPool::stored_tokens(BlockId b) const {
  return {tokens_.data() + std::size_t(b) * block_size_, std::size_t(block_size_)};
}

BlockId BlockPool::lookup(BlockHash h, BlockRef parent, std::span<const TokenId> tokens) const {
  const BlockId* head = by_hash_.find(h);
  if (!head || std::ssize(tokens) != block_size_) return kNoBlock;
  for (BlockId c = *head; c != kNoBlock; c = blocks_[c].hash_next) {
    const Block& blk = blocks_[c];
    if (blk.parent == parent && std::equal(tokens.begin(), tokens.end(), stored_tokens(c).begin())) return c;
  }
  return kNoBlock;
}

BlockId BlockPool::cache(BlockId b, BlockHash h, BlockRef parent, std::span<const TokenId> tokens) {
  if (std::ssize(tokens) != block_size_)
    throw std::logic_error("BlockPool::cache: only full blocks are cached");
  Block& blk = blocks_[b];
  if (blk.cached) return b;
  if (const BlockId same = lookup(h, parent, tokens); same != kNoBlock) return same;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + std::ptrdiff_t(b) * block_size_);
  blk.hash = h;
  blk.parent = parent;
  blk.cached = true;
  auto [head, inserted] = by_hash_.try_emplace(h, b);
  blk.hash_next = inserted ? kNoBlock : *head;
  *head = b;
  ++num_cached_;
  ++stats_.cached_inserts;
  return b;
}

std::vector<BlockId> BlockPool::eviction_order() const {
  std::vector<BlockId> order;
  order.reserve(std::size_t(num_free_));
  for (const List& l : lists_)
    for (BlockId b = l.head; b != kNoBlock; b = blocks_[b].next) order.push_back(b);
  return order;
}

void BlockPool::check_consistency() const {
  auto fail = [](const std::string& what) { throw std::logic_error("BlockPool: " + what); };
  std::vector<char> seen(blocks_.size(), 0);
  std::int32_t listed = 0;
  for (int p = 0; p < kNumPriorities; ++p) {
    const List& l = lists_[p];
    if (bool(nonempty_ & (1u << p)) != (l.head != kNoBlock))
      fail("non-empty mask disagrees with list " + std::to_string(p));
    BlockId prev = kNoBlock;
    for (BlockId b = l.head; b != kNoBlock; b = blocks_[b].next) {
      const Block& blk = blocks_[b];
      if (seen[b]++) fail("block " + std::to_string(b) + " listed twice");
      if (blk.prev != prev) fail("broken prev link at block " + std::to_string(b));
      if (!blk.in_free_list || blk.ref_count != 0) fail("listed block " + std::to_string(b) + " is in use");
      if ((blk.cached ? blk.priority : 0) != p) fail("block " + std::to_string(b) + " on the wrong list");
      prev = b;
      ++listed;
    }
    if (l.tail != prev) fail("bad tail of list " + std::to_string(p));
  }
  if (listed != num_free_)
    fail("free count " + std::to_string(num_free_) + " but " + std::to_string(listed) + " listed");
  std::int32_t cached = 0;
  for (BlockId b = 0; b < num_blocks(); ++b) {
    const Block& blk = blocks_[b];
    if (!seen[b] && (blk.in_free_list || blk.ref_count <= 0))
      fail("block " + std::to_string(b) + " neither free nor used");
    cached += blk.cached;
  }
  if (cached != num_cached_) fail("cached count mismatch");
  std::int32_t chained = 0;
  by_hash_.for_each([&](BlockHash h, BlockId head) {
    for (BlockId c = head; c != kNoBlock; c = blocks_[c].hash_next) {
      if (!blocks_[c].cached || blocks_[c].hash != h)
        fail("hash chain holds block " + std::to_string(c) + " wrongly");
      // A block's key must be the hash of its stored tokens after its parent's hash, whenever
      // that parent still holds the content the block was chained to.
      const BlockRef parent = blocks_[c].parent;
      const bool parent_live = parent.id == kNoBlock || (blocks_[parent.id].cached &&
                                                         blocks_[parent.id].generation == parent.generation);
      if (parent_live &&
          hash(parent.id == kNoBlock ? kRootHash : blocks_[parent.id].hash, stored_tokens(c)) != h)
        fail("block " + std::to_string(c) + " stores tokens that do not hash to its key");
      ++chained;
    }
  });
  if (chained != num_cached_) fail("hash map does not hold every cached block exactly once");
}

}  // namespace duet
