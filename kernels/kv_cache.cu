// The paged KV cache (attention.hpp, layout of core/kv_layout.hpp):
//   pool[block][layer][K or V][kv_head][slot][head_dim], bf16.
// kv_write scatters the K and V rows of one layer to their slots; copy_blocks performs the
// copy-on-write block copies of a step in every layer. Both are pure data movement, so the
// results are bit-exact; they move 16 bytes per thread where every address allows it.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "kernels/attention.hpp"
#include "kernels/launch.cuh"

namespace duet::kernels {

namespace {

using detail::check_launch;
using detail::require;

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

void check_shape(const KvLayout& s, const char* fn) {
  require(s.num_layers > 0 && s.num_blocks > 0 && s.num_kv_heads > 0 && s.block_size > 0 && s.head_dim > 0,
          std::string(fn) + ": empty KV pool shape");
}

using detail::Raw;

// One thread per V elements of one (row, kv head, dim) of K and the same of V: threads that are
// neighbours in x write neighbouring dims of the same slot, so both the reads of k/v and the
// writes into the pool are coalesced. Rows whose slot is negative are padding and are skipped.
template <int V>
__global__ void kv_write_kernel(bf16* __restrict__ k_pool, std::int64_t v_offset, int row_elems, int head_dim,
                                int block_size, std::int64_t block_stride, const bf16* __restrict__ k,
                                const bf16* __restrict__ v, int k_stride, int v_stride,
                                const std::int64_t* __restrict__ slot_mapping, int rows) {
  using T = typename Raw<V>::type;
  const int per_row = row_elems / V;
  const std::int64_t total = std::int64_t(rows) * per_row;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const int r = int(i / per_row);
    const int c = int(i - std::int64_t(r) * per_row) * V;  // element within [num_kv_heads * head_dim]
    const std::int64_t slot = slot_mapping[r];
    if (slot < 0) continue;
    const std::int64_t block = slot / block_size;
    const int offset = int(slot - block * block_size);
    const int head = c / head_dim, e = c - head * head_dim;
    const std::int64_t dst = block * block_stride + (std::int64_t(head) * block_size + offset) * head_dim + e;
    *reinterpret_cast<T*>(k_pool + dst) = *reinterpret_cast<const T*>(k + std::int64_t(r) * k_stride + c);
    *reinterpret_cast<T*>(k_pool + v_offset + dst) =
        *reinterpret_cast<const T*>(v + std::int64_t(r) * v_stride + c);
  }
}

// blockIdx.x: the pair i, blockIdx.y: layer * 2 + (K or V), one block_elems run of the page each
// (a page is 2 * num_layers such runs, contiguous), copied by the whole thread block. All pairs run
// concurrently, so no destination may also be a source (copy-on-write targets are fresh blocks);
// a source may be copied to several destinations.
template <int V>
__global__ void copy_blocks_kernel(bf16* __restrict__ pool, std::int64_t block_elems, std::int64_t page_elems,
                                   const std::int32_t* __restrict__ src,
                                   const std::int32_t* __restrict__ dst) {
  using T = typename Raw<V>::type;
  const std::int64_t run = std::int64_t(blockIdx.y) * block_elems;  // (layer, kv) within the page
  const T* from = reinterpret_cast<const T*>(pool + std::int64_t(src[blockIdx.x]) * page_elems + run);
  T* to = reinterpret_cast<T*>(pool + std::int64_t(dst[blockIdx.x]) * page_elems + run);
  const std::int64_t n = block_elems / V;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) to[i] = from[i];
}

int grid_for(std::int64_t work, int threads) {
  const std::int64_t blocks = (work + threads - 1) / threads;
  return int(blocks < 65536 ? blocks : 65536);  // grid-stride beyond that
}

}  // namespace

void kv_write(bf16* pool, const KvLayout& shape, int layer, const bf16* k, const bf16* v, int k_stride,
              int v_stride, const std::int64_t* slot_mapping, int rows, Stream s) {
  check_shape(shape, "kv_write");
  require(layer >= 0 && layer < shape.num_layers,
          "kv_write: layer " + std::to_string(layer) + " out of range");
  const int row_elems = shape.num_kv_heads * shape.head_dim;
  require(k_stride >= row_elems && v_stride >= row_elems, "kv_write: row stride shorter than a K/V row");
  require(rows >= 0, "kv_write: negative row count");
  if (rows == 0) return;
  bf16* k_pool = pool + shape.plane_offset(layer, 0);
  const std::int64_t v_offset = shape.plane_offset(layer, 1) - shape.plane_offset(layer, 0);
  const std::int64_t block_stride = shape.page_elems();
  constexpr int kThreads = 256;
  const bool vec = shape.head_dim % 8 == 0 && k_stride % 8 == 0 && v_stride % 8 == 0 && aligned16(pool) &&
                   aligned16(k) && aligned16(v);
  if (vec) {
    kv_write_kernel<8><<<grid_for(std::int64_t(rows) * row_elems / 8, kThreads), kThreads, 0, s>>>(
        k_pool, v_offset, row_elems, shape.head_dim, shape.block_size, block_stride, k, v, k_stride, v_stride,
        slot_mapping, rows);
  } else {
    kv_write_kernel<1><<<grid_for(std::int64_t(rows) * row_elems, kThreads), kThreads, 0, s>>>(
        k_pool, v_offset, row_elems, shape.head_dim, shape.block_size, block_stride, k, v, k_stride, v_stride,
        slot_mapping, rows);
  }
  check_launch("kv_write");
}

void copy_blocks(bf16* pool, const KvLayout& shape, const std::int32_t* src, const std::int32_t* dst, int n,
                 Stream s) {
  check_shape(shape, "copy_blocks");
  require(n >= 0, "copy_blocks: negative count");
  if (n == 0) return;
  require(shape.num_layers * 2 <= 65535, "copy_blocks: too many layers for one grid");
  const std::int64_t block_elems = shape.block_elems(), page_elems = shape.page_elems();
  const dim3 grid(unsigned(n), unsigned(shape.num_layers * 2));
  constexpr int kThreads = 256;
  if (block_elems % 8 == 0 && aligned16(pool))
    copy_blocks_kernel<8><<<grid, kThreads, 0, s>>>(pool, block_elems, page_elems, src, dst);
  else copy_blocks_kernel<1><<<grid, kThreads, 0, s>>>(pool, block_elems, page_elems, src, dst);
  check_launch("copy_blocks");
}

}  // namespace duet::kernels
