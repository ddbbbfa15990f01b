#pragma once
// Elementwise and row kernels of the Llama forward pass: bf16 storage, float32 math. All take
// device pointers and a stream and launch asynchronously.
#include <cstdint>

#include "kernels/device.hpp"
#include "kernels/dummy_value.hpp"

namespace duet::kernels {

// out[r] = table[tokens[r]]: [rows, hidden].
void embedding_gather(const bf16* table, const std::int32_t* tokens, bf16* out, int rows, int hidden,
                      Stream s);

// out = x * rsqrt(mean(x^2) + eps) * weight, per row of `hidden` (HF LlamaRMSNorm).
void rmsnorm(const bf16* x, const bf16* weight, bf16* out, int rows, int hidden, float eps, Stream s);

// Fused with the residual add: residual += x (in place, rounded to bf16), then out = rmsnorm(residual).
void add_rmsnorm(bf16* residual, const bf16* x, const bf16* weight, bf16* out, int rows, int hidden,
                 float eps, Stream s);

// Qwen3's q and k head norms (ModelSpec::qk_norm): each head of q (of k) is RMS-normalised over
// head_dim and scaled by q_weight (k_weight) [head_dim], before RoPE. Null weights: no norm.
struct HeadNorm {
  const bf16* q_weight = nullptr;
  const bf16* k_weight = nullptr;
  float eps = 0.0f;
};

// Rotary embedding, rotate-half convention (HF Llama), in place on q [rows, num_heads*head_dim]
// and k [rows, num_kv_heads*head_dim], row r at positions[r]. inv_freq [head_dim/2] is computed on
// the host (llama3 scaling included), so that CPU and GPU share one definition of it. With `norm`
// the heads are normalised first, in the same kernel (one write and one rounding of q and k; the
// second read of a head, after its sum, is served from cache).
void rope(bf16* q, bf16* k, const std::int32_t* positions, const float* inv_freq, int rows, int num_heads,
          int num_kv_heads, int head_dim, int q_stride, int k_stride, Stream s, const HeadNorm& norm = {});

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i]: gate_up [rows, 2*inter] (fused GEMM output).
void silu_mul(const bf16* gate_up, bf16* out, int rows, int inter, Stream s);

// Per-row sampling from fp32 logits [rows, vocab]: greedy when temperature == 0 (lowest id on
// ties), else temperature and top-p (nucleus) with a counter-based Philox4x32-10 stream keyed by
// (seed, counter) so that a request's draws do not depend on its batch.
struct SampleParams {
  float temperature = 0.0f;
  float top_p = 1.0f;
  std::uint64_t seed = 0;
  std::uint64_t counter = 0;  // the request's output index
};
void sample(const float* logits, const SampleParams* params, std::int32_t* out_tokens, int rows, int vocab,
            Stream s);

// PRM scores: out[r] = exp(l[plus]) / (exp(l[plus]) + exp(l[minus])) of logits row r.
void prm_scores(const float* logits, float* out, int rows, int vocab, std::int32_t plus_id,
                std::int32_t minus_id, Stream s);

// A Linear with few outputs, in float32: y[r, j] = dot(x[r, :], w[j, :]) + bias[j], x [rows, k],
// w [n, k] (HuggingFace's layout), bias [n]. A PRM score head's last layer, whose n = 2 labels is
// below what cuBLASLt's tensor-core path aligns; one warp per output, a float32 sum.
void small_linear_f32(const bf16* x, const bf16* w, const bf16* bias, float* y, int rows, int n, int k,
                      Stream s);

// Gathers rows of x [*, hidden] into out [rows, hidden]: the LM head runs only on rows needing logits.
void gather_rows(const bf16* x, const std::int32_t* rows_index, bf16* out, int rows, int hidden, Stream s);

// Dummy weights on the device: dst[i] = bf16(dummy_value(init, i)), i < n, exactly the values the
// host's dummy_tensor rounds to bf16 (vLLM's load_format = "dummy" without a host copy).
void fill_dummy(bf16* dst, std::int64_t n, const DummyInit& init, Stream s);

}  // namespace duet::kernels
