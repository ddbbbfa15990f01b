// Elementwise and row kernels of the Llama forward pass (ops.hpp). Storage is bf16, arithmetic is
// float32 throughout, and every bf16 result is rounded once, to nearest even, as it is stored.
// Each function validates its shape on the host (duet::Error), launches nothing for zero rows and
// checks the launch; kernels run asynchronously on the given stream.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "core/error.hpp"
#include "kernels/dummy_value.hpp"
#include "kernels/launch.cuh"
#include "kernels/ops.hpp"

namespace duet::kernels {

namespace {

using detail::check_launch;
using detail::require;

bool aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

// --- bf16 <-> float and vector access -----------------------------------------------------------

using detail::bf16_to_float;
using detail::float_to_bf16;

using detail::Raw;

template <int V>
__device__ __forceinline__ void load_vec(const bf16* p, float (&out)[V]) {
  const typename Raw<V>::type raw = *reinterpret_cast<const typename Raw<V>::type*>(p);
  bf16 e[V];
  memcpy(e, &raw, sizeof raw);  // register moves; no local memory
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = bf16_to_float(e[j]);
}

template <int V>
__device__ __forceinline__ void store_vec(bf16* p, const float (&in)[V]) {
  bf16 e[V];
#pragma unroll
  for (int j = 0; j < V; ++j) e[j] = float_to_bf16(in[j]);
  typename Raw<V>::type raw;
  memcpy(&raw, e, sizeof raw);
  *reinterpret_cast<typename Raw<V>::type*>(p) = raw;
}

// The widest vector that the row length and every pointer's alignment allow.
int vec_width(int hidden, std::initializer_list<const void*> ptrs) {
  auto all_aligned = [&](std::size_t bytes) {
    for (const void* p : ptrs)
      if (!aligned(p, bytes)) return false;
    return true;
  };
  if (hidden % 8 == 0 && all_aligned(16)) return 8;
  if (hidden % 2 == 0 && all_aligned(4)) return 2;
  return 1;
}

// A block size for a row of n work items: whole warps, at most 1024.
int row_threads(int n) {
  const int t = (n + 31) / 32 * 32;
  return t < 32 ? 32 : (t > 1024 ? 1024 : t);
}

// Sum over the block: warp shuffles, then one value per warp through shared memory. Every thread
// gets the total. blockDim.x must be a multiple of 32.
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < int(blockDim.x / 32) ? partial[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

// --- Row gathers ----------------------------------------------------------------------------------

// out[r] = src[index[r]], one block per row, V bf16 per access.
template <int V>
__global__ void gather_rows_kernel(const bf16* src, const std::int32_t* index, bf16* out, int hidden) {
  const std::size_t r = blockIdx.x;
  const bf16* from = src + std::size_t(index[r]) * hidden;
  bf16* to = out + r * hidden;
  for (int i = threadIdx.x * V; i < hidden; i += blockDim.x * V)
    *reinterpret_cast<typename Raw<V>::type*>(to + i) =
        *reinterpret_cast<const typename Raw<V>::type*>(from + i);
}

void launch_gather(const bf16* src, const std::int32_t* index, bf16* out, int rows, int hidden, Stream s,
                   const char* what) {
  require(rows >= 0 && hidden > 0, std::string(what) + ": rows must be >= 0 and hidden > 0");
  if (rows == 0) return;
  const int v = vec_width(hidden, {src, out});
  const int threads = row_threads(hidden / v);
  if (v == 8) gather_rows_kernel<8><<<rows, threads, 0, s>>>(src, index, out, hidden);
  else if (v == 2) gather_rows_kernel<2><<<rows, threads, 0, s>>>(src, index, out, hidden);
  else gather_rows_kernel<1><<<rows, threads, 0, s>>>(src, index, out, hidden);
  check_launch(what);
}

// --- RMSNorm --------------------------------------------------------------------------------------

// One block per row. Pass 1 sums squares (and, when fused, stores residual + x rounded to bf16 and
// squares that rounded value, as HF does: the residual stream is a bf16 tensor). Pass 2 rereads
// the row (L1/L2-resident by then) and writes (x * inv_rms) * w, the CPU reference's order, rounded
// once (HF also rounds x * inv_rms to bf16 before the weight multiply; one rounding is at least as
// accurate). Each thread rereads exactly the elements it wrote, so no barrier is needed between its
// own write and read of the residual.
template <int V, bool kAdd>
__global__ void rmsnorm_kernel(bf16* residual, const bf16* x, const bf16* weight, bf16* out, int hidden,
                               float eps) {
  const std::size_t base = std::size_t(blockIdx.x) * hidden;
  const bf16* row = kAdd ? residual + base : x + base;
  float sum_sq = 0.0f;
  for (int i = threadIdx.x * V; i < hidden; i += blockDim.x * V) {
    float a[V];
    load_vec<V>(row + i, a);
    if constexpr (kAdd) {
      float b[V];
      load_vec<V>(x + base + i, b);
#pragma unroll
      for (int j = 0; j < V; ++j) a[j] = bf16_to_float(float_to_bf16(a[j] + b[j]));
      store_vec<V>(residual + base + i, a);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) sum_sq += a[j] * a[j];
  }
  // rsqrtf is within 2 ulp; the CPU reference takes the root in double. Both are far below the
  // bf16 rounding of the output.
  const float inv_rms = rsqrtf(block_sum(sum_sq) / float(hidden) + eps);
  for (int i = threadIdx.x * V; i < hidden; i += blockDim.x * V) {
    float a[V], w[V];
    load_vec<V>(row + i, a);
    load_vec<V>(weight + i, w);
#pragma unroll
    for (int j = 0; j < V; ++j) a[j] = (a[j] * inv_rms) * w[j];
    store_vec<V>(out + base + i, a);
  }
}

template <bool kAdd>
void launch_rmsnorm(bf16* residual, const bf16* x, const bf16* weight, bf16* out, int rows, int hidden,
                    float eps, Stream s, const char* what) {
  require(rows >= 0 && hidden > 0, std::string(what) + ": rows must be >= 0 and hidden > 0");
  if (rows == 0) return;
  const int v = kAdd ? vec_width(hidden, {residual, x, weight, out}) : vec_width(hidden, {x, weight, out});
  const int threads = row_threads(hidden / v);
  if (v == 8) rmsnorm_kernel<8, kAdd><<<rows, threads, 0, s>>>(residual, x, weight, out, hidden, eps);
  else if (v == 2) rmsnorm_kernel<2, kAdd><<<rows, threads, 0, s>>>(residual, x, weight, out, hidden, eps);
  else rmsnorm_kernel<1, kAdd><<<rows, threads, 0, s>>>(residual, x, weight, out, hidden, eps);
  check_launch(what);
}

// --- RoPE -----------------------------------------------------------------------------------------

// One block per token row. cos/sin of position * inv_freq[i] are computed once per row into shared
// memory (float32, as HF computes them: the angle is a float32 product, so its absolute error is
// about |angle| * 2^-23 -- 0.008 rad at position 65536 for inv_freq[0] = 1 -- where the CPU
// reference uses double; sincosf itself does full range reduction and is within 2 ulp). With head
// norms, each warp then sums the squares of whole heads into a per-head inverse RMS in shared
// memory. Then every (head, i) pair of q and k, normalised, rotates: (a, b) = (x[i], x[i + half])
// -> (a cos - b sin, b cos + a sin).
__global__ void rope_kernel(bf16* q, bf16* k, const std::int32_t* positions, const float* inv_freq,
                            int num_heads, int num_kv_heads, int head_dim, int q_stride, int k_stride,
                            HeadNorm norm) {
  extern __shared__ float cs[];  // [half] cos, then [half] sin, then with norms [heads] inverse RMS
  const int half = head_dim / 2, heads = num_heads + num_kv_heads;
  const std::size_t r = blockIdx.x;
  const float pos = float(positions[r]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) sincosf(pos * inv_freq[i], &cs[half + i], &cs[i]);
  auto head_at = [&](int head) {
    return head < num_heads ? q + r * q_stride + std::size_t(head) * head_dim
                            : k + r * k_stride + std::size_t(head - num_heads) * head_dim;
  };
  float* inv_rms = cs + head_dim;
  const bool normed = norm.q_weight != nullptr;
  if (normed) {
    const int warps = int(blockDim.x / 32), lane = int(threadIdx.x % 32);
    for (int head = int(threadIdx.x / 32); head < heads; head += warps) {
      const bf16* h = head_at(head);
      float sum_sq = 0.0f;
      for (int i = lane; i < head_dim; i += 32) sum_sq += bf16_to_float(h[i]) * bf16_to_float(h[i]);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, o);
      if (lane == 0) inv_rms[head] = rsqrtf(sum_sq / float(head_dim) + norm.eps);
    }
  }
  __syncthreads();
  for (int p = threadIdx.x; p < heads * half; p += blockDim.x) {
    const int head = p / half, i = p % half;
    bf16* h = head_at(head);
    float a = bf16_to_float(h[i]), b = bf16_to_float(h[i + half]);
    if (normed) {  // (x * inv_rms) * weight, as rmsnorm_kernel and the CPU reference order it
      const bf16* w = head < num_heads ? norm.q_weight : norm.k_weight;
      a = (a * inv_rms[head]) * bf16_to_float(w[i]);
      b = (b * inv_rms[head]) * bf16_to_float(w[i + half]);
    }
    const float c = cs[i], sn = cs[half + i];
    h[i] = float_to_bf16(a * c - b * sn);
    h[i + half] = float_to_bf16(b * c + a * sn);
  }
}

// --- SwiGLU ---------------------------------------------------------------------------------------

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i], V outputs per thread, grid-stride over
// rows * inter (64-bit indices: a prefill chunk times the intermediate size can pass 2^31).
template <int V>
__global__ void silu_mul_kernel(const bf16* gate_up, bf16* out, int inter, std::size_t total) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x * V;
  for (std::size_t e = (std::size_t(blockIdx.x) * blockDim.x + threadIdx.x) * V; e < total; e += stride) {
    const std::size_t r = e / inter, i = e % inter;  // inter % V == 0: a vector never spans rows
    const bf16* gate = gate_up + r * 2 * inter + i;
    float g[V], u[V], y[V];
    load_vec<V>(gate, g);
    load_vec<V>(gate + inter, u);
#pragma unroll
    for (int j = 0; j < V; ++j) y[j] = g[j] / (1.0f + expf(-g[j])) * u[j];  // exp overflow gives -0: fine
    store_vec<V>(out + e, y);
  }
}

// --- PRM scores -----------------------------------------------------------------------------------

// p = 1 / (1 + e^d), d = l- - l+, written so that exp never overflows: for d > 0 it is
// e^-d / (1 + e^-d). One thread per row.
__global__ void prm_scores_kernel(const float* logits, float* out, int rows, int vocab, int plus_id,
                                  int minus_id) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* l = logits + std::size_t(r) * vocab;
  const float d = l[minus_id] - l[plus_id];
  if (d > 0.0f) {
    const float e = expf(-d);
    out[r] = e / (1.0f + e);
  } else {
    out[r] = 1.0f / (1.0f + expf(d));
  }
}

// --- a small Linear -------------------------------------------------------------------------------

// One warp per output (r, j): lanes stride over k, then a shuffle reduction. The order of the sum
// differs from a GEMM's, by float32 rounding only.
__global__ void small_linear_kernel(const bf16* x, const bf16* w, const bf16* bias, float* y, int rows, int n,
                                    int k) {
  const int warp = int((std::size_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
  if (warp >= rows * n) return;
  const int r = warp / n, j = warp % n;
  const bf16* xr = x + std::size_t(r) * k;
  const bf16* wj = w + std::size_t(j) * k;
  float sum = 0.0f;
  for (int i = lane; i < k; i += 32) sum += bf16_to_float(xr[i]) * bf16_to_float(wj[i]);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  if (lane == 0) y[std::size_t(r) * n + j] = sum + bf16_to_float(bias[j]);
}

// Dummy weights: element i is dummy_value(init, i), the host's own function (dummy_value.hpp).
__global__ void fill_dummy_kernel(bf16* dst, std::int64_t n, const DummyInit init) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = float_to_bf16(dummy_value(init, std::uint64_t(i)));
}

}  // namespace

void embedding_gather(const bf16* table, const std::int32_t* tokens, bf16* out, int rows, int hidden,
                      Stream s) {
  launch_gather(table, tokens, out, rows, hidden, s, "embedding_gather");
}

void gather_rows(const bf16* x, const std::int32_t* rows_index, bf16* out, int rows, int hidden, Stream s) {
  launch_gather(x, rows_index, out, rows, hidden, s, "gather_rows");
}

void rmsnorm(const bf16* x, const bf16* weight, bf16* out, int rows, int hidden, float eps, Stream s) {
  launch_rmsnorm<false>(nullptr, x, weight, out, rows, hidden, eps, s, "rmsnorm");
}

void add_rmsnorm(bf16* residual, const bf16* x, const bf16* weight, bf16* out, int rows, int hidden,
                 float eps, Stream s) {
  launch_rmsnorm<true>(residual, x, weight, out, rows, hidden, eps, s, "add_rmsnorm");
}

void rope(bf16* q, bf16* k, const std::int32_t* positions, const float* inv_freq, int rows, int num_heads,
          int num_kv_heads, int head_dim, int q_stride, int k_stride, Stream s, const HeadNorm& norm) {
  require(rows >= 0 && num_heads >= 0 && num_kv_heads >= 0, "rope: negative rows or heads");
  require(head_dim > 0 && head_dim % 2 == 0 && head_dim <= 1024,
          "rope: head_dim must be even and in (0, 1024]");
  require(q_stride >= num_heads * head_dim && k_stride >= num_kv_heads * head_dim,
          "rope: a row stride is shorter than its heads");
  require((norm.q_weight == nullptr) == (norm.k_weight == nullptr),
          "rope: give both head norms' weights or none");
  require(norm.q_weight == nullptr || (norm.eps > 0 && num_heads + num_kv_heads <= 4096),
          "rope: head norms need eps > 0 and at most 4096 heads");
  if (rows == 0 || num_heads + num_kv_heads == 0) return;
  const int pairs = (num_heads + num_kv_heads) * (head_dim / 2);
  const int threads = row_threads(pairs < 256 ? pairs : 256);
  const std::size_t shared =
      (std::size_t(head_dim) + (norm.q_weight ? num_heads + num_kv_heads : 0)) * sizeof(float);
  rope_kernel<<<rows, threads, shared, s>>>(q, k, positions, inv_freq, num_heads, num_kv_heads, head_dim,
                                            q_stride, k_stride, norm);
  check_launch("rope");
}

void silu_mul(const bf16* gate_up, bf16* out, int rows, int inter, Stream s) {
  require(rows >= 0 && inter > 0, "silu_mul: rows must be >= 0 and inter > 0");
  if (rows == 0) return;
  const std::size_t total = std::size_t(rows) * inter;
  const int v = vec_width(inter, {gate_up, out});
  const int threads = 256;
  // Enough blocks to fill any current GPU several times over; the grid-stride loop does the rest.
  const std::size_t want = (total / v + threads - 1) / threads;
  const int blocks = int(want < 4096 ? want : 4096);
  if (v == 8) silu_mul_kernel<8><<<blocks, threads, 0, s>>>(gate_up, out, inter, total);
  else if (v == 2) silu_mul_kernel<2><<<blocks, threads, 0, s>>>(gate_up, out, inter, total);
  else silu_mul_kernel<1><<<blocks, threads, 0, s>>>(gate_up, out, inter, total);
  check_launch("silu_mul");
}

void small_linear_f32(const bf16* x, const bf16* w, const bf16* bias, float* y, int rows, int n, int k,
                      Stream s) {
  require(rows >= 0 && n > 0 && k > 0, "small_linear_f32: rows must be >= 0, n and k > 0");
  require(std::int64_t(rows) * n <= (std::int64_t(1) << 26), "small_linear_f32: too many outputs (rows x n)");
  if (rows == 0) return;
  const int threads = 256, warps = rows * n;
  small_linear_kernel<<<(warps + threads / 32 - 1) / (threads / 32), threads, 0, s>>>(x, w, bias, y, rows, n,
                                                                                      k);
  check_launch("small_linear_f32");
}

void prm_scores(const float* logits, float* out, int rows, int vocab, std::int32_t plus_id,
                std::int32_t minus_id, Stream s) {
  require(rows >= 0 && vocab > 0, "prm_scores: rows must be >= 0 and vocab > 0");
  require(plus_id >= 0 && plus_id < vocab && minus_id >= 0 && minus_id < vocab,
          "prm_scores: label id " + std::to_string(plus_id < 0 || plus_id >= vocab ? plus_id : minus_id) +
              " is outside the vocabulary of " + std::to_string(vocab));
  if (rows == 0) return;
  const int threads = 128;
  prm_scores_kernel<<<(rows + threads - 1) / threads, threads, 0, s>>>(logits, out, rows, vocab, plus_id,
                                                                       minus_id);
  check_launch("prm_scores");
}

void fill_dummy(bf16* dst, std::int64_t n, const DummyInit& init, Stream s) {
  require(n >= 0, "fill_dummy: negative length");
  if (n == 0) return;
  const int threads = 256;
  const std::int64_t want = (n + threads - 1) / threads;
  const int blocks = int(want < 8192 ? want : 8192);
  fill_dummy_kernel<<<blocks, threads, 0, s>>>(dst, n, init);
  check_launch("fill_dummy");
}

}  // namespace duet::kernels
