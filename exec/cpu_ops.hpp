#pragma once
// The reference operators of a Llama-architecture decoder, as plain functions on spans and Eigen
// matrices, all in float32 (except where a comment says otherwise). CpuExecutor composes them; the
// CUDA kernels are checked against CpuExecutor, so each operator here states the convention it
// follows (HuggingFace transformers' modeling_llama.py unless said otherwise).
#include <Eigen/Core>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/kv_layout.hpp"
#include "core/model_spec.hpp"
#include "core/sequence.hpp"
#include "core/types.hpp"

namespace duet {

// Activations and weights are row-major: one token per row, and weights as HF stores them.
using MatrixRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// --- Normalisation and activation -----------------------------------------------------------

// HF LlamaRMSNorm: out = x * rsqrt(mean(x^2) + eps) * weight. The sum of squares is taken in
// double so that the reference does not depend on the summation order; the result is float32.
void rms_norm(std::span<const float> x, std::span<const float> weight, float eps, std::span<float> out);
// The same for every row of x (out may alias x).
void rms_norm_rows(const MatrixRM& x, std::span<const float> weight, float eps, MatrixRM& out);

// SwiGLU's gate: out = silu(gate) * up, silu(g) = g / (1 + exp(-g)). out may alias gate or up.
void silu_mul(std::span<const float> gate, std::span<const float> up, std::span<float> out);

// Numerically stable softmax in place (the maximum is subtracted first).
void softmax(std::span<float> x);

// --- Rotary position embedding ----------------------------------------------------------------

// inv_freq[i] = theta^(-2i/head_dim) for i < head_dim/2 (HF _compute_default_rope_parameters),
// rescaled when `scaling` is set as Llama 3.1 does (see rope_llama3_scale). In double: the
// reference should be the exact frequency; HF computes it in float32.
std::vector<double> rope_inv_freq(int head_dim, double theta, const std::optional<RopeScaling>& scaling);
std::vector<double> rope_inv_freq(const ModelSpec& spec);

// Llama 3.1's frequency-dependent rescaling (HF transformers _compute_llama3_parameters; the
// Llama 3 herd paper, Dubey et al. 2024, sec. 3.2 / its released rope code): wavelengths longer
// than original/low_freq_factor are stretched by `factor`, shorter than original/high_freq_factor
// are kept, and the band between is interpolated linearly in original/wavelen.
double rope_llama3_scale(double inv_freq, const RopeScaling& s);

// cos and sin of position * inv_freq[i], each of length head_dim/2.
void rope_cos_sin(int position, std::span<const double> inv_freq, std::span<float> cos, std::span<float> sin);

// Rotates one head vector in place with HF's rotate-half convention: the pair (x[i], x[i + d/2])
// turns by angle i, i.e. x*cos + rotate_half(x)*sin with rotate_half(x) = (-x2, x1).
void apply_rope(std::span<float> head, std::span<const float> cos, std::span<const float> sin);
void apply_rope(std::span<float> head, int position, std::span<const double> inv_freq);

// --- Paged KV cache ---------------------------------------------------------------------------

// The pool slot of token position p: block table[p / block_size], offset p % block_size.
struct KvSlot {
  BlockId block = kNoBlock;
  int offset = 0;
};
KvSlot kv_slot(std::span<const BlockId> block_table, int block_size, int position);

// Writes one token's K and V ([num_kv_heads * head_dim] each, head after head) of one layer at
// `position` of the sequence whose block table is given.
void kv_write(std::span<float> pool, const KvLayout& layout, int layer, std::span<const BlockId> block_table,
              int position, std::span<const float> k, std::span<const float> v);

// Copy-on-write: block src's K and V, in every layer, into block dst.
void kv_copy_block(std::span<float> pool, const KvLayout& layout, BlockId src, BlockId dst);

// Causal grouped-query attention for a chunk of queries of one sequence, reading K and V through
// its block table. q holds num_queries rows of [num_heads * head_dim] (RoPE applied); query row i
// sits at absolute position first_position + i and sees keys 0..first_position + i, which must all
// be in the cache already. Query head h reads KV head h / (num_heads / num_kv_heads), as HF's
// repeat_kv does. Scores are scaled by 1/sqrt(head_dim). Returns rows of [num_heads * head_dim].
MatrixRM paged_attention(std::span<const float> pool, const KvLayout& layout, int layer,
                         std::span<const BlockId> block_table, const Eigen::Ref<const MatrixRM>& q,
                         int first_position, int num_heads);

// --- Sampling and scoring ---------------------------------------------------------------------

// The highest logit; the lowest id among equal ones.
TokenId argmax(std::span<const float> logits);

// Temperature + nucleus sampling with a given uniform u in [0, 1), by the CUDA sampler's rule
// (kernels/sampling.cu): each token weighs exp((logit - max) / temperature) in float32, carried
// as an integer mass; tokens are ordered by weight (ties: lower id first), the shortest prefix
// whose mass reaches top_p of the total is kept (at least one token), and u picks within its
// mass. temperature <= 0 (or NaN), or no finite maximum, is greedy (argmax). O(vocabulary): a
// radix search over the weights' bits, no sort.
TokenId sample_top_p(std::span<const float> logits, float temperature, float top_p, double u);

// A request's token number `output_index`: its own stream, the uniform
// kernels::philox_uniform(seed, output index) as on the GPU, so that the token does not depend on
// the batch it was computed in, nor on preemption and recompute, nor, given the same logits, on
// the backend (but for an ulp of expf at a boundary between two tokens' masses).
TokenId sample_token(std::span<const float> logits, const SamplingParams& params, int output_index);

// A PRM's score: the probability of the `plus` label in a softmax over the two label tokens only,
// p = exp(l+) / (exp(l+) + exp(l-)) = 1 / (1 + exp(l- - l+)), evaluated without overflow.
float prm_score(std::span<const float> logits, TokenId plus_id, TokenId minus_id);

}  // namespace duet
