#include "core/kv_cache_manager.hpp"

#include <gtest/gtest.h>

#include <numeric>

#include "tests/support/test_support.hpp"

namespace duet {
namespace {

Sequence make_seq(SeqId id, int n, TokenId first = 0) {
  Sequence s;
  s.id = id;
  s.tokens.resize(std::size_t(n));
  std::iota(s.tokens.begin(), s.tokens.end(), first);
  s.num_prompt_tokens = n;
  return s;
}

using test_support::admit;

void decode(KvCacheManager& kv, Sequence& s, TokenId t) {
  s.tokens.push_back(t);
  ASSERT_TRUE(kv.allocate_slots(s, 1));
  s.num_computed_tokens += 1;
}

KvCacheManager make_kv(int blocks, int block_size = 16, bool caching = true) {
  return KvCacheManager(KvCacheConfig{blocks, block_size, caching});
}

TEST(KvCacheManager, AllocatesCeilOfTokensOverBlockSize) {
  auto kv = make_kv(10);
  Sequence s = make_seq(1, 33);
  ASSERT_TRUE(admit(kv, s));
  EXPECT_EQ(s.kv.blocks.size(), 3u);
  EXPECT_EQ(s.kv.num_slots, 33);
  EXPECT_EQ(kv.usage().used_blocks, 3);
  EXPECT_EQ(kv.usage().filled_tokens, 33);
  EXPECT_EQ(s.kv.num_cached_blocks, 2) << "the two full blocks are registered for reuse";
}

TEST(KvCacheManager, PrefixHitsNeverCountTheLastToken) {
  auto kv = make_kv(10);
  Sequence a = make_seq(1, 40);
  ASSERT_TRUE(admit(kv, a));
  Sequence b = make_seq(2, 40);
  EXPECT_EQ(kv.lookup_prefix(b), 32);
  Sequence c = make_seq(3, 32);
  EXPECT_EQ(kv.lookup_prefix(c), 16) << "32 tokens: the second block holds the last token";
  Sequence d = make_seq(4, 33);
  EXPECT_EQ(kv.lookup_prefix(d), 32);
  Sequence other = make_seq(5, 40, 1000);
  EXPECT_EQ(kv.lookup_prefix(other), 0);
}

TEST(KvCacheManager, AdmissionWithHitsSharesBlocksAndCounts) {
  auto kv = make_kv(10);
  Sequence a = make_seq(1, 40);
  ASSERT_TRUE(admit(kv, a));
  Sequence b = make_seq(2, 40);
  ASSERT_TRUE(admit(kv, b));
  EXPECT_EQ(b.kv.blocks[0], a.kv.blocks[0]);
  EXPECT_EQ(b.kv.blocks[1], a.kv.blocks[1]);
  EXPECT_NE(b.kv.blocks[2], a.kv.blocks[2]);
  EXPECT_EQ(kv.pool().block(a.kv.blocks[0]).ref_count, 2);
  EXPECT_EQ(kv.usage().used_blocks, 4);
  EXPECT_EQ(kv.counters().query_tokens, 80);
  EXPECT_EQ(kv.counters().hit_tokens, 32);
}

TEST(KvCacheManager, FreedSequenceIsHitOnReadmission) {
  auto kv = make_kv(4);
  Sequence a = make_seq(1, 48);
  ASSERT_TRUE(admit(kv, a));
  kv.free(a);  // as preemption by recompute does
  a.num_computed_tokens = 0;
  EXPECT_EQ(kv.usage().used_blocks, 0);
  EXPECT_EQ(kv.lookup_prefix(a), 32);
  ASSERT_TRUE(kv.allocate_slots(a, 16, 32));
  EXPECT_EQ(kv.usage().used_blocks, 3);
}

// vLLM V1 keeps a preempted request's lookups out of its prefix-cache statistics: hitting its own
// freed blocks is recompute saved, not sharing between requests.
TEST(KvCacheManager, AReadmissionAfterPreemptionIsNoPrefixQuery) {
  auto kv = make_kv(4);
  Sequence a = make_seq(1, 48);
  ASSERT_TRUE(admit(kv, a));
  kv.free(a);
  a.num_computed_tokens = 0;
  ++a.num_preemptions;  // as Scheduler::preempt does
  ASSERT_EQ(kv.lookup_prefix(a), 32);
  ASSERT_TRUE(kv.allocate_slots(a, 16, 32));
  EXPECT_EQ(kv.counters().query_tokens, 48) << "the first admission's only";
  EXPECT_EQ(kv.counters().hit_tokens, 0);
}

TEST(KvCacheManager, FreesTailFirstSoPrefixesOutliveTails) {
  auto kv = make_kv(3, 4);
  Sequence a = make_seq(1, 12);
  ASSERT_TRUE(admit(kv, a));
  const auto blocks = a.kv.blocks;
  kv.free(a);
  EXPECT_EQ(kv.pool().eviction_order(), (std::vector<BlockId>{blocks[2], blocks[1], blocks[0]}));
}

TEST(KvCacheManager, FailedAllocationChangesNothing) {
  auto kv = make_kv(3, 4);
  Sequence a = make_seq(1, 8);
  ASSERT_TRUE(admit(kv, a));
  Sequence b = make_seq(2, 8, 100);
  const KvUsage before = kv.usage();
  EXPECT_FALSE(kv.allocate_slots(b, 8));
  EXPECT_TRUE(b.kv.blocks.empty());
  EXPECT_EQ(kv.usage().used_blocks, before.used_blocks);
  EXPECT_EQ(kv.usage().filled_tokens, before.filled_tokens);
}

TEST(KvCacheManager, HitsOnFreeBlocksCountAgainstFreeSpace) {
  // The hit blocks sit on the free list: taking them must not be double-counted as free room.
  auto kv = make_kv(3, 4);
  Sequence a = make_seq(1, 9);
  ASSERT_TRUE(admit(kv, a));
  kv.free(a);
  Sequence b = make_seq(2, 9);
  EXPECT_EQ(kv.lookup_prefix(b), 8);
  EXPECT_TRUE(kv.allocate_slots(b, 1, 8));  // two hit blocks + one fresh = all three
  Sequence c = make_seq(3, 1, 500);
  EXPECT_EQ(kv.lookup_prefix(c), 0);
  EXPECT_FALSE(kv.allocate_slots(c, 1));
  kv.pool().check_consistency();
}

// num_must_fit (vLLM's full_sequence_must_fit) is a check: the blocks of that many tokens must be
// free now, hit blocks on the free list and a copy-on-write copy counted as for the chunk itself,
// and only the chunk's are allocated.
TEST(KvCacheManager, MustFitChecksTheWholeAndAllocatesTheChunk) {
  {  // a fresh prompt of 3 blocks on a pool of 3, with 2 free: its first block fits, the whole not
    auto kv = make_kv(3, 4);
    Sequence a = make_seq(1, 4, 500);
    ASSERT_TRUE(admit(kv, a));
    Sequence b = make_seq(2, 12);
    EXPECT_FALSE(kv.allocate_slots(b, 4, 0, 12));
    EXPECT_TRUE(b.kv.blocks.empty());
    EXPECT_TRUE(kv.allocate_slots(b, 4, 0, 8));  // 2 blocks' worth must fit: they do
    EXPECT_EQ(b.kv.blocks.size(), 1u) << "only the chunk's block is taken";
  }
  {  // hits on the free list count against free space: 2 hit blocks + 2 more for 16 tokens, of 3
    auto kv = make_kv(3, 4);
    Sequence a = make_seq(1, 9);
    ASSERT_TRUE(admit(kv, a));
    kv.free(a);
    Sequence b = make_seq(2, 16);
    ASSERT_EQ(kv.lookup_prefix(b), 8);
    EXPECT_FALSE(kv.allocate_slots(b, 1, 8, 8));
    ASSERT_EQ(kv.lookup_prefix(b), 8);
    EXPECT_TRUE(kv.allocate_slots(b, 1, 8, 4));  // 12 tokens: the 2 hits and 1 fresh, all 3 blocks
    kv.pool().check_consistency();
  }
  {  // a fork writing into its parent's half-full block needs its copy beside the rest
    auto kv = make_kv(5, 4);
    Sequence a = make_seq(1, 6);  // blocks: 4 + 2; 3 free
    ASSERT_TRUE(admit(kv, a));
    Sequence f = make_seq(2, 0);
    f.tokens = a.tokens;
    f.num_computed_tokens = 6;
    kv.fork(a, f);
    for (TokenId t = 7; t < 18; ++t) f.tokens.push_back(t);  // 17 tokens: 11 after the 6 computed
    EXPECT_FALSE(kv.allocate_slots(f, 1, 0, 11)) << "5 blocks in all: the copy and 3 more, of 3 free";
    EXPECT_TRUE(kv.allocate_slots(f, 1, 0, 10)) << "4 blocks in all: the copy and 2 more, all 3 free";
    EXPECT_EQ(kv.take_copies().size(), 1u);
  }
}

TEST(KvCacheManager, ForkSharesEveryBlockAndCopiesAPartialBlockOnWrite) {
  auto kv = make_kv(10, 4);
  Sequence a = make_seq(1, 10);  // blocks: 4 + 4 + 2
  ASSERT_TRUE(admit(kv, a));
  Sequence b = make_seq(2, 0);
  b.tokens = a.tokens;
  b.num_computed_tokens = a.num_computed_tokens;
  kv.fork(a, b);
  EXPECT_EQ(b.kv.blocks, a.kv.blocks);
  EXPECT_EQ(kv.usage().used_blocks, 3);
  EXPECT_TRUE(kv.take_copies().empty());
  decode(kv, b, 77);
  const auto copies = kv.take_copies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, a.kv.blocks[2]);
  EXPECT_EQ(copies[0].dst, b.kv.blocks[2]);
  EXPECT_NE(a.kv.blocks[2], b.kv.blocks[2]);
  EXPECT_EQ(kv.counters().cow_copies, 1);
  // The original now owns its last block alone: appending to it copies nothing.
  decode(kv, a, 78);
  EXPECT_TRUE(kv.take_copies().empty());
  EXPECT_EQ(kv.usage().used_blocks, 4);
  EXPECT_EQ(kv.usage().filled_tokens, 4 + 4 + 3 + 3);
}

// A step's copies run at once (a GPU kernel copies them in parallel): a copy's source stays held
// until the copies are taken, so that it is no other copy's destination in the same step, even
// when its last holder lets it go in between (once, it went back to the free list's front).
TEST(KvCacheManager, ACopysSourceIsNoOtherCopysDestinationInOneStep) {
  auto kv = make_kv(6, 4);
  Sequence x = make_seq(1, 6), z = make_seq(2, 6, 100);  // blocks: 4 + 2 each
  ASSERT_TRUE(admit(kv, x));
  ASSERT_TRUE(admit(kv, z));
  Sequence f = make_seq(3, 0), z2 = make_seq(4, 0);
  f.tokens = x.tokens, f.num_computed_tokens = 6;
  z2.tokens = z.tokens, z2.num_computed_tokens = 6;
  kv.fork(x, f);
  kv.fork(z, z2);
  decode(kv, f, 7);   // copies x's half-full block
  kv.free(x);         // its last holder lets it go
  decode(kv, z2, 8);  // copies z's half-full block into the one block that is free
  const std::vector<BlockCopy> copies = kv.take_copies();
  ASSERT_EQ(copies.size(), 2u);
  for (const BlockCopy& a : copies)
    for (const BlockCopy& b : copies)
      EXPECT_NE(a.src, b.dst) << a.src << " -> " << a.dst << ", " << b.src << " -> " << b.dst;
  EXPECT_EQ(kv.usage().used_blocks, 5) << "x's copied block went back once the copies were taken";
  kv.pool().check_consistency();
}

TEST(KvCacheManager, ForkAtABlockBoundaryNeedsNoCopy) {
  auto kv = make_kv(10, 4);
  Sequence a = make_seq(1, 8);
  ASSERT_TRUE(admit(kv, a));
  Sequence b = make_seq(2, 0);
  b.tokens = a.tokens;
  b.num_computed_tokens = 8;
  kv.fork(a, b);
  decode(kv, a, 1);
  decode(kv, b, 2);
  EXPECT_TRUE(kv.take_copies().empty());
  EXPECT_NE(a.kv.blocks[2], b.kv.blocks[2]);
}

TEST(KvCacheManager, SetPriorityTouchesOnlyExclusiveBlocksUnlessAsked) {
  auto kv = make_kv(10, 4);
  Sequence a = make_seq(1, 10);
  ASSERT_TRUE(admit(kv, a));
  Sequence b = make_seq(2, 0);
  b.tokens = a.tokens;
  b.num_computed_tokens = 10;
  kv.fork(a, b);
  decode(kv, b, 5);  // b's last block is now its own
  kv.set_priority(b, 1);
  EXPECT_EQ(kv.pool().block(b.kv.blocks[0]).priority, kDefaultPriority);
  EXPECT_EQ(kv.pool().block(b.kv.blocks[2]).priority, 1);
  kv.set_priority(b, 6, /*shared=*/true);
  EXPECT_EQ(kv.pool().block(b.kv.blocks[0]).priority, 6);
}

TEST(KvCacheManager, WithoutPrefixCachingNothingIsShared) {
  auto kv = make_kv(10, 4, false);
  Sequence a = make_seq(1, 12);
  ASSERT_TRUE(admit(kv, a));
  Sequence b = make_seq(2, 12);
  EXPECT_EQ(kv.lookup_prefix(b), 0);
  EXPECT_EQ(kv.usage().cached_blocks, 0);
  EXPECT_EQ(kv.counters().query_tokens, 0);
}

TEST(KvCacheManager, EvictionsAreCounted) {
  auto kv = make_kv(2, 4);
  Sequence a = make_seq(1, 8);
  ASSERT_TRUE(admit(kv, a));
  kv.free(a);
  Sequence b = make_seq(2, 8, 100);
  ASSERT_TRUE(admit(kv, b));
  EXPECT_EQ(kv.counters().evictions, 2);
  Sequence a2 = make_seq(3, 8);
  EXPECT_EQ(kv.lookup_prefix(a2), 0);
}

}  // namespace
}  // namespace duet
