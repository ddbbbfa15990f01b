// Per-row token sampling (ops.hpp: sample). One block of kThreads per row; no sort and no scratch
// memory: every step is a pass over the row's logits (L2-resident after the first).
//
// The rule, which the CPU engine's sampler follows too (exec/cpu_ops.cpp: sample_top_p; the
// arithmetic of steps 2-4 is shared, kernels/sample_rule.hpp) and tests/kernels/test_ops.cpp
// replays in double:
//  1. m = max logit, lowest id on ties (NaN never wins). temperature <= 0 (or NaN), or no finite
//     maximum, returns that argmax (id 0 when every logit is -inf or NaN).
//  2. Each token weighs p_i = expf((l_i - m) / T) in [0, 1] (NaN -> 0), and carries the integer
//     mass q_i = floor(p_i * 2^40). Integer masses make every sum exact and order-independent, so
//     a draw is bitwise reproducible whatever the thread schedule; a token with p_i < 2^-40 (less
//     than 2^-40 of the top token's weight) gets no mass. Q = sum q_i <= vocab * 2^40 <= 2^63.
//  3. Tokens are ordered by p descending, ties by id ascending (the CPU reference's order). The
//     nucleus is the shortest prefix of that order whose mass reaches ceil(top_p * Q) (at least
//     one token; all of Q when top_p >= 1); `kept` is its mass.
//  4. u = philox_uniform(seed, counter) (kernels/philox.hpp: Philox4x32-10, key = seed, counter =
//     (counter, 0), u = top 53 bits of output words 0-1 over 2^53). target = min(kept - 1,
//     uint64(u * double(kept))), and the token is the first in the order whose cumulative mass
//     exceeds target.
// Steps 3 and 4 use the same search: "the first token in the order whose cumulative mass reaches
// `need`". A radix search over the bit pattern of p (positive floats order like their bits), eight
// bits per pass, finds that token's p* and the mass strictly above it; ties at p* are then ranked
// by id with a block-wide scan, and the ceil((need - above) / q*)-th of them is the token.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "kernels/ops.hpp"
#include "kernels/philox.hpp"
#include "kernels/sample_rule.hpp"

namespace duet::kernels {

namespace {

using u64 = unsigned long long;  // the type CUDA's 64-bit atomics and shuffles take

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

struct Shared {
  u64 hist[kWarps][256];  // per-warp digit histograms of mass: 16x less atomic contention
  u64 digit_mass[256];
  u64 scratch[kWarps];
  float best_v[kWarps];
  int best_id[kWarps];
  int digit;
  u64 above;
  int token;
};

// sample_mass as the type CUDA's 64-bit atomics and shuffles take.
__device__ __forceinline__ u64 mass_of(float p) { return u64(sample_mass(p)); }

// --- Block reductions (blockDim.x == kThreads) ---------------------------------------------------

// The larger logit, the lower id on ties.
__device__ __forceinline__ void take_better(float& v, int& id, float ov, int oid) {
  if (ov > v || (ov == v && oid < id)) {
    v = ov;
    id = oid;
  }
}

__device__ void block_argmax(float& v, int& id, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1)
    take_better(v, id, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, id, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sh.best_v[warp] = v;
    sh.best_id[warp] = id;
  }
  __syncthreads();
  v = sh.best_v[0];
  id = sh.best_id[0];
  for (int w = 1; w < kWarps; ++w) take_better(v, id, sh.best_v[w], sh.best_id[w]);
  __syncthreads();  // sh.best_* may be reused
}

__device__ u64 block_sum(u64 x, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  if (threadIdx.x % 32 == 0) sh.scratch[threadIdx.x / 32] = x;
  __syncthreads();
  u64 total = 0;
  for (int w = 0; w < kWarps; ++w) total += sh.scratch[w];
  __syncthreads();
  return total;
}

// Exclusive prefix sum over the block, in thread order.
__device__ u64 block_exclusive_scan(u64 x, Shared& sh) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  u64 incl = x;
  for (int o = 1; o < 32; o <<= 1) {
    const u64 y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) sh.scratch[warp] = incl;
  __syncthreads();
  u64 before = incl - x;
  for (int w = 0; w < warp; ++w) before += sh.scratch[w];
  __syncthreads();
  return before;
}

// --- The search ----------------------------------------------------------------------------------

struct Cut {
  std::uint32_t key;  // bit pattern of p* (all tokens with p == p* are its ties)
  u64 above;          // mass of tokens with p > p*
  u64 q;              // mass of one token with p == p*
};

// The p* of the first token (in the order of step 3) whose cumulative mass reaches `need`
// (1 <= need <= Q). Invariant: above + (mass of tokens matching the fixed high bits) >= need.
__device__ Cut find_cut(const float* l, int vocab, float m, float t, u64 need, Shared& sh) {
  const int warp = threadIdx.x / 32;
  std::uint32_t prefix = 0, mask = 0;
  u64 above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kWarps * 256; b += kThreads) sh.hist[b / 256][b % 256] = 0;
    __syncthreads();
    // A thread's consecutive hits on one digit (common in flat distributions) add as one atomic.
    int run_digit = 0;
    u64 run = 0;
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const float p = sample_weight(l[i], m, t);
      const std::uint32_t key = __float_as_uint(p);
      const u64 q = mass_of(p);
      if ((key & mask) != prefix || q == 0) continue;
      const int d = int(key >> shift) & 255;
      if (d != run_digit && run != 0) {
        atomicAdd(&sh.hist[warp][run_digit], run);
        run = 0;
      }
      run_digit = d;
      run += q;
    }
    if (run != 0) atomicAdd(&sh.hist[warp][run_digit], run);
    __syncthreads();
    for (int d = threadIdx.x; d < 256; d += kThreads) {
      u64 s = 0;
      for (int w = 0; w < kWarps; ++w) s += sh.hist[w][d];
      sh.digit_mass[d] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // highest digit first: larger p comes first in the order
      u64 acc = above;
      int d = 255;
      for (; d > 0 && acc + sh.digit_mass[d] < need; --d) acc += sh.digit_mass[d];
      sh.digit = d;
      sh.above = acc;
    }
    __syncthreads();
    prefix |= std::uint32_t(sh.digit) << shift;
    mask |= 0xffu << shift;
    above = sh.above;
    __syncthreads();  // everyone has read sh.digit/above before the next pass rewrites them
  }
  return Cut{prefix, above, mass_of(__uint_as_float(prefix))};
}

// The rank-th (1-based) lowest id among tokens whose p has bit pattern `key`. Each thread scans a
// contiguous chunk of ids, so the exclusive scan of per-thread counts ranks the ties by id.
__device__ int kth_tie(const float* l, int vocab, float m, float t, std::uint32_t key, u64 rank, Shared& sh) {
  const int chunk = (vocab + kThreads - 1) / kThreads;
  const int begin = min(vocab, int(threadIdx.x) * chunk), end = min(vocab, begin + chunk);
  u64 count = 0;
  for (int i = begin; i < end; ++i) count += __float_as_uint(sample_weight(l[i], m, t)) == key;
  const u64 before = block_exclusive_scan(count, sh);
  if (threadIdx.x == 0) sh.token = -1;
  __syncthreads();
  if (rank > before && rank <= before + count) {
    u64 seen = before;
    for (int i = begin; i < end; ++i)
      if (__float_as_uint(sample_weight(l[i], m, t)) == key && ++seen == rank) {
        sh.token = i;
        break;
      }
  }
  __syncthreads();
  return sh.token;
}

// The mass of the prefix through the first token whose cumulative mass reaches `need`, and that
// token.
__device__ int first_reaching(const float* l, int vocab, float m, float t, u64 need, u64* prefix_mass,
                              Shared& sh) {
  const Cut cut = find_cut(l, vocab, m, t, need, sh);
  const u64 rank = (need - cut.above + cut.q - 1) / cut.q;  // cut.q > 0 by the invariant
  if (prefix_mass) *prefix_mass = cut.above + rank * cut.q;
  return kth_tie(l, vocab, m, t, cut.key, rank, sh);
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* logits, const SampleParams* params, std::int32_t* out, int vocab) {
  __shared__ Shared sh;
  const std::size_t row = blockIdx.x;
  const float* l = logits + row * vocab;
  const SampleParams prm = params[row];

  float m = -INFINITY;
  int best = INT_MAX;
  for (int i = threadIdx.x; i < vocab; i += kThreads)  // ascending ids: strict > keeps the first
    if (l[i] > m) {
      m = l[i];
      best = i;
    }
  block_argmax(m, best, sh);
  if (!(prm.temperature > 0.0f) || !isfinite(m)) {
    if (threadIdx.x == 0) out[row] = best == INT_MAX ? 0 : best;
    return;
  }
  const float t = prm.temperature;

  u64 part = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) part += mass_of(sample_weight(l[i], m, t));
  const u64 total = block_sum(part, sh);  // >= 2^40: the top token has p = 1

  u64 kept = total;
  if (prm.top_p < 1.0f) first_reaching(l, vocab, m, t, u64(nucleus_need(prm.top_p, total)), &kept, sh);
  const u64 target = u64(draw_target(philox_uniform(prm.seed, prm.counter), kept));
  const int token = first_reaching(l, vocab, m, t, target + 1, nullptr, sh);
  if (threadIdx.x == 0) out[row] = token;
}

}  // namespace

void sample(const float* logits, const SampleParams* params, std::int32_t* out_tokens, int rows, int vocab,
            Stream s) {
  if (rows < 0 || vocab <= 0 || vocab > kSampleMaxVocab)
    throw Error("sample: need rows >= 0 and 0 < vocab <= " + std::to_string(kSampleMaxVocab) + " (got rows " +
                std::to_string(rows) + ", vocab " + std::to_string(vocab) + ")");
  if (rows == 0) return;
  sample_kernel<<<rows, kThreads, 0, s>>>(logits, params, out_tokens, vocab);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) throw Error(std::string("sample launch: ") + cudaGetErrorString(status));
}

}  // namespace duet::kernels
