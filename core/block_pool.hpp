#pragma once
// Fixed-size KV blocks as plain metadata, for one model's KV pool.
//
// Free blocks sit on intrusive doubly linked lists (index links inside the Block records), one
// list per retention priority. The concatenation of the lists, lowest priority first and each
// front to back, *is* the eviction order: allocate() takes its head. Freed blocks that hold a
// cached (hashed) full block stay in the hash map and remain hittable until allocate() reuses
// them (lazy eviction). Blocks that hold nothing worth keeping go to the very front.
//
// allocate, free, touch and set_priority are O(1); lookup is O(1) expected.
#include <cstdint>
#include <span>
#include <vector>

#include "core/block_hash.hpp"
#include "core/hash_index.hpp"
#include "core/types.hpp"

namespace duet {

// Retention priorities: lower is evicted first. A search can pin a problem's prefix with a high
// priority and let pruned beams' blocks go first with a low one.
inline constexpr int kNumPriorities = 8;
inline constexpr int kDefaultPriority = 4;

// A cached block's identity as a parent: its id and the generation of its content.
struct BlockRef {
  BlockId id = kNoBlock;
  std::uint32_t generation = 0;
  bool operator==(const BlockRef&) const = default;
};

struct Block {
  std::int32_t ref_count = 0;
  std::int8_t priority = kDefaultPriority;
  bool in_free_list = false;
  bool cached = false;           // registered in the hash map
  std::uint32_t generation = 0;  // bumped each time cached content is dropped
  BlockHash hash = 0;
  BlockRef parent;          // the cached block before this one in its prefix (id kNoBlock: root)
  BlockId prev = kNoBlock;  // free-list links
  BlockId next = kNoBlock;
  BlockId hash_next = kNoBlock;  // next block with the same hash (collisions)
};

struct BlockPoolStats {
  std::int64_t allocations = 0;
  std::int64_t evictions = 0;  // cached blocks whose content was dropped for reuse
  std::int64_t cached_inserts = 0;
};

class BlockPool {
 public:
  BlockPool(std::int32_t num_blocks, int block_size, std::uint32_t model_id = 0,
            BlockHashFn hash_fn = hash_block);

  // Takes the head of the eviction order, dropping its cached content. kNoBlock when none is free.
  BlockId allocate();
  // Drops one reference. At zero the block joins the free lists: a cached block at the back of
  // its retention priority's list (it is still worth a hit), an uncached one at the very front.
  void free(BlockId b);
  // Takes one more reference (a prefix hit or a fork); a free block leaves the free lists.
  void touch(BlockId b);
  // Sets the retention priority a block is freed with (reset to the default when it is
  // reallocated); a cached free block moves to the back of the new priority's list.
  void set_priority(BlockId b, int priority);

  // The hash a block with these tokens after `parent_hash` has in this pool.
  BlockHash hash(BlockHash parent_hash, std::span<const TokenId> tokens) const;
  // A cached block with this hash whose parent is `parent` and whose stored tokens equal
  // `tokens`; kNoBlock otherwise. Never returns a block on the strength of its hash alone.
  BlockId lookup(BlockHash h, BlockRef parent, std::span<const TokenId> tokens) const;
  // Registers a full, computed block. Returns the block that now stands for this content: `b`
  // itself, or an existing cached block with identical content and parent (then `b` stays
  // uncached, and children should name the returned block as their parent).
  BlockId cache(BlockId b, BlockHash h, BlockRef parent, std::span<const TokenId> tokens);

  BlockRef ref(BlockId b) const { return {b, blocks_[b].generation}; }
  const Block& block(BlockId b) const { return blocks_[b]; }
  std::span<const TokenId> stored_tokens(BlockId b) const;

  std::int32_t num_blocks() const { return static_cast<std::int32_t>(blocks_.size()); }
  int block_size() const { return block_size_; }
  std::uint32_t model_id() const { return model_id_; }
  std::int32_t num_free() const { return num_free_; }
  std::int32_t num_used() const { return num_blocks() - num_free_; }
  std::int32_t num_cached() const { return num_cached_; }
  const BlockPoolStats& stats() const { return stats_; }

  // The whole eviction order (O(n)); for tests and reports.
  std::vector<BlockId> eviction_order() const;
  // Checks every internal link and count (O(n)); throws std::logic_error on the first violation.
  void check_consistency() const;

 private:
  void push_front(BlockId b, int list);
  void push_back(BlockId b, int list);
  void unlink(BlockId b);
  void uncache(BlockId b);

  struct List {
    BlockId head = kNoBlock;
    BlockId tail = kNoBlock;
  };

  std::vector<Block> blocks_;
  std::vector<TokenId> tokens_;  // block_size tokens per block, valid while cached
  List lists_[kNumPriorities];
  std::uint32_t nonempty_ = 0;  // bit p set when lists_[p] has a block
  HashIndex by_hash_;           // hash -> first block of its collision chain
  int block_size_;
  std::uint32_t model_id_;
  BlockHashFn hash_fn_;
  std::int32_t num_free_ = 0;
  std::int32_t num_cached_ = 0;
  BlockPoolStats stats_;
};

}  // namespace duet
