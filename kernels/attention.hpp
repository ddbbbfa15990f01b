#pragma once
// Attention and the KV cache on the paged, block-major layout of core/kv_layout.hpp, in bf16:
//   pool[block][layer][K or V][kv_head][slot][head_dim]
// Every offset is KvLayout's: a (layer, K or V) tile of a block starts at
// block * page_elems() + plane_offset(layer, kv), so one arena may hold the pages of several models.
#include <cstdint>

#include "core/kv_layout.hpp"
#include "kernels/device.hpp"

namespace duet::kernels {

// Writes the K and V rows of one layer into the pool: row r goes to slot slot_mapping[r]
// (= block * block_size + offset); k, v are [rows, num_kv_heads*head_dim] with row strides.
void kv_write(bf16* pool, const KvLayout& shape, int layer, const bf16* k, const bf16* v, int k_stride,
              int v_stride, const std::int64_t* slot_mapping, int rows, Stream s);

// Copy-on-write: block src[i] -> dst[i] in every layer, K and V.
void copy_blocks(bf16* pool, const KvLayout& shape, const std::int32_t* src, const std::int32_t* dst, int n,
                 Stream s);

// A batch's attention problem: for sequence i, its queries are rows [query_start[i],
// query_start[i+1]) of q (heads [num_heads*head_dim], stride q_stride), at absolute positions
// context_len[i] - (query rows) ... context_len[i] - 1 (context_len counts the new tokens too), and
// attend causally to its context through block_tables[i * max_blocks .. ].
struct AttentionBatch {
  const bf16* q = nullptr;
  int q_stride = 0;
  bf16* out = nullptr;  // [rows, num_heads*head_dim]
  int out_stride = 0;
  const std::int32_t* query_start = nullptr;   // [num_seqs + 1]
  const std::int32_t* context_len = nullptr;   // [num_seqs]
  const std::int32_t* block_tables = nullptr;  // [num_seqs, max_blocks]
  int max_blocks = 0;
  int num_seqs = 0;
  int num_heads = 0;
  float scale = 0.0f;  // 1/sqrt(head_dim)
};

// Decode: one query row per sequence. GQA-aware: one thread block serves all query heads of a KV
// head, so K/V are read once per group. Long contexts are split (FlashDecoding) into
// `num_splits` partitions reduced by a second kernel; workspace from decode_workspace_bytes.
std::size_t decode_workspace_bytes(int num_seqs, int num_heads, int head_dim, int num_splits);
// A power of two (it is part of a decode graph's key), 1 below 1,024 tokens of context.
int choose_decode_splits(int num_seqs, int num_kv_heads, int max_context, int sm_count);
inline constexpr int kMaxDecodeSplits = 64;  // choose_decode_splits' ceiling; the kernels accept any count
void paged_decode_attention(const bf16* pool, const KvLayout& shape, int layer, const AttentionBatch& batch,
                            int num_splits, void* workspace, Stream s);

// Prefill and chunked prefill (and decodes mixed in): causal, online softmax, K/V tiles in shared
// memory (FlashAttention-2 style), reading the cached context through the block tables.
void paged_prefill_attention(const bf16* pool, const KvLayout& shape, int layer, const AttentionBatch& batch,
                             int max_query_rows, Stream s);

}  // namespace duet::kernels
