#pragma once
// How long a batch takes. One interface, three implementations: a roofline from the GPU's and the
// model's public figures (no measurement needed), an operator-level model whose per-kernel
// efficiencies are fitted to public measured kernel tables (sim/operator_model.hpp), and a profile
// fitted to steps that a real engine measured on this device (sim/calibrated.hpp). All three split
// a step into the device's share and the host's (scheduling, batch preparation, postprocessing),
// because the host's share is what simulators that leave it out get wrong (Vidur's and others'
// TTFT errors of 17-56% at low load).
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "core/batch.hpp"
#include "core/gpu_spec.hpp"
#include "core/model_spec.hpp"

namespace duet {

struct StepCost {
  double device_s = 0;  // the forward pass: kernels, or the CPU engine's arithmetic
  double host_s = 0;    // the engine's own work around it: schedule, prepare, postprocess
  double total() const { return device_s + host_s; }
};

// The kernels of one decoder layer (`duet cost`'s keys). `norm` is both RMSNorms, each fused with
// the residual add before it, as the CUDA engine runs them (kernels::add_rmsnorm).
inline constexpr std::array<const char*, 9> kLayerOperators = {
    "qkv_proj", "o_proj", "gate_up_proj", "down_proj", "attention", "norm", "rope", "act", "kv_write"};
enum LayerOperator : std::size_t {
  kQkvProj,
  kOProj,
  kGateUpProj,
  kDownProj,
  kAttention,
  kNorm,
  kRope,
  kAct,
  kKvWrite
};

// A step by operator. step_s() = layers * sum(per_layer_s) + lm_head_s + sampling_s + other_s +
// unattributed_s + host_s, and equals the model's step_time().
struct StepBreakdown {
  int layers = 0;
  std::array<double, kLayerOperators.size()> per_layer_s{};  // one layer's seconds per operator
  double lm_head_s = 0;
  double sampling_s = 0;
  double other_s = 0;         // embedding, final norm, block copies, launch and graph overheads
  double unattributed_s = 0;  // device time that a step-level model does not split by operator
  double host_s = 0;
  std::vector<std::string> outside;  // operators priced beyond the data the model was fitted on
  double device_s() const;
  double step_s() const { return device_s() + host_s; }
};

class CostModel {
 public:
  virtual ~CostModel() = default;
  // The step of an engine that takes turns with others on its device: the engine before it may
  // have pushed this one's weights and KV out of the device's caches.
  virtual StepCost step_cost(const BatchShape& shape) const = 0;
  // The step of an engine that also ran the device's previous step, so its weights and KV are
  // still cached. Only a CPU profile prices the difference (sim/calibrated.hpp); a GPU streams
  // the weights from HBM every step, and a model without warm terms prices both alike.
  virtual StepCost warm_step_cost(const BatchShape& shape) const { return step_cost(shape); }
  // Seconds from the step's start on the host to its end, host overhead included.
  double step_time(const BatchShape& shape) const { return step_cost(shape).total(); }
  virtual std::string describe() const = 0;
  // The step by operator; models that price whole steps leave it unattributed.
  virtual StepBreakdown by_operator(const BatchShape& shape) const;
  // After a run: a warning when steps fell outside what the model was fitted on; empty if none.
  virtual std::string extrapolation_report() const { return {}; }
};

}  // namespace duet
