// NaiveAllocator: the pre-PagedAttention baseline. Each sequence reserves a whole region of
// ceil(max_model_len / block_size) consecutive blocks on admission.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/naive_allocator.hpp"
#include "core/sequence.hpp"

namespace duet {
namespace {

Sequence make_seq(SeqId id, int num_tokens) {
  Sequence s;
  s.id = id;
  s.tokens.assign(std::size_t(num_tokens), TokenId(7));
  s.num_prompt_tokens = num_tokens;
  return s;
}

std::vector<BlockId> range(BlockId first, int count) {
  std::vector<BlockId> v;
  for (int i = 0; i < count; ++i) v.push_back(first + i);
  return v;
}

TEST(NaiveAllocator, RegionCountRoundsMaxModelLenUpToBlocks) {
  // ceil(100 / 16) = 7 blocks per region; 100 blocks hold 14 regions (2 blocks left over).
  NaiveAllocator a(100, 16, 100);
  EXPECT_EQ(a.blocks_per_region(), 7);
  EXPECT_EQ(a.num_regions(), 14);
  EXPECT_EQ(a.free_regions(), 14);
  EXPECT_EQ(a.block_size(), 16);
  const KvUsage u = a.usage();
  EXPECT_EQ(u.total_blocks, 14 * 7);  // the leftover blocks are never usable
  EXPECT_EQ(u.used_blocks, 0);
  EXPECT_EQ(u.filled_tokens, 0);
  EXPECT_EQ(u.block_size, 16);

  // An exact fit: 256 / 16 = 16 blocks per region, 64 / 16 = 4 regions.
  NaiveAllocator b(64, 16, 256);
  EXPECT_EQ(b.blocks_per_region(), 16);
  EXPECT_EQ(b.num_regions(), 4);
}

TEST(NaiveAllocator, ConstructorErrors) {
  // ceil(161 / 16) = 11 blocks per region, more than the 10 in the pool.
  EXPECT_THROW(NaiveAllocator(10, 16, 161), Error);
  EXPECT_NO_THROW(NaiveAllocator(10, 16, 160));  // exactly one region
  EXPECT_THROW(NaiveAllocator(0, 16, 16), Error);
  EXPECT_THROW(NaiveAllocator(100, 0, 16), Error);
  EXPECT_THROW(NaiveAllocator(100, 16, 0), Error);
  try {
    NaiveAllocator(10, 16, 161);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("161"), std::string::npos) << e.what();
  }
}

TEST(NaiveAllocator, FirstAllocationReservesARegionOfConsecutiveBlocks) {
  NaiveAllocator a(64, 16, 256);  // 4 regions of 16 blocks
  Sequence s = make_seq(1, 20);
  EXPECT_EQ(a.lookup_prefix(s), 0);  // no prefix cache
  ASSERT_TRUE(a.allocate_slots(s, 20));
  // Region 0 first; 20 tokens need 2 blocks of 16.
  EXPECT_EQ(s.kv.naive_region, 0);
  EXPECT_EQ(s.kv.blocks, range(0, 2));
  EXPECT_EQ(s.kv.num_slots, 20);
  EXPECT_EQ(a.free_regions(), 3);

  // Growing stays in the region: 20 + 13 = 33 tokens need 3 blocks.
  ASSERT_TRUE(a.allocate_slots(s, 13));
  EXPECT_EQ(s.kv.blocks, range(0, 3));
  EXPECT_EQ(s.kv.num_slots, 33);
  EXPECT_EQ(a.free_regions(), 3);  // no second reservation

  // A second sequence gets the next region, whose blocks start at 16.
  Sequence t = make_seq(2, 5);
  ASSERT_TRUE(a.allocate_slots(t, 5));
  EXPECT_EQ(t.kv.naive_region, 1);
  EXPECT_EQ(t.kv.blocks, range(16, 1));
  EXPECT_EQ(a.free_regions(), 2);
}

TEST(NaiveAllocator, PrefixHitsAreALogicError) {
  NaiveAllocator a(64, 16, 256);
  Sequence s = make_seq(1, 32);
  EXPECT_THROW(a.allocate_slots(s, 16, 16), std::logic_error);
}

TEST(NaiveAllocator, CannotGrowPastMaxModelLen) {
  NaiveAllocator a(64, 16, 100);  // 7 blocks per region
  Sequence s = make_seq(1, 100);
  ASSERT_TRUE(a.allocate_slots(s, 100));  // exactly max_model_len
  EXPECT_EQ(s.kv.blocks, range(0, 7));
  const KvUsage before = a.usage();

  EXPECT_FALSE(a.allocate_slots(s, 1));
  // Nothing changed: not the sequence, not the allocator.
  EXPECT_EQ(s.kv.num_slots, 100);
  EXPECT_EQ(s.kv.blocks, range(0, 7));
  EXPECT_EQ(a.usage().used_blocks, before.used_blocks);
  EXPECT_EQ(a.usage().filled_tokens, before.filled_tokens);

  // A new sequence longer than max_model_len is refused without reserving a region.
  Sequence big = make_seq(2, 101);
  const std::int32_t free_before = a.free_regions();
  EXPECT_FALSE(a.allocate_slots(big, 101));
  EXPECT_EQ(big.kv.naive_region, -1);
  EXPECT_TRUE(big.kv.blocks.empty());
  EXPECT_EQ(a.free_regions(), free_before);
}

TEST(NaiveAllocator, OutOfRegionsReturnsFalseAndChangesNothing) {
  NaiveAllocator a(32, 16, 256);  // 2 regions of 16 blocks
  Sequence s1 = make_seq(1, 10);
  Sequence s2 = make_seq(2, 10);
  Sequence s3 = make_seq(3, 10);
  ASSERT_TRUE(a.allocate_slots(s1, 10));
  ASSERT_TRUE(a.allocate_slots(s2, 10));
  EXPECT_EQ(a.free_regions(), 0);
  const KvUsage before = a.usage();

  // Only 20 tokens are stored, yet the pool is full: the baseline's waste.
  EXPECT_FALSE(a.allocate_slots(s3, 10));
  EXPECT_EQ(s3.kv.naive_region, -1);
  EXPECT_TRUE(s3.kv.blocks.empty());
  EXPECT_EQ(s3.kv.num_slots, 0);
  EXPECT_EQ(a.usage().used_blocks, before.used_blocks);
  EXPECT_EQ(a.usage().filled_tokens, before.filled_tokens);
  EXPECT_EQ(a.free_regions(), 0);
}

TEST(NaiveAllocator, FreeReturnsTheRegion) {
  NaiveAllocator a(32, 16, 256);  // 2 regions
  Sequence s1 = make_seq(1, 40);
  Sequence s2 = make_seq(2, 10);
  ASSERT_TRUE(a.allocate_slots(s1, 40));
  ASSERT_TRUE(a.allocate_slots(s2, 10));
  const BlockId s1_first = s1.kv.blocks.front();

  a.free(s1);
  EXPECT_EQ(a.free_regions(), 1);
  EXPECT_EQ(s1.kv.naive_region, -1);  // the sequence holds nothing afterwards
  EXPECT_TRUE(s1.kv.blocks.empty());
  EXPECT_EQ(s1.kv.num_slots, 0);
  EXPECT_EQ(a.usage().used_blocks, 16);
  EXPECT_EQ(a.usage().filled_tokens, 10);

  // The freed region is handed out again.
  Sequence s3 = make_seq(3, 3);
  ASSERT_TRUE(a.allocate_slots(s3, 3));
  EXPECT_EQ(s3.kv.blocks, range(s1_first, 1));

  a.free(s2);
  a.free(s3);
  EXPECT_EQ(a.free_regions(), 2);
  EXPECT_EQ(a.usage().used_blocks, 0);
  EXPECT_EQ(a.usage().filled_tokens, 0);
}

TEST(NaiveAllocator, ForkReservesARegionAndCopiesEveryUsedBlock) {
  NaiveAllocator a(48, 16, 256);  // 3 regions of 16 blocks
  Sequence src = make_seq(1, 40);
  ASSERT_TRUE(a.allocate_slots(src, 40));  // blocks 0, 1, 2
  Sequence dst = make_seq(2, 40);
  a.fork(src, dst);

  EXPECT_EQ(dst.kv.naive_region, 1);
  EXPECT_EQ(dst.kv.blocks, range(16, 3));
  EXPECT_EQ(dst.kv.num_slots, 40);
  EXPECT_EQ(a.free_regions(), 1);
  EXPECT_EQ(a.counters().cow_copies, 3);
  EXPECT_EQ(a.usage().filled_tokens, 80);

  const std::vector<BlockCopy> expected = {{0, 16}, {1, 17}, {2, 18}};
  EXPECT_EQ(a.take_copies(), expected);
  EXPECT_TRUE(a.take_copies().empty());  // handed out once only

  // The fork grows independently within its own region.
  ASSERT_TRUE(a.allocate_slots(dst, 10));
  EXPECT_EQ(dst.kv.blocks, range(16, 4));
  EXPECT_EQ(src.kv.blocks, range(0, 3));
}

// A step's copies run at once on a GPU, so they must not depend on each other: a fork of a fork
// whose copies are still pending reads from the first source, and a region freed before its
// copies ran takes them back (its next owner's copies would race with them).
TEST(NaiveAllocator, PendingCopiesNeverReadOrRewriteAnotherCopysDestination) {
  NaiveAllocator a(64, 16, 256);  // 4 regions of 16 blocks
  Sequence p = make_seq(1, 40);
  ASSERT_TRUE(a.allocate_slots(p, 40));  // blocks 0, 1, 2
  Sequence c = make_seq(2, 40), g = make_seq(3, 40);
  ASSERT_TRUE(a.fork(p, c));  // region 1: 0->16, 1->17, 2->18
  ASSERT_TRUE(a.fork(c, g));  // region 2, from p's blocks: c's are not written yet
  const std::vector<BlockCopy> chained = {{0, 16}, {1, 17}, {2, 18}, {0, 32}, {1, 33}, {2, 34}};
  EXPECT_EQ(a.take_copies(), chained);

  Sequence h = make_seq(4, 40), k = make_seq(5, 40);
  ASSERT_TRUE(a.fork(p, h));  // region 3: 0->48, 1->49, 2->50
  a.free(h);                  // before any step ran its copies
  EXPECT_EQ(a.counters().cow_copies, 6);
  ASSERT_TRUE(a.fork(g, k));  // region 3 again, now from g
  const std::vector<BlockCopy> after_free = {{32, 48}, {33, 49}, {34, 50}};
  EXPECT_EQ(a.take_copies(), after_free);
  EXPECT_EQ(a.counters().cow_copies, 9);
}

// Fork, then release the parent, before a step: the parent's region is still read by the fork's
// pending copies, so it is not handed out (once, the next fork copied into it in the same step).
TEST(NaiveAllocator, ARegionThatPendingCopiesReadIsHeldUntilTheyAreTaken) {
  NaiveAllocator a(48, 16, 256);  // 3 regions of 16 blocks
  Sequence p = make_seq(1, 40), q = make_seq(2, 40);
  ASSERT_TRUE(a.allocate_slots(p, 40));  // region 0
  ASSERT_TRUE(a.allocate_slots(q, 40));  // region 1
  a.take_copies();
  Sequence c = make_seq(3, 40), d = make_seq(4, 40);
  ASSERT_TRUE(a.fork(p, c));  // region 2, from region 0
  a.free(p);
  EXPECT_EQ(a.free_regions(), 0) << "region 0 is read by pending copies";
  EXPECT_FALSE(a.fork(q, d)) << "no region free this step";
  const std::vector<BlockCopy> copies = {{0, 32}, {1, 33}, {2, 34}};
  EXPECT_EQ(a.take_copies(), copies);
  EXPECT_EQ(a.free_regions(), 1);
  ASSERT_TRUE(a.fork(q, d));
  EXPECT_EQ(d.kv.blocks, range(0, 3));
}

TEST(NaiveAllocator, ForkWithoutAFreeRegionLeavesTheCopyToRecompute) {
  NaiveAllocator a(16, 16, 256);  // a single region
  Sequence src = make_seq(1, 8);
  ASSERT_TRUE(a.allocate_slots(src, 8));
  Sequence dst = make_seq(2, 8);
  EXPECT_FALSE(a.fork(src, dst));
  EXPECT_TRUE(dst.kv.blocks.empty());
  EXPECT_EQ(dst.kv.naive_region, -1);
  EXPECT_TRUE(a.take_copies().empty());
}

TEST(NaiveAllocator, UsageCountsWholeRegionsAndFilledTokens) {
  NaiveAllocator a(64, 16, 256);  // 4 regions of 16 blocks
  Sequence s1 = make_seq(1, 20);
  Sequence s2 = make_seq(2, 100);
  ASSERT_TRUE(a.allocate_slots(s1, 20));
  ASSERT_TRUE(a.allocate_slots(s2, 100));
  const KvUsage u = a.usage();
  EXPECT_EQ(u.total_blocks, 64);
  EXPECT_EQ(u.used_blocks, 32);  // two whole regions, though only 2 + 7 blocks hold tokens
  EXPECT_EQ(u.free_blocks(), 32);
  EXPECT_EQ(u.filled_tokens, 120);
  // 120 of 32 * 16 = 512 reserved slots hold a token.
  EXPECT_DOUBLE_EQ(u.token_utilisation(), 120.0 / 512.0);
  EXPECT_DOUBLE_EQ(u.block_utilisation(), 0.5);
}

}  // namespace
}  // namespace duet
