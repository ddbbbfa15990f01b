// Paged prefill / chunked-prefill attention (attention.hpp), FlashAttention-2 style (Dao 2023):
// a thread block owns a tile of 64 query rows, loops over the sequence's visible keys in tiles of
// 64 read through the block table into shared memory, and keeps an online softmax (running max
// m, running sum l per row) with fp32 accumulators; the output is normalised once at the end.
//
//  * GQA packing: the 64 rows of a tile are (query row, query head) pairs of ONE KV head,
//    row r = (q0 + r / G, kv_head * G + r % G), G = num_heads / num_kv_heads. A K/V tile is then
//    loaded once for all G heads, and a decode mixed into the batch (1 query row) fills G rows
//    instead of 1. grid = (query tiles of 64/G rows, KV heads, sequences).
//  * 4 warps (128 threads); warp w owns rows 16w..16w+15: S = Q K^T and O += P V run on tensor
//    cores through WMMA bf16 m16n16k16 fragments with fp32 accumulators (sm_80+). S goes through
//    shared memory for the softmax (2 lanes per row); P is stored back as bf16 (FA2 does the same)
//    as the A operand of P V. O stays in registers: the row of each accumulator element is found
//    once by loading a matrix of row indices into a fragment of the same type, so the per-row
//    rescale exp(m_old - m_new) needs no shared-memory round trip and no assumption on the
//    (unspecified) fragment layout.
//  * K and V tiles are fetched with cp.async (16 bytes per thread per copy): the next K tile is
//    in flight during the softmax and P V, the next V tile during the next S = Q K^T.
//  * Causal mask: query row i of a sequence with n new rows and context c sits at position
//    c - n + i and sees keys 0..c - n + i. Key tiles past the tile's last visible key are skipped.
// head_dim 64 and 128 have exact instantiations; any multiple of 8 up to 256 runs zero-padded
// to 128 or 256 columns (zero Q/K columns add nothing to Q K^T; padded V columns are dropped).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "kernels/attention.hpp"
#include "kernels/launch.cuh"

namespace duet::kernels {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kBM = 64;  // query rows (row = query x head of the group) per thread block
constexpr int kBN = 64;  // keys per tile
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
static_assert(kBM == 16 * kWarps, "one 16-row WMMA strip per warp");

using detail::check_launch;
using detail::require;

using detail::float_to_bf16;

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Shared memory of one thread block, in bytes; every region starts on a 128-byte boundary
// (WMMA pointers must be 32-byte aligned) and row strides are skewed by 16 bytes so that the
// 8 rows a fragment load touches fall in different banks.
template <int DP>
struct Smem {
  static constexpr int kLdk = DP + 8;          // bf16 stride of Q, K, V tiles
  static constexpr int kLds = kBN + 4;         // float stride of S
  static constexpr int kLdp = kBN + 8;         // bf16 stride of P
  static constexpr int kLdo = DP + 4;          // float stride of the output staging
  static constexpr bool kQInRegs = DP <= 128;  // Q fragments: DP/16 * 4 registers
  static constexpr std::size_t kTile = std::size_t(kBN) * kLdk * 2;
  static constexpr std::size_t k_off = 0;
  static constexpr std::size_t v_off = kTile;
  // Q is staged in the K tile when its fragments live in registers, else it keeps its own tile.
  static constexpr std::size_t q_off = kQInRegs ? 0 : 2 * kTile;
  static constexpr std::size_t s_off = 2 * kTile + (kQInRegs ? 0 : std::size_t(kBM) * kLdk * 2);
  static constexpr std::size_t p_off = s_off + std::size_t(kBM) * kLds * 4;
  static constexpr std::size_t alpha_off = p_off + std::size_t(kBM) * kLdp * 2;
  static constexpr std::size_t l_off = alpha_off + kBM * 4;
  static constexpr std::size_t idx_off = l_off + kBM * 4;
  static constexpr std::size_t bytes = idx_off + 16 * 16 * 4;
  // The normalised output is staged over the K and V tiles once the loop is done.
  static_assert(std::size_t(kBM) * kLdo * 4 <= 2 * kTile, "output staging fits in the K/V tiles");
  static_assert(kBM == kBN, "Q staging reuses the K tile");
  static_assert(kTile % 128 == 0 && s_off % 128 == 0 && p_off % 128 == 0 && alpha_off % 128 == 0,
                "128-byte aligned regions");
};

struct PrefillParams {
  const bf16* k_pool;  // layer's K tile of block 0; V tile at k_pool + v_offset
  std::int64_t v_offset;
  std::int64_t block_stride;    // from one block to the next: a page (KvLayout::page_elems)
  int block_size, block_shift;  // block_shift = log2(block_size), or -1 when not a power of two
  int head_dim, group, qrows;   // qrows = query rows per tile = kBM / group
  const bf16* q;
  int q_stride;
  bool q_vec;  // q rows 16-byte aligned: vector loads
  bf16* out;
  int out_stride;
  const std::int32_t* query_start;
  const std::int32_t* context_len;
  const std::int32_t* block_tables;
  int max_blocks;
  float scale_log2;  // scale * log2(e): softmax in base 2
};

// Issues the copies of keys [kt0, kt0 + kBN) of one plane (K or V) into a [kBN][kLdk] tile; keys
// at or past `kend` are zero-filled so that masked columns never multiply garbage (0 * NaN).
template <int DP, bool kExact>
__device__ __forceinline__ void load_kv_tile(bf16* tile, const bf16* plane, const PrefillParams& p,
                                             const std::int32_t* table, int kv_head, int kt0, int kend) {
  constexpr int kLdk = Smem<DP>::kLdk;
  const int d = kExact ? DP : p.head_dim;
  const int chunks = d / 8;
  for (int i = threadIdx.x; i < kBN * chunks; i += kThreads) {
    const int r = i / chunks, c8 = (i - r * chunks) * 8;
    const int key = kt0 + r;
    bf16* dst = tile + r * kLdk + c8;
    if (key < kend) {
      const int b = p.block_shift >= 0 ? key >> p.block_shift : key / p.block_size;
      const int slot = key - b * p.block_size;
      cp_async16(dst, plane + std::int64_t(table[b]) * p.block_stride +
                          (std::int64_t(kv_head) * p.block_size + slot) * d + c8);
    } else {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
  }
}

// grid: x = query tile (reversed: the longest tiles start first), y = KV head, z = sequence.
template <int DP, bool kExact>
__global__ void __launch_bounds__(kThreads) prefill_kernel(const PrefillParams p) {
  using L = Smem<DP>;
  using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
  using FragBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major>;  // K^T
  using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major>;   // V
  using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
  constexpr int kLdk = L::kLdk, kLds = L::kLds, kLdp = L::kLdp, kLdo = L::kLdo;
  constexpr int kDF = DP / 16;  // 16-column fragments across head_dim
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* k_s = reinterpret_cast<bf16*>(smem + L::k_off);
  bf16* v_s = reinterpret_cast<bf16*>(smem + L::v_off);
  bf16* q_s = reinterpret_cast<bf16*>(smem + L::q_off);
  float* s_s = reinterpret_cast<float*>(smem + L::s_off);
  bf16* p_s = reinterpret_cast<bf16*>(smem + L::p_off);
  float* alpha_s = reinterpret_cast<float*>(smem + L::alpha_off);
  float* l_s = reinterpret_cast<float*>(smem + L::l_off);
  float* idx_s = reinterpret_cast<float*>(smem + L::idx_off);
  float* o_s = reinterpret_cast<float*>(smem);  // after the loop, over K and V

  const int d = kExact ? DP : p.head_dim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kv_head = blockIdx.y, seq = blockIdx.z;
  const int q0 = int(gridDim.x - 1 - blockIdx.x) * p.qrows;
  const int qs = p.query_start[seq], nq = p.query_start[seq + 1] - qs;
  if (q0 >= nq) return;
  const int first = p.context_len[seq] - nq;       // position of query row 0
  const int kend = first + min(q0 + p.qrows, nq);  // keys [0, kend) are visible to some row
  const int ntiles = (kend + kBN - 1) / kBN;
  const std::int32_t* table = p.block_tables + std::int64_t(seq) * p.max_blocks;
  const bf16* k_plane = p.k_pool;
  const bf16* v_plane = p.k_pool + p.v_offset;
  // Tile row r -> (query row, head); rows past qrows * G or past the sequence are padding.
  auto row_valid = [&](int r) { return r < p.qrows * p.group && q0 + r / p.group < nq; };
  auto row_ptr = [&](auto* base, int stride, int r) {
    return base + std::int64_t(qs + q0 + r / p.group) * stride +
           std::int64_t(kv_head * p.group + r % p.group) * d;
  };

  // --- stage Q (zero for padding rows and columns) and the row-index matrix
  for (int i = threadIdx.x; i < kBM * (DP / 8); i += kThreads) {
    const int r = i / (DP / 8), c8 = (i % (DP / 8)) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (c8 < d && row_valid(r)) {
      const bf16* src = row_ptr(p.q, p.q_stride, r) + c8;
      if (p.q_vec) {
        v = *reinterpret_cast<const uint4*>(src);
      } else {
        v.x = src[0] | std::uint32_t(src[1]) << 16;
        v.y = src[2] | std::uint32_t(src[3]) << 16;
        v.z = src[4] | std::uint32_t(src[5]) << 16;
        v.w = src[6] | std::uint32_t(src[7]) << 16;
      }
    }
    *reinterpret_cast<uint4*>(q_s + r * kLdk + c8) = v;
  }
  for (int i = threadIdx.x; i < 256; i += kThreads) idx_s[i] = float(i / 16);
  __syncthreads();
  FragA qf[L::kQInRegs ? kDF : 1];
  if constexpr (L::kQInRegs) {
#pragma unroll
    for (int k = 0; k < kDF; ++k)
      wmma::load_matrix_sync(qf[k], reinterpret_cast<const __nv_bfloat16*>(q_s + warp * 16 * kLdk + k * 16),
                             kLdk);
  }
  FragC rows;  // rows.x[i] = the row (0..15) of accumulator element i
  wmma::load_matrix_sync(rows, idx_s, 16, wmma::mem_row_major);
  int row_of[FragC::num_elements];
#pragma unroll
  for (int i = 0; i < FragC::num_elements; ++i) row_of[i] = int(rows.x[i]);
  __syncthreads();  // Q staging in the K tile is consumed
  if (!kExact) {    // padding columns of K and V stay zero: tile loads only write columns < d
    for (int i = threadIdx.x; i < 2 * kBN * (DP / 8); i += kThreads) {
      const int r = i / (DP / 8), c8 = (i % (DP / 8)) * 8;
      if (c8 >= d)
        *reinterpret_cast<uint4*>(k_s + r * kLdk + c8) = make_uint4(0, 0, 0, 0);  // r < 2*kBN: K then V
    }
  }

  // --- softmax state: lanes 2i and 2i+1 of warp w share row 16w + i
  const int srow = warp * 16 + lane / 2, half = lane % 2;
  const int prow = row_valid(srow) ? first + q0 + srow / p.group : 0;  // last visible key
  float m_run = -INFINITY, l_run = 0.0f;
  FragC o[kDF];
#pragma unroll
  for (int j = 0; j < kDF; ++j) wmma::fill_fragment(o[j], 0.0f);

  load_kv_tile<DP, kExact>(k_s, k_plane, p, table, kv_head, 0, kend);
  cp_async_commit();
  load_kv_tile<DP, kExact>(v_s, v_plane, p, table, kv_head, 0, kend);
  cp_async_commit();

  for (int t = 0; t < ntiles; ++t) {
    const int kt0 = t * kBN;
    cp_async_wait<1>();  // K tile t has landed (V tile t may be in flight)
    __syncthreads();

    // --- S = Q K^T for this warp's 16 rows
#pragma unroll
    for (int n = 0; n < kBN / 16; ++n) {
      FragC c;
      wmma::fill_fragment(c, 0.0f);
#pragma unroll
      for (int k = 0; k < kDF; ++k) {
        if (!kExact && k * 16 >= d) break;
        FragBt b;
        wmma::load_matrix_sync(b, reinterpret_cast<const __nv_bfloat16*>(k_s + n * 16 * kLdk + k * 16), kLdk);
        if constexpr (L::kQInRegs) {
          wmma::mma_sync(c, qf[k], b, c);
        } else {
          FragA a;
          wmma::load_matrix_sync(a, reinterpret_cast<const __nv_bfloat16*>(q_s + warp * 16 * kLdk + k * 16),
                                 kLdk);
          wmma::mma_sync(c, a, b, c);
        }
      }
      wmma::store_matrix_sync(s_s + warp * 16 * kLds + n * 16, c, kLds, wmma::mem_row_major);
    }
    __syncthreads();  // every warp is done with K tile t: fetch tile t+1 behind the softmax
    if (t + 1 < ntiles) load_kv_tile<DP, kExact>(k_s, k_plane, p, table, kv_head, kt0 + kBN, kend);
    cp_async_commit();

    // --- online softmax of row srow over this tile (columns half, half+2, ...)
    {
      const float* srow_s = s_s + srow * kLds;
      float sv[kBN / 2];
      float tmax = -INFINITY;
#pragma unroll
      for (int i = 0; i < kBN / 2; ++i) {
        const int c = 2 * i + half;
        sv[i] = kt0 + c <= prow ? srow_s[c] * p.scale_log2 : -INFINITY;
        tmax = fmaxf(tmax, sv[i]);
      }
      tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
      // The first tile holds key 0, visible to every row, so m_new is finite from then on.
      const float m_new = fmaxf(m_run, tmax);
      const float alpha = m_run == -INFINITY ? 0.0f : exp2f(m_run - m_new);
      float sum = 0.0f;
      bf16* prow_s = p_s + srow * kLdp;
#pragma unroll
      for (int i = 0; i < kBN / 2; ++i) {
        const float e = sv[i] == -INFINITY ? 0.0f : exp2f(sv[i] - m_new);
        sum += e;
        prow_s[2 * i + half] = float_to_bf16(e);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      l_run = l_run * alpha + sum;
      m_run = m_new;
      if (half == 0) alpha_s[srow] = alpha;
    }
    __syncwarp();  // P and alpha of this warp's rows are visible to the warp

    // --- O = O * alpha + P V
    float a[FragC::num_elements];
#pragma unroll
    for (int i = 0; i < FragC::num_elements; ++i) a[i] = alpha_s[warp * 16 + row_of[i]];
#pragma unroll
    for (int j = 0; j < kDF; ++j)
#pragma unroll
      for (int i = 0; i < FragC::num_elements; ++i) o[j].x[i] *= a[i];
    FragA pf[kBN / 16];
#pragma unroll
    for (int k = 0; k < kBN / 16; ++k)
      wmma::load_matrix_sync(pf[k], reinterpret_cast<const __nv_bfloat16*>(p_s + warp * 16 * kLdp + k * 16),
                             kLdp);
    cp_async_wait<1>();  // V tile t has landed (K tile t+1 may be in flight)
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kDF; ++j) {
      if (!kExact && j * 16 >= d) break;
#pragma unroll
      for (int k = 0; k < kBN / 16; ++k) {
        FragB b;
        wmma::load_matrix_sync(b, reinterpret_cast<const __nv_bfloat16*>(v_s + k * 16 * kLdk + j * 16), kLdk);
        wmma::mma_sync(o[j], pf[k], b, o[j]);
      }
    }
    __syncthreads();  // every warp is done with V tile t
    if (t + 1 < ntiles) load_kv_tile<DP, kExact>(v_s, v_plane, p, table, kv_head, kt0 + kBN, kend);
    cp_async_commit();
  }
  cp_async_wait<0>();

  // --- normalise and write: stage O over the K/V tiles, then coalesced rows of d columns
  if (half == 0) l_s[srow] = l_run;
#pragma unroll
  for (int j = 0; j < kDF; ++j) {
    if (!kExact && j * 16 >= d) break;
    wmma::store_matrix_sync(o_s + warp * 16 * kLdo + j * 16, o[j], kLdo, wmma::mem_row_major);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kBM * d; i += kThreads) {
    const int r = i / d, c = i - r * d;
    if (!row_valid(r)) continue;
    const float l = l_s[r];
    row_ptr(p.out, p.out_stride, r)[c] = float_to_bf16(l > 0.0f ? o_s[r * kLdo + c] / l : 0.0f);
  }
}

template <int DP, bool kExact>
void launch_prefill(const PrefillParams& p, dim3 grid, Stream s) {
  constexpr std::size_t bytes = Smem<DP>::bytes;
  // Above 48 KiB a kernel must opt in to its dynamic shared memory (once per kernel).
  static const cudaError_t opt_in = cudaFuncSetAttribute(
      prefill_kernel<DP, kExact>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  if (opt_in != cudaSuccess)
    throw Error(std::string("paged_prefill_attention: cudaFuncSetAttribute(") + std::to_string(bytes) +
                " bytes of shared memory): " + cudaGetErrorString(opt_in));
  prefill_kernel<DP, kExact><<<grid, kThreads, bytes, s>>>(p);
}

}  // namespace

void paged_prefill_attention(const bf16* pool, const KvLayout& shape, int layer, const AttentionBatch& batch,
                             int max_query_rows, Stream s) {
  require(shape.num_kv_heads > 0 && shape.block_size > 0 && shape.num_blocks > 0,
          "paged_prefill_attention: empty KV pool shape");
  require(layer >= 0 && layer < shape.num_layers, "paged_prefill_attention: layer out of range");
  const int d = shape.head_dim;
  require(d > 0 && d % 8 == 0 && d <= 256,
          "paged_prefill_attention: head_dim " + std::to_string(d) + " must be a multiple of 8 up to 256");
  require(batch.num_heads > 0 && batch.num_heads % shape.num_kv_heads == 0,
          "paged_prefill_attention: num_heads must be a multiple of num_kv_heads");
  const int group = batch.num_heads / shape.num_kv_heads;
  require(group <= kBM, "paged_prefill_attention: more than 64 query heads per KV head");
  require(reinterpret_cast<std::uintptr_t>(pool) % 16 == 0,
          "paged_prefill_attention: pool not 16-byte aligned");
  if (batch.num_seqs <= 0 || max_query_rows <= 0) return;
  require(batch.num_seqs <= 65535 && shape.num_kv_heads <= 65535, "paged_prefill_attention: grid too large");

  PrefillParams p{};
  p.k_pool = pool + shape.plane_offset(layer, 0);
  p.v_offset = shape.plane_offset(layer, 1) - shape.plane_offset(layer, 0);
  p.block_stride = shape.page_elems();
  p.block_size = shape.block_size;
  p.block_shift = -1;
  for (int sh = 0; sh < 31; ++sh)
    if ((1 << sh) == shape.block_size) p.block_shift = sh;
  p.head_dim = d;
  p.group = group;
  p.qrows = kBM / group;
  p.q = batch.q;
  p.q_stride = batch.q_stride;
  p.q_vec = reinterpret_cast<std::uintptr_t>(batch.q) % 16 == 0 && batch.q_stride % 8 == 0;
  p.out = batch.out;
  p.out_stride = batch.out_stride;
  p.query_start = batch.query_start;
  p.context_len = batch.context_len;
  p.block_tables = batch.block_tables;
  p.max_blocks = batch.max_blocks;
  p.scale_log2 = batch.scale * 1.4426950408889634f;

  const dim3 grid(unsigned((max_query_rows + p.qrows - 1) / p.qrows), unsigned(shape.num_kv_heads),
                  unsigned(batch.num_seqs));
  if (d == 64) launch_prefill<64, true>(p, grid, s);
  else if (d == 128) launch_prefill<128, true>(p, grid, s);
  else if (d < 128) launch_prefill<128, false>(p, grid, s);
  else launch_prefill<256, false>(p, grid, s);
  check_launch("paged_prefill_attention");
}

}  // namespace duet::kernels
