// Paged decode attention (attention.hpp): one query row per sequence against its cached context.
//
// Decode is bound by reading the KV cache, so the kernel is organised around reading each K/V
// element exactly once, in 16-byte coalesced loads:
//  * One thread block (4 warps, 128 threads) per (sequence, KV head, split) serves all the query
//    heads of that KV head (GQA: up to 8 per block, held in registers; larger groups take several
//    head chunks), so a K/V tile is loaded once and used by the whole group.
//  * A "lane group" of LANES = 8/16/32 lanes reads one token's head_dim row (8 bf16 = 16 bytes per
//    lane; head_dim <= 8*LANES), so a warp reads 32/LANES neighbouring tokens per load: one
//    contiguous run of the page's [slot][head_dim] tile.
//  * Tokens are processed in tiles of T = 4 warps * 32/LANES tokens * 8 (or 4) loads per lane:
//    scores of the tile go to shared memory, one warp per query head does the online-softmax step
//    (FlashAttention-2, Dao 2023: running max m, running sum l, accumulator rescaled by
//    exp(m_old - m_new)), then the same lanes accumulate P*V in fp32 registers.
//  * Split-KV (FlashDecoding, Dao et al. 2023): with num_splits > 1 each split takes a contiguous
//    range of the sequence's blocks and writes its normalised partial output and log-sum-exp to
//    the workspace; decode_combine_kernel merges them. With 1 split the output is written directly.
// Exponentials are base 2 with log2(e) folded into the query scale (one FMUL per score fewer).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "kernels/attention.hpp"
#include "kernels/launch.cuh"

namespace duet::kernels {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxGroup = 8;  // query heads per thread block (registers: 16 floats per head)
// Tokens each lane group loads per tile before using them (16 bytes each in flight per lane);
// halved at 8 heads per block, where q and the accumulators already take 128 registers.
constexpr int loads_for(int gc) { return gc >= kMaxGroup ? 4 : 8; }
constexpr int kMaxHeadDim = 256;

using detail::check_launch;
using detail::require;

using detail::bf16_to_float;
using detail::float_to_bf16;

// The 8 bf16 of a 16-byte load, widened to float.
__device__ __forceinline__ void unpack8(const uint4& raw, float (&out)[8]) {
  const std::uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(w[i] << 16);
    out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

struct DecodeParams {
  const bf16* k_pool;  // layer's K tile of block 0; V tile at k_pool + v_offset
  std::int64_t v_offset;
  std::int64_t block_stride;  // from one block to the next: a page (KvLayout::page_elems)
  int block_size, head_dim, num_heads, group, head_chunks;
  const bf16* q;
  int q_stride;
  bf16* out;
  int out_stride;
  const std::int32_t* query_start;
  const std::int32_t* context_len;
  const std::int32_t* block_tables;
  int max_blocks;
  float scale_log2;  // scale * log2(e)
  int num_splits;
  float* ws_out;  // [seq][head][split][head_dim], normalised partial outputs
  float* ws_lse;  // [seq][head][split], base-2 log-sum-exp of the split's scores (-inf: empty)
};

// The token range [t0, t1) of split `split`: a contiguous range of whole blocks.
__device__ __forceinline__ void split_range(int ctx, int block_size, int num_splits, int split, int& t0,
                                            int& t1) {
  const int blocks = (ctx + block_size - 1) / block_size;
  const int per_split = (blocks + num_splits - 1) / num_splits;
  t0 = min(ctx, split * per_split * block_size);
  t1 = min(ctx, (split + 1) * per_split * block_size);
}

// grid: x = kv_head * head_chunks + chunk, y = sequence, z = split. GC: query heads per block.
template <int LANES, int GC>
__global__ void __launch_bounds__(kThreads) decode_kernel(const DecodeParams p) {
  constexpr int kLoads = loads_for(GC);
  constexpr int kTpw = 32 / LANES;                 // tokens per warp per load
  constexpr int kTile = kWarps * kTpw * kLoads;    // tokens per tile
  __shared__ float score_s[GC][kTile];             // scores, then probabilities, of the tile
  __shared__ float m_s[GC], l_s[GC], alpha_s[GC];  // running max / sum, this tile's rescale
  __shared__ float red_s[GC][kMaxHeadDim];         // the cross-warp sum of the accumulators

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int grp = lane / LANES, j = lane % LANES;  // token within the warp's load, 16-byte chunk
  const int d = p.head_dim;
  const bool active = 8 * j < d;  // lanes past head_dim idle (head_dim < 8*LANES)
  const int kv_head = blockIdx.x / p.head_chunks;
  const int chunk = blockIdx.x - kv_head * p.head_chunks;
  const int seq = blockIdx.y, split = blockIdx.z;
  const int head0 = kv_head * p.group + chunk * GC;  // first query head of this block
  const int heads = min(GC, p.group - chunk * GC);   // valid heads of this block
  const int ctx = p.context_len[seq];
  const int row = p.query_start[seq];
  int t0, t1;
  split_range(ctx, p.block_size, p.num_splits, split, t0, t1);

  // The query slice of this lane, pre-scaled; heads past `heads` are zero and never written.
  float q[GC][8];
#pragma unroll
  for (int g = 0; g < GC; ++g) {
    const bf16* qp = p.q + std::int64_t(row) * p.q_stride + std::int64_t(head0 + g) * d + 8 * j;
#pragma unroll
    for (int e = 0; e < 8; ++e) q[g][e] = (g < heads && active) ? bf16_to_float(qp[e]) * p.scale_log2 : 0.0f;
  }
  float acc[GC][8];
#pragma unroll
  for (int g = 0; g < GC; ++g)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[g][e] = 0.0f;
  if (threadIdx.x < GC) {
    m_s[threadIdx.x] = -INFINITY;
    l_s[threadIdx.x] = 0.0f;
  }
  __syncthreads();

  const std::int32_t* table = p.block_tables + std::int64_t(seq) * p.max_blocks;
  const std::int64_t lane_off = std::int64_t(kv_head) * p.block_size * d + 8 * j;
  // Every tile holds at least one valid token (tiles start below t1), so m stays finite.
  for (int tile = t0; tile < t1; tile += kTile) {
    // --- scores: all loads first (kLoads * 16 bytes in flight per lane), then the dot products
    std::int64_t off[kLoads];
    uint4 raw[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int t = tile + u * kWarps * kTpw + warp * kTpw + grp;
      off[u] = -1;
      raw[u] = make_uint4(0, 0, 0, 0);
      if (t < t1) {
        const int b = t / p.block_size;
        off[u] = std::int64_t(table[b]) * p.block_stride + std::int64_t(t - b * p.block_size) * d + lane_off;
        if (active) raw[u] = *reinterpret_cast<const uint4*>(p.k_pool + off[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      float k[8];
      unpack8(raw[u], k);
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) s = fmaf(q[g][e], k[e], s);
#pragma unroll
        for (int o = LANES / 2; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (j == 0) score_s[g][u * kWarps * kTpw + warp * kTpw + grp] = off[u] >= 0 ? s : -INFINITY;
      }
    }
    __syncthreads();

    // --- online softmax step, one warp per head
    for (int g = warp; g < GC; g += kWarps) {
      float tmax = -INFINITY;
      for (int t = lane; t < kTile; t += 32) tmax = fmaxf(tmax, score_s[g][t]);
#pragma unroll
      for (int o = 16; o > 0; o /= 2) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
      const float m_old = m_s[g];
      const float m_new = fmaxf(m_old, tmax);  // finite: the tile has a valid token
      float sum = 0.0f;
      for (int t = lane; t < kTile; t += 32) {
        const float e = exp2f(score_s[g][t] - m_new);  // exp2(-inf) = 0 for padding
        score_s[g][t] = e;
        sum += e;
      }
#pragma unroll
      for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      __syncwarp();
      if (lane == 0) {
        const float alpha = exp2f(m_old - m_new);  // 0 on the first tile (m_old = -inf)
        alpha_s[g] = alpha;
        l_s[g] = l_s[g] * alpha + sum;
        m_s[g] = m_new;
      }
    }
    __syncthreads();

    // --- P * V into the fp32 accumulators, same token assignment as the scores
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      raw[u] = make_uint4(0, 0, 0, 0);  // padding tokens: p = 0 and v = 0, never 0 * NaN
      if (off[u] >= 0 && active) raw[u] = *reinterpret_cast<const uint4*>(p.k_pool + p.v_offset + off[u]);
    }
#pragma unroll
    for (int g = 0; g < GC; ++g) {
      const float alpha = alpha_s[g];
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[g][e] *= alpha;
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      float v[8];
      unpack8(raw[u], v);
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        const float pr = score_s[g][u * kWarps * kTpw + warp * kTpw + grp];
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[g][e] = fmaf(pr, v[e], acc[g][e]);
      }
    }
    __syncthreads();  // score_s is rewritten by the next tile
  }

  // --- sum the accumulators over the lane groups of a warp, then over warps (fixed order)
#pragma unroll
  for (int o = LANES; o < 32; o *= 2)
#pragma unroll
    for (int g = 0; g < GC; ++g)
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], o);
  for (int w = 0; w < kWarps; ++w) {
    if (warp == w && grp == 0 && active) {
#pragma unroll
      for (int g = 0; g < GC; ++g)
#pragma unroll
        for (int e = 0; e < 8; ++e) red_s[g][8 * j + e] = (w == 0 ? 0.0f : red_s[g][8 * j + e]) + acc[g][e];
    }
    __syncthreads();
  }

  // --- the output (one split) or this split's partial result
  for (int i = threadIdx.x; i < heads * d; i += kThreads) {
    const int g = i / d, c = i - g * d;
    const float l = l_s[g];
    const float o = l > 0.0f ? red_s[g][c] / l : 0.0f;  // l = 0 only for an empty range
    const int h = head0 + g;
    if (p.num_splits == 1)
      p.out[std::int64_t(row) * p.out_stride + std::int64_t(h) * d + c] = float_to_bf16(o);
    else p.ws_out[((std::int64_t(seq) * p.num_heads + h) * p.num_splits + split) * d + c] = o;
  }
  if (p.num_splits > 1 && threadIdx.x < heads) {
    const int g = threadIdx.x;
    const float l = l_s[g];
    p.ws_lse[(std::int64_t(seq) * p.num_heads + head0 + g) * p.num_splits + split] =
        l > 0.0f ? m_s[g] + log2f(l) : -INFINITY;
  }
}

// FlashDecoding's reduction: out = sum_i 2^(lse_i - M) o_i / sum_i 2^(lse_i - M), M = max_i lse_i.
// grid: x = head, y = sequence.
__global__ void __launch_bounds__(kThreads) decode_combine_kernel(const DecodeParams p) {
  extern __shared__ float w_s[];  // [num_splits] weights
  __shared__ float inv_total_s;
  const int head = blockIdx.x, seq = blockIdx.y, d = p.head_dim, n = p.num_splits;
  const std::int64_t base = std::int64_t(seq) * p.num_heads + head;
  const float* lse = p.ws_lse + base * n;
  if (threadIdx.x < 32) {
    float m = -INFINITY;
    for (int i = threadIdx.x; i < n; i += 32) m = fmaxf(m, lse[i]);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float total = 0.0f;
    for (int i = threadIdx.x; i < n; i += 32) {
      const float w = lse[i] == -INFINITY ? 0.0f : exp2f(lse[i] - m);  // empty splits weigh 0
      w_s[i] = w;
      total += w;
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) total += __shfl_xor_sync(0xffffffffu, total, o);
    if (threadIdx.x == 0) inv_total_s = total > 0.0f ? 1.0f / total : 0.0f;
  }
  __syncthreads();
  const float* part = p.ws_out + base * n * d;
  const int row = p.query_start[seq];
  for (int c = threadIdx.x; c < d; c += kThreads) {
    float o = 0.0f;
    for (int i = 0; i < n; ++i) o = fmaf(w_s[i], part[std::int64_t(i) * d + c], o);
    p.out[std::int64_t(row) * p.out_stride + std::int64_t(head) * d + c] = float_to_bf16(o * inv_total_s);
  }
}

std::size_t round_up(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }

template <int LANES>
void launch_decode(const DecodeParams& p, int gc, dim3 grid, Stream s) {
  switch (gc) {
    case 1:
      decode_kernel<LANES, 1><<<grid, kThreads, 0, s>>>(p);
      break;
    case 2:
      decode_kernel<LANES, 2><<<grid, kThreads, 0, s>>>(p);
      break;
    case 4:
      decode_kernel<LANES, 4><<<grid, kThreads, 0, s>>>(p);
      break;
    default:
      decode_kernel<LANES, 8><<<grid, kThreads, 0, s>>>(p);
      break;
  }
}

}  // namespace

std::size_t decode_workspace_bytes(int num_seqs, int num_heads, int head_dim, int num_splits) {
  if (num_splits <= 1 || num_seqs <= 0) return 0;
  const std::size_t parts = std::size_t(num_seqs) * std::size_t(num_heads) * std::size_t(num_splits);
  return round_up(parts * std::size_t(head_dim) * sizeof(float), 256) + round_up(parts * sizeof(float), 256);
}

int choose_decode_splits(int num_seqs, int num_kv_heads, int max_context, int sm_count) {
  // Short contexts: one pass is cheap and a second kernel plus the workspace traffic would cost
  // more than it saves. Long ones: enough (sequence, KV head, split) blocks to give every SM
  // about two, but no split shorter than 256 tokens (below that the reduction dominates).
  // A power of two: the count is part of a decode graph's key, and as a batch's contexts grow an
  // exact count could change every 256 tokens, each change a capture and a graph's memory.
  if (max_context < 1024 || sm_count <= 0) return 1;
  const unsigned long long blocks =
      std::max(1ULL, static_cast<unsigned long long>(std::max(0, num_seqs)) * std::max(1, num_kv_heads));
  const unsigned long long want = (2ULL * unsigned(sm_count) + blocks - 1) / blocks;
  const unsigned long long cap =
      std::min<unsigned long long>(kMaxDecodeSplits, std::max(1, max_context / 256));
  return int(std::min(std::bit_ceil(std::max(1ULL, want)), std::bit_floor(cap)));
}

void paged_decode_attention(const bf16* pool, const KvLayout& shape, int layer, const AttentionBatch& batch,
                            int num_splits, void* workspace, Stream s) {
  require(shape.num_kv_heads > 0 && shape.block_size > 0 && shape.num_blocks > 0,
          "paged_decode_attention: empty KV pool shape");
  require(layer >= 0 && layer < shape.num_layers, "paged_decode_attention: layer out of range");
  const int d = shape.head_dim;
  require(d > 0 && d % 8 == 0 && d <= kMaxHeadDim,
          "paged_decode_attention: head_dim " + std::to_string(d) + " must be a multiple of 8 up to 256");
  require(batch.num_heads > 0 && batch.num_heads % shape.num_kv_heads == 0,
          "paged_decode_attention: num_heads must be a multiple of num_kv_heads");
  require(reinterpret_cast<std::uintptr_t>(pool) % 16 == 0,
          "paged_decode_attention: pool not 16-byte aligned");
  require(num_splits >= 1 && num_splits <= 4096, "paged_decode_attention: num_splits must be in [1, 4096]");
  require(num_splits == 1 || workspace != nullptr, "paged_decode_attention: split-KV needs a workspace");
  if (batch.num_seqs <= 0) return;
  require(batch.num_seqs <= 65535 && num_splits <= 65535, "paged_decode_attention: grid too large");

  DecodeParams p{};
  p.k_pool = pool + shape.plane_offset(layer, 0);
  p.v_offset = shape.plane_offset(layer, 1) - shape.plane_offset(layer, 0);
  p.block_stride = shape.page_elems();
  p.block_size = shape.block_size;
  p.head_dim = d;
  p.num_heads = batch.num_heads;
  p.group = batch.num_heads / shape.num_kv_heads;
  // Query heads per block: the group, rounded up to an instantiated 1, 2, 4 or 8; larger groups
  // take several head chunks (each chunk re-reads the K/V tiles, from L2 mostly).
  const int gc = p.group > 4 ? kMaxGroup : p.group > 2 ? 4 : p.group;
  p.head_chunks = (p.group + gc - 1) / gc;
  p.q = batch.q;
  p.q_stride = batch.q_stride;
  p.out = batch.out;
  p.out_stride = batch.out_stride;
  p.query_start = batch.query_start;
  p.context_len = batch.context_len;
  p.block_tables = batch.block_tables;
  p.max_blocks = batch.max_blocks;
  p.scale_log2 = batch.scale * 1.4426950408889634f;
  p.num_splits = num_splits;
  if (num_splits > 1) {
    const std::size_t parts = std::size_t(batch.num_seqs) * batch.num_heads * num_splits;
    p.ws_out = static_cast<float*>(workspace);
    p.ws_lse =
        reinterpret_cast<float*>(static_cast<char*>(workspace) + round_up(parts * d * sizeof(float), 256));
  }

  const dim3 grid(unsigned(shape.num_kv_heads * p.head_chunks), unsigned(batch.num_seqs),
                  unsigned(num_splits));
  if (d <= 64) launch_decode<8>(p, gc, grid, s);
  else if (d <= 128) launch_decode<16>(p, gc, grid, s);
  else launch_decode<32>(p, gc, grid, s);
  check_launch("paged_decode_attention");
  if (num_splits > 1) {
    decode_combine_kernel<<<dim3(unsigned(batch.num_heads), unsigned(batch.num_seqs)), kThreads,
                            num_splits * sizeof(float), s>>>(p);
    check_launch("paged_decode_attention (split combine)");
  }
}

}  // namespace duet::kernels
