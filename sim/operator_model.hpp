#pragma once
// The operator-level cost model: a step is the sum of its kernels, each priced from its shape.
//
//   kernel time = fixed_s + roofline_s * slowdown(shape)                    (sim/operator_curve.hpp)
//     roofline_s  max(FLOPs / peak bf16 FLOP/s, bytes / peak HBM bandwidth) of that kernel
//     slowdown    exp of a surface that is multilinear in log2 of the shape, one knot per octave:
//                   GEMM               (m, n, k)
//                   decode attention   (sequences x KV heads, KV heads, context, query heads per KV
//                                       head, head_dim)
//                   prefill attention  (sequences x heads, query tokens per sequence, head_dim)
//     fixed_s     one per class: the kernel's floor under CUDA-graph replay (2.2-2.6 us for a
//                 GEMM, 7.5-11 us for attention on H100/H200/A100)
//
// Both are fitted per device to NVIDIA AIConfigurator's measured bf16 tables (`duet fit-ops`).
// Why this form: on those tables the roofline alone is off by 50-59% (GEMMs) and 70-84%
// (attention), because small kernels have a floor and a kernel's efficiency varies with its shape;
// one efficiency plus a floor per m-bucket (a*roofline + c) still leaves 12-15% on held-out GEMM
// shapes, and linear sums of FLOP and byte terms fit negative costs. The surface leaves 4-7% on
// held-out (n, k) shapes and 4-10% on held-out head configurations (bench/results/op-cost.md).
//
// The elementwise kernels (RMSNorm x2 fused with the residual adds, RoPE, SiLU*mul, KV write per layer; the
// embedding, final norm and sampling per step) are not in the tables. They are priced as
// fixed_s + bytes / (HBM bandwidth * efficiency), with the GEMM curve's floor and the efficiency
// of a large matrix-vector product (m = 1, n = k = 4096), both from the same fit: an assumption,
// stated in every prior. A step that is not decode-only runs eagerly, so each kernel takes at
// least the host's launch time; a decode-only step of up to kMaxCudaGraphBatch sequences replays a
// CUDA graph (one launch) and its kernels run the graph's padded rows, as in the roofline and the
// CUDA engine, but for decode attention, priced at the real rows (a padding row reads one key). Host time per
// step and per sequence is the roofline's (sim/roofline.hpp).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/gpu_spec.hpp"
#include "core/model_spec.hpp"
#include "sim/operator_curve.hpp"
#include "sim/roofline.hpp"

namespace duet {

enum class OperatorClass { gemm, decode_attention, prefill_attention };
inline constexpr std::array<OperatorClass, 3> kOperatorClasses = {
    OperatorClass::gemm, OperatorClass::decode_attention, OperatorClass::prefill_attention};
const char* operator_class_name(OperatorClass c);  // "gemm", "decode_attention", "prefill_attention"
// The axes a prior's curve for that class has (names and knots), in the order points give coordinates.
std::vector<CurveAxis> operator_axes(OperatorClass c);

// A kernel's shape as its curve's coordinates, and its roofline time on `gpu`.
struct OperatorPoint {
  CurveCoords coords{};
  double roofline_s = 0;
};
// m rows times a (k -> n) weight, bf16.
OperatorPoint gemm_point(const GpuSpec& gpu, double m, double n, double k);
// `seqs` single-token queries, each attending to `context` keys (its own new token included).
OperatorPoint decode_attention_point(const GpuSpec& gpu, double seqs, double context, double heads,
                                     double kv_heads, double head_dim);
// `seqs` chunks of `query_len` new tokens each; `keys` causal (query, key) pairs and `cached`
// cached-context tokens, both summed over the chunks.
OperatorPoint prefill_attention_point(const GpuSpec& gpu, double seqs, double query_len, double keys,
                                      double cached, double heads, double kv_heads, double head_dim);
// The same chunks on the decode curve: each KV head's `query_len` x (heads / kv_heads) query rows
// read the chunk's `context` cached tokens and its own, in tiles of at most `max_rows` rows, each
// tile reading them again (FlashAttention packs a chunk's rows and its query group into tiles, as
// it packs a decode's group).
OperatorPoint chunk_on_context_point(const GpuSpec& gpu, double seqs, double query_len, double context,
                                     double keys, double heads, double kv_heads, double head_dim,
                                     double max_rows);

// What a prior covers: the kernels its tables measured.
struct PriorCoverage {
  std::string dtype = "bf16";
  std::string architecture = "dense decoder with grouped-query attention (Llama family)";
  std::vector<int> head_dims;  // the attention tables' head dimensions
};

struct OperatorPrior {
  std::string device;    // the device key (sim/profiles.hpp): "h100-sxm"
  std::string gpu_name;  // the GpuSpec it was fitted with
  std::string created_utc;
  std::string git_revision;
  std::string source;  // the tables it was fitted on, and where they come from
  PriorCoverage covers;
  OperatorCurve gemm, decode_attention, prefill_attention;
  double elementwise_fixed_s = 0;
  double elementwise_bandwidth_efficiency = 1;
  std::string held_out_json;     // the fit's held-out errors by class, as JSON text (for the record)
  std::string file_fingerprint;  // of the file it was read from (core/mix.hpp), "" when made in memory

  const OperatorCurve& curve(OperatorClass c) const;
  OperatorCurve& curve(OperatorClass c);
};

// The prior file's "format" field; other versions of the family are refused with this one named.
inline constexpr std::string_view kOperatorPriorFormat = "duet-operator-prior/1";

void save_prior(const OperatorPrior& prior, const std::string& path);
OperatorPrior load_prior(const std::string& path);
OperatorPrior parse_prior(std::string_view text, const std::string& path);  // `path` names the text in errors
// Throws when the prior was fitted for another device, or for kernels of another kind (dtype)
// than the model's. A head_dim the attention tables lack is priced, and flagged, like any other
// shape beyond them.
void check_prior(const OperatorPrior& prior, const ModelSpec& model, const std::string& device,
                 const std::string& origin);

class OperatorCostModel final : public CostModel {
 public:
  // `launch_and_host`: the CUDA-graph switch, launch and host-time assumptions, shared with the roofline.
  OperatorCostModel(const GpuSpec& gpu, const ModelSpec& model, OperatorPrior prior,
                    RooflineParams launch_and_host = {});
  StepCost step_cost(const BatchShape& shape) const override;
  StepBreakdown by_operator(const BatchShape& shape) const override;
  std::string describe() const override;
  std::string extrapolation_report() const override;
  const OperatorPrior& prior() const { return prior_; }

 private:
  double kernel(OperatorClass c, const OperatorPoint& p, bool eager, StepBreakdown& b,
                const char* what) const;
  double elementwise(double bytes, bool eager) const;
  double gemm(double rows, double n, double k, bool eager, StepBreakdown& b, const char* what) const;
  double prefill_attention(const BatchShape& s, bool eager, StepBreakdown& b) const;

  GpuSpec gpu_;
  ModelSpec model_;
  OperatorPrior prior_;
  RooflineParams p_;
  bool head_dim_measured_ = false;
  struct GemmMemo {  // the layer GEMMs' times at the last token count priced within the tables
    double tokens = -1;
    bool eager = false;
    std::array<double, 4> s{};  // qkv_proj, o_proj, gate_up_proj, down_proj
  };
  static_assert(kDownProj == kQkvProj + 3, "the layer GEMMs are the first four operators");
  mutable GemmMemo gemm_memo_;
  mutable std::int64_t steps_ = 0, steps_outside_ = 0;
  mutable std::string first_outside_;
};

}  // namespace duet
