// The figures of the PagedAttention explainer (Kwon et al., SOSP 2023, and the vLLM blog post
// "vLLM: Easy, Fast, and Cheap LLM Serving with PagedAttention"), reproduced on duet's
// allocators: a contiguous max-length reservation wastes most of its memory, paging wastes less
// than half a block per sequence, and a shared system prompt is stored once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "core/kv_cache_manager.hpp"
#include "core/naive_allocator.hpp"

namespace duet {
namespace {

constexpr int kBlock = 16;
constexpr int kMaxModelLen = 2048;

// Prompt lengths ~ Normal(500, 200) clipped to [200, 2048]. Box-Muller over mt19937_64, whose
// output the C++ standard fixes, so the lengths are the same on every platform.
std::vector<int> prompt_lengths(int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&] { return (double(rng() >> 11) + 0.5) * 0x1.0p-53; };
  std::vector<int> out;
  while (int(out.size()) < n) {
    const double r = std::sqrt(-2.0 * std::log(uniform()));
    const double z = r * std::cos(2.0 * M_PI * uniform());
    out.push_back(std::clamp(int(std::lround(500.0 + 200.0 * z)), 200, kMaxModelLen));
  }
  return out;
}

Sequence sequence(SeqId id, int len) {
  Sequence s;
  s.id = id;
  s.tokens.assign(std::size_t(len), TokenId(id));
  s.num_prompt_tokens = len;
  return s;
}

double utilisation(KvAllocator& kv, const std::vector<int>& lens) {
  std::vector<Sequence> seqs;
  for (std::size_t i = 0; i < lens.size(); ++i) seqs.push_back(sequence(i + 1, lens[i]));
  for (auto& s : seqs) EXPECT_TRUE(kv.allocate_slots(s, s.num_tokens()));
  return kv.usage().token_utilisation();
}

TEST(PagedAttentionNumbers, NaiveReservationUsesAboutAQuarterPagedAtLeast98Percent) {
  std::int64_t naive_reserved = 0, naive_filled = 0;
  for (int batch : {10, 25, 50, 100, 200}) {
    const auto lens = prompt_lengths(batch, 2023 + batch);
    const std::int32_t blocks = batch * (kMaxModelLen / kBlock);
    NaiveAllocator naive(blocks, kBlock, kMaxModelLen);
    KvCacheManager paged(KvCacheConfig{blocks, kBlock, false});
    const double un = utilisation(naive, lens);
    const double up = utilisation(paged, lens);
    std::printf("batch %3d: naive %.1f%%  paged %.2f%%\n", batch, 100 * un, 100 * up);
    EXPECT_GT(un, 0.20) << "batch " << batch;
    EXPECT_LT(un, 0.29) << "batch " << batch;
    EXPECT_GE(up, 0.98) << "batch " << batch;
    naive_reserved += naive.usage().used_blocks * std::int64_t(kBlock);
    naive_filled += naive.usage().filled_tokens;
  }
  const double overall = double(naive_filled) / double(naive_reserved);
  EXPECT_NEAR(overall, 0.245, 0.015) << "E[clip(N(500,200),200,2048)] / 2048 is about 24.7%";
}

TEST(PagedAttentionNumbers, PagingFitsAboutFourTimesMoreSequencesInTheSameMemory) {
  const std::int32_t blocks = 50 * (kMaxModelLen / kBlock);  // room for 50 max-length reservations
  const auto lens = prompt_lengths(1000, 7);
  auto admitted = [&](KvAllocator& kv) {
    int n = 0;
    std::vector<Sequence> seqs;
    seqs.reserve(lens.size());
    for (int len : lens) {
      seqs.push_back(sequence(seqs.size() + 1, len));
      if (!kv.allocate_slots(seqs.back(), len)) break;
      ++n;
    }
    return n;
  };
  NaiveAllocator naive(blocks, kBlock, kMaxModelLen);
  KvCacheManager paged(KvCacheConfig{blocks, kBlock, false});
  const int n_naive = admitted(naive);
  const int n_paged = admitted(paged);
  EXPECT_EQ(n_naive, 50);
  EXPECT_GT(n_paged, 3.5 * n_naive);
}

TEST(PagedAttentionNumbers, ASharedSystemPromptTakes13BlocksNot130) {
  KvCacheManager kv(KvCacheConfig{200, kBlock, true});
  Sequence root = sequence(1, 200);
  ASSERT_TRUE(kv.allocate_slots(root, 200));
  root.num_computed_tokens = 200;
  std::vector<Sequence> forks(9);
  for (std::size_t i = 0; i < forks.size(); ++i) {
    forks[i] = sequence(10 + i, 0);
    forks[i].tokens = root.tokens;
    forks[i].num_computed_tokens = 200;
    kv.fork(root, forks[i]);
  }
  EXPECT_EQ(kv.usage().used_blocks, 13) << "ceil(200 / 16), shared by all ten";

  KvCacheManager unshared(KvCacheConfig{200, kBlock, false});
  std::vector<Sequence> copies;
  for (int i = 0; i < 10; ++i) copies.push_back(sequence(100 + i, 200));
  for (auto& s : copies) ASSERT_TRUE(unshared.allocate_slots(s, 200));
  EXPECT_EQ(unshared.usage().used_blocks, 130);

  // The first divergent token writes into the shared, half-full 13th block: one copy.
  forks[0].tokens.push_back(4242);
  ASSERT_TRUE(kv.allocate_slots(forks[0], 1));
  EXPECT_EQ(kv.take_copies().size(), 1u);
  EXPECT_EQ(kv.usage().used_blocks, 14);
}

}  // namespace
}  // namespace duet
