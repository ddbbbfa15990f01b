#pragma once
// A roofline cost model: every op class takes max(FLOPs / peak compute, bytes / peak bandwidth),
// plus kernel launches and a per-step CPU overhead. It needs no measurement and is optimistic by
// construction (it assumes peak figures); the calibrated model corrects it with measured steps.
#include "core/executor.hpp"
#include "sim/cost_model.hpp"

namespace duet {

// max(FLOPs / peak compute, bytes / peak bandwidth) on `gpu`, at the given shares of its peaks.
double roofline_time(const GpuSpec& gpu, double flops, double bytes, double flops_efficiency = 1.0,
                     double bandwidth_efficiency = 1.0);

struct RooflineParams {
  double flops_efficiency = 1.0;      // achieved share of peak bf16 FLOP/s
  double bandwidth_efficiency = 1.0;  // achieved share of peak HBM bandwidth
  // Kernels per decoder layer in an eager forward pass: norm, QKV GEMM, RoPE, KV write,
  // attention, O GEMM, residual norm, gate/up GEMM, SiLU*mul, down GEMM.
  int kernels_per_layer = 10;
  // Decode-only batches of up to kMaxCudaGraphBatch sequences replay a CUDA graph, padded to its
  // size (cuda_graph_batch): one launch, and a small device-side gap per kernel. Larger ones run
  // eagerly, as in the CUDA engine.
  bool cuda_graphs_for_decode = true;
  double graph_kernel_gap_s = 1.0e-6;
  // Host time per step: scheduling, batch preparation, sampling bookkeeping. Assumed values for a
  // C++ engine (vLLM's Python scheduler costs several times more); calibration replaces them.
  double cpu_step_s = 30e-6;
  double cpu_per_seq_s = 0.3e-6;
};

// The graph size a step replays (one launch), or 0 where it launches kernel by kernel.
inline int graph_batch(const RooflineParams& p, const BatchShape& s) {
  return p.cuda_graphs_for_decode ? cuda_graph_batch(s) : 0;
}
// The shape whose kernels run: a graph step's, padded to the graph's size.
inline BatchShape executed_shape(const RooflineParams& p, const BatchShape& s) {
  return p.cuda_graphs_for_decode ? cuda_graph_shape(s) : s;
}

struct RooflineBreakdown {
  std::array<double, 4> layer_gemm_s{};  // one layer's QKV, O, gate/up and down GEMMs
  double gemm_s = 0;                     // every layer's
  double lm_head_s = 0;
  double decode_attention_s = 0;
  double prefill_attention_s = 0;
  double launch_s = 0;
  double cpu_s = 0;
  double total() const {
    return gemm_s + lm_head_s + decode_attention_s + prefill_attention_s + launch_s + cpu_s;
  }
};

class RooflineCostModel final : public CostModel {
 public:
  RooflineCostModel(const GpuSpec& gpu, const ModelSpec& model, RooflineParams params = {});
  StepCost step_cost(const BatchShape& shape) const override {
    const RooflineBreakdown b = breakdown(shape);
    return {b.total() - b.cpu_s, b.cpu_s};
  }
  RooflineBreakdown breakdown(const BatchShape& shape) const;
  // The elementwise kernels are zero here: the roofline prices only GEMMs and attention.
  StepBreakdown by_operator(const BatchShape& shape) const override;
  std::string describe() const override;

 private:
  double op_time(double flops, double bytes) const;
  // One layer's GEMMs (QKV, O, gate/up, down) for `tokens` rows.
  std::array<double, 4> layer_gemms(double tokens) const;

  GpuSpec gpu_;
  ModelSpec model_;
  RooflineParams p_;
};

}  // namespace duet
