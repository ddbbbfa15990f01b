#include "exec/cpu_ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "core/mix.hpp"

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

double sample_uniform(std::uint64_t seed, std::uint64_t index) {
  // Two rounds of splitmix64's finalizer: the seed picks a stream, the index a point in it. The
  // constant keeps these streams apart from the scripted-token hashes of the same seed.
  const std::uint64_t h = mix64(mix64(seed ^ 0x73616d706c650000ULL) + index);
  return double(h >> 11) * 0x1.0p-53;
}

TokenId sample_top_p(std::span<const float> logits, float temperature, float top_p, double u) {
  if (!(temperature > 0.0f)) return argmax(logits);  // NaN too
  require(!logits.empty(), "sample_top_p: no logits");
  const double top = double(logits[std::size_t(argmax(logits))]);
  // An infinite maximum (+inf, or every logit -inf) leaves no finite distribution: the argmax, as
  // the CUDA sampler returns.
  if (!std::isfinite(top)) return argmax(logits);
  std::vector<double> p(logits.size());
  double total = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    p[i] = std::isnan(logits[i]) ? 0.0 : std::exp((double(logits[i]) - top) / temperature);
    total += p[i];
  }
  std::vector<TokenId> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](TokenId a, TokenId b) { return p[a] != p[b] ? p[a] > p[b] : a < b; });
  // The nucleus: the shortest prefix of the sorted tokens holding at least top_p of the mass.
  double kept = 0.0;
  std::size_t n = 0;
  while (n < order.size()) {
    kept += p[std::size_t(order[n++])];
    if (kept >= double(top_p) * total) break;
  }
  const double target = u * kept;
  double acc = 0.0;
  for (std::size_t j = 0; j < n; ++j) {
    acc += p[std::size_t(order[j])];
    if (target < acc) return order[j];
  }
  return order[n - 1];
}

TokenId sample_token(std::span<const float> logits, const SamplingParams& params, int output_index) {
  if (params.temperature <= 0.0f) return argmax(logits);
  return sample_top_p(logits, params.temperature, params.top_p,
                      sample_uniform(params.seed, std::uint64_t(output_index)));
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
