#pragma once
// The CPU reference engine: a Llama-architecture forward pass in Eigen (float32) over the paged KV
// layout that the CUDA engine shares (core/kv_layout.hpp). It is slow and simple on purpose: it
// is the correctness reference for the CUDA kernels and lets the whole stack run without a GPU.
#include <span>
#include <vector>

#include "core/executor.hpp"
#include "core/kv_layout.hpp"
#include "exec/cpu_ops.hpp"
#include "exec/llama_weights.hpp"

namespace duet {

// The PRM label tokens when the caller names none: ids 3 and 4, the first two ordinary pieces of
// a sentencepiece vocabulary (0-2 are <unk>, <s>, </s>), where duet's 8000-token tokenizer keeps
// "+" and "-". A caller with another tokenizer passes its own ids.
inline constexpr TokenId kDefaultPrmPlusId = 3;
inline constexpr TokenId kDefaultPrmMinusId = 4;

struct CpuExecutorOptions {
  TokenId prm_plus_id = kDefaultPrmPlusId;  // a Score row returns p(plus) of the two-way softmax
  TokenId prm_minus_id = kDefaultPrmMinusId;
  // Emit a sequence's scripted tokens and scores when its OutputScript says `force`, exactly as
  // the simulator does, so that both backends process identical token streams.
  bool honour_scripts = true;
};

// The logits one batch item produced: one row per position that needed them (the last new token
// for Want::Sample, the score positions for Want::Score, none for Want::Nothing).
struct ItemLogits {
  std::vector<int> positions;
  MatrixRM logits;  // positions.size() x the model's logits_width() (its vocabulary, or 2 with a score head)
};

class CpuExecutor final : public Executor {
 public:
  // `weights` must outlive the executor. The KV pool holds num_blocks blocks of block_size tokens:
  // its own, or `arena` (borrowed; KvLayout::total_elems() floats), the pages of a shared pool.
  CpuExecutor(const LlamaWeights& weights, int num_blocks, int block_size, CpuExecutorOptions options = {},
              std::span<float> arena = {});
  CpuExecutor(const CpuExecutor&) = delete;  // kv_ may point into own_kv_
  CpuExecutor& operator=(const CpuExecutor&) = delete;

  StepResult execute(const Batch& batch) override;

  const ModelSpec& spec() const { return weights_.spec; }
  const CpuExecutorOptions& options() const { return options_; }
  const KvLayout& layout() const { return layout_; }
  // The paged KV pool, [block][layer][K/V][kv_head][slot][head_dim] (KvLayout::offset).
  std::span<const float> kv_pool() const { return kv_; }
  std::span<float> kv_pool() { return kv_; }
  // The logits of the last execute(), one entry per batch item.
  const std::vector<ItemLogits>& last_logits() const { return last_logits_; }

 private:
  // Where each item's new tokens sit among the rows of the step's activation matrix.
  struct RowPlan {
    std::vector<int> first_row;   // per item
    std::vector<int> positions;   // per row: the token's absolute position
    std::vector<TokenId> tokens;  // per row
  };

  void check_weights() const;
  RowPlan plan_rows(const Batch& batch) const;
  MatrixRM embed(const RowPlan& plan) const;
  void attention_block(int layer, const Batch& batch, const RowPlan& plan, MatrixRM& x);
  void mlp_block(int layer, MatrixRM& x) const;
  void rope_rows(const RowPlan& plan, MatrixRM& m, int num_heads) const;
  std::vector<ItemLogits> logits(const Batch& batch, const RowPlan& plan, const MatrixRM& x) const;
  MatrixRM head(const MatrixRM& h) const;
  StepResult outputs(const Batch& batch) const;

  const LlamaWeights& weights_;
  KvLayout layout_;
  CpuExecutorOptions options_;
  std::vector<double> inv_freq_;
  std::vector<float> own_kv_;  // empty when the pool is a borrowed arena
  std::span<float> kv_;
  MatrixRM rope_cos_, rope_sin_;  // per row of the current step, [rows x head_dim/2]
  std::vector<ItemLogits> last_logits_;
};

}  // namespace duet
