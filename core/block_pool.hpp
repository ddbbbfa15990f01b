#pragma once
// Fixed-size KV blocks as plain metadata: one model's KV pool, or one pool of equal-byte pages
// that several models (tenants) share (kv_pool = "shared").
//
// Free blocks sit on intrusive doubly linked lists (index links inside the Block records), one
// list per retention priority and tenant. allocate() takes the lowest priority's first block, in
// least recently freed order across the tenants' lists. Freed blocks that hold a cached (hashed)
// full block stay in the hash map and remain hittable until allocate() reuses them (lazy
// eviction), unless another block caches the same content (a copy, cache() below). Blocks that
// hold nothing worth keeping go to the very front.
//
// allocate, touch and set_priority are O(tenants); free is too, plus a walk of the block's hash
// chain when it is marked copied; lookup is O(1) expected.
//
// Shared pools. A page holds one block of any tenant: the tenants' block sizes differ, their block
// bytes do not (the memory plan checks that). Eviction is global: the least recently freed block
// of the lowest priority goes first, whoever's it is. Tenants may give a cached block a cost (what
// losing it costs, e.g. its recompute FLOPs): eviction is then GreedyDual (Young, "The k-server
// dual and loose competitiveness for paging", Algorithmica 1994; Cao & Irani, USITS 1997): a
// block freed when the pool's inflation is L is worth L + its cost, the least worth goes first,
// and L rises to what each evicted block was worth. Equal costs give least recently freed order,
// so a costlier tenant's blocks outlive a cheaper one's by the difference. The prefix cache
// stays per tenant: a block hits only for the tenant that cached it (its hash covers the tenant's
// model id too). Floors and ceilings (KvLimits) bound what each tenant holds: a tenant may take a
// page only while every other tenant could still reach its floor from the free pages, and only
// below its own ceiling. A one-tenant pool without limits behaves exactly as a private pool.
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/block_hash.hpp"
#include "core/hash_index.hpp"
#include "core/types.hpp"

namespace duet {

// Retention priorities: lower is evicted first. A search can pin a problem's prefix with a high
// priority and let pruned beams' blocks go first with a low one.
inline constexpr int kNumPriorities = 8;
inline constexpr int kDefaultPriority = 4;

inline constexpr std::int32_t kNoCeiling = std::numeric_limits<std::int32_t>::max();

// One model of a pool: its block size in tokens and the model id its hashes cover. `label` names
// it in errors (the engine's name).
struct PoolTenant {
  std::string label = "model";
  std::uint32_t model_id = 0;
  int block_size = 16;
  BlockHashFn hash_fn = hash_block;
  double eviction_cost = 0;  // what one evicted cached block costs (same units for every tenant)
};

// Pages one tenant holds in use: at least min_blocks stay within its reach, at most max_blocks it
// may hold. Free cached pages count for nobody: they are everyone's to evict.
struct KvLimits {
  std::int32_t min_blocks = 0;
  std::int32_t max_blocks = kNoCeiling;
  bool operator==(const KvLimits&) const = default;
};

// What makes a floor and ceiling impossible on their own: the field and why ("must not be
// negative, got -1"), or nullopt. The pool's set_limits and the Lua memory policy (which names the
// policy's line) both refuse by it.
struct KvLimitsError {
  const char* field;
  std::string reason;
};
std::optional<KvLimitsError> kv_limits_error(KvLimits limits);

// What a block stands for as a parent: a cached content. The pool numbers each distinct content it
// caches (a tenant's tokens after a parent content) and never reuses a number, so a child is
// reachable exactly while some block still caches its parent. Every block caching the same content
// shares its number: two sequences that computed one prompt side by side hold two copies, and the
// children chained to it outlive either copy. 0 is the root, the parent of a sequence's first block.
struct BlockRef {
  std::uint64_t content = 0;
  bool operator==(const BlockRef&) const = default;
};
// What an uncached block stands for: nothing can be chained to it.
inline constexpr BlockRef kNoContent{~std::uint64_t(0)};

// One cache line each: the simulator's lookups and frees walk these records.
struct alignas(64) Block {
  std::int32_t ref_count = 0;
  std::int8_t priority = kDefaultPriority;
  bool in_free_list : 1 = false;
  bool cached : 1 = false;       // registered in the hash map
  bool copied : 1 = false;       // another block may cache the same content (checked when freed)
  std::uint8_t tenant = 0;       // whose KV the page holds (or last held)
  std::uint32_t generation = 0;  // bumped each time its cached content is evicted
  BlockId hash_next = kNoBlock;  // next block with the same hash (collisions, copies)
  BlockHash hash = 0;
  BlockRef content = kNoContent;  // the content it caches
  BlockRef parent;                // the content before it in its prefix (the root: none)
  BlockId prev = kNoBlock;        // free-list links
  BlockId next = kNoBlock;
  // While free: when it was freed (a counter), and what it is worth to keep (a cached block:
  // the inflation when freed + its tenant's eviction_cost; an uncached one: -inf, goes first).
  std::uint64_t freed_at = 0;
  double worth = 0;
};
static_assert(sizeof(Block) == 64);

struct BlockPoolStats {
  std::int64_t allocations = 0;
  std::int64_t evictions = 0;  // cached blocks whose content was lost to a reuse of the block
  std::int64_t cached_inserts = 0;
};

class BlockPool {
 public:
  static constexpr int kMaxTenants = 8;

  // One model's private pool.
  BlockPool(std::int32_t num_blocks, int block_size, std::uint32_t model_id = 0,
            BlockHashFn hash_fn = hash_block);
  // A pool of num_blocks pages shared by the tenants (tenant i is index i in the calls below).
  BlockPool(std::int32_t num_blocks, std::vector<PoolTenant> tenants);

  // Takes the head of the eviction order for `tenant`, dropping its cached content (whoever's it
  // was). kNoBlock when none is free, or when the tenant's limits leave it none (available()).
  BlockId allocate(int tenant = 0);
  // Drops one reference. At zero the block joins the free lists: a cached block at the back of
  // its retention priority's list (it is still worth a hit), an uncached one at the very front.
  // A cached block whose content another block in use also caches is uncached first (no eviction:
  // nothing is lost), and its retention priority passes to that block if higher.
  void free(BlockId b);
  // Takes one more reference (a prefix hit or a fork); a free block leaves the free lists, its
  // retention priority raised to at least the default (a pin above it stays).
  void touch(BlockId b);
  // Sets the retention priority a block is freed with (reset to the default when it is
  // reallocated); a cached free block moves to the back of the new priority's list.
  void set_priority(BlockId b, int priority);

  // The hash a block of `tenant` with these tokens after `parent_hash` has in this pool.
  BlockHash hash(BlockHash parent_hash, std::span<const TokenId> tokens, int tenant = 0) const;
  // A cached block of `tenant` with this hash whose parent is `parent` and whose stored tokens
  // equal `tokens`; kNoBlock otherwise. Never returns a block on the strength of its hash alone,
  // nor another tenant's block.
  BlockId lookup(BlockHash h, BlockRef parent, std::span<const TokenId> tokens, int tenant = 0) const;
  // Registers a full, computed block and returns its content, the parent its successors name.
  // A block with content that another block already caches becomes a copy of it (the same
  // BlockRef). A copy is only kept while in use: a free block whose content another block caches
  // is dropped at once (it goes first, and its priority passes to `b` if higher), so the cache
  // never spends a free page twice on one content.
  BlockRef cache(BlockId b, BlockHash h, BlockRef parent, std::span<const TokenId> tokens);

  // The content a block caches; kNoContent when it caches nothing.
  BlockRef ref(BlockId b) const { return blocks_[b].content; }
  const Block& block(BlockId b) const { return blocks_[b]; }
  std::span<const TokenId> stored_tokens(BlockId b) const;

  std::int32_t num_blocks() const { return static_cast<std::int32_t>(blocks_.size()); }
  int num_tenants() const { return static_cast<int>(tenants_.size()); }
  int block_size(int tenant = 0) const { return tenants_[std::size_t(tenant)].spec.block_size; }
  std::uint32_t model_id(int tenant = 0) const { return tenants_[std::size_t(tenant)].spec.model_id; }
  const std::string& label(int tenant) const { return tenants_[std::size_t(tenant)].spec.label; }
  std::int32_t num_free() const { return num_free_; }
  std::int32_t num_used() const { return num_blocks() - num_free_; }
  std::int32_t num_cached() const { return num_cached_; }
  const BlockPoolStats& stats() const { return stats_; }

  // Per tenant: pages in use, cached blocks (used or free), and its allocations and evictions
  // (its cached blocks dropped for reuse, by whichever tenant reused them).
  std::int32_t tenant_used(int tenant) const { return tenants_[std::size_t(tenant)].used; }
  std::int32_t tenant_cached(int tenant) const { return tenants_[std::size_t(tenant)].cached; }
  const BlockPoolStats& tenant_stats(int tenant) const { return tenants_[std::size_t(tenant)].stats; }
  const KvLimits& limits(int tenant) const { return tenants_[std::size_t(tenant)].limits; }
  // Sets a tenant's floor and ceiling; throws duet::Error naming the field when they cannot hold
  // (a negative floor, a ceiling below the floor, floors that sum past the pool). Pages already
  // held are never taken back: a lowered ceiling or a raised floor is reached as pages are freed.
  void set_limits(int tenant, KvLimits limits);
  // Free pages `tenant` may take now: below its ceiling, and leaving the other tenants' floors
  // within their reach. The whole free count for a one-tenant pool without limits.
  std::int32_t available(int tenant = 0) const;

  // The whole eviction order (O(n)); for tests and reports.
  std::vector<BlockId> eviction_order() const;
  // Checks every internal link and count (O(n)); throws std::logic_error on the first violation.
  void check_consistency() const;

 private:
  // The free list a block is on (by its priority and tenant; uncached blocks on priority 0's).
  int list_of(const Block& blk) const;
  // Puts a freed block on its list: a cached one at the back, worth the inflation + its cost.
  void enlist(BlockId b);
  void push_front(BlockId b, int list);
  void push_back(BlockId b, int list);
  void unlink(BlockId b);
  // The next block to evict: the head, least worth first, of the lowest priority's lists.
  BlockId eviction_head() const;
  void uncache(BlockId b);
  // Another cached block with b's content, or kNoBlock.
  BlockId other_copy(BlockId b) const;
  // `dropped`, free, and `keeper` cache one content: keeper keeps it, with the higher of their
  // retention priorities (a pinned prefix stays pinned), and dropped is uncached. The caller
  // keeps dropped off (or takes it off) its free list around this.
  void drop_copy(BlockId dropped, BlockId keeper);
  // Pages the tenants other than `tenant` still need to reach their floors.
  std::int32_t reserved_for_others(int tenant) const;
  void check_tenant(int tenant, const char* what) const;

  struct Tenant {
    PoolTenant spec;
    KvLimits limits;
    std::int32_t used = 0;
    std::int32_t cached = 0;
    BlockPoolStats stats;
  };
  struct List {
    BlockId head = kNoBlock;
    BlockId tail = kNoBlock;
  };

  std::vector<Block> blocks_;
  std::vector<TokenId> tokens_;  // token_stride_ tokens per page, valid while cached
  std::vector<Tenant> tenants_;
  int token_stride_ = 0;                      // the largest tenant block size
  List lists_[kNumPriorities * kMaxTenants];  // [priority][tenant]
  std::uint64_t nonempty_ = 0;                // bit i set when lists_[i] has a block
  std::uint64_t free_clock_ = 0;              // counts frees: Block::freed_at
  double inflation_ = 0;                      // GreedyDual's L
  std::uint64_t next_content_ = 1;            // BlockRef numbers: 0 is the root
  HashIndex by_hash_;                         // hash -> first block of its collision chain
  std::int32_t num_free_ = 0;
  std::int32_t num_cached_ = 0;
  BlockPoolStats stats_;
};

}  // namespace duet
