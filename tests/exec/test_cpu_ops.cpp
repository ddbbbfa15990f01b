// The CPU reference operators against hand computations and naive loops. Tolerances are float32
// rounding with room to spare: 1e-6 relative for one elementwise op, 1e-5 for a reduction over a
// few dozen terms.
#include "exec/cpu_ops.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kernels/philox.hpp"
#include "kernels/sample_rule.hpp"

namespace duet {
namespace {

// Uniform floats in [lo, hi) from mt19937_64, whose output the standard fixes.
std::vector<float> uniform(std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::vector<float> out(n);
  for (float& v : out) v = lo + (hi - lo) * float(double(rng() >> 11) * 0x1.0p-53);
  return out;
}

double norm(std::span<const float> x) {
  double s = 0;
  for (float v : x) s += double(v) * v;
  return std::sqrt(s);
}

TEST(CpuOps, RmsNormMatchesAHandComputation) {
  const std::vector<float> x = {1, 2, 3, 4}, w = {1, 0.5f, 2, 1};
  std::vector<float> out(4);
  rms_norm(x, w, 1e-5f, out);
  const double inv_rms = 1.0 / std::sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-5);  // mean(x^2) = 7.5
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], x[i] * inv_rms * w[i], 1e-6) << i;
  MatrixRM rows(2, 4);
  rows << 1, 2, 3, 4, -2, 0, 0, 2;
  rms_norm_rows(rows, w, 1e-5f, rows);  // in place
  EXPECT_NEAR(rows(0, 3), 4 * inv_rms, 1e-6);
  EXPECT_NEAR(rows(1, 0), -2 / std::sqrt(2.0 + 1e-5), 1e-6);
}

TEST(CpuOps, SiluMulAndSoftmax) {
  std::vector<float> out(2);
  silu_mul(std::vector<float>{1.0f, -2.0f}, std::vector<float>{2.0f, 3.0f}, out);
  EXPECT_NEAR(out[0], 1.0 / (1.0 + std::exp(-1.0)) * 2.0, 1e-6);
  EXPECT_NEAR(out[1], -2.0 / (1.0 + std::exp(2.0)) * 3.0, 1e-6);

  std::vector<float> p = {1000.0f, 1001.0f, 999.0f};  // overflows exp unless the max goes first
  softmax(p);
  const double z = std::exp(-1.0) + 1.0 + std::exp(-2.0);
  EXPECT_NEAR(p[0], std::exp(-1.0) / z, 1e-6);
  EXPECT_NEAR(p[1], 1.0 / z, 1e-6);
  EXPECT_NEAR(p[0] + p[1] + p[2], 1.0, 1e-6);
}

TEST(CpuOps, RopeFrequenciesAreThetaToTheMinusTwoIOverD) {
  const auto inv = rope_inv_freq(16, 10000.0, std::nullopt);
  ASSERT_EQ(inv.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(inv[i], std::pow(10000.0, -2.0 * i / 16));
}

TEST(CpuOps, RopeRotatesThePairsIAndIPlusHalfD) {
  // head_dim 4, theta 10000: inv_freq = {1, 0.01}; pairs (0, 2) and (1, 3).
  const auto inv = rope_inv_freq(4, 10000.0, std::nullopt);
  std::vector<float> x = {1, 2, 3, 4};
  apply_rope(x, 2, inv);
  EXPECT_NEAR(x[0], 1 * std::cos(2.0) - 3 * std::sin(2.0), 1e-6);
  EXPECT_NEAR(x[2], 3 * std::cos(2.0) + 1 * std::sin(2.0), 1e-6);
  EXPECT_NEAR(x[1], 2 * std::cos(0.02) - 4 * std::sin(0.02), 1e-6);
  EXPECT_NEAR(x[3], 4 * std::cos(0.02) + 2 * std::sin(0.02), 1e-6);
}

TEST(CpuOps, RopeIsARotationAndPositionZeroIsTheIdentity) {
  const auto inv = rope_inv_freq(64, 500000.0, std::nullopt);
  const std::vector<float> x = uniform(64, 1);
  std::vector<float> y = x;
  apply_rope(y, 0, inv);
  EXPECT_EQ(y, x) << "cos 0 = 1 and sin 0 = 0 exactly";
  for (int pos : {1, 17, 1000, 131071}) {
    y = x;
    apply_rope(y, pos, inv);
    EXPECT_NEAR(norm(y), norm(x), 1e-5 * norm(x)) << pos;
  }
  // Relative positions: <rope(q, m), rope(k, n)> depends only on m - n.
  const std::vector<float> k = uniform(64, 2);
  auto dot_at = [&](int m, int n) {
    std::vector<float> a = x, b = k;
    apply_rope(a, m, inv);
    apply_rope(b, n, inv);
    double s = 0;
    for (int i = 0; i < 64; ++i) s += double(a[i]) * b[i];
    return s;
  };
  EXPECT_NEAR(dot_at(10, 3), dot_at(107, 100), 1e-4);
}

TEST(CpuOps, Llama3ScalingKeepsHighFrequenciesAndStretchesLowOnes) {
  // Llama 3.1 8B: theta 500000, head_dim 128, factor 8, low 1, high 4, original 8192. Wavelengths
  // below 8192/4 = 2048 are kept, above 8192/1 = 8192 divided by 8, and interpolated between.
  const RopeScaling s{8.0, 1.0, 4.0, 8192};
  const auto plain = rope_inv_freq(128, 500000.0, std::nullopt);
  const auto scaled = rope_inv_freq(128, 500000.0, s);
  int high = 0, low = 0, medium = 0;
  for (std::size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = 2 * M_PI / plain[i];
    if (wavelen < 2048) {
      EXPECT_DOUBLE_EQ(scaled[i], plain[i]) << i;
      ++high;
    } else if (wavelen > 8192) {
      EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 8) << i;
      ++low;
    } else {
      const double smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0);
      EXPECT_DOUBLE_EQ(scaled[i], (1 - smooth) * plain[i] / 8 + smooth * plain[i]) << i;
      EXPECT_LT(scaled[i], plain[i]);
      EXPECT_GT(scaled[i], plain[i] / 8);
      ++medium;
    }
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(medium, 0);
  // The band edges join continuously: smooth = 1 at wavelen = 2048, 0 at 8192.
  EXPECT_NEAR(rope_llama3_scale(2 * M_PI / 2048, s), 2 * M_PI / 2048, 1e-15);
  EXPECT_NEAR(rope_llama3_scale(2 * M_PI / 8192, s), 2 * M_PI / 8192 / 8, 1e-15);
}

TEST(CpuOps, KvWriteAndBlockCopyFollowTheLayout) {
  const KvLayout L{2, 8, 2, 4, 3};  // layers, blocks, kv heads, block size, head dim
  std::vector<float> pool(std::size_t(L.total_elems()), 0.0f);
  const std::vector<BlockId> table = {3, 6};
  const std::vector<float> k = {1, 2, 3, 4, 5, 6}, v = {7, 8, 9, 10, 11, 12};
  kv_write(pool, L, 1, table, 5, k, v);  // position 5: block 6, slot 1
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(pool[std::size_t(L.offset(1, 0, 6, h, 1) + i)], k[std::size_t(h * 3 + i)]);
      EXPECT_EQ(pool[std::size_t(L.offset(1, 1, 6, h, 1) + i)], v[std::size_t(h * 3 + i)]);
    }
  kv_write(pool, L, 0, table, 2, k, v);  // layer 0, block 3, slot 2
  kv_copy_block(pool, L, 6, 0);
  kv_copy_block(pool, L, 3, 1);
  for (int layer = 0; layer < 2; ++layer)
    for (int kv = 0; kv < 2; ++kv)
      for (std::int64_t e = 0; e < L.block_elems(); ++e) {
        EXPECT_EQ(pool[std::size_t(L.offset(layer, kv, 0, 0, 0) + e)],
                  pool[std::size_t(L.offset(layer, kv, 6, 0, 0) + e)]);
        EXPECT_EQ(pool[std::size_t(L.offset(layer, kv, 1, 0, 0) + e)],
                  pool[std::size_t(L.offset(layer, kv, 3, 0, 0) + e)]);
      }
  EXPECT_THROW(kv_write(pool, L, 0, table, 8, k, v), std::out_of_range) << "past the block table";
}

// Paged attention against a loop over contiguous K and V, for a chunk of 5 queries after 6 cached
// tokens, blocks scattered over the pool and every unwritten slot NaN (so a read outside the
// causal window or the table shows). Tolerance: 1e-5 on outputs of size ~1 (float32 dots of 16).
void check_attention_against_naive_loop(int num_heads, int num_kv_heads) {
  const int d = 16, bs = 4, first = 6, nq = 5, nk = first + nq;
  const KvLayout L{2, 10, num_kv_heads, bs, d};
  std::vector<float> pool(std::size_t(L.total_elems()), std::numeric_limits<float>::quiet_NaN());
  const std::vector<BlockId> table = {7, 2, 9};
  const std::vector<float> keys = uniform(std::size_t(nk * num_kv_heads * d), 10);
  const std::vector<float> values = uniform(std::size_t(nk * num_kv_heads * d), 11);
  const std::size_t width = std::size_t(num_kv_heads * d);
  for (int p = 0; p < nk; ++p)
    kv_write(pool, L, 1, table, p, std::span(keys).subspan(p * width, width),
             std::span(values).subspan(p * width, width));
  const std::vector<float> qv = uniform(std::size_t(nq * num_heads * d), 12, -2.0f, 2.0f);
  const MatrixRM q = Eigen::Map<const MatrixRM>(qv.data(), nq, num_heads * d);

  const MatrixRM out = paged_attention(pool, L, 1, table, q, first, num_heads);
  const int group = num_heads / num_kv_heads;
  for (int i = 0; i < nq; ++i)
    for (int h = 0; h < num_heads; ++h) {
      const int kvh = h / group;
      std::vector<double> w;
      double z = 0, top = -1e300;
      for (int j = 0; j <= first + i; ++j) {
        double s = 0;
        for (int e = 0; e < d; ++e) s += double(q(i, h * d + e)) * keys[std::size_t(j) * width + kvh * d + e];
        w.push_back(s / std::sqrt(double(d)));
        top = std::max(top, w.back());
      }
      for (double& x : w) z += (x = std::exp(x - top));
      for (int e = 0; e < d; ++e) {
        double o = 0;
        for (std::size_t j = 0; j < w.size(); ++j) o += w[j] / z * values[j * width + kvh * d + e];
        ASSERT_NEAR(out(i, h * d + e), o, 1e-5) << "query " << i << " head " << h << " dim " << e;
      }
    }
}

TEST(CpuOps, PagedAttentionMatchesANaiveLoopWithoutGqa) { check_attention_against_naive_loop(4, 4); }
TEST(CpuOps, PagedAttentionMatchesANaiveLoopWithGqa2) { check_attention_against_naive_loop(4, 2); }
TEST(CpuOps, PagedAttentionMatchesANaiveLoopWithGqa4) { check_attention_against_naive_loop(8, 2); }

TEST(CpuOps, ArgmaxTakesTheLowestIdOnTies) {
  EXPECT_EQ(argmax(std::vector<float>{0, 3, 1, 3, 3}), 1);
  EXPECT_EQ(argmax(std::vector<float>{-1, std::numeric_limits<float>::quiet_NaN(), -0.5f}), 2);
}

TEST(CpuOps, TopPWithATinyPIsGreedy) {
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    std::vector<float> logits = uniform(300, seed, -5.0f, 5.0f);
    logits[17] = logits[250] = 6.0f;  // a tie at the top: the lowest id wins, as in argmax
    for (int i = 0; i < 20; ++i)
      ASSERT_EQ(sample_top_p(logits, 0.7f, 1e-6f, kernels::philox_uniform(seed, std::uint64_t(i))), 17);
  }
  EXPECT_EQ(sample_token(std::vector<float>{1, 5, 2}, SamplingParams{}, 3), 1)
      << "temperature 0 (the default): greedy";
}

TEST(CpuOps, SamplingWithoutAFiniteMaximumIsTheArgmax) {
  // The CUDA sampler's rule: no finite distribution to draw from, so the greedy token.
  const float inf = std::numeric_limits<float>::infinity();
  for (int i = 0; i < 20; ++i) {
    const double u = kernels::philox_uniform(5, std::uint64_t(i));
    EXPECT_EQ(sample_top_p(std::vector<float>{1, inf, 2, inf}, 1.0f, 0.9f, u), 1) << "+inf: the first";
    EXPECT_EQ(sample_top_p(std::vector<float>{-inf, -inf, -inf}, 1.0f, 1.0f, u), 0) << "all -inf";
    EXPECT_EQ(sample_top_p(std::vector<float>{1, 5, 2}, std::numeric_limits<float>::quiet_NaN(), 1.0f, u), 1)
        << "a NaN temperature";
  }
}

TEST(CpuOps, SamplingIsDeterministicPerSeedAndOutputIndex) {
  const std::vector<float> logits = uniform(64, 3, -1.0f, 1.0f);  // flat: many tokens likely
  SamplingParams a;
  a.temperature = 1.0f;
  a.seed = 7;
  SamplingParams b = a;
  b.seed = 8;
  int differ = 0, differ_by_index = 0;
  for (int i = 0; i < 100; ++i) {
    const TokenId t = sample_token(logits, a, i);
    EXPECT_EQ(t, sample_token(logits, a, i)) << "the same (seed, index) gives the same token";
    differ += t != sample_token(logits, b, i);
    differ_by_index += t != sample_token(logits, a, i + 1);
  }
  EXPECT_GT(differ, 50) << "another seed is another stream";
  EXPECT_GT(differ_by_index, 50);
  double mean = 0;
  for (int i = 0; i < 10000; ++i) {
    const double u = kernels::philox_uniform(123, std::uint64_t(i));
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    mean += u / 10000;
  }
  EXPECT_NEAR(mean, 0.5, 0.01);  // standard error 0.003
}

// The rule of kernels/sampling.cu written the plain way: integer masses, a full sort, prefix
// sums. Integer sums are exact, so the CPU sampler's radix search must find the very same token.
struct SortedRule {
  std::vector<TokenId> order;       // tokens with mass, by weight descending, then id ascending
  std::vector<std::uint64_t> ends;  // cumulative mass through each of them
  std::uint64_t total = 0;

  SortedRule(std::span<const float> l, float temperature) {
    const float top = l[std::size_t(argmax(l))];
    std::vector<float> p(l.size());
    std::vector<std::uint64_t> q(l.size());
    for (std::size_t i = 0; i < l.size(); ++i) {
      p[i] = kernels::sample_weight(l[i], top, temperature);
      q[i] = kernels::sample_mass(p[i]);
      if (q[i] > 0) order.push_back(TokenId(i));
    }
    std::sort(order.begin(), order.end(), [&](TokenId a, TokenId b) {
      return p[std::size_t(a)] != p[std::size_t(b)] ? p[std::size_t(a)] > p[std::size_t(b)] : a < b;
    });
    for (TokenId t : order) ends.push_back(total += q[std::size_t(t)]);
  }
  // The first token whose cumulative mass reaches need.
  std::size_t reach(std::uint64_t need) const {
    return std::size_t(std::lower_bound(ends.begin(), ends.end(), need) - ends.begin());
  }
  std::uint64_t kept(float top_p) const {
    return top_p < 1.0f ? ends[reach(kernels::nucleus_need(top_p, total))] : total;
  }
  TokenId draw(float top_p, double u) const { return order[reach(kernels::draw_target(u, kept(top_p)) + 1)]; }
};

TEST(CpuOps, SamplingFindsTheTokenOfTheSortedRule) {
  // Flat, peaked and quantised logits (many exact ties), a few NaN and -inf, and weights that
  // fall below 2^-40 of the top (no mass); every temperature and nucleus kind; uniforms from the
  // stream, and uniforms on both sides of the boundaries between tokens in the order, where a
  // search that is off by one mass unit picks the neighbour.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float temps[] = {1.0f, 0.7f, 0.05f, 3.0f};
  const float top_ps[] = {1.0f, 0.9f, 0.5f, 1e-6f, 0.999f};
  int draws = 0, distinct_tokens = 0;
  for (std::uint64_t seed = 0; seed < 40; ++seed) {
    const std::size_t vocab = std::size_t(50 + 997 * (seed % 7));
    std::vector<float> l = uniform(vocab, seed, -8.0f, 8.0f);
    if (seed % 3 == 1)
      for (float& x : l) x = std::round(x * 2.0f) / 2.0f;  // 33 distinct values: ties everywhere
    if (seed % 4 == 2) l[vocab / 3] += 12.0f;              // one token holds most of the mass
    if (seed % 5 == 3) l[vocab / 2] = nan, l[vocab / 5] = -inf, l[1] = 40.0f;
    std::vector<TokenId> seen;
    for (int i = 0; i < 25; ++i) {
      const float t = temps[(seed + std::uint64_t(i)) % 4], top_p = top_ps[std::size_t(i) % 5];
      const SortedRule rule(l, t);
      std::vector<double> us = {kernels::philox_uniform(seed, std::uint64_t(i))};
      const double kept = double(rule.kept(top_p));
      for (std::size_t j : {std::size_t(0), rule.order.size() / 7, rule.order.size() / 2})
        if (double(rule.ends[j]) < kept) {
          const double at = double(rule.ends[j]) / kept;
          us.push_back(at);
          us.push_back(std::nextafter(at, 0.0));
        }
      for (double u : us) {
        const TokenId got = sample_top_p(l, t, top_p, u);
        ASSERT_EQ(got, rule.draw(top_p, u))
            << "seed " << seed << " draw " << i << " T " << t << " top_p " << top_p << " u " << u;
        if (std::find(seen.begin(), seen.end(), got) == seen.end()) seen.push_back(got);
        ++draws;
      }
    }
    distinct_tokens += int(seen.size());
  }
  EXPECT_GT(draws, 3000);
  EXPECT_GT(distinct_tokens, 200) << "the draws must spread over many tokens for the check to mean much";
}

// The rule's arithmetic (kernels/sample_rule.hpp), which the property test above shares with its
// reference and so cannot check: pinned values.
TEST(CpuOps, SamplingRuleArithmetic) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(kernels::sample_weight(2.0f, 2.0f, 0.7f), 1.0f) << "the top token weighs 1";
  EXPECT_EQ(kernels::sample_weight(nan, 2.0f, 1.0f), 0.0f) << "a NaN logit weighs nothing";
  EXPECT_EQ(kernels::sample_weight(-inf, 2.0f, 1.0f), 0.0f);
  EXPECT_EQ(kernels::sample_weight(1.0f, 2.0f, inf), 1.0f) << "an infinite temperature flattens";
  EXPECT_EQ(kernels::sample_mass(1.0f), std::uint64_t(1) << 40);
  EXPECT_EQ(kernels::sample_mass(0.5f), std::uint64_t(1) << 39);
  EXPECT_EQ(kernels::sample_mass(0x1.0p-41f), 0u) << "below 2^-40 of the top: no mass";
  EXPECT_EQ(kernels::sample_mass(std::nextafter(1.0f, 0.0f)),
            (std::uint64_t(1) << 40) - (std::uint64_t(1) << 16));
  const std::uint64_t total = 1000;
  EXPECT_EQ(kernels::nucleus_need(0.0f, total), 1u) << "at least one token";
  EXPECT_EQ(kernels::nucleus_need(-0.5f, total), 1u);
  EXPECT_EQ(kernels::nucleus_need(0.5f, total), 500u);
  EXPECT_EQ(kernels::nucleus_need(0.3f, total), 301u) << "ceil of 0.3f * 1000 = 300.0000119";
  EXPECT_EQ(kernels::nucleus_need(2.0f, total), total);
  EXPECT_EQ(kernels::draw_target(0.0, total), 0u);
  EXPECT_EQ(kernels::draw_target(0.5, total), 500u);
  EXPECT_EQ(kernels::draw_target(std::nextafter(1.0, 0.0), total), total - 1) << "the last mass unit";
}

// Weights one ulp apart share every bit but the lowest: only the search's last pass tells them
// apart, and the heavier one comes first although its id is higher.
TEST(CpuOps, SamplingOrdersWeightsThatDifferInTheLastBit) {
  float a = -3.0f, b = a;  // logits whose weights differ by the fewest ulps above zero
  while (kernels::sample_weight(b, 0.0f, 1.0f) == kernels::sample_weight(a, 0.0f, 1.0f))
    b = std::nextafter(b, 0.0f);
  const auto key = [](float l) {
    return std::bit_cast<std::uint32_t>(kernels::sample_weight(l, 0.0f, 1.0f));
  };
  ASSERT_LT(key(b) - key(a), 256u) << "the two weights differ only in the last byte";
  const std::vector<float> l = {0.0f, a, b};  // order: 0, then 2 (heavier), then 1
  // Masses: token 0 2^40, then the pair's, nearly equal; a draw in the middle of each interval.
  const double m0 = double(kernels::sample_mass(1.0f)),
               m2 = double(kernels::sample_mass(kernels::sample_weight(b, 0.0f, 1.0f))),
               m1 = double(kernels::sample_mass(kernels::sample_weight(a, 0.0f, 1.0f))), kept = m0 + m1 + m2;
  EXPECT_EQ(sample_top_p(l, 1.0f, 1.0f, 0.5 * m0 / kept), 0);
  EXPECT_EQ(sample_top_p(l, 1.0f, 1.0f, (m0 + 0.5 * m2) / kept), 2)
      << "the heavier of the pair, id 2, comes first";
  EXPECT_EQ(sample_top_p(l, 1.0f, 1.0f, (m0 + m2 + 0.5 * m1) / kept), 1);
  EXPECT_EQ(sample_top_p(l, 1.0f, 1.0f, std::nextafter(1.0, 0.0)), 1) << "the last mass unit: the last token";
  EXPECT_EQ(sample_top_p(std::vector<float>{3.0f}, 0.8f, 0.9f, 0.999), 0) << "a vocabulary of one";
  EXPECT_THROW(sample_top_p(l, 1.0f, 1.0f, 1.0), std::invalid_argument) << "u must be below 1";
  EXPECT_THROW(sample_top_p(l, 1.0f, 1.0f, std::numeric_limits<double>::quiet_NaN()), std::invalid_argument);
}

// Equal logits give every token mass exactly 2^40, so the draw is exact arithmetic on the uniform:
// top_p = 1 gives floor(u * vocab), top_p < 1 keeps the k = ceil(top_p * vocab) lowest ids (ties
// rank by id) and gives floor(u * k).
TEST(CpuOps, SamplingEqualLogitsExposesTheUniform) {
  const std::size_t vocab = 1 << 12;
  const std::vector<float> l(vocab, 0.25f);
  for (std::uint64_t i = 0; i < 200; ++i) {
    const double u = kernels::philox_uniform(0x0123456789abcdefULL, i << 33);
    EXPECT_EQ(sample_top_p(l, 0.37f, 1.0f, u), TokenId(std::floor(u * double(vocab)))) << i;
    EXPECT_EQ(sample_top_p(l, 1.0f, 0.3f, u),
              TokenId(std::floor(u * std::ceil(double(0.3f) * double(vocab)))))
        << i;
  }
}

TEST(CpuOps, TemperatureAndNucleusSampleTheRightDistribution) {
  // Probabilities 0.5, 0.3, 0.15, 0.05. 40000 draws: standard error <= 0.0025, tolerance 0.01.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  const int n = 40000;
  std::vector<int> full(4), nucleus(4), hot(4);
  for (int i = 0; i < n; ++i) {
    const double u = kernels::philox_uniform(99, std::uint64_t(i));
    ++full[std::size_t(sample_top_p(logits, 1.0f, 1.0f, u))];
    ++nucleus[std::size_t(sample_top_p(logits, 1.0f, 0.7f, u))];
    ++hot[std::size_t(sample_top_p(logits, 2.0f, 1.0f, u))];
  }
  const double expect_full[] = {0.5, 0.3, 0.15, 0.05};
  const double expect_nucleus[] = {0.625, 0.375, 0, 0};  // 0.5 + 0.3 >= 0.7, renormalised
  double z = 0;
  for (double p : expect_full) z += std::sqrt(p);  // T = 2: p^(1/2), renormalised
  for (int t = 0; t < 4; ++t) {
    EXPECT_NEAR(full[t] / double(n), expect_full[t], 0.01) << t;
    EXPECT_NEAR(nucleus[t] / double(n), expect_nucleus[t], 0.01) << t;
    EXPECT_NEAR(hot[t] / double(n), std::sqrt(expect_full[t]) / z, 0.01) << t;
  }
  EXPECT_EQ(nucleus[2] + nucleus[3], 0) << "tokens outside the nucleus are never drawn";
}

TEST(CpuOps, PrmScoreIsTheTwoWaySoftmax) {
  std::vector<float> logits = uniform(32, 5, -3.0f, 3.0f);
  const double lp = logits[7], lm = logits[9];
  EXPECT_NEAR(prm_score(logits, 7, 9), std::exp(lp) / (std::exp(lp) + std::exp(lm)), 1e-6);
  EXPECT_NEAR(prm_score(logits, 9, 7), std::exp(lm) / (std::exp(lp) + std::exp(lm)), 1e-6);
  logits[7] = logits[9];
  EXPECT_EQ(prm_score(logits, 7, 9), 0.5f);
  logits[7] = 1e30f;  // no overflow in either direction
  logits[9] = -1e30f;
  EXPECT_EQ(prm_score(logits, 7, 9), 1.0f);
  EXPECT_EQ(prm_score(logits, 9, 7), 0.0f);
  EXPECT_THROW(prm_score(logits, 7, 32), std::invalid_argument);
}

}  // namespace
}  // namespace duet
