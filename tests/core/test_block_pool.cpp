#include "core/block_pool.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "core/error.hpp"

namespace duet {
namespace {

BlockHash constant_hash(BlockHash, std::span<const TokenId>, std::uint32_t) { return 42; }

std::vector<TokenId> toks(std::initializer_list<TokenId> t) { return t; }

TEST(BlockPool, AllocatesEveryBlockOnceThenRunsOut) {
  BlockPool pool(4, 2);
  std::vector<BlockId> got;
  for (int i = 0; i < 4; ++i) got.push_back(pool.allocate());
  EXPECT_EQ(got, (std::vector<BlockId>{0, 1, 2, 3}));
  EXPECT_EQ(pool.allocate(), kNoBlock);
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_EQ(pool.num_used(), 4);
  pool.check_consistency();
}

TEST(BlockPool, RejectsImpossibleSizes) {
  EXPECT_THROW(BlockPool(0, 16), Error);
  EXPECT_THROW(BlockPool(-3, 16), Error);
  EXPECT_THROW(BlockPool(8, 0), Error);
}

TEST(BlockPool, UncachedFreedBlocksAreReusedFirst) {
  BlockPool pool(4, 2);
  for (int i = 0; i < 4; ++i) pool.allocate();
  pool.free(2);
  pool.free(0);
  // Nothing worth keeping: each goes to the very front, so the last freed is reused first.
  EXPECT_EQ(pool.eviction_order(), (std::vector<BlockId>{0, 2}));
  EXPECT_EQ(pool.allocate(), 0);
  pool.check_consistency();
}

TEST(BlockPool, CachedFreedBlocksStayHittableUntilReused) {
  BlockPool pool(2, 2);
  const BlockId a = pool.allocate();
  const auto t = toks({7, 8});
  const BlockHash h = pool.hash(kRootHash, t);
  const BlockRef content = pool.cache(a, h, {}, t);
  EXPECT_EQ(content, pool.ref(a));
  EXPECT_NE(content, BlockRef{}) << "a content is not the root";
  pool.free(a);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.lookup(h, {}, t), a) << "lazy eviction: a freed cached block is still a hit";
  // The uncached block 1 is in front of it in the eviction order.
  EXPECT_EQ(pool.eviction_order(), (std::vector<BlockId>{1, 0}));
  EXPECT_EQ(pool.allocate(), 1);
  EXPECT_EQ(pool.lookup(h, {}, t), a);
  EXPECT_EQ(pool.allocate(), a);  // now its content goes
  EXPECT_EQ(pool.lookup(h, {}, t), kNoBlock);
  EXPECT_EQ(pool.stats().evictions, 1);
  EXPECT_EQ(pool.num_cached(), 0);
  pool.check_consistency();
}

TEST(BlockPool, TouchTakesAFreeCachedBlockOffTheFreeList) {
  BlockPool pool(3, 1);
  const BlockId a = pool.allocate();
  const auto t = toks({5});
  pool.cache(a, pool.hash(kRootHash, t), {}, t);
  pool.free(a);
  pool.touch(a);
  EXPECT_EQ(pool.block(a).ref_count, 1);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_FALSE(pool.block(a).in_free_list);
  pool.touch(a);
  EXPECT_EQ(pool.block(a).ref_count, 2);
  pool.free(a);
  EXPECT_EQ(pool.num_free(), 2) << "still referenced once";
  pool.check_consistency();
}

TEST(BlockPool, CachedBlocksAreEvictedInFreeingOrder) {
  BlockPool pool(3, 1);
  std::vector<BlockId> b;
  for (int i = 0; i < 3; ++i) {
    b.push_back(pool.allocate());
    const auto t = toks({i});
    pool.cache(b.back(), pool.hash(kRootHash, t), {}, t);
  }
  pool.free(b[1]);
  pool.free(b[2]);
  pool.free(b[0]);
  EXPECT_EQ(pool.eviction_order(), (std::vector<BlockId>{b[1], b[2], b[0]}));
}

// Caches a one-token block each in a pool of 3 (token i in block i), sets the retention
// priorities of a pinned prefix (block 0), the default (1) and a pruned beam (2), and frees them.
std::vector<BlockId> free_pinned_default_pruned(BlockPool& pool) {
  std::vector<BlockId> b;
  for (int i = 0; i < 3; ++i) {
    b.push_back(pool.allocate());
    const auto t = toks({i});
    pool.cache(b.back(), pool.hash(kRootHash, t), {}, t);
  }
  pool.set_priority(b[0], kDefaultPriority + 2);
  pool.set_priority(b[2], 1);
  for (BlockId x : b) pool.free(x);
  return b;
}

TEST(BlockPool, LowerRetentionPriorityIsEvictedFirst) {
  BlockPool pool(3, 1);
  const std::vector<BlockId> b = free_pinned_default_pruned(pool);
  EXPECT_EQ(pool.eviction_order(), (std::vector<BlockId>{b[2], b[1], b[0]}));
  // Re-prioritising a free block moves it.
  pool.set_priority(b[0], 0);
  EXPECT_EQ(pool.eviction_order(), (std::vector<BlockId>{b[0], b[2], b[1]}));
  EXPECT_EQ(pool.allocate(), b[0]);
  EXPECT_EQ(pool.block(b[0]).priority, kDefaultPriority) << "a reallocated block starts at the default";
  EXPECT_THROW(pool.set_priority(b[1], kNumPriorities), Error);
  EXPECT_THROW(pool.set_priority(b[1], -1), Error);
  pool.check_consistency();
}

// A prefix hit on a pruned beam's free block makes it live again: freed once more, it is not
// evicted ahead of the default; a pinned block hit and freed keeps its pin.
TEST(BlockPool, AHitClearsAPrunedPriorityButKeepsAPin) {
  BlockPool pool(3, 1);
  const std::vector<BlockId> b = free_pinned_default_pruned(pool);
  pool.touch(b[2]);  // hits: the pruned beam's block and the pinned one
  pool.touch(b[0]);
  EXPECT_EQ(pool.block(b[2]).priority, kDefaultPriority);
  EXPECT_EQ(pool.block(b[0]).priority, kDefaultPriority + 2);
  pool.free(b[2]);
  pool.free(b[0]);
  EXPECT_EQ(pool.eviction_order(), (std::vector<BlockId>{b[1], b[2], b[0]}));
  // A fork of a block in use keeps whatever priority its holder set.
  const BlockId held = pool.allocate();
  pool.set_priority(held, 1);
  pool.touch(held);
  EXPECT_EQ(pool.block(held).priority, 1);
  pool.check_consistency();
}

TEST(BlockPool, ACollidingHashNeverYieldsAWrongHit) {
  BlockPool pool(4, 2, 0, constant_hash);
  const auto t1 = toks({1, 2});
  const auto t2 = toks({3, 4});
  const BlockId a = pool.allocate();
  const BlockId b = pool.allocate();
  pool.cache(a, pool.hash(kRootHash, t1), {}, t1);
  pool.cache(b, pool.hash(kRootHash, t2), {}, t2);
  EXPECT_EQ(pool.num_cached(), 2) << "both live in one collision chain";
  EXPECT_EQ(pool.lookup(42, {}, t1), a);
  EXPECT_EQ(pool.lookup(42, {}, t2), b);
  EXPECT_EQ(pool.lookup(42, {}, toks({1, 3})), kNoBlock);
  // Same tokens but another parent: not the same prefix.
  const BlockId c = pool.allocate();
  pool.cache(c, 42, pool.ref(a), t2);
  EXPECT_EQ(pool.lookup(42, pool.ref(a), t2), c);
  EXPECT_EQ(pool.lookup(42, pool.ref(b), t2), kNoBlock);
  // Once the parent's content is dropped, the child cannot be reached through a reused id.
  const BlockRef old_parent = pool.ref(a);
  pool.free(a);
  pool.free(b);  // b sits behind a in the eviction order, so a goes first
  pool.free(c);
  EXPECT_EQ(pool.allocate(), 3);  // the never-cached block goes first
  EXPECT_EQ(pool.allocate(), a);
  EXPECT_NE(pool.ref(a), old_parent);
  EXPECT_EQ(pool.lookup(42, pool.ref(a), t2), kNoBlock);
  pool.check_consistency();
}

// Two sequences that compute one prompt side by side cache two copies of each block. Either copy
// keeps the prompt's later blocks reachable; a copy nobody uses is dropped at once.
TEST(BlockPool, CopiesOfOneContentKeepItsChildrenReachable) {
  BlockPool pool(5, 2);
  const auto t = toks({9, 9});
  const auto u = toks({5, 6});
  const BlockHash h = pool.hash(kRootHash, t);
  const BlockHash hu = pool.hash(h, u);
  const BlockId a = pool.allocate();
  const BlockId b = pool.allocate();
  const BlockRef content = pool.cache(a, h, {}, t);
  EXPECT_EQ(pool.cache(b, h, {}, t), content) << "a copy shares the content's number";
  EXPECT_TRUE(pool.block(b).cached);
  EXPECT_EQ(pool.num_cached(), 2);
  const BlockId child = pool.allocate();  // chained after the second copy
  const BlockRef child_content = pool.cache(child, hu, content, u);
  EXPECT_EQ(child_content, pool.ref(child));
  pool.check_consistency();

  // The first copy's holder finishes: that copy is dropped (no eviction) and goes first.
  pool.free(a);
  EXPECT_FALSE(pool.block(a).cached);
  EXPECT_EQ(pool.stats().evictions, 0);
  EXPECT_EQ(pool.eviction_order().front(), a);
  EXPECT_EQ(pool.allocate(), a);
  EXPECT_EQ(pool.lookup(h, {}, t), b);
  EXPECT_EQ(pool.lookup(hu, pool.ref(b), u), child) << "the child outlives the copy it was chained after";
  pool.check_consistency();

  // A copy cached while the other copy is free: the free one is dropped.
  pool.free(child);
  pool.free(b);
  EXPECT_TRUE(pool.block(b).cached) << "the last copy stays cached when freed";
  const BlockId d = pool.allocate();  // block 3, never cached
  EXPECT_EQ(pool.cache(d, h, {}, t), content);
  EXPECT_FALSE(pool.block(b).cached);
  EXPECT_EQ(pool.lookup(h, {}, t), d);
  EXPECT_EQ(pool.lookup(hu, pool.ref(d), u), child);
  EXPECT_EQ(pool.stats().evictions, 0);
  pool.check_consistency();

  // Once no block caches the content, its children are unreachable even if it is computed again.
  pool.free(d);
  pool.free(a);
  pool.set_priority(child, kDefaultPriority + 1);
  while (pool.num_cached() > 1) pool.allocate();  // a, b and 4 (uncached) go first, then d
  EXPECT_FALSE(pool.block(d).cached);
  EXPECT_TRUE(pool.block(child).cached);
  EXPECT_EQ(pool.stats().evictions, 1);
  const BlockRef again = pool.cache(a, h, {}, t);
  EXPECT_NE(again, content) << "a number is never reused";
  EXPECT_EQ(pool.lookup(hu, again, u), kNoBlock);
  EXPECT_THROW(pool.cache(b, hu, kNoContent, u), std::logic_error) << "nothing chains to an uncached block";
  pool.check_consistency();
}

// A dropped copy's retention priority passes to the copy that stays: a prefix a search pinned is
// not lost because another sequence computed it again.
TEST(BlockPool, ADroppedCopyPassesItsPriorityOn) {
  BlockPool pool(4, 2);
  const auto t = toks({1, 2});
  const BlockHash h = pool.hash(kRootHash, t);
  const BlockId pinned = pool.allocate();
  pool.cache(pinned, h, {}, t);
  pool.set_priority(pinned, kNumPriorities - 1);
  pool.free(pinned);
  const BlockId again = pool.allocate();  // recomputes the content: the free copy is dropped
  pool.cache(again, h, {}, t);
  EXPECT_FALSE(pool.block(pinned).cached);
  EXPECT_EQ(pool.block(again).priority, kNumPriorities - 1);

  // Freed while another copy is in use: that copy takes the higher priority.
  const BlockId other = pool.allocate();
  pool.cache(other, h, {}, t);
  EXPECT_EQ(pool.block(other).priority, kDefaultPriority);
  pool.free(again);
  EXPECT_FALSE(pool.block(again).cached);
  EXPECT_EQ(pool.block(other).priority, kNumPriorities - 1);
  pool.set_priority(other, 1);  // a higher priority is never lowered by a lower one passed on
  const BlockId low = pool.allocate();
  pool.cache(low, h, {}, t);
  pool.set_priority(low, 0);
  pool.free(low);
  EXPECT_EQ(pool.block(other).priority, 1);
  pool.check_consistency();
}

TEST(BlockPool, HashesChainOverParentTokensAndModel) {
  const auto t = toks({1, 2, 3});
  EXPECT_EQ(hash_block(kRootHash, t, 0), hash_block(kRootHash, t, 0));
  EXPECT_NE(hash_block(kRootHash, t, 0), hash_block(kRootHash, t, 1));
  EXPECT_NE(hash_block(kRootHash, t, 0), hash_block(kRootHash + 1, t, 0));
  EXPECT_NE(hash_block(kRootHash, t, 0), hash_block(kRootHash, toks({1, 2, 4}), 0));
}

}  // namespace
}  // namespace duet
