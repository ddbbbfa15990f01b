#include "sim/roofline.hpp"

#include <gtest/gtest.h>

namespace duet {
namespace {

BatchShape decode(int seqs, std::int64_t context_each) {
  BatchShape s;
  s.decode_tokens = s.decode_seqs = s.logit_rows = seqs;
  s.decode_context_tokens = std::int64_t(seqs) * context_each;
  return s;
}

BatchShape prefill(int tokens, std::int64_t context_before = 0) {
  BatchShape s;
  s.prefill_tokens = tokens;
  s.prefill_seqs = 1;
  s.logit_rows = 1;
  s.prefill_context_tokens = context_before;
  const double n = tokens;
  s.prefill_attention_keys = n * double(context_before) + n * (n + 1) / 2;
  return s;
}

const GpuSpec kH100 = gpu_by_name("h100");
const ModelSpec k8B = model_by_name("llama-3.1-8b");

TEST(Roofline, SmallDecodeIsBoundByReadingTheWeights) {
  RooflineCostModel m(kH100, k8B);
  const double weights_s = double(k8B.weight_bytes()) / kH100.hbm_bandwidth;  // ~4.8 ms
  const double t = m.step_time(decode(1, 100));
  EXPECT_GT(t, 0.95 * weights_s);
  EXPECT_LT(t, 1.05 * weights_s);
}

TEST(Roofline, DecodeAttentionReadsEverySequencesKv) {
  RooflineCostModel m(kH100, k8B);
  const auto a = m.breakdown(decode(64, 1000));
  const auto b = m.breakdown(decode(64, 2000));
  const double extra_bytes = 64.0 * 1000 * double(k8B.kv_bytes_per_token());
  EXPECT_NEAR(b.decode_attention_s - a.decode_attention_s, extra_bytes / kH100.hbm_bandwidth, 1e-9);
  EXPECT_DOUBLE_EQ(a.gemm_s, b.gemm_s);
}

TEST(Roofline, LargePrefillIsComputeBound) {
  RooflineCostModel m(kH100, k8B);
  const auto b = m.breakdown(prefill(8192));
  const double layer_flops = 8192.0 * (k8B.linear_flops_per_token() - 2.0 * k8B.vocab_size * k8B.hidden_size);
  EXPECT_NEAR(b.gemm_s, layer_flops / kH100.bf16_flops, 0.01 * b.gemm_s);
  EXPECT_GT(b.gemm_s, 0.1);
}

TEST(Roofline, PrefillAttentionGrowsWithChunkTimesContext) {
  RooflineCostModel m(kH100, k8B);
  const double t0 = m.breakdown(prefill(2048, 0)).prefill_attention_s;
  const double t1 = m.breakdown(prefill(2048, 8192)).prefill_attention_s;
  const double extra_keys = 2048.0 * 8192;
  const double per_key = 4.0 * k8B.num_layers * k8B.num_heads * k8B.head_dim / kH100.bf16_flops;
  EXPECT_NEAR(t1 - t0, extra_keys * per_key, 1e-3 * (t1 - t0));
}

TEST(Roofline, LaunchesAndCpuOverheadAreCounted) {
  RooflineParams p;
  p.cpu_step_s = 1e-3;
  p.cpu_per_seq_s = 1e-5;
  RooflineCostModel m(kH100, k8B, p);
  const auto d = m.breakdown(decode(10, 10));
  EXPECT_DOUBLE_EQ(d.cpu_s, 1e-3 + 10 * 1e-5);
  const auto pf = m.breakdown(prefill(16));
  EXPECT_GT(pf.launch_s, d.launch_s) << "eager prefill launches every kernel; decode replays a graph";
  EXPECT_NEAR(pf.launch_s, (10.0 * k8B.num_layers + 4) * kH100.kernel_launch_s, 1e-12);
}

// The CUDA engine copies a step's copy-on-write blocks in one kernel, whatever their count.
TEST(Roofline, AStepsCopiesAreOneLaunch) {
  RooflineCostModel m(kH100, k8B);
  BatchShape s = decode(8, 256);
  const double none = m.breakdown(s).launch_s;
  s.block_size = 16;
  for (int copies : {1, 32}) {
    s.copies = copies;
    EXPECT_NEAR(m.breakdown(s).launch_s - none, kH100.kernel_launch_s, 1e-15) << copies << " copies";
  }
}

// As the CUDA engine: decode-only batches up to its largest graph bucket replay a graph, larger
// ones launch every kernel.
TEST(Roofline, DecodeBeyondTheLargestGraphLaunchesEveryKernel) {
  RooflineCostModel m(kH100, k8B);
  const double kernels = 10.0 * k8B.num_layers + 4;
  EXPECT_NEAR(m.breakdown(decode(kMaxCudaGraphBatch, 100)).launch_s,
              kH100.kernel_launch_s + kernels * RooflineParams{}.graph_kernel_gap_s, 1e-12);
  EXPECT_NEAR(m.breakdown(decode(kMaxCudaGraphBatch + 1, 100)).launch_s, kernels * kH100.kernel_launch_s,
              1e-12);
}

// A graph step's kernels run its padded rows (the CUDA engine's write_graph_padding): 129
// sequences cost 256 rows of GEMMs and logits; the host's work is the 129 items'.
TEST(Roofline, AGraphStepPricesItsPaddedRows) {
  RooflineCostModel m(kH100, k8B);
  BatchShape n129 = decode(129, 100);
  const RooflineBreakdown b = m.breakdown(n129);
  BatchShape n256 = decode(256, 0);
  n256.decode_context_tokens = n129.decode_context_tokens;
  const RooflineBreakdown full = m.breakdown(n256);
  EXPECT_DOUBLE_EQ(b.gemm_s, full.gemm_s);
  EXPECT_DOUBLE_EQ(b.lm_head_s, full.lm_head_s);
  EXPECT_LT(b.cpu_s, full.cpu_s);
  EXPECT_GT(b.lm_head_s, m.breakdown(decode(128, 100)).lm_head_s);
  RooflineCostModel eager(kH100, k8B, RooflineParams{.cuda_graphs_for_decode = false});
  EXPECT_LT(eager.breakdown(n129).lm_head_s, b.lm_head_s) << "without graphs, nothing is padded";
}

TEST(Roofline, LogitsOnlyForRowsThatNeedThem) {
  RooflineCostModel m(kH100, k8B);
  BatchShape chunk = prefill(4096);
  chunk.logit_rows = 0;
  EXPECT_DOUBLE_EQ(m.breakdown(chunk).lm_head_s, 0.0);
  EXPECT_GT(m.breakdown(prefill(4096)).lm_head_s, 0.0);
}

TEST(Roofline, EfficiencyFactorsSlowItDown) {
  RooflineCostModel peak(kH100, k8B);
  RooflineCostModel real(kH100, k8B, RooflineParams{.flops_efficiency = 0.5, .bandwidth_efficiency = 0.5});
  EXPECT_NEAR(real.breakdown(decode(1, 10)).gemm_s, 2 * peak.breakdown(decode(1, 10)).gemm_s, 1e-12);
}

TEST(Roofline, FasterGpuIsFaster) {
  const auto shape = decode(32, 1000);
  EXPECT_LT(RooflineCostModel(gpu_by_name("h200"), k8B).step_time(shape),
            RooflineCostModel(kH100, k8B).step_time(shape));
  EXPECT_LT(RooflineCostModel(kH100, k8B).step_time(shape),
            RooflineCostModel(gpu_by_name("a100"), k8B).step_time(shape));
}

}  // namespace
}  // namespace duet
