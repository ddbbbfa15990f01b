#include "exec/cpu_ops.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/philox.hpp"
#include "kernels/sample_rule.hpp"

namespace duet {

namespace {

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("cpu_ops: ") + what);
}

}  // namespace

// --- Normalisation and activation -----------------------------------------------------------

void rms_norm(std::span<const float> x, std::span<const float> weight, float eps, std::span<float> out) {
  require(weight.size() == x.size() && out.size() == x.size(), "rms_norm: sizes differ");
  double sum_sq = 0.0;
  for (float v : x) sum_sq += double(v) * double(v);
  const float inv_rms = float(1.0 / std::sqrt(sum_sq / double(x.size()) + double(eps)));
  // HF multiplies the normalised float32 activation by the weight: (x * inv_rms) * w.
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = (x[i] * inv_rms) * weight[i];
}

void rms_norm_rows(const MatrixRM& x, std::span<const float> weight, float eps, MatrixRM& out) {
  if (&out != &x) out.resize(x.rows(), x.cols());
  const std::size_t n = std::size_t(x.cols());
  for (Eigen::Index r = 0; r < x.rows(); ++r)
    rms_norm({x.row(r).data(), n}, weight, eps, {out.row(r).data(), n});
}

void silu_mul(std::span<const float> gate, std::span<const float> up, std::span<float> out) {
  require(up.size() == gate.size() && out.size() == gate.size(), "silu_mul: sizes differ");
  for (std::size_t i = 0; i < gate.size(); ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void softmax(std::span<float> x) {
  if (x.empty()) return;
  const float m = *std::max_element(x.begin(), x.end());
  double sum = 0.0;
  for (float& v : x) {
    v = std::exp(v - m);
    sum += v;
  }
  const float inv = float(1.0 / sum);
  for (float& v : x) v *= inv;
}

// --- Rotary position embedding ----------------------------------------------------------------

double rope_llama3_scale(double inv_freq, const RopeScaling& s) {
  const double original = s.original_max_position_embeddings;
  const double low_freq_wavelen = original / s.low_freq_factor;
  const double high_freq_wavelen = original / s.high_freq_factor;
  const double wavelen = 2.0 * M_PI / inv_freq;
  if (wavelen < high_freq_wavelen) return inv_freq;            // high frequency: local detail, kept
  if (wavelen > low_freq_wavelen) return inv_freq / s.factor;  // low frequency: stretched
  const double smooth = (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * inv_freq / s.factor + smooth * inv_freq;
}

std::vector<double> rope_inv_freq(int head_dim, double theta, const std::optional<RopeScaling>& scaling) {
  require(head_dim > 0 && head_dim % 2 == 0, "rope_inv_freq: head_dim must be positive and even");
  std::vector<double> inv(std::size_t(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) {
    inv[std::size_t(i)] = std::pow(theta, -2.0 * i / head_dim);
    if (scaling) inv[std::size_t(i)] = rope_llama3_scale(inv[std::size_t(i)], *scaling);
  }
  return inv;
}

std::vector<double> rope_inv_freq(const ModelSpec& spec) {
  return rope_inv_freq(spec.head_dim, spec.rope_theta, spec.rope_scaling);
}

void rope_cos_sin(int position, std::span<const double> inv_freq, std::span<float> cos,
                  std::span<float> sin) {
  require(cos.size() == inv_freq.size() && sin.size() == inv_freq.size(), "rope_cos_sin: sizes differ");
  for (std::size_t i = 0; i < inv_freq.size(); ++i) {
    const double angle = double(position) * inv_freq[i];
    cos[i] = float(std::cos(angle));
    sin[i] = float(std::sin(angle));
  }
}

void apply_rope(std::span<float> head, std::span<const float> cos, std::span<const float> sin) {
  const std::size_t half = head.size() / 2;
  require(cos.size() == half && sin.size() == half && head.size() % 2 == 0, "apply_rope: sizes differ");
  for (std::size_t i = 0; i < half; ++i) {
    const float a = head[i], b = head[i + half];
    head[i] = a * cos[i] - b * sin[i];
    head[i + half] = b * cos[i] + a * sin[i];
  }
}

void apply_rope(std::span<float> head, int position, std::span<const double> inv_freq) {
  std::vector<float> cos(inv_freq.size()), sin(inv_freq.size());
  rope_cos_sin(position, inv_freq, cos, sin);
  apply_rope(head, cos, sin);
}

// --- Paged KV cache ---------------------------------------------------------------------------

KvSlot kv_slot(std::span<const BlockId> block_table, int block_size, int position) {
  const std::size_t index = std::size_t(position / block_size);
  if (position < 0 || index >= block_table.size())
    throw std::out_of_range("kv_slot: position " + std::to_string(position) +
                            " is outside the block table (" + std::to_string(block_table.size()) +
                            " blocks)");
  return {block_table[index], position % block_size};
}

namespace {

void check_block(const KvLayout& layout, BlockId b) {
  if (b < 0 || b >= layout.num_blocks)
    throw std::out_of_range("KV block " + std::to_string(b) + " is outside the pool of " +
                            std::to_string(layout.num_blocks));
}

// Copies K or V of positions [0, n) of one KV head into rows of `out` ([n x head_dim]). Within a
// block the slots of one head are contiguous, so this is one copy per block.
void kv_gather(std::span<const float> pool, const KvLayout& layout, int layer, int kv, int head,
               std::span<const BlockId> block_table, int n, MatrixRM& out) {
  out.resize(n, layout.head_dim);
  for (int start = 0; start < n; start += layout.block_size) {
    const KvSlot slot = kv_slot(block_table, layout.block_size, start);
    check_block(layout, slot.block);
    const int count = std::min(layout.block_size, n - start);
    const float* src = pool.data() + layout.offset(layer, kv, slot.block, head, 0);
    std::copy_n(src, std::size_t(count) * layout.head_dim, out.row(start).data());
  }
}

}  // namespace

void kv_write(std::span<float> pool, const KvLayout& layout, int layer, std::span<const BlockId> block_table,
              int position, std::span<const float> k, std::span<const float> v) {
  const std::size_t d = std::size_t(layout.head_dim);
  require(k.size() == d * layout.num_kv_heads && v.size() == k.size(), "kv_write: K/V size");
  require(pool.size() == std::size_t(layout.total_elems()), "kv_write: pool size");
  const KvSlot slot = kv_slot(block_table, layout.block_size, position);
  check_block(layout, slot.block);
  for (int h = 0; h < layout.num_kv_heads; ++h) {
    std::copy_n(k.data() + h * d, d, pool.data() + layout.offset(layer, 0, slot.block, h, slot.offset));
    std::copy_n(v.data() + h * d, d, pool.data() + layout.offset(layer, 1, slot.block, h, slot.offset));
  }
}

void kv_copy_block(std::span<float> pool, const KvLayout& layout, BlockId src, BlockId dst) {
  require(pool.size() == std::size_t(layout.total_elems()), "kv_copy_block: pool size");
  check_block(layout, src);
  check_block(layout, dst);
  // Block-major: a block's every layer, K and V, is one page.
  std::copy_n(pool.data() + layout.offset(0, 0, src, 0, 0), std::size_t(layout.page_elems()),
              pool.data() + layout.offset(0, 0, dst, 0, 0));
}

MatrixRM paged_attention(std::span<const float> pool, const KvLayout& layout, int layer,
                         std::span<const BlockId> block_table, const Eigen::Ref<const MatrixRM>& q,
                         int first_position, int num_heads) {
  const int d = layout.head_dim;
  require(num_heads > 0 && num_heads % layout.num_kv_heads == 0, "paged_attention: heads per KV head");
  require(q.cols() == Eigen::Index(num_heads) * d && first_position >= 0, "paged_attention: query shape");
  require(pool.size() == std::size_t(layout.total_elems()), "paged_attention: pool size");
  const int num_queries = int(q.rows());
  const int num_keys = first_position + num_queries;
  const int group = num_heads / layout.num_kv_heads;
  const float scale = 1.0f / std::sqrt(float(d));
  MatrixRM out(num_queries, num_heads * d);
  MatrixRM k, v, scores;
  for (int kvh = 0; kvh < layout.num_kv_heads; ++kvh) {
    kv_gather(pool, layout, layer, 0, kvh, block_table, num_keys, k);
    kv_gather(pool, layout, layer, 1, kvh, block_table, num_keys, v);
    for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
      scores.noalias() = (q.middleCols(h * d, d) * k.transpose()) * scale;
      for (int i = 0; i < num_queries; ++i) {  // causal: query i sees keys 0..first_position + i
        const int visible = first_position + i + 1;
        softmax({scores.row(i).data(), std::size_t(visible)});
        scores.row(i).tail(num_keys - visible).setZero();
      }
      out.middleCols(h * d, d).noalias() = scores * v;
    }
  }
  return out;
}

// --- Sampling and scoring ---------------------------------------------------------------------

TokenId argmax(std::span<const float> logits) {
  require(!logits.empty(), "argmax: no logits");
  TokenId best = 0;
  float best_value = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < logits.size(); ++i)
    if (logits[i] > best_value) {  // strict: the first of equal maxima wins; NaN never does
      best_value = logits[i];
      best = TokenId(i);
    }
  return best;
}

namespace {

// The first token, in the order of weight descending then id ascending, whose cumulative mass
// reaches `need` (1 <= need <= the total), and the mass of the prefix through it. A radix search
// over the weights' bit patterns (non-negative floats order like their bits), eight bits at a
// time from the top: each pass adds up the mass per digit among the tokens that match the digits
// fixed so far, fixes the digit where the running mass reaches `need`, and keeps only the tokens
// that match it, in id order. After four passes what is left are the ties at that weight, and
// the token is the one among them where the mass is reached.
struct Reached {
  TokenId token;
  std::uint64_t prefix_mass;
};

Reached first_reaching(std::span<const std::uint32_t> key, std::span<const std::uint64_t> mass,
                       std::vector<TokenId>& candidates, std::uint64_t need) {
  candidates.clear();
  for (std::size_t i = 0; i < key.size(); ++i)
    if (mass[i] > 0) candidates.push_back(TokenId(i));
  std::uint64_t above = 0;  // the mass of tokens that weigh more than every candidate
  std::uint32_t prefix = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    std::array<std::uint64_t, 256> digit_mass{};
    for (TokenId i : candidates) digit_mass[(key[std::size_t(i)] >> shift) & 255u] += mass[std::size_t(i)];
    int d = 255;  // the highest digit first: a larger weight comes first in the order
    for (; d > 0 && above + digit_mass[std::size_t(d)] < need; --d) above += digit_mass[std::size_t(d)];
    prefix |= std::uint32_t(d) << shift;
    const std::uint32_t mask = ~0u << shift;
    std::erase_if(candidates, [&](TokenId i) { return (key[std::size_t(i)] & mask) != prefix; });
  }
  const std::uint64_t q = mass[std::size_t(candidates.front())];  // every tie has the same mass
  const std::uint64_t rank = (need - above + q - 1) / q;          // 1-based, among the ties
  return {candidates[std::size_t(rank - 1)], above + rank * q};
}

}  // namespace

TokenId sample_top_p(std::span<const float> logits, float temperature, float top_p, double u) {
  require(!logits.empty(), "sample_top_p: no logits");
  require(logits.size() <= std::size_t(kernels::kSampleMaxVocab), "sample_top_p: vocabulary too large");
  require(u >= 0.0 && u < 1.0, "sample_top_p: u must be in [0, 1)");
  const TokenId best = argmax(logits);
  const float top = logits[std::size_t(best)];
  // NaN temperatures too; an infinite maximum (+inf, or every logit -inf or NaN) leaves no
  // finite distribution: the argmax, as the CUDA sampler returns.
  if (!(temperature > 0.0f) || !std::isfinite(top)) return best;
  std::vector<std::uint32_t> key(logits.size());
  std::vector<std::uint64_t> mass(logits.size());
  std::uint64_t total = 0;  // >= 2^40: the top token weighs 1
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float p = kernels::sample_weight(logits[i], top, temperature);
    key[i] = std::bit_cast<std::uint32_t>(p);
    mass[i] = kernels::sample_mass(p);
    total += mass[i];
  }
  std::vector<TokenId> candidates;
  candidates.reserve(logits.size());
  const std::uint64_t kept =
      top_p < 1.0f ? first_reaching(key, mass, candidates, kernels::nucleus_need(top_p, total)).prefix_mass
                   : total;
  return first_reaching(key, mass, candidates, kernels::draw_target(u, kept) + 1).token;
}

TokenId sample_token(std::span<const float> logits, const SamplingParams& params, int output_index) {
  if (params.temperature <= 0.0f) return argmax(logits);
  return sample_top_p(logits, params.temperature, params.top_p,
                      kernels::philox_uniform(params.seed, std::uint64_t(output_index)));
}

float prm_score(std::span<const float> logits, TokenId plus_id, TokenId minus_id) {
  require(plus_id >= 0 && minus_id >= 0 && std::size_t(std::max(plus_id, minus_id)) < logits.size(),
          "prm_score: label id outside the vocabulary");
  // 1 / (1 + e^d) with d = l- - l+; for d > 0 use e^-d / (1 + e^-d) so that exp never overflows.
  const double d = double(logits[std::size_t(minus_id)]) - double(logits[std::size_t(plus_id)]);
  if (d > 0.0) {
    const double e = std::exp(-d);
    return float(e / (1.0 + e));
  }
  return float(1.0 / (1.0 + std::exp(d)));
}

}  // namespace duet
