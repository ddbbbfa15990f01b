#include "exec/cpu_executor.hpp"

#include <chrono>
#include <stdexcept>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif
#include <string>

#include "core/error.hpp"
#include "core/output_script.hpp"
#include "exec/batch_check.hpp"
#include "exec/wall_clock.hpp"

namespace duet {

namespace {

using ConstMap = Eigen::Map<const MatrixRM>;

// A weight matrix as HF stores it, [out_features, in_features] row-major: y = x W^T.
ConstMap matrix(const HostTensor& t) { return ConstMap(t.data.data(), t.rows(), t.cols()); }

std::span<const float> vec(const HostTensor& t) { return t.data; }

// y += b on every row: a Linear's bias, before RoPE (transformers' Qwen2Attention).
void add_bias(MatrixRM& y, const HostTensor& b) {
  y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(b.data.data(), Eigen::Index(b.data.size()));
}

// RMSNorm of every head of every row in place, one weight vector for all heads: Qwen3's q_norm
// and k_norm, after the projections and before RoPE (transformers' Qwen3Attention).
void head_norm(MatrixRM& y, const HostTensor& w, float eps) {
  const std::size_t d = w.data.size();  // check_weights: head_dim, which divides the row
  if (d == 0 || std::size_t(y.cols()) % d != 0) throw std::logic_error("CpuExecutor: a head norm's width");
  for (Eigen::Index r = 0; r < y.rows(); ++r)
    for (std::size_t c = 0; c + d <= std::size_t(y.cols()); c += d) {
      const std::span<float> head{y.row(r).data() + c, d};
      rms_norm(head, w.data, eps, head);
    }
}

// The LM head: lm_head, or the embedding when tied and the loader left lm_head empty.
const HostTensor& lm_head_of(const LlamaWeights& w) {
  return w.lm_head.data.empty() && w.spec.tie_word_embeddings ? w.embed_tokens : w.lm_head;
}

void expect_shape(const HostTensor& t, std::int64_t rows, std::int64_t cols, const std::string& name) {
  const bool vector = cols == 0;
  const bool ok = vector ? t.shape.size() == 1 && t.shape[0] == rows
                         : t.shape.size() == 2 && t.shape[0] == rows && t.shape[1] == cols;
  if (!ok || std::int64_t(t.data.size()) != rows * (vector ? 1 : cols))
    throw Error("CpuExecutor: weight " + name + " has the wrong shape or size (expected [" +
                std::to_string(rows) + (vector ? "" : ", " + std::to_string(cols)) + "])");
}

// Flush-to-zero and denormals-are-zero for the scope of a step, as GPUs do in their fast paths:
// a softmax over thousands of keys leaves many exp() results below FLT_MIN, and x86 handles such
// denormals in microcode at ~100x the cost, which made a step's time depend on the KV's values
// rather than the batch's shape (a 4-token chunk at 2,048 cached tokens ran slower than an 8-token
// one). Values below 1.2e-38 change nothing a float32 reference is compared on.
class FlushDenormals {
 public:
#if defined(__SSE__)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }  // FTZ (bit 15) | DAZ (bit 6)
  ~FlushDenormals() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#endif
};

}  // namespace

CpuExecutor::CpuExecutor(const LlamaWeights& weights, int num_blocks, int block_size,
                         CpuExecutorOptions options, std::span<float> arena)
    : weights_(weights), layout_(KvLayout::of(weights.spec, num_blocks, block_size)), options_(options) {
  weights.spec.validate();
  if (num_blocks <= 0 || block_size <= 0)
    throw Error("CpuExecutor: num_blocks and block_size must be positive, got " + std::to_string(num_blocks) +
                " and " + std::to_string(block_size));
  check_prm_label_ids(weights.spec, options.prm_plus_id, options.prm_minus_id, "CpuExecutor");
  check_weights();
  inv_freq_ = rope_inv_freq(weights.spec);
  if (arena.empty()) {
    own_kv_.assign(std::size_t(layout_.total_elems()), 0.0f);
    kv_ = own_kv_;
  } else if (std::int64_t(arena.size()) != layout_.total_elems()) {
    throw Error("CpuExecutor: a shared KV arena of " + std::to_string(arena.size()) + " floats for " +
                std::to_string(num_blocks) + " pages of " + std::to_string(layout_.page_elems()) +
                " floats (" + weights.spec.name + ", block_size " + std::to_string(block_size) + ")");
  } else {
    kv_ = arena;
  }
}

void CpuExecutor::check_weights() const {
  const ModelSpec& m = weights_.spec;
  const std::int64_t h = m.hidden_size, q = std::int64_t(m.num_heads) * m.head_dim,
                     kv = std::int64_t(m.num_kv_heads) * m.head_dim, f = m.intermediate_size;
  if (std::int64_t(weights_.layers.size()) != m.num_layers)
    throw Error("CpuExecutor: " + std::to_string(weights_.layers.size()) +
                " layers of weights for a model of " + std::to_string(m.num_layers));
  expect_shape(weights_.embed_tokens, m.vocab_size, h, "model.embed_tokens.weight");
  expect_shape(weights_.final_norm, h, 0, "model.norm.weight");
  if (m.score_head == ScoreHead::Classifier) {
    expect_shape(weights_.score_hidden, h, h, "score.0.weight");
    expect_shape(weights_.score_hidden_bias, h, 0, "score.0.bias");
    expect_shape(weights_.score_out, 2, h, "score.2.weight");
    expect_shape(weights_.score_out_bias, 2, 0, "score.2.bias");
  } else if (m.score_head == ScoreHead::Value) {
    expect_shape(weights_.score_out, 1, h, "v_head.summary.weight");
    expect_shape(weights_.score_out_bias, 1, 0, "v_head.summary.bias");
  } else {
    expect_shape(lm_head_of(weights_), m.vocab_size, h, "lm_head.weight");
  }
  for (std::size_t i = 0; i < weights_.layers.size(); ++i) {
    const LlamaLayerWeights& l = weights_.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    expect_shape(l.input_norm, h, 0, p + "input_layernorm.weight");
    expect_shape(l.q_proj, q, h, p + "self_attn.q_proj.weight");
    expect_shape(l.k_proj, kv, h, p + "self_attn.k_proj.weight");
    expect_shape(l.v_proj, kv, h, p + "self_attn.v_proj.weight");
    if (m.qkv_bias) {
      expect_shape(l.q_bias, q, 0, p + "self_attn.q_proj.bias");
      expect_shape(l.k_bias, kv, 0, p + "self_attn.k_proj.bias");
      expect_shape(l.v_bias, kv, 0, p + "self_attn.v_proj.bias");
    }
    if (m.qk_norm) {
      expect_shape(l.q_norm, m.head_dim, 0, p + "self_attn.q_norm.weight");
      expect_shape(l.k_norm, m.head_dim, 0, p + "self_attn.k_norm.weight");
    }
    expect_shape(l.o_proj, h, q, p + "self_attn.o_proj.weight");
    expect_shape(l.post_norm, h, 0, p + "post_attention_layernorm.weight");
    expect_shape(l.gate_proj, f, h, p + "mlp.gate_proj.weight");
    expect_shape(l.up_proj, f, h, p + "mlp.up_proj.weight");
    expect_shape(l.down_proj, h, f, p + "mlp.down_proj.weight");
  }
}

StepResult CpuExecutor::execute(const Batch& batch) {
  const auto start = std::chrono::steady_clock::now();
  const FlushDenormals flush;
  check_batch(batch, layout_, weights_.spec, "CpuExecutor");
  // Copy-on-write first: a fork's private copy of a shared partial block must hold the shared
  // tokens before the fork writes its own after them.
  for (const BlockCopy& c : batch.copies) kv_copy_block(kv_, layout_, c.src, c.dst);

  const RowPlan plan = plan_rows(batch);
  MatrixRM x = embed(plan);
  rope_cos_.resize(Eigen::Index(plan.positions.size()), Eigen::Index(inv_freq_.size()));
  rope_sin_.resize(rope_cos_.rows(), rope_cos_.cols());
  for (std::size_t r = 0; r < plan.positions.size(); ++r)
    rope_cos_sin(plan.positions[r], inv_freq_, {rope_cos_.row(Eigen::Index(r)).data(), inv_freq_.size()},
                 {rope_sin_.row(Eigen::Index(r)).data(), inv_freq_.size()});
  for (int layer = 0; layer < weights_.spec.num_layers; ++layer) {
    attention_block(layer, batch, plan, x);
    mlp_block(layer, x);
  }
  last_logits_ = logits(batch, plan, x);

  StepResult result = outputs(batch);
  result.duration_s = seconds_since(start);
  return result;
}

CpuExecutor::RowPlan CpuExecutor::plan_rows(const Batch& batch) const {
  RowPlan plan;
  for (const BatchItem& it : batch.items) {
    plan.first_row.push_back(int(plan.positions.size()));
    for (int p = it.context_len; p < it.context_len + it.num_new_tokens; ++p) {
      plan.positions.push_back(p);
      plan.tokens.push_back(it.seq->tokens[std::size_t(p)]);
    }
  }
  return plan;
}

MatrixRM CpuExecutor::embed(const RowPlan& plan) const {
  const ConstMap table = matrix(weights_.embed_tokens);
  MatrixRM x(Eigen::Index(plan.tokens.size()), table.cols());
  for (std::size_t r = 0; r < plan.tokens.size(); ++r) x.row(Eigen::Index(r)) = table.row(plan.tokens[r]);
  return x;
}

void CpuExecutor::rope_rows(const RowPlan& plan, MatrixRM& m, int num_heads) const {
  const std::size_t d = std::size_t(layout_.head_dim), half = d / 2;
  for (std::size_t r = 0; r < plan.positions.size(); ++r)
    for (int h = 0; h < num_heads; ++h)
      apply_rope({m.row(Eigen::Index(r)).data() + h * d, d}, {rope_cos_.row(Eigen::Index(r)).data(), half},
                 {rope_sin_.row(Eigen::Index(r)).data(), half});
}

void CpuExecutor::attention_block(int layer, const Batch& batch, const RowPlan& plan, MatrixRM& x) {
  const ModelSpec& m = weights_.spec;
  const LlamaLayerWeights& w = weights_.layers[std::size_t(layer)];
  MatrixRM h;
  rms_norm_rows(x, vec(w.input_norm), float(m.rms_norm_eps), h);
  MatrixRM q = h * matrix(w.q_proj).transpose();
  MatrixRM k = h * matrix(w.k_proj).transpose();
  MatrixRM v = h * matrix(w.v_proj).transpose();
  if (m.qkv_bias) {
    add_bias(q, w.q_bias);
    add_bias(k, w.k_bias);
    add_bias(v, w.v_bias);
  }
  if (m.qk_norm) {
    head_norm(q, w.q_norm, float(m.rms_norm_eps));
    head_norm(k, w.k_norm, float(m.rms_norm_eps));
  }
  rope_rows(plan, q, m.num_heads);
  rope_rows(plan, k, m.num_kv_heads);

  // Every new K/V of this layer goes in before any query reads: a sequence admitted in this step
  // may hit a prefix-cached block that another item of this same batch is filling now.
  const std::size_t kv_width = std::size_t(k.cols());
  for (std::size_t i = 0; i < batch.items.size(); ++i)
    for (int r = plan.first_row[i]; r < plan.first_row[i] + batch.items[i].num_new_tokens; ++r)
      kv_write(kv_, layout_, layer, batch.items[i].seq->kv.blocks, plan.positions[std::size_t(r)],
               {k.row(r).data(), kv_width}, {v.row(r).data(), kv_width});

  MatrixRM attn(x.rows(), q.cols());
  for (std::size_t i = 0; i < batch.items.size(); ++i) {
    const BatchItem& it = batch.items[i];
    attn.middleRows(plan.first_row[i], it.num_new_tokens) =
        paged_attention(kv_, layout_, layer, it.seq->kv.blocks,
                        q.middleRows(plan.first_row[i], it.num_new_tokens), it.context_len, m.num_heads);
  }
  x.noalias() += attn * matrix(w.o_proj).transpose();
}

void CpuExecutor::mlp_block(int layer, MatrixRM& x) const {
  const LlamaLayerWeights& w = weights_.layers[std::size_t(layer)];
  MatrixRM h;
  rms_norm_rows(x, vec(w.post_norm), float(weights_.spec.rms_norm_eps), h);
  MatrixRM gate = h * matrix(w.gate_proj).transpose();
  const MatrixRM up = h * matrix(w.up_proj).transpose();
  const std::size_t n = std::size_t(gate.size());
  silu_mul({gate.data(), n}, {up.data(), n}, {gate.data(), n});
  x.noalias() += gate * matrix(w.down_proj).transpose();
}

// The LM head runs only on the rows whose logits are used: a prefill chunk of n tokens that
// wants one sample pays for one row, not n.
std::vector<ItemLogits> CpuExecutor::logits(const Batch& batch, const RowPlan& plan,
                                            const MatrixRM& x) const {
  std::vector<ItemLogits> out(batch.items.size());
  std::vector<int> rows;
  for (std::size_t i = 0; i < batch.items.size(); ++i) {
    const BatchItem& it = batch.items[i];
    if (it.want == Want::Sample) out[i].positions = {it.context_len + it.num_new_tokens - 1};
    if (it.want == Want::Score) {
      const auto pos = positions_to_score(it);
      out[i].positions.assign(pos.begin(), pos.end());
    }
    for (int p : out[i].positions) rows.push_back(plan.first_row[i] + p - it.context_len);
  }
  MatrixRM h(Eigen::Index(rows.size()), x.cols());
  for (std::size_t r = 0; r < rows.size(); ++r) h.row(Eigen::Index(r)) = x.row(rows[r]);
  rms_norm_rows(h, vec(weights_.final_norm), float(weights_.spec.rms_norm_eps), h);
  const MatrixRM all = head(h);
  Eigen::Index next = 0;
  for (ItemLogits& item : out) {
    const Eigen::Index n = Eigen::Index(item.positions.size());
    item.logits = all.middleRows(next, n);
    next += n;
  }
  return out;
}

// The output head on normed hidden rows: the LM head's logits, or the score head's two columns: a
// classifier's labels (Linear, ReLU, Linear, each with its bias: Qwen2ForProcessRewardModel's
// `score`), or a value head's value (one Linear with its bias) beside a constant 0, whose two-way
// softmax is the value's sigmoid.
MatrixRM CpuExecutor::head(const MatrixRM& h) const {
  const ScoreHead kind = weights_.spec.score_head;
  if (kind == ScoreHead::None) return h * matrix(lm_head_of(weights_)).transpose();
  MatrixRM in = h;
  if (kind == ScoreHead::Classifier) {
    in = h * matrix(weights_.score_hidden).transpose();
    add_bias(in, weights_.score_hidden_bias);
    in = in.cwiseMax(0.0f);
  }
  MatrixRM labels = in * matrix(weights_.score_out).transpose();
  add_bias(labels, weights_.score_out_bias);
  MatrixRM out = MatrixRM::Zero(h.rows(), weights_.spec.logits_width());
  out.leftCols(labels.cols()) = labels;
  return out;
}

// Tokens and scores from the step's logits (an item's row 0 is its sampled row or its first
// scored one), or from the sequence's script when it is forced.
StepResult CpuExecutor::outputs(const Batch& batch) const {
  const std::size_t width = std::size_t(weights_.spec.logits_width());
  auto row = [&](std::size_t item, std::size_t k) -> std::span<const float> {
    return {last_logits_[item].logits.row(Eigen::Index(k)).data(), width};
  };
  return step_outputs(
      batch, options_.honour_scripts, weights_.spec.vocab_size,
      [&](std::size_t i) {
        const Sequence& s = *batch.items[i].seq;
        return sample_token(row(i, 0), s.sampling, s.num_output_tokens());
      },
      [&](std::size_t i, std::size_t k) {
        return prm_score(row(i, k), options_.prm_plus_id, options_.prm_minus_id);
      });
}

}  // namespace duet
