#include "sim/roofline.hpp"

#include <algorithm>
#include <cstdio>

namespace duet {

RooflineCostModel::RooflineCostModel(const GpuSpec& gpu, const ModelSpec& model, RooflineParams params)
    : gpu_(gpu), model_(model), p_(params) {
  model_.validate();
}

double roofline_time(const GpuSpec& gpu, double flops, double bytes, double flops_efficiency,
                     double bandwidth_efficiency) {
  return std::max(flops / (gpu.bf16_flops * flops_efficiency),
                  bytes / (gpu.hbm_bandwidth * bandwidth_efficiency));
}

double RooflineCostModel::op_time(double flops, double bytes) const {
  return roofline_time(gpu_, flops, bytes, p_.flops_efficiency, p_.bandwidth_efficiency);
}

std::array<double, 4> RooflineCostModel::layer_gemms(double tokens) const {
  const ModelSpec& m = model_;
  const double w = dtype_bytes(m.dtype);
  const double h = m.hidden_size;
  const double q = double(m.num_heads) * m.head_dim;
  const double kv = double(m.num_kv_heads) * m.head_dim;
  const double inter = m.intermediate_size;
  // The GEMMs of one layer as (input width, output width): weights are read once per step,
  // activations once per token.
  const double gemms[][2] = {{h, q + 2 * kv}, {q, h}, {h, 2 * inter}, {inter, h}};
  std::array<double, 4> t{};
  for (int i = 0; i < 4; ++i)
    t[i] = op_time(2.0 * tokens * gemms[i][0] * gemms[i][1],
                   w * (gemms[i][0] * gemms[i][1] + tokens * (gemms[i][0] + gemms[i][1])));
  return t;
}

RooflineBreakdown RooflineCostModel::breakdown(const BatchShape& logical) const {
  RooflineBreakdown b;
  const BatchShape s = executed_shape(p_, logical);
  const ModelSpec& m = model_;
  const double w = dtype_bytes(m.dtype);
  const double tokens = double(s.prefill_tokens + s.decode_tokens);
  const double h = m.hidden_size;
  b.layer_gemm_s = layer_gemms(tokens);
  for (double t : b.layer_gemm_s) b.gemm_s += t * m.num_layers;
  // Logits only for the rows that need them, written in fp32.
  if (s.logit_rows > 0) {
    const double rows = s.logit_rows;
    // A score head also writes and reads its hidden layer's activations.
    const double hidden_act = m.score_head == ScoreHead::Classifier ? 2.0 * w * rows * h : 0.0;
    b.lm_head_s = op_time(rows * m.head_flops_per_token(),
                          w * double(m.head_weights()) + hidden_act + 4.0 * rows * m.logits_width());
  }
  const double attn_flops_per_key = 4.0 * m.num_layers * m.num_heads * m.head_dim;
  const double kv_token_bytes = double(m.kv_bytes_per_token());
  // Decode attention reads each sequence's whole KV once (GQA: once per KV head group).
  b.decode_attention_s = op_time(attn_flops_per_key * double(s.decode_context_tokens + s.decode_seqs),
                                 kv_token_bytes * double(s.decode_context_tokens + s.decode_seqs));
  // Prefill attention: FLOPs grow with chunk x context; the cached context's KV is read once.
  b.prefill_attention_s = op_time(attn_flops_per_key * s.prefill_attention_keys,
                                  kv_token_bytes * double(s.prefill_context_tokens + s.prefill_tokens));
  const double kernels = double(p_.kernels_per_layer) * m.num_layers + 4.0;  // + embed, norm, head, sample
  const bool graph = graph_batch(p_, s) > 0;
  b.launch_s =
      graph ? gpu_.kernel_launch_s + kernels * p_.graph_kernel_gap_s : kernels * gpu_.kernel_launch_s;
  if (s.copies > 0) b.launch_s += gpu_.kernel_launch_s;  // one copy kernel for the step's copies
  b.cpu_s = p_.cpu_step_s + p_.cpu_per_seq_s * double(logical.prefill_seqs + logical.decode_seqs);
  return b;
}

StepBreakdown RooflineCostModel::by_operator(const BatchShape& s) const {
  const RooflineBreakdown r = breakdown(s);
  StepBreakdown b;
  b.layers = model_.num_layers;
  std::copy(r.layer_gemm_s.begin(), r.layer_gemm_s.end(), b.per_layer_s.begin());
  b.per_layer_s[kAttention] = (r.decode_attention_s + r.prefill_attention_s) / model_.num_layers;
  b.lm_head_s = r.lm_head_s;
  b.other_s = r.launch_s;
  b.host_s = r.cpu_s;
  return b;
}

std::string RooflineCostModel::describe() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "roofline(%s on %s, flops x%.2f, bandwidth x%.2f)", model_.name.c_str(),
                gpu_.name.c_str(), p_.flops_efficiency, p_.bandwidth_efficiency);
  return buf;
}

}  // namespace duet
