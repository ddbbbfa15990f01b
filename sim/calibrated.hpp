#pragma once
// A cost model fitted to measured step timings: duration = coefficients . features(batch), fitted
// by least squares (Eigen). The profile is a small JSON file:
//   {
//     "format": "duet-cost-profile/1",
//     "model": "llama-3.1-8b", "gpu": "H100-SXM", "source": "where the timings came from",
//     "features": ["prefill_tokens", "decode_seqs", "decode_context_tokens",
//                  "prefill_attention_keys", "constant"],
//     "coefficients": [s per prefill token, s per decode sequence, s per KV token read,
//                      s per prefill attention key, s per step],
//     "fit": {"rows": N, "r2": R2, "rmse_s": RMSE}
//   }
// Measurements come as CSV (a header naming the feature columns, "constant" excepted, and
// "duration_s") or as the steps table of a duet HDF5 run file.
#include <array>
#include <string>
#include <vector>

#include "core/metrics.hpp"
#include "sim/cost_model.hpp"

namespace duet {

inline constexpr std::size_t kNumCalibrationFeatures = 5;
const std::array<const char*, kNumCalibrationFeatures>& calibration_feature_names();
std::array<double, kNumCalibrationFeatures> calibration_features(const BatchShape& shape);

struct CalibrationProfile {
  std::string model;
  std::string gpu;
  std::string source;
  std::array<double, kNumCalibrationFeatures> coefficients{};
  std::size_t rows = 0;
  double r2 = 0;
  double rmse_s = 0;
};

// Least-squares fit; throws duet::Error when the rows cannot determine the coefficients.
CalibrationProfile fit_profile(const std::vector<std::array<double, kNumCalibrationFeatures>>& features,
                               const std::vector<double>& durations_s);
CalibrationProfile fit_profile_csv(const std::string& path);
// From the steps of a run (the real engine's measured durations).
CalibrationProfile fit_profile_steps(const std::vector<StepRecord>& steps);

void save_profile(const CalibrationProfile& profile, const std::string& path);
CalibrationProfile load_profile(const std::string& path);
CalibrationProfile parse_profile(const std::string& json_text, const std::string& origin);

class CalibratedCostModel final : public CostModel {
 public:
  explicit CalibratedCostModel(CalibrationProfile profile);
  double step_time(const BatchShape& shape) const override;
  std::string describe() const override;
  const CalibrationProfile& profile() const { return profile_; }

 private:
  CalibrationProfile profile_;
};

}  // namespace duet
