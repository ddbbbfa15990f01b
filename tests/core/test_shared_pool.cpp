// One BlockPool shared by two KvCacheManagers (kv_pool = "shared"): unit tests of floors,
// ceilings, global eviction and per-model prefix caching, bad input, and seeded property tests
// that run random operations on both models and check every invariant after every operation.
//
// The property model records, for every page, which model's KV each slot holds and of which
// token (copy-on-write copies and the forward pass's writes replayed in executor order). So
// "a sequence's table holds the KV of its own tokens, written by its own model" is checked on
// every slot of every live sequence: a block of one model hit by the other would fail it, even
// with a hash function that sends every block of both models to one collision chain.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/kv_cache_manager.hpp"
#include "tests/support/test_support.hpp"

namespace duet {
namespace {

BlockHash constant_hash(BlockHash, std::span<const TokenId>, std::uint32_t) { return 0xC0111DEULL; }

std::shared_ptr<BlockPool> two_model_pool(int pages, int bs0, int bs1, BlockHashFn fn = hash_block,
                                          double cost0 = 0, double cost1 = 0) {
  return std::make_shared<BlockPool>(
      pages, std::vector<PoolTenant>{{"llm", 0, bs0, fn, cost0}, {"prm", 1, bs1, fn, cost1}});
}

Sequence seq_of(SeqId id, std::vector<TokenId> tokens) {
  Sequence s;
  s.id = id;
  s.tokens = std::move(tokens);
  s.num_prompt_tokens = s.num_tokens();
  return s;
}

using test_support::admit;

TEST(SharedPool, ModelsDrawPagesFromOnePool) {
  auto pool = two_model_pool(10, 4, 1);
  KvCacheManager llm(pool, 0, true), prm(pool, 1, true);
  Sequence a = seq_of(1, std::vector<TokenId>(16, 5));  // 4 pages of 4 tokens
  Sequence b = seq_of(2, std::vector<TokenId>(5, 6));   // 5 pages of 1 token
  ASSERT_TRUE(admit(llm, a));
  ASSERT_TRUE(admit(prm, b));
  EXPECT_EQ(pool->tenant_used(0), 4);
  EXPECT_EQ(pool->tenant_used(1), 5);
  EXPECT_EQ(llm.usage().free_blocks(), 1);  // the shared free count
  EXPECT_EQ(prm.usage().free_blocks(), 1);
  EXPECT_EQ(llm.usage().total_blocks, 10);
  Sequence c = seq_of(3, std::vector<TokenId>(8, 7));
  EXPECT_FALSE(admit(llm, c));  // 2 pages needed, 1 free
  pool->check_consistency();
}

TEST(SharedPool, EvictionIsGlobalInLeastRecentlyFreedOrder) {
  auto pool = two_model_pool(4, 2, 2);
  KvCacheManager llm(pool, 0, true), prm(pool, 1, true);
  Sequence a = seq_of(1, {1, 2, 3, 4});
  Sequence b = seq_of(2, {1, 2, 3, 4});
  ASSERT_TRUE(admit(prm, b));
  ASSERT_TRUE(admit(llm, a));
  prm.free(b);  // the PRM's blocks are freed first: they go first
  llm.free(a);
  Sequence c = seq_of(3, {9, 9, 9, 9});
  ASSERT_TRUE(admit(llm, c));  // takes 2 pages: the PRM's cached blocks are evicted
  EXPECT_EQ(prm.counters().evictions, 2);
  EXPECT_EQ(llm.counters().evictions, 0);
  Sequence again = seq_of(4, {1, 2, 3, 4, 5});
  EXPECT_EQ(llm.lookup_prefix(again), 4);  // the LLM's own blocks are still cached
  pool->check_consistency();
}

// With eviction costs (GreedyDual), the PRM's blocks (cost 3) outlive the LLM's (cost 1) though
// freed first, until the pool's inflation has risen by the difference: then the least recently
// freed goes first again.
TEST(SharedPool, CostlierBlocksOutliveCheaperOnesByTheirCost) {
  auto pool = two_model_pool(5, 2, 2, hash_block, 1.0, 3.0);
  KvCacheManager llm(pool, 0, true), prm(pool, 1, true);
  Sequence b = seq_of(1, {1, 2, 3, 4}), a = seq_of(2, {1, 2, 3, 4}), c = seq_of(3, {5, 6});
  ASSERT_TRUE(admit(prm, b));
  ASSERT_TRUE(admit(llm, a));
  ASSERT_TRUE(admit(llm, c));
  prm.free(b);  // worth 0 + 3 each
  llm.free(a);  // worth 0 + 1 each: evicted first, though freed later
  Sequence d = seq_of(4, {9, 9, 9, 9});
  ASSERT_TRUE(admit(llm, d));  // takes a's 2 pages; the inflation rises to 1
  EXPECT_EQ(llm.counters().evictions, 2);
  EXPECT_EQ(prm.counters().evictions, 0);
  llm.free(d);  // worth 1 + 1 = 2: still below the PRM's 3
  llm.free(c);  // worth 2 as well, freed after d
  const std::vector<BlockId> order = pool->eviction_order();
  ASSERT_EQ(order.size(), 5u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(pool->block(order[std::size_t(i)]).tenant, 0) << i;
  for (int i = 3; i < 5; ++i) EXPECT_EQ(pool->block(order[std::size_t(i)]).tenant, 1) << i;
  // Evicting d's and c's blocks raises the inflation to 2, so LLM blocks freed now are worth 3,
  // as much as the PRM's, which were freed earlier: those go first.
  Sequence e = seq_of(5, {7, 7, 7, 7, 7, 7});
  ASSERT_TRUE(admit(llm, e));
  llm.free(e);
  const std::vector<BlockId> after = pool->eviction_order();
  ASSERT_EQ(after.size(), 5u);
  EXPECT_EQ(pool->block(after[0]).tenant, 1);
  EXPECT_EQ(pool->block(after[1]).tenant, 1);
  Sequence f = seq_of(6, {8, 8, 8, 8});
  ASSERT_TRUE(admit(llm, f));
  EXPECT_EQ(prm.counters().evictions, 2);
  pool->check_consistency();
  EXPECT_THROW(two_model_pool(4, 2, 2, hash_block, -1.0, 0.0), Error);
}

TEST(SharedPool, APrefixCachedByOneModelNeverHitsForTheOther) {
  auto pool = two_model_pool(8, 2, 2, constant_hash);  // every block collides
  KvCacheManager llm(pool, 0, true), prm(pool, 1, true);
  Sequence a = seq_of(1, {1, 2, 3, 4, 5});
  ASSERT_TRUE(admit(llm, a));
  Sequence b = seq_of(2, {1, 2, 3, 4, 5});
  EXPECT_EQ(prm.lookup_prefix(b), 0);
  Sequence c = seq_of(3, {1, 2, 3, 4, 5});
  EXPECT_EQ(llm.lookup_prefix(c), 4);
}

TEST(SharedPool, FloorsKeepPagesWithinReachOfTheirModel) {
  auto pool = two_model_pool(10, 1, 1);
  pool->set_limits(1, {4, kNoCeiling});
  KvCacheManager llm(pool, 0, true), prm(pool, 1, true);
  EXPECT_EQ(llm.usage().free_blocks(), 6);
  Sequence a = seq_of(1, std::vector<TokenId>(7, 1));
  EXPECT_FALSE(admit(llm, a));
  a = seq_of(1, std::vector<TokenId>(6, 1));
  ASSERT_TRUE(admit(llm, a));
  Sequence b = seq_of(2, std::vector<TokenId>(4, 2));
  ASSERT_TRUE(admit(prm, b));
  EXPECT_EQ(pool->num_free(), 0);
  prm.free(b);  // the floor reserves the pages again
  Sequence c = seq_of(3, {3});
  EXPECT_FALSE(admit(llm, c));
}

TEST(SharedPool, CeilingsCapAModelAndMayMoveDuringARun) {
  auto pool = two_model_pool(10, 1, 1);
  KvCacheManager llm(pool, 0, true), prm(pool, 1, true);
  llm.set_limits({0, 3});
  Sequence a = seq_of(1, std::vector<TokenId>(4, 1));
  EXPECT_FALSE(admit(llm, a));
  EXPECT_EQ(llm.usage().free_blocks(), 3);
  llm.set_limits({0, 4});
  ASSERT_TRUE(admit(llm, a));
  llm.set_limits({0, 2});  // pages held are kept; the model cannot grow until it is below
  EXPECT_EQ(llm.usage().used_blocks, 4);
  EXPECT_EQ(llm.usage().free_blocks(), 0);
  EXPECT_EQ(prm.usage().free_blocks(), 6);
}

TEST(SharedPool, ImpossibleLimitsAreClearErrors) {
  auto pool = two_model_pool(10, 1, 1);
  pool->set_limits(0, {6, kNoCeiling});
  try {
    pool->set_limits(1, {5, kNoCeiling});
    FAIL() << "floors past the pool were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("min_blocks"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("11 pages"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pool->set_limits(1, {-1, kNoCeiling}), Error);
  try {
    pool->set_limits(1, {3, 2});
    FAIL() << "a ceiling below the floor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_blocks of 'prm'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool->limits(1), KvLimits{});  // refused limits change nothing
}

TEST(SharedPool, AOneTenantPoolWithoutLimitsIsAPrivatePool) {
  BlockPool pool(5, 4);
  EXPECT_EQ(pool.available(), 5);
  for (int i = 0; i < 5; ++i) EXPECT_NE(pool.allocate(), kNoBlock);
  EXPECT_EQ(pool.allocate(), kNoBlock);
  EXPECT_EQ(pool.tenant_used(0), 5);
}

// --- property tests ----------------------------------------------------------------------------

struct PoolCase {
  const char* name;
  std::uint64_t seed;
  int pages;
  int bs[2];
  KvLimits limits[2];
  bool moving_limits;  // limits change at random during the run
  bool constant_hash;
  int num_ops;
  double costs[2];  // eviction costs: {0, 0} is least recently freed order
};

void PrintTo(const PoolCase& c, std::ostream* os) { *os << c.name << " (seed " << c.seed << ")"; }

struct Slot {
  int tenant = -1;
  TokenId token = kNoToken;
  bool operator==(const Slot&) const = default;
};

class SharedPoolModel {
 public:
  explicit SharedPoolModel(const PoolCase& c)
      : c_(c),
        pool_(two_model_pool(c.pages, c.bs[0], c.bs[1], c.constant_hash ? constant_hash : hash_block,
                             c.costs[0], c.costs[1])),
        rng_(c.seed),
        content_(std::size_t(c.pages), std::vector<Slot>(std::size_t(std::max(c.bs[0], c.bs[1])))) {
    for (int t = 0; t < 2; ++t) {
      pool_->set_limits(t, c.limits[t]);
      kv_.push_back(std::make_unique<KvCacheManager>(pool_, t, true));
    }
    for (int p = 0; p < 3; ++p) prefixes_.push_back(tokens(int(below(12)) + 1));
  }

  std::string step() {
    const int t = int(below(2));
    const std::vector<std::int32_t> used0 = {pool_->tenant_used(0), pool_->tenant_used(1)};
    writes_.clear();
    std::string err = run(t, int(below(100)));
    if (!err.empty()) return err;
    if (err = replay(); !err.empty()) return err;
    return check(used0);
  }

  std::string release_all() {
    for (int t = 0; t < 2; ++t)
      for (auto& s : live_[t]) kv_[std::size_t(t)]->free(*s);
    live_[0].clear();
    live_[1].clear();
    DUET_CHECK_OR_RETURN(pool_->num_free() == pool_->num_blocks(),
                         "pages still in use after freeing everything");
    return "";
  }

  std::int64_t moved = 0;  // pages one model took that the other had held
  std::int64_t refusals = 0;

 private:
  struct Write {
    int tenant;
    Sequence* seq;
    int begin, end;
  };

  std::uint64_t below(std::uint64_t n) { return rng_() % n; }
  std::vector<TokenId> tokens(int n) {
    std::vector<TokenId> v(static_cast<std::size_t>(n));
    for (TokenId& x : v) x = TokenId(below(3));
    return v;
  }

  std::unique_ptr<Sequence> new_seq() {
    std::vector<TokenId> p = prefixes_[below(prefixes_.size())];
    const auto tail = tokens(int(below(10)) + 1);
    p.insert(p.end(), tail.begin(), tail.end());
    auto s = std::make_unique<Sequence>(seq_of(next_id_++, std::move(p)));
    return s;
  }

  bool allocate(int t, Sequence& s, int n, int hit) {
    const int begin = std::max(s.kv.num_slots, hit);
    if (!kv_[std::size_t(t)]->allocate_slots(s, n, hit)) {
      ++refusals;
      return false;
    }
    writes_.push_back({t, &s, begin, begin + n});
    return true;
  }

  std::string run(int t, int r) {
    auto& live = live_[t];
    KvCacheManager& kv = *kv_[std::size_t(t)];
    if (r < 30 && live.size() < 10) {  // admit (a preempted sequence, or a new one)
      std::unique_ptr<Sequence> s;
      if (!preempted_[t].empty() && below(2) == 0) {
        s = std::move(preempted_[t].back());
        preempted_[t].pop_back();
      } else {
        s = new_seq();
      }
      const int hit = kv.lookup_prefix(*s);
      if (allocate(t, *s, s->num_tokens() - hit, hit)) {
        s->num_computed_tokens = s->num_tokens();
        live.push_back(std::move(s));
      } else {
        preempted_[t].push_back(std::move(s));
      }
    } else if (r < 60 && !live.empty()) {  // a decode step
      Sequence& s = *live[below(live.size())];
      s.tokens.push_back(TokenId(below(3)));
      if (allocate(t, s, 1, 0)) ++s.num_computed_tokens;
      else s.tokens.pop_back();
    } else if (r < 70 && !live.empty() && live.size() < 10) {  // a fork
      const Sequence& src = *live[below(live.size())];
      auto dst = std::make_unique<Sequence>(seq_of(next_id_++, src.tokens));
      dst->num_computed_tokens = src.num_computed_tokens;
      kv.fork(src, *dst);
      live.push_back(std::move(dst));
    } else if (r < 85 && !live.empty()) {  // finish or preempt
      const std::size_t i = below(live.size());
      kv.free(*live[i]);
      live[i]->num_computed_tokens = 0;
      if (below(2) == 0 && preempted_[t].size() < 6) preempted_[t].push_back(std::move(live[i]));
      live.erase(live.begin() + std::ptrdiff_t(i));
    } else if (r < 92 && !live.empty()) {
      kv.set_priority(*live[below(live.size())], int(below(kNumPriorities)), below(2) == 0);
    } else if (c_.moving_limits) {
      // A policy moving the floor and ceiling; refused limits (floors past the pool) change nothing.
      const std::int32_t lo = std::int32_t(below(std::uint64_t(c_.pages / 2 + 2)));
      const KvLimits l{lo, below(3) == 0 ? kNoCeiling : lo + std::int32_t(below(std::uint64_t(c_.pages)))};
      const KvLimits before = pool_->limits(t);
      try {
        kv.set_limits(l);
      } catch (const Error&) {
        DUET_CHECK_OR_RETURN(pool_->limits(t) == before, "refused limits changed the pool");
      }
    }
    return "";
  }

  // The executor's order: block copies first, then the new tokens' KV.
  std::string replay() {
    for (int t = 0; t < 2; ++t)
      for (const BlockCopy& c : kv_[std::size_t(t)]->take_copies()) {
        DUET_CHECK_OR_RETURN(
            pool_->block(c.src).tenant == t && pool_->block(c.dst).tenant == t,
            "model " << t << " copies page " << c.src << " -> " << c.dst << " of another model");
        content_[std::size_t(c.dst)] = content_[std::size_t(c.src)];
      }
    for (const Write& w : writes_) {
      const int bs = c_.bs[w.tenant];
      for (int p = w.begin; p < w.end; ++p)
        content_[std::size_t(w.seq->kv.blocks[std::size_t(p / bs)])][std::size_t(p % bs)] = {
            w.tenant, w.seq->tokens[std::size_t(p)]};
    }
    return "";
  }

  std::string check(const std::vector<std::int32_t>& used0) {
    std::vector<int> holders(std::size_t(c_.pages), 0);
    std::vector<int> owner(std::size_t(c_.pages), -1);
    std::int32_t held[2] = {0, 0};
    for (int m = 0; m < 2; ++m)
      for (const auto& s : live_[m]) {
        const int bs = c_.bs[m];
        for (std::size_t i = 0; i < s->kv.blocks.size(); ++i) {
          const BlockId b = s->kv.blocks[i];
          DUET_CHECK_OR_RETURN(owner[std::size_t(b)] == -1 || owner[std::size_t(b)] == m,
                               "page " << b << " is in tables of both models");
          DUET_CHECK_OR_RETURN(pool_->block(b).tenant == m,
                               "model " << m << " holds page " << b << " of another model");
          if (holders[std::size_t(b)]++ == 0) ++held[m];
          owner[std::size_t(b)] = m;
          const int slots = std::min(bs, s->kv.num_slots - int(i) * bs);
          for (int j = 0; j < slots; ++j) {
            const Slot want{m, s->tokens[i * std::size_t(bs) + std::size_t(j)]};
            DUET_CHECK_OR_RETURN(content_[std::size_t(b)][std::size_t(j)] == want,
                                 "model " << m << " sequence " << s->id << " reads page " << b << " slot "
                                          << j << " written by model "
                                          << content_[std::size_t(b)][std::size_t(j)].tenant << " (token "
                                          << content_[std::size_t(b)][std::size_t(j)].token << ")");
          }
        }
      }
    for (BlockId b = 0; b < c_.pages; ++b)
      DUET_CHECK_OR_RETURN(pool_->block(b).ref_count == holders[std::size_t(b)],
                           "page " << b << " ref count is off");
    // Pages per model sum to the total.
    DUET_CHECK_OR_RETURN(held[0] == pool_->tenant_used(0) && held[1] == pool_->tenant_used(1),
                         "used pages " << pool_->tenant_used(0) << "/" << pool_->tenant_used(1)
                                       << ", tables hold " << held[0] << "/" << held[1]);
    DUET_CHECK_OR_RETURN(held[0] + held[1] + pool_->num_free() == c_.pages,
                         "pages per model and free pages do not sum to " << c_.pages);
    // A model that grew stayed within its ceiling and left the other's floor within its reach.
    for (int m = 0; m < 2; ++m) {
      if (held[m] <= used0[std::size_t(m)]) continue;
      DUET_CHECK_OR_RETURN(held[m] <= pool_->limits(m).max_blocks, "model " << m << " grew past its ceiling");
      const int o = 1 - m;
      DUET_CHECK_OR_RETURN(pool_->num_free() >= std::max(0, pool_->limits(o).min_blocks - held[o]),
                           "model " << m << " took pages that model " << o << "'s floor reserves");
    }
    for (BlockId b = 0; b < c_.pages; ++b) {
      const int m = owner[std::size_t(b)];
      if (m < 0) continue;
      moved += last_owner_[std::size_t(b)] == 1 - m;
      last_owner_[std::size_t(b)] = m;
    }
    for (int m = 0; m < 2; ++m) {
      const KvUsage u = kv_[std::size_t(m)]->usage();
      DUET_CHECK_OR_RETURN(
          u.used_blocks == held[m] && u.free_blocks() == pool_->available(m) && u.total_blocks == c_.pages,
          "usage of model " << m << " disagrees with the pool");
    }
    try {
      pool_->check_consistency();
    } catch (const std::exception& e) {
      return std::string("check_consistency: ") + e.what();
    }
    return "";
  }

  PoolCase c_;
  std::shared_ptr<BlockPool> pool_;
  std::vector<std::unique_ptr<KvCacheManager>> kv_;
  std::mt19937_64 rng_;
  std::vector<std::vector<Slot>> content_;
  std::vector<std::vector<TokenId>> prefixes_;
  std::vector<std::unique_ptr<Sequence>> live_[2], preempted_[2];
  std::vector<Write> writes_;
  std::vector<int> last_owner_ = std::vector<int>(std::size_t(c_.pages), -1);
  SeqId next_id_ = 1;
};

class SharedPoolProperty : public ::testing::TestWithParam<PoolCase> {};

TEST_P(SharedPoolProperty, RandomOperationsOnBothModelsKeepInvariants) {
  const PoolCase& c = GetParam();
  SharedPoolModel model(c);
  for (int i = 0; i < c.num_ops; ++i) {
    const std::string err = model.step();
    ASSERT_TRUE(err.empty()) << c.name << " seed " << c.seed << " op " << i << ": " << err;
  }
  ASSERT_EQ(model.release_all(), "");
  // The cases are sized so that the pool binds: allocations are refused and pages change hands.
  EXPECT_GT(model.refusals, 0);
  EXPECT_GT(model.moved, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SharedPoolProperty,
    ::testing::Values(
        PoolCase{"llm64_prm16_scaled", 1, 24, {4, 1}, {{}, {}}, false, false, 4000, {0, 0}},
        PoolCase{"equal_sizes_colliding", 2, 20, {2, 2}, {{}, {}}, false, true, 4000, {0, 0}},
        PoolCase{"floors", 3, 24, {4, 1}, {{6, kNoCeiling}, {8, kNoCeiling}}, false, false, 4000, {0, 0}},
        PoolCase{"floors_and_ceilings", 4, 24, {2, 2}, {{4, 14}, {4, 16}}, false, true, 4000, {0, 0}},
        PoolCase{"moving_limits", 5, 24, {4, 1}, {{}, {}}, true, false, 6000, {0, 0}},
        PoolCase{"moving_limits_colliding", 6, 16, {2, 2}, {{}, {}}, true, true, 6000, {0, 0}},
        PoolCase{"eviction_costs", 7, 24, {4, 1}, {{}, {}}, false, false, 4000, {1.0, 1.6}},
        PoolCase{"eviction_costs_moving_limits", 8, 16, {2, 2}, {{}, {}}, true, true, 6000, {0.5, 2.0}}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace duet
