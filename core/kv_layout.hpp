#pragma once
// The paged KV layout of the real engines: the CPU reference (float32), the CUDA engine (bf16)
// and its kernels index every KV element through this one struct. Block-major: a block is one
// page holding all of its layers, K and V,
//   [block][layer][K or V][kv_head][slot in block][head_dim]
// so that models with different layer counts, heads and block sizes share one arena of pages
// (kv_pool = "shared") whenever their blocks have equal bytes: model A's block 7 and model B's
// block 7 are the same bytes, never both in use. A layer-major layout ([layer][K/V][block]...)
// would spread a block over planes whose strides depend on the model, so two models could not
// share a page. Within a page, one (layer, K or V, kv_head) tile is [block_size x head_dim],
// contiguous: a decode-attention thread block serving one KV head reads it in one run, as before.
#include <cstdint>

#include "core/model_spec.hpp"

namespace duet {

struct KvLayout {
  int num_layers = 0;
  int num_blocks = 0;
  int num_kv_heads = 0;
  int block_size = 0;
  int head_dim = 0;

  static KvLayout of(const ModelSpec& m, int num_blocks, int block_size) {
    return {m.num_layers, num_blocks, m.num_kv_heads, block_size, m.head_dim};
  }
  // One layer's K (or V) of one block: [kv_head][slot][head_dim], contiguous.
  std::int64_t block_elems() const { return std::int64_t(num_kv_heads) * block_size * head_dim; }
  // One page: a block of every layer, K and V; the stride from one block to the next.
  std::int64_t page_elems() const { return 2 * std::int64_t(num_layers) * block_elems(); }
  std::int64_t total_elems() const { return std::int64_t(num_blocks) * page_elems(); }
  // Where (layer, K or V) starts within a page.
  std::int64_t plane_offset(int layer, int kv) const {
    return (2 * std::int64_t(layer) + kv) * block_elems();
  }
  // Offset of element 0 of (layer, kv: 0 = K, 1 = V, block, head, slot).
  std::int64_t offset(int layer, int kv, int block, int head, int slot) const {
    return std::int64_t(block) * page_elems() + plane_offset(layer, kv) +
           (std::int64_t(head) * block_size + slot) * head_dim;
  }
};

}  // namespace duet
