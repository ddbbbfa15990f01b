#pragma once
// A cost model fitted to steps that a real engine measured (`duet profile`, or a run's steps table
// with `duet fit`). A step is priced as two linear models over the batch's shape:
//
//   device_s = sum_i device_coefficient_i * device_feature_i
//     constant                 s per step: launches, the weights' read by a one-row step, fixed work
//     batched_tokens           1 when the step has 2 or more token rows: BLAS libraries switch from
//                              matrix-vector kernels to GEMMs (packing on CPUs, other kernels on GPUs)
//     batched_logits           the same switch for the LM head (2 or more logit rows)
//     prefill_tokens           s per prompt token: every GEMM of every layer
//     decode_tokens            s per decode token: the same GEMMs, batched with other decodes
//     prefill_seqs             s per prefill chunk: per-item attention set-up, gathers
//     logit_rows               s per LM-head row (a sample, or a scored position of a PRM)
//     decode_context_tokens    s per KV token that decode attention reads
//     prefill_attention_keys   s per (query, key) pair of causal prefill attention
//     prefill_tokens_squared   s per n*n of a chunk of n tokens: attention that computes the whole
//                              square and masks it (the CPU reference), or tile waste on a GPU
//     prefill_context_tokens   s per cached KV token a prefill chunk reads
//     copies                   s per copy-on-write block copy
//     decode_distinct_context_tokens
//                              s per KV token that decode attention reads from a block no other
//                              decode of the batch has read: with decode_context_tokens (every
//                              token read, the compute) this splits attention into compute and
//                              memory, so that beams reading one prefix's blocks are priced as the
//                              caches serve them
//   host_s = sum_j host_coefficient_j * host_feature_j
//     host_constant            s per step: the scheduler's pass, the runtime's bookkeeping
//     host_seqs                s per batch item: block tables, outputs, stop checks
//     host_prefill_tokens      s per prompt token: block hashing for the prefix cache
//
// Decode and prefill tokens have separate terms because a decode batch of n rows is not a prefill
// chunk of n tokens to a GEMM (weights are re-read per step, not per token, so small decode
// batches are bandwidth-bound). The fit minimises relative error (rows weighted by 1/duration),
// because a simulated run adds thousands of small steps and a few large ones, and keeps every
// coefficient non-negative (a negative cost would be extrapolated into negative time).
//
// The profile is JSON ("format": "duet-cost-profile/3"; a /2 profile, which has no distinct-token
// term, is read with that term at 0) with the model's name and shape, the
// device, the backend, the date, the git revision, the grid it was measured on, the coefficients,
// each feature's fitted range (for extrapolation warnings), and the residuals per regime. A CPU
// profile also has "device_terms_alone": the device time of an engine alone on the device, whose
// caches stay warm between its steps (exec/profiler.hpp); the other terms are for engines that
// take turns. The simulator prices a step with the alone terms when its engine also ran the
// device's previous step (warm_step_cost, sim/sim_executor.hpp), and with the others after
// another engine's step.
#include <array>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/metrics.hpp"
#include "core/model_spec.hpp"
#include "sim/cost_model.hpp"

namespace duet {

inline constexpr std::size_t kNumDeviceFeatures = 13;
inline constexpr std::size_t kNumHostFeatures = 3;
using DeviceFeatures = std::array<double, kNumDeviceFeatures>;
using HostFeatures = std::array<double, kNumHostFeatures>;

const std::array<const char*, kNumDeviceFeatures>& device_feature_names();
const std::array<const char*, kNumHostFeatures>& host_feature_names();
DeviceFeatures device_features(const BatchShape& shape);
HostFeatures host_features(const BatchShape& shape);

// The shape whose device time a step takes: a graph step's padded shape where the engine replays
// CUDA graphs, else the shape itself.
BatchShape device_shape(const BatchShape& shape, bool cuda_graphs);

// "decode" (no prefill tokens), "prefill" (no decode tokens) or "mixed".
const char* regime_of(const BatchShape& shape);

// How well a fit explains its rows: relative errors (predicted / measured - 1).
struct FitStats {
  std::size_t rows = 0;
  double r2 = 0;
  double rmse_s = 0;
  double median_abs_rel_error = 0;
  double p90_abs_rel_error = 0;
  double max_abs_rel_error = 0;
};
FitStats fit_stats(const std::vector<double>& predicted, const std::vector<double>& measured);

// Non-negative least squares on relative error. Returns one coefficient per column; a column that
// never varies from zero gets 0 (the shape was never measured). Throws duet::Error when there are
// too few rows, or a feature is negative or not finite (naming the row and the feature). When the
// measured columns are linearly dependent, the fit still runs (non-negativity picks one split of
// their shared cost), and `warnings`, if given, gets a line naming the features the data cannot
// tell apart. `names` names the columns (default: "column J").
std::vector<double> fit_linear(const std::vector<std::vector<double>>& x, const std::vector<double>& y,
                               const std::string& what, std::span<const char* const> names = {},
                               std::vector<std::string>* warnings = nullptr);

struct CalibrationProfile {
  std::string model;        // ModelSpec::name
  std::string model_shape;  // model_shape(): layers, widths, vocabulary; checked on use
  std::string device;       // the device key: "h100-sxm", "cpu-<model>" (see sim/profiles.hpp)
  std::string device_name;  // as the driver or /proc/cpuinfo names it
  std::string backend;      // cpu, cuda; "fit" for a profile fitted from a run file
  // Measured on an engine that replays CUDA graphs for decode-only steps (the CUDA engine): such a
  // step's device time is fitted and priced at the graph's padded shape (core/executor.hpp's
  // cuda_graph_shape), its host time at the real one. JSON "cuda_graphs", written when true.
  bool cuda_graphs = false;
  std::string created_utc;
  std::string git_revision;
  std::string source;            // what was measured
  std::string grid_json;         // the grid, as JSON text
  std::string file_fingerprint;  // of the file it was read from (core/mix.hpp), "" when made in memory
  DeviceFeatures device_coefficients{};
  // Device time of an engine that has the device to itself, where caches stay warm from one step
  // to the next (the CPU engine's `duet profile` measures both; absent elsewhere).
  std::optional<DeviceFeatures> alone_coefficients;
  FitStats alone_fit;
  HostFeatures host_coefficients{};
  DeviceFeatures device_max{};  // the largest value of each feature in the fitted rows
  HostFeatures host_max{};
  FitStats device_fit, host_fit;
  std::map<std::string, FitStats> regimes;  // step time (device + host) by regime
  std::vector<std::string> warnings;        // what the fit could not determine (collinear features)
};

// The model's shape as one line, e.g. "L2 h256 q4 kv2 d64 f688 v8000 bf16": two profiles agree on
// a model when these agree.
std::string model_shape(const ModelSpec& model);

// A measured step: its shape, device time and host time (host_s < 0: not measured).
struct MeasuredStep {
  BatchShape shape;
  double device_s = 0;
  double host_s = -1;
};

// Fits both linear models and the per-regime residuals; identity fields are left to the caller.
// cuda_graphs: the steps ran on an engine that replays CUDA graphs (CalibrationProfile::cuda_graphs).
CalibrationProfile fit_profile(const std::vector<MeasuredStep>& steps, bool cuda_graphs = false);
// Measurements as CSV: a header naming the shape's members by their feature names (prefill_tokens,
// decode_seqs, ...: not the derived constant and 0/1 switches; missing ones are zero, and a table
// needs at least one), "duration_s", and optionally "host_s". Any other column, a repeated one, a
// negative count or a duration that is not positive is an error naming the file and line.
CalibrationProfile fit_profile_csv(const std::string& path);
// From the steps of a run (the real engine's measured durations and host times).
CalibrationProfile fit_profile_steps(const std::vector<StepRecord>& steps, bool cuda_graphs = false);

void save_profile(const CalibrationProfile& profile, const std::string& path);
CalibrationProfile load_profile(const std::string& path);
CalibrationProfile parse_profile(const std::string& json_text, const std::string& origin);

class CalibratedCostModel final : public CostModel {
 public:
  explicit CalibratedCostModel(CalibrationProfile profile);
  StepCost step_cost(const BatchShape& shape) const override;
  // The profile's alone terms where it has them (a CPU profile's), its other terms otherwise.
  StepCost warm_step_cost(const BatchShape& shape) const override;
  std::string describe() const override;
  std::string extrapolation_report() const override;
  const CalibrationProfile& profile() const { return profile_; }

 private:
  StepCost price(const BatchShape& shape, const DeviceFeatures& device) const;

  CalibrationProfile profile_;
  DeviceFeatures warm_;  // the alone terms, or the others where the profile has none
  // Steps priced beyond a feature's fitted range (by more than 10%), per device feature.
  mutable std::array<std::int64_t, kNumDeviceFeatures> beyond_{};
  mutable std::int64_t steps_ = 0;
};

}  // namespace duet
