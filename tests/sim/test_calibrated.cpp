#include "sim/calibrated.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/executor.hpp"
#include "io/file_bytes.hpp"
#include "sim/profiles.hpp"
#include "tests/support/test_support.hpp"

namespace duet {
namespace {

using test_support::contains;
using test_support::error_of;
using test_support::TempDir;

// Known coefficients, roughly a small model on a GPU: 1 ms per step, 0.5 ms more for GEMMs and
// 0.2 ms for an LM-head GEMM, 60 us per prefill token, 20 us per decode token, 30 us per prefill
// chunk, 15 us per LM-head row, 40 ns per KV token read, 0.5 ns per attention key, 0.2 ns per
// chunk token squared, 10 ns per cached token, 5 us per copy. Host: 30 us per step, 0.4 us per
// sequence, 20 ns per prefill token; 25 ns more per KV token that no other decode read.
constexpr DeviceFeatures kDevice = {1e-3,  0.5e-3, 0.2e-3, 60e-6, 20e-6, 30e-6, 15e-6,
                                    40e-9, 0.5e-9, 0.2e-9, 10e-9, 5e-6,  25e-9};
constexpr HostFeatures kHost = {30e-6, 0.4e-6, 20e-9};

template <std::size_t N>
double dot(const std::array<double, N>& a, const std::array<double, N>& b) {
  double s = 0;
  for (std::size_t i = 0; i < N; ++i) s += a[i] * b[i];
  return s;
}

// Batches of every regime, as the scheduler makes them.
std::vector<BatchShape> random_shapes(int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> seqs(0, 256), chunks(0, 8), chunk(1, 2048), ctx(0, 4000), copies(0, 16);
  std::mt19937_64 sharing(seed + 1);  // its own stream: the other features are drawn as before
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<BatchShape> out;
  for (int i = 0; i < n; ++i) {
    BatchShape s;
    s.decode_seqs = s.decode_tokens = seqs(rng);
    for (int k = 0; k < s.decode_seqs; ++k) s.decode_context_tokens += ctx(rng);
    // Every other batch's decodes share blocks (beams of one prompt): 10% to 100% distinct.
    s.decode_distinct_context_tokens =
        i % 2 ? s.decode_context_tokens
              : std::int64_t(double(s.decode_context_tokens) * (0.1 + 0.9 * unit(sharing)));
    s.prefill_seqs = i % 3 == 0 ? 0 : chunks(rng);
    for (int k = 0; k < s.prefill_seqs; ++k) {
      const double t = chunk(rng), c = ctx(rng);
      s.prefill_tokens += int(t);
      s.prefill_context_tokens += std::int64_t(c);
      s.prefill_attention_keys += t * c + t * (t + 1) / 2;
      s.prefill_tokens_squared += t * t;
    }
    if (s.decode_seqs + s.prefill_seqs == 0 || i % 7 == 0) {  // one-row steps too
      s = BatchShape{};
      s.decode_seqs = s.decode_tokens = 1;
      s.decode_context_tokens = s.decode_distinct_context_tokens = ctx(rng);
    }
    s.logit_rows = s.decode_seqs + s.prefill_seqs * int(rng() % 20);
    if (i % 5 == 1 && s.prefill_seqs > 0) {  // prefill-only: many token rows, at most one logit row
      s.decode_seqs = s.decode_tokens = 0;
      s.decode_context_tokens = s.decode_distinct_context_tokens = 0;
      s.logit_rows = int(rng() % 2);
    }
    s.copies = copies(rng);
    out.push_back(s);
  }
  return out;
}

std::vector<MeasuredStep> measured(const std::vector<BatchShape>& shapes, double noise, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> jitter(0.0, noise);
  std::vector<MeasuredStep> out;
  for (const BatchShape& s : shapes)
    out.push_back({s, dot(kDevice, device_features(s)) * (1 + jitter(rng)),
                   dot(kHost, host_features(s)) * (1 + jitter(rng))});
  return out;
}

TEST(Calibrated, FitRecoversKnownDeviceAndHostCoefficients) {
  const CalibrationProfile p = fit_profile(measured(random_shapes(600, 1), 0.0, 0));
  for (std::size_t i = 0; i < kNumDeviceFeatures; ++i)
    EXPECT_NEAR(p.device_coefficients[i], kDevice[i], 1e-6 * kDevice[i]) << device_feature_names()[i];
  for (std::size_t i = 0; i < kNumHostFeatures; ++i)
    EXPECT_NEAR(p.host_coefficients[i], kHost[i], 1e-6 * kHost[i]) << host_feature_names()[i];
  EXPECT_EQ(p.device_fit.rows, 600u);
  EXPECT_LT(p.device_fit.max_abs_rel_error, 1e-6);
  EXPECT_LT(p.host_fit.max_abs_rel_error, 1e-6);
  EXPECT_EQ(p.regimes.size(), 3u) << "decode, prefill and mixed rows";
  EXPECT_EQ(p.device_max[3], [&] {
    double m = 0;
    for (const BatchShape& s : random_shapes(600, 1)) m = std::max(m, double(s.prefill_tokens));
    return m;
  }());
}

TEST(Calibrated, FitWithMeasurementNoiseStaysClose) {
  const CalibrationProfile p = fit_profile(measured(random_shapes(4000, 2), 0.02, 3));
  // The terms that carry most of a step's time come back within a few percent; the residuals say
  // what the noise was.
  for (std::size_t i : {0u, 3u, 7u}) EXPECT_NEAR(p.device_coefficients[i], kDevice[i], 0.05 * kDevice[i]);
  // Keys and the chunks' squares grow together: each alone is less certain.
  EXPECT_NEAR(p.device_coefficients[8], kDevice[8], 0.15 * kDevice[8]);
  EXPECT_NEAR(p.host_coefficients[0], kHost[0], 0.05 * kHost[0]);
  EXPECT_NEAR(p.device_fit.median_abs_rel_error, 0.0135, 0.004) << "median |N(0, 2%)| is 1.35%";
}

TEST(Calibrated, CoefficientsNeverGoNegative) {
  // Durations that fall with one feature: least squares would give it a negative cost.
  std::vector<MeasuredStep> rows;
  for (int i = 1; i <= 50; ++i) {
    BatchShape s;
    s.decode_seqs = s.decode_tokens = i;
    s.copies = 50 - i;
    rows.push_back({s, 1e-3 + 1e-5 * i - 1e-6 * (50 - i), -1});
  }
  const CalibrationProfile p = fit_profile(rows);
  for (double c : p.device_coefficients) EXPECT_GE(c, 0.0);
  EXPECT_EQ(p.host_fit.rows, 0u) << "no host times measured";
}

TEST(Calibrated, CollinearFeaturesAreNamedAndNegativeOnesRejected) {
  // decode_context_tokens = 100 * decode_seqs in every row: the data cannot split their costs.
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (int i = 1; i <= 30; ++i) {
    x.push_back({1.0, double(i), 100.0 * i});
    y.push_back(1e-3 + 1e-5 * i);
  }
  const std::array<const char*, 3> names = {"constant", "decode_seqs", "decode_context_tokens"};
  std::vector<std::string> warnings;
  const std::vector<double> c = fit_linear(x, y, "t.csv", names, &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(contains(warnings[0], "cannot tell")) << warnings[0];
  EXPECT_TRUE(contains(warnings[0], "decode_seqs") || contains(warnings[0], "decode_context_tokens"))
      << warnings[0];
  for (double v : c) EXPECT_GE(v, 0.0);
  x[4][1] = -2;
  EXPECT_TRUE(
      contains(error_of([&] { fit_linear(x, y, "t.csv", names); }), "t.csv: row 5: decode_seqs is -2"));
}

TEST(Calibrated, TooFewRowsOrBadDurationsAreErrors) {
  EXPECT_TRUE(
      contains(error_of([] { fit_profile(measured(random_shapes(3, 4), 0.0, 0)); }), "rows cannot fit"));
  std::vector<MeasuredStep> rows = measured(random_shapes(40, 4), 0.0, 0);
  rows[3].device_s = 0;
  EXPECT_TRUE(contains(error_of([&] { fit_profile(rows); }), "durations must be positive"));
}

TEST(Calibrated, FitsFromCsvAndRoundTripsTheProfile) {
  TempDir dir;
  std::string csv =
      "prefill_tokens,decode_seqs,decode_context_tokens,decode_distinct_context_tokens,prefill_attention_"
      "keys,"
      "duration_s,host_s\r\n";
  for (BatchShape s : random_shapes(80, 5)) {
    s.prefill_seqs = s.logit_rows = s.copies = 0;
    s.prefill_context_tokens = 0;
    s.prefill_tokens_squared = 0;
    char line[256];
    std::snprintf(line, sizeof line, "%d,%d,%lld,%lld,%.17g,%.17g,%.17g\r\n", s.prefill_tokens, s.decode_seqs,
                  (long long)s.decode_context_tokens, (long long)s.decode_distinct_context_tokens,
                  s.prefill_attention_keys, dot(kDevice, device_features(s)), dot(kHost, host_features(s)));
    csv += line;
  }
  std::ofstream(dir.file("steps.csv")) << csv;
  CalibrationProfile p = fit_profile_csv(dir.file("steps.csv"));
  EXPECT_NEAR(p.device_coefficients[0], kDevice[0], 1e-6 * kDevice[0]);
  EXPECT_NEAR(p.device_coefficients[7], kDevice[7], 1e-6 * kDevice[7]);
  EXPECT_NEAR(p.device_coefficients[12], kDevice[12], 1e-6 * kDevice[12]) << "distinct KV tokens";
  p.model = "llama-3.1-8b";
  p.model_shape = model_shape(model_by_name("llama-3.1-8b"));
  p.device = "h100-sxm";
  save_profile(p, dir.file("profile.json"));
  const CalibrationProfile back = load_profile(dir.file("profile.json"));
  EXPECT_EQ(back.model, "llama-3.1-8b");
  EXPECT_EQ(back.device_coefficients, p.device_coefficients);
  EXPECT_EQ(back.host_coefficients, p.host_coefficients);
  EXPECT_EQ(back.device_fit.rows, 80u);

  auto model = make_cost_model("profile:" + dir.file("profile.json"), gpu_by_name("h100"),
                               model_by_name("llama-3.1-8b"));
  BatchShape s;
  s.decode_seqs = s.decode_tokens = 10;
  s.decode_context_tokens = 10000;
  s.decode_distinct_context_tokens = 4000;  // ten beams that share most of their context
  const StepCost c = model->step_cost(s);
  EXPECT_NEAR(c.device_s, kDevice[0] + kDevice[1] + 10 * kDevice[4] + 10000 * kDevice[7] + 4000 * kDevice[12],
              1e-9);
  EXPECT_NEAR(c.host_s, kHost[0] + 10 * kHost[1], 1e-12);
}

TEST(Calibrated, AWarmStepUsesTheAloneTerms) {
  TempDir dir;
  CalibrationProfile p = fit_profile(measured(random_shapes(100, 9), 0.0, 0));
  DeviceFeatures alone = p.device_coefficients;
  for (double& c : alone) c *= 0.5;
  p.alone_coefficients = alone;
  save_profile(p, dir.file("p.json"));
  const CalibrationProfile back = load_profile(dir.file("p.json"));
  ASSERT_TRUE(back.alone_coefficients.has_value());
  EXPECT_EQ(*back.alone_coefficients, alone);
  BatchShape s;
  s.decode_seqs = s.decode_tokens = s.logit_rows = 8;
  s.decode_context_tokens = 4000;
  const CalibratedCostModel cpu(back);
  const double cold = cpu.step_cost(s).device_s;
  EXPECT_NEAR(cpu.warm_step_cost(s).device_s, 0.5 * cold, 1e-12);
  EXPECT_EQ(cpu.warm_step_cost(s).host_s, cpu.step_cost(s).host_s) << "the host's share has one set of terms";
  EXPECT_TRUE(contains(cpu.describe(), "warm caches"));
  CalibrationProfile gpu = back;
  gpu.alone_coefficients.reset();
  const CalibratedCostModel streams(gpu);
  EXPECT_NEAR(streams.warm_step_cost(s).device_s, cold, 1e-12) << "no alone terms: the others";
  EXPECT_FALSE(contains(streams.describe(), "warm caches"));
}

// The CUDA engine pads a decode-only step to its graph's size: a profile measured there fits and
// prices the padded rows' device time (at the graph sizes the profiler measures, the two agree),
// and the real rows' host time.
TEST(Calibrated, ACudaProfilePricesDecodesAtTheirGraphsSize) {
  TempDir dir;
  auto decode = [](int seqs) {
    BatchShape s;
    s.decode_seqs = s.decode_tokens = s.logit_rows = seqs;
    s.decode_context_tokens = s.decode_distinct_context_tokens = 300LL * seqs;
    return s;
  };
  std::vector<MeasuredStep> rows;
  for (int b : kCudaGraphBatchSizes)
    for (int ctx : {100, 300, 900}) {
      BatchShape s = decode(b);
      s.decode_context_tokens = s.decode_distinct_context_tokens = std::int64_t(ctx) * b;
      rows.push_back({s, dot(kDevice, device_features(s)), dot(kHost, host_features(s))});
    }
  CalibrationProfile p = fit_profile(rows, true);
  EXPECT_TRUE(p.cuda_graphs);
  p.model = "m", p.backend = "cuda";
  save_profile(p, dir.file("p.json"));
  const CalibrationProfile back = load_profile(dir.file("p.json"));
  ASSERT_TRUE(back.cuda_graphs);
  const CalibratedCostModel cuda(back);
  BatchShape n129 = decode(129);
  n129.decode_context_tokens = n129.decode_distinct_context_tokens = 300LL * 256;  // the same KV read
  const StepCost padded = cuda.step_cost(n129);
  EXPECT_NEAR(padded.device_s, cuda.step_cost(cuda_graph_shape(n129)).device_s, 1e-12);
  EXPECT_GT(padded.device_s, cuda.step_cost(decode(128)).device_s);
  EXPECT_NEAR(padded.host_s, dot(back.host_coefficients, host_features(n129)), 1e-12)
      << "129 items' host work";
  const StepCost eager = cuda.step_cost(decode(kMaxCudaGraphBatch + 1));
  EXPECT_NEAR(eager.device_s, dot(back.device_coefficients, device_features(decode(kMaxCudaGraphBatch + 1))),
              1e-12)
      << "beyond the largest graph: the real rows";
  CalibrationProfile cpu = back;
  cpu.cuda_graphs = false;
  EXPECT_LT(CalibratedCostModel(cpu).step_cost(n129).device_s, padded.device_s)
      << "a CPU engine pads nothing";
  save_profile(cpu, dir.file("cpu.json"));
  EXPECT_FALSE(contains(read_file_bytes(dir.file("cpu.json")), "cuda_graphs"));
}

// A profile's terms are named when they are wrong in type or absurd in value: a corrupted or
// hand-edited file is refused, never priced as every step free or as centuries.
TEST(Calibrated, AProfilesTermsAreCheckedOneByOne) {
  TempDir dir;
  save_profile(fit_profile(measured(random_shapes(100, 10), 0.0, 0)), dir.file("p.json"));
  const nlohmann::json good = nlohmann::json::parse(std::ifstream(dir.file("p.json")));
  auto error_with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = good;
    edit(j);
    return error_of([&] { parse_profile(j.dump(), "p.json"); });
  };
  EXPECT_EQ(error_with([](nlohmann::json& j) { j["device_terms"][7]["coefficient"] = "0.001"; }),
            "p.json: device_terms[7].coefficient (decode_context_tokens) must be a number, got \"0.001\"");
  EXPECT_EQ(error_with([](nlohmann::json& j) { j["host_terms"][1].erase("coefficient"); }),
            "p.json: host_terms[1].coefficient (host_seqs) must be a number, and is missing");
  EXPECT_EQ(
      error_with([](nlohmann::json& j) { j["device_terms"][0]["coefficient"] = 1e300; }),
      "p.json: device_terms.constant must be a number of seconds in [0, 3600], got " + std::to_string(1e300));
  EXPECT_EQ(error_with([](nlohmann::json& j) { j["device_terms"][3]["max"] = -5; }),
            "p.json: device_terms.prefill_tokens.max must be a non-negative number, got -5.000000");
  EXPECT_EQ(error_with([](nlohmann::json& j) { j["device_terms"][2] = 7; }),
            "p.json: device_terms[2] must be an object {\"feature\": name, \"coefficient\": seconds, "
            "\"max\": value}");
  EXPECT_EQ(error_with([](nlohmann::json& j) {
              for (auto& t : j["device_terms"]) t["coefficient"] = 0;
            }),
            "p.json: every device term is 0, so every step would take no time");
  EXPECT_NO_THROW(parse_profile(good.dump(), "p.json"));
}

TEST(Calibrated, AFormatTwoProfileHasNoDistinctContextTerm) {
  // Format 2 predates decode_distinct_context_tokens: its 12 terms are read as they were, and the
  // new term is 0, so that every KV token read is priced by decode_context_tokens as before.
  TempDir dir;
  save_profile(fit_profile(measured(random_shapes(100, 10), 0.0, 0)), dir.file("p.json"));
  nlohmann::json j = nlohmann::json::parse(std::ifstream(dir.file("p.json")));
  ASSERT_EQ(j["device_terms"].back()["feature"], "decode_distinct_context_tokens");
  j["format"] = "duet-cost-profile/2";
  j["device_terms"].erase(j["device_terms"].size() - 1);
  const CalibrationProfile old = parse_profile(j.dump(), "old.json");
  EXPECT_EQ(old.device_coefficients[12], 0.0);
  EXPECT_NEAR(old.device_coefficients[7], kDevice[7], 1e-6 * kDevice[7]);
  const CalibratedCostModel priced(old);
  BatchShape beams;
  add_decode(beams, 1000);
  add_decode(beams, 1000);
  beams.decode_distinct_context_tokens = 1100;
  beams.logit_rows = 2;
  priced.step_cost(beams);
  EXPECT_EQ(priced.extrapolation_report(), "") << "a term the profile never had is no extrapolation";
  j["format"] = "duet-cost-profile/3";
  EXPECT_TRUE(contains(error_of([&] { parse_profile(j.dump(), "cut.json"); }),
                       "cut.json: field 'device_terms' must list 13 terms"));
}

TEST(Calibrated, WarnsWhenAPredictionExtrapolates) {
  CalibrationProfile p = fit_profile(measured(random_shapes(100, 6), 0.0, 0));
  CalibratedCostModel m(p);
  BatchShape inside;
  inside.decode_seqs = inside.decode_tokens = 1;
  m.step_cost(inside);
  EXPECT_EQ(m.extrapolation_report(), "");
  BatchShape beyond = inside;
  beyond.prefill_tokens = int(p.device_max[3] * 2);
  beyond.prefill_seqs = 1;
  m.step_cost(beyond);
  EXPECT_TRUE(contains(m.extrapolation_report(), "1 of 2 steps had prefill_tokens beyond"))
      << m.extrapolation_report();
}

TEST(Calibrated, ProfilesForAnotherModelOrDeviceAreRefused) {
  TempDir dir;
  CalibrationProfile p = fit_profile(measured(random_shapes(100, 7), 0.0, 0));
  p.model = "llama-3.2-1b";
  p.model_shape = model_shape(model_by_name("llama-3.2-1b"));
  p.device = "h100-sxm";
  const std::string path = dir.file("p.json");
  save_profile(p, path);
  const GpuSpec h100 = gpu_by_name("h100");
  EXPECT_EQ(choose_cost_model("profile:" + path, h100, model_by_name("llama-3.2-1b"), "h100-sxm", "").kind,
            "profile");
  EXPECT_TRUE(contains(error_of([&] {
                         choose_cost_model("profile:" + path, h100, model_by_name("llama-3.1-8b"), "h100-sxm",
                                           "");
                       }),
                       "the profile is for model 'llama-3.2-1b'"));
  EXPECT_TRUE(contains(error_of([&] {
                         choose_cost_model("profile:" + path, h100, model_by_name("llama-3.2-1b"), "h200",
                                           "");
                       }),
                       "measured on device 'h100-sxm', not 'h200'"));
  // The same widths with Qwen2's q, k and v biases are another model: a step computes more.
  ModelSpec biased = model_by_name("llama-3.2-1b");
  biased.qkv_bias = true;
  EXPECT_TRUE(contains(error_of([&] { choose_cost_model("profile:" + path, h100, biased, "h100-sxm", ""); }),
                       "qkv-bias"));
  // A CPU engine's profile is for duet validate, which says so.
  p.device = "cpu-amd-epyc";
  save_profile(p, path);
  EXPECT_TRUE(
      contains(error_of([&] {
                 choose_cost_model("profile:" + path, h100, model_by_name("llama-3.2-1b"), "h100-sxm", "");
               }),
               "measured on the CPU engine ('cpu-amd-epyc'), not on 'h100-sxm'; it prices the simulator in "
               "`duet validate --backend cpu --profile "));
  // Another CPU's profile, inside duet validate --backend cpu: that one says to measure this CPU.
  EXPECT_TRUE(contains(error_of([&] {
                         choose_cost_model("profile:" + path, h100, model_by_name("llama-3.2-1b"),
                                           "cpu-intel-xeon", "");
                       }),
                       "measured on device 'cpu-amd-epyc', not 'cpu-intel-xeon'; measure this device with"));
  // A profile without its device or model shape says the field is missing, not that it is ''.
  for (const char* field : {"device", "model_shape"}) {
    CalibrationProfile bare = p;
    (std::string(field) == "device" ? bare.device : bare.model_shape).clear();
    save_profile(bare, path);
    EXPECT_TRUE(contains(error_of([&] {
                           choose_cost_model("profile:" + path, h100, model_by_name("llama-3.2-1b"),
                                             "cpu-amd-epyc", "");
                         }),
                         std::string("the profile has no field '") + field + "'"))
        << field;
  }
}

TEST(Calibrated, TheSimulatorFindsACommittedProfileByItself) {
  TempDir dir;
  const ModelSpec m = model_by_name("llama-3.2-1b");
  const GpuSpec h100 = gpu_by_name("h100");
  const ChosenCostModel none = choose_cost_model("auto", h100, m, "h100-sxm", dir.path().string());
  EXPECT_EQ(none.kind, "roofline");
  EXPECT_TRUE(contains(none.reason, "no profile of llama-3.2-1b on h100-sxm")) << none.reason;
  CalibrationProfile p = fit_profile(measured(random_shapes(100, 8), 0.0, 0));
  p.model = m.name;
  p.model_shape = model_shape(m);
  p.device = "h100-sxm";
  std::filesystem::create_directories(dir.path() / "h100-sxm");
  save_profile(p, profile_path(dir.path().string(), "h100-sxm", m));
  EXPECT_EQ(choose_cost_model("auto", h100, m, "h100-sxm", dir.path().string()).kind, "profile");
  EXPECT_EQ(choose_cost_model("roofline", h100, m, "h100-sxm", dir.path().string()).kind, "roofline")
      << "roofline forces the roofline";
}

// duet validate of a run of two models takes a profile for each: each engine's is the one measured
// for its model's shape, whichever order they are given in.
TEST(Calibrated, ProfileForPicksTheOneMeasuredForTheModel) {
  TempDir dir;
  const ModelSpec small = model_by_name("llama-3.2-1b"), prm = model_by_name("qwen2.5-math-prm-7b");
  std::vector<std::string> paths;
  for (const ModelSpec* m : {&prm, &small}) {
    CalibrationProfile p = fit_profile(measured(random_shapes(100, 9), 0.0, 0));
    p.model = m->name;
    p.model_shape = model_shape(*m);
    p.device = "h100-sxm";
    paths.push_back(dir.file(m->name + ".json"));
    save_profile(p, paths.back());
  }
  EXPECT_EQ(profile_for(paths, small, "profiles", "h100-sxm"), paths[1]);
  EXPECT_EQ(profile_for(paths, prm, "profiles", "h100-sxm"), paths[0]);
  EXPECT_EQ(profile_for({}, small, "profiles", "h100-sxm"), "profiles/h100-sxm/llama-3-2-1b.json");
  EXPECT_EQ(profile_for({paths[0]}, small, "profiles", "h100-sxm"), paths[0])
      << "one is checked where it is used";
  const std::string msg =
      error_of([&] { profile_for(paths, model_by_name("llama-3.1-8b"), "p", "h100-sxm"); });
  EXPECT_TRUE(contains(msg, "none of the profiles given") && contains(msg, "llama-3.1-8b")) << msg;
  EXPECT_NE(model_shape(prm).find("score-head-classifier"), std::string::npos) << model_shape(prm);
  // Of two profiles of one model, the one measured on the device.
  CalibrationProfile other = load_profile(paths[1]);
  other.device = "h200";
  const std::string h200 = dir.file("small-h200.json");
  save_profile(other, h200);
  EXPECT_EQ(profile_for({h200, paths[1]}, small, "profiles", "h100-sxm"), paths[1]);
  EXPECT_EQ(profile_for({h200, paths[0]}, small, "profiles", "h100-sxm"), h200)
      << "then check_profile says why";
}

TEST(Calibrated, BadTablesAndProfilesNameTheFileAndLine) {
  TempDir dir;
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir.file(name)) << text;
    return dir.file(name);
  };
  EXPECT_TRUE(contains(error_of([&] { fit_profile_csv(write("nod.csv", "prefill_tokens,x\n1,2\n")); }),
                       "nod.csv:1: missing column 'duration_s'"));
  EXPECT_TRUE(
      contains(error_of([&] { fit_profile_csv(write("bad.csv", "prefill_tokens,duration_s\n1,5\nx,5\n")); }),
               "bad.csv:3: 'x' is not a number"));
  EXPECT_TRUE(
      contains(error_of([&] { fit_profile_csv(write("ragged.csv", "prefill_tokens,duration_s\n1,2,3\n")); }),
               "ragged.csv:2: 3 fields"));
  // A misspelt or repeated column, a negative count or a duration that is no time: named, with the line.
  EXPECT_TRUE(contains(error_of([&] { fit_profile_csv(write("typo.csv", "decode_seq,duration_s\n1,2\n")); }),
                       "typo.csv:1: unknown column 'decode_seq' (valid: duration_s, host_s, copies"));
  EXPECT_TRUE(contains(
      error_of([&] { fit_profile_csv(write("twice.csv", "decode_seqs,decode_seqs,duration_s\n1,1,2\n")); }),
      "twice.csv:1: column 'decode_seqs' appears twice"));
  EXPECT_TRUE(
      contains(error_of([&] { fit_profile_csv(write("neg.csv", "prefill_tokens,duration_s\n1,2\n-5,2\n")); }),
               "neg.csv:3: prefill_tokens is -5, a count that cannot be negative"));
  EXPECT_TRUE(
      contains(error_of([&] { fit_profile_csv(write("zero.csv", "prefill_tokens,duration_s\n1,0\n")); }),
               "zero.csv:2: duration_s is 0, not a positive time"));
  // A count that is no whole number, or beyond its field (it was cast, wrapping to -2^31): named.
  EXPECT_TRUE(
      contains(error_of([&] { fit_profile_csv(write("half.csv", "prefill_tokens,duration_s\n2.5,1\n")); }),
               "half.csv:2: prefill_tokens is 2.5, not a whole count below 2^31"));
  EXPECT_TRUE(
      contains(error_of([&] { fit_profile_csv(write("huge.csv", "prefill_tokens,duration_s\n3e9,1\n")); }),
               "huge.csv:2: prefill_tokens is 3e9, not a whole count below 2^31"));
  EXPECT_TRUE(contains(
      error_of([&] { fit_profile_csv(write("ctx.csv", "decode_context_tokens,duration_s\n1e17,1\n")); }),
      "ctx.csv:2: decode_context_tokens is 1e17, not a whole count below 2^53"));
  EXPECT_TRUE(contains(error_of([&] { load_profile(dir.file("nope.json")); }), "nope.json: cannot open"));
  EXPECT_TRUE(
      contains(error_of([] { parse_profile(R"({"format":"duet-cost-profile/3","model":5})", "p.json"); }),
               "p.json: field 'model' must be a string, got 5"));
  EXPECT_TRUE(contains(error_of([] { parse_profile(R"({"format":3})", "p.json"); }),
                       "p.json: field 'format' must be \"duet-cost-profile/3\""));
  EXPECT_TRUE(contains(error_of([] { parse_profile("{", "p.json"); }), "p.json: not valid JSON"));
  EXPECT_TRUE(contains(
      error_of([] { parse_profile(R"({"format":"duet-cost-profile/3","grid":{"a":1,"a":2}})", "p.json"); }),
      "p.json: key \"a\" appears twice in one object"));
  EXPECT_TRUE(contains(error_of([] { parse_profile(R"({"format":"duet-cost-profile/1"})", "p.json"); }),
                       "p.json: field 'format' must be \"duet-cost-profile/3\""));
  EXPECT_TRUE(contains(
      error_of([] {
        parse_profile(R"({"format":"duet-cost-profile/3","device_terms":[],"host_terms":[]})", "p.json");
      }),
      "field 'device_terms' must list 13 terms"));
  EXPECT_TRUE(contains(
      error_of([] {
        parse_profile(R"({"format":"duet-cost-profile/2","device_terms":[],"host_terms":[]})", "p.json");
      }),
      "field 'device_terms' must list 12 terms"));
  EXPECT_TRUE(contains(error_of([] { parse_profile(R"({"format":"duet-cost-profile/2"})", "p.json"); }),
                       "p.json: missing field 'device_terms'"));
  EXPECT_TRUE(
      contains(error_of([] { make_cost_model("magic", gpu_by_name("h100"), model_by_name("llama-3.1-8b")); }),
               "unknown cost model 'magic'"));
}

}  // namespace
}  // namespace duet
