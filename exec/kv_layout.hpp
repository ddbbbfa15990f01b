#pragma once
// The paged KV cache layout shared by the CPU reference and the CUDA engine. One pool per model:
//   [layer][K or V][block][kv_head][slot in block][head_dim]
// so that a decode-attention thread block serving one KV head of one sequence reads, block after
// block, one contiguous [block_size x head_dim] tile of K and one of V. The CPU stores float32,
// the GPU bfloat16; the element order is the same.
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
  std::int64_t block_elems() const { return std::int64_t(num_kv_heads) * block_size * head_dim; }
  std::int64_t layer_elems() const { return 2 * std::int64_t(num_blocks) * block_elems(); }
  std::int64_t total_elems() const { return std::int64_t(num_layers) * layer_elems(); }
  // Offset of element 0 of (layer, kv: 0 = K, 1 = V, block, head, slot).
  std::int64_t offset(int layer, int kv, int block, int head, int slot) const {
    return std::int64_t(layer) * layer_elems() + (std::int64_t(kv) * num_blocks + block) * block_elems() +
           (std::int64_t(head) * block_size + slot) * head_dim;
  }
};

}  // namespace duet
