#include "sim/calibrated.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.hpp"

namespace duet {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  TempDir() : path(fs::temp_directory_path() / ("duet-calib-" + std::to_string(::getpid()))) {
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name, const std::string& text = "") const {
    const std::string p = (path / name).string();
    if (!text.empty()) std::ofstream(p) << text;
    return p;
  }
  fs::path path;
};

// Known coefficients, roughly an 8B model on an H100: 60 us per prefill token, 20 us per decode
// sequence, 40 ns per KV token read, 0.5 ns per attention key, 5 ms per step.
constexpr std::array<double, kNumCalibrationFeatures> kTruth = {60e-6, 20e-6, 40e-9, 0.5e-9, 5e-3};

std::vector<std::array<double, kNumCalibrationFeatures>> random_shapes(int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> seqs(0, 256), chunk(0, 4096), ctx(0, 4000);
  std::vector<std::array<double, kNumCalibrationFeatures>> x;
  for (int i = 0; i < n; ++i) {
    BatchShape s;
    s.decode_seqs = s.decode_tokens = seqs(rng);
    s.decode_context_tokens = std::int64_t(s.decode_seqs) * ctx(rng);
    s.prefill_tokens = chunk(rng);
    const double c = ctx(rng), t = s.prefill_tokens;
    s.prefill_attention_keys = t * c + t * (t + 1) / 2;
    x.push_back(calibration_features(s));
  }
  return x;
}

double dot(const std::array<double, kNumCalibrationFeatures>& a, const std::array<double, kNumCalibrationFeatures>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

TEST(Calibrated, FitRecoversKnownCoefficientsOfASyntheticTable) {
  const auto x = random_shapes(400, 1);
  std::vector<double> y;
  for (const auto& row : x) y.push_back(dot(row, kTruth));
  const CalibrationProfile p = fit_profile(x, y);
  for (std::size_t i = 0; i < kNumCalibrationFeatures; ++i)
    EXPECT_NEAR(p.coefficients[i], kTruth[i], 1e-6 * kTruth[i]) << calibration_feature_names()[i];
  EXPECT_GT(p.r2, 0.999999);
  EXPECT_EQ(p.rows, 400u);
}

TEST(Calibrated, FitWithMeasurementNoiseStaysClose) {
  const auto x = random_shapes(4000, 2);
  std::mt19937_64 rng(3);
  std::normal_distribution<double> noise(0.0, 0.02);  // 2% multiplicative jitter
  std::vector<double> y;
  for (const auto& row : x) y.push_back(dot(row, kTruth) * (1.0 + noise(rng)));
  const CalibrationProfile p = fit_profile(x, y);
  for (std::size_t i = 0; i < kNumCalibrationFeatures; ++i)
    // 2% noise on a ~100 ms step is larger than the whole decode-sequence term: 10% is what the
    // smallest coefficient can promise from 4,000 rows.
    EXPECT_NEAR(p.coefficients[i], kTruth[i], 0.10 * kTruth[i]) << calibration_feature_names()[i];
  EXPECT_GT(p.r2, 0.99);
}

TEST(Calibrated, TooFewRowsIsAnError) {
  EXPECT_THROW(fit_profile(random_shapes(3, 4), {1, 2, 3}), Error);
  EXPECT_THROW(fit_profile(random_shapes(10, 4), {1, 2}), Error);
}

TEST(Calibrated, FitsFromCsvAndRoundTripsTheProfile) {
  TempDir dir;
  std::string csv = "prefill_tokens,decode_seqs,decode_context_tokens,prefill_attention_keys,duration_s\r\n";
  for (const auto& row : random_shapes(50, 5)) {
    char line[256];
    std::snprintf(line, sizeof line, "%.0f,%.0f,%.0f,%.17g,%.17g\r\n", row[0], row[1], row[2], row[3], dot(row, kTruth));
    csv += line;
  }
  const CalibrationProfile p = fit_profile_csv(dir.file("steps.csv", csv));
  EXPECT_NEAR(p.coefficients[4], kTruth[4], 1e-6 * kTruth[4]);
  CalibrationProfile named = p;
  named.model = "llama-3.1-8b";
  named.gpu = "H100-SXM";
  const std::string path = dir.file("profile.json");
  save_profile(named, path);
  const CalibrationProfile back = load_profile(path);
  EXPECT_EQ(back.model, "llama-3.1-8b");
  EXPECT_EQ(back.coefficients, named.coefficients);
  EXPECT_EQ(back.rows, 50u);

  auto model = make_cost_model("calibrated:" + path, gpu_by_name("h100"), model_by_name("llama-3.1-8b"));
  BatchShape s;
  s.decode_seqs = s.decode_tokens = 10;
  s.decode_context_tokens = 10000;
  EXPECT_NEAR(model->step_time(s), 10 * 20e-6 + 10000 * 40e-9 + 5e-3, 1e-9);
}

TEST(Calibrated, BadTablesAndProfilesNameTheFileAndLine) {
  TempDir dir;
  auto expect_error = [](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error, expected one containing " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const std::string missing = dir.file("missing.csv", "prefill_tokens,decode_seqs,duration_s\n1,2,3\n");
  expect_error([&] { fit_profile_csv(missing); }, "missing.csv:1: missing column 'decode_context_tokens'");
  const std::string bad = dir.file("bad.csv",
                                   "prefill_tokens,decode_seqs,decode_context_tokens,prefill_attention_keys,duration_s\n"
                                   "1,2,3,4,5\n1,2,x,4,5\n");
  expect_error([&] { fit_profile_csv(bad); }, "bad.csv:3: 'x' is not a number");
  const std::string ragged = dir.file("ragged.csv",
                                      "prefill_tokens,decode_seqs,decode_context_tokens,prefill_attention_keys,duration_s\n"
                                      "1,2,3\n");
  expect_error([&] { fit_profile_csv(ragged); }, "ragged.csv:2: 3 fields");
  expect_error([&] { load_profile(dir.file("nope.json")); }, "nope.json: cannot open");
  expect_error([&] { parse_profile("{", "p.json"); }, "p.json: not valid JSON");
  expect_error([&] { parse_profile(R"({"format":"other"})", "p.json"); }, "p.json: field 'format'");
  expect_error([&] { parse_profile(R"({"format":"duet-cost-profile/1","features":[],"coefficients":[]})", "p.json"); },
               "must list 5 entries");
  expect_error([&] { make_cost_model("magic", gpu_by_name("h100"), model_by_name("llama-3.1-8b")); },
               "unknown cost model 'magic'");
}

}  // namespace
}  // namespace duet
