#include "exec/validation.hpp"

#include <gtest/gtest.h>

#include "tests/support/test_support.hpp"

namespace duet {
namespace {

using test_support::contains;
using test_support::error_of;
using test_support::TempDir;

// A run of one engine whose steps took `spans` seconds each (device 90%, host 10%), one request
// per step, over `makespan` seconds.
ExperimentOutcome outcome(const std::vector<double>& spans, double makespan) {
  ExperimentOutcome o;
  EngineRecords r;
  r.name = "llm";
  r.model = "m";
  r.total_blocks = 8;
  r.block_size = 16;
  double t = 0;
  for (double s : spans) {
    StepRecord st;
    st.start_s = t;
    st.duration_s = 0.9 * s;
    st.host_s = 0.1 * s;
    st.decode_tokens = st.num_seqs = st.decode_seqs = 2;
    r.steps.push_back(st);
    RequestRecord q;
    q.seq_id = r.requests.size() + 1;
    q.arrival_s = 0;
    q.first_scheduled_s = t;
    q.first_token_s = t + s;
    q.finish_s = t + s;
    q.output_tokens = 1;
    r.requests.push_back(q);
    t += s;
  }
  o.records.push_back(r);
  o.summary.makespan_s = makespan;
  o.summary.engines.push_back(summarize(r, makespan));
  o.metadata.text.emplace_back("backend", "test");
  return o;
}

TEST(Validation, ErrorsAreComputedAsHandWorkedValues) {
  // Predicted: steps of 1, 2, 3 s in 6 s. Measured: 1.25, 2, 2 s, and 0.75 s outside steps, in 6 s.
  const ExperimentOutcome predicted = outcome({1, 2, 3}, 6);
  const ExperimentOutcome measured = outcome({1.25, 2, 2}, 6.0);
  const ValidationPoint p = compare_runs("point", "problems/s", 12, predicted, measured, true);
  EXPECT_DOUBLE_EQ(p.predicted_throughput, 2.0);
  EXPECT_DOUBLE_EQ(p.measured_throughput, 2.0);
  EXPECT_DOUBLE_EQ(p.throughput_error, 0.0);
  EXPECT_NEAR(p.measured_outside_steps_s, 0.75, 1e-12);
  ASSERT_EQ(p.engines.size(), 1u);
  const EngineComparison& c = p.engines[0];
  EXPECT_NEAR(c.predicted_busy_s, 6.0, 1e-12);
  EXPECT_NEAR(c.measured_busy_s, 5.25, 1e-12);
  // Per-step errors: 1/1.25 - 1 = -0.2, 2/2 - 1 = 0, 3/2 - 1 = +0.5.
  EXPECT_EQ(c.steps, 3u);
  EXPECT_NEAR(c.step_error_median, 0.0, 1e-12);
  EXPECT_NEAR(c.step_error_p10, -0.2, 1e-12);
  EXPECT_NEAR(c.step_error_p90, 0.5, 1e-12);
  EXPECT_NEAR(c.step_error_max_abs, 0.5, 1e-12);

  const ValidationPoint slow =
      compare_runs("slow", "problems/s", 12, outcome({1, 2, 3}, 6), outcome({1, 2, 3}, 8), true);
  EXPECT_NEAR(slow.throughput_error, 8.0 / 6.0 - 1.0, 1e-12) << "predicted 2/s, measured 1.5/s";
  EXPECT_DOUBLE_EQ(relative_error(0, 0), 0.0);
  EXPECT_DOUBLE_EQ(relative_error(3, 2), 0.5);
}

RequestRecord request(std::uint64_t id, int prompt, double arrival, double first, double finish, int out) {
  RequestRecord q;
  q.seq_id = id;
  q.owner = 100 + id;
  q.prompt_tokens = prompt;
  q.arrival_s = arrival;
  q.first_token_s = first;
  q.finish_s = finish;
  q.output_tokens = out;
  return q;
}

TEST(Validation, RequestsArePairedByIdAndComparedOneByOne) {
  const std::vector<RequestRecord> predicted = {request(1, 8, 0, 1, 3, 3), request(2, 8, 1, 2, 2, 1),
                                                request(3, 10, 0, 1, 1, 1), request(4, 8, 0, 1, 1, 1),
                                                request(6, 8, 0, 1.1, 1.1, 1)};
  const std::vector<RequestRecord> measured = {request(6, 8, 0, 1, 1, 1), request(1, 8, 0, 2, 4, 3),
                                               request(2, 8, 1, 1.5, 1.5, 1), request(3, 11, 0, 1, 1, 1),
                                               request(5, 8, 0, 1, 1, 1)};
  const RequestComparison c = compare_requests(predicted, measured);
  // 1, 2 and 6 pair; 3's prompts differ (unpaired on both sides), 4 and 5 are on one side only.
  EXPECT_EQ(c.unpaired, 4u);
  // TTFT: 1/2 - 1 = -0.5, 1/0.5 - 1 = +1, 1.1/1 - 1 = +0.1.
  EXPECT_EQ(c.ttft.pairs, 3u);
  EXPECT_NEAR(c.ttft.median, 0.1, 1e-12);
  EXPECT_NEAR(c.ttft.median_abs, 0.5, 1e-12);
  EXPECT_NEAR(c.ttft.p90_abs, 1.0, 1e-12);
  // E2E: 3/4 - 1 = -0.25, +1, +0.1.
  EXPECT_NEAR(c.e2e.median, 0.1, 1e-12);
  EXPECT_NEAR(c.e2e.median_abs, 0.25, 1e-12);
  // TPOT: only request 1 has two tokens: (3 - 1) / 2 against (4 - 2) / 2.
  EXPECT_EQ(c.tpot.pairs, 1u);
  EXPECT_NEAR(c.tpot.median_abs, 0.0, 1e-12);
}

TEST(Validation, DifferentBatchesAreAClearError) {
  ExperimentOutcome a = outcome({1, 2, 3}, 6), b = outcome({1, 2, 3}, 6);
  EXPECT_NO_THROW(check_identical_batches(a.records, b.records));
  b.records[0].steps[1].decode_tokens = 3;
  EXPECT_TRUE(
      contains(error_of([&] { check_identical_batches(a.records, b.records); }),
               "token streams differ between the simulator and the real engine: engine 'llm' step 2 has "
               "decode_tokens 2 predicted, 3 measured"));
  b = outcome({1, 2}, 6);
  EXPECT_TRUE(contains(error_of([&] { check_identical_batches(a.records, b.records); }),
                       "ran 3 steps predicted, 2 measured"));
}

TEST(Validation, RepeatsGiveTheRealEnginesOwnLatencyNoise) {
  // Compared run: TTFTs 1, 2, 3 s (p50 2, p90 2.8, interpolated). Other runs: 1, 2.5, 3.5
  // (p50 2.5, p90 3.3) and 1, 1.5, 3 (p50 1.5, p90 2.7): the largest deviations are 0.25 at p50
  // and 0.5 / 2.8 at p90.
  // The prediction (TTFTs 2, 4, 6 s) differs from every run: noise is the measured runs' own.
  const ExperimentOutcome predicted = outcome({2, 2, 2}, 6), measured = outcome({1, 1, 1}, 3);
  ValidationPoint p = compare_runs("point", "requests/s", 3, predicted, measured, false);
  EXPECT_DOUBLE_EQ(p.engines[0].ttft_noise.p50, 0.0) << "one run: no noise";
  add_repeat(p, outcome({1, 1.5, 1}, 3.5));
  add_repeat(p, outcome({1, 0.5, 1.5}, 3));
  const EngineComparison& c = p.engines[0];
  EXPECT_NEAR(c.ttft_noise.p50, 0.25, 1e-12);
  EXPECT_NEAR(c.ttft_noise.p90, 0.5 / 2.8, 1e-12);
  EXPECT_NEAR(c.e2e_noise.p50, 0.25, 1e-12) << "one token each: E2E is TTFT";
  EXPECT_DOUBLE_EQ(c.tpot_noise.p50, 0.0) << "no request has a second token: TPOT is NaN in every run";
  EXPECT_NEAR(p.noise, 1 - 3.0 / 3.5, 1e-12) << "throughput: 3 requests in 3.5 s against 3 s";

  TempDir dir;
  {
    RunFileWriter file(dir.file("v.h5"));
    write_validation(file, "/validate/points/0000", p, predicted, measured);
    file.close();
  }
  const RunMetadata a = read_attributes(dir.file("v.h5"), "/validate/points/0000");
  ASSERT_NE(a.find_number("validation.llm.ttft_p90_noise"), nullptr);
  EXPECT_NEAR(*a.find_number("validation.llm.ttft_p90_noise"), 0.5 / 2.8, 1e-12);
  ASSERT_NE(a.find_number("validation.llm.e2e_p50_noise"), nullptr);
}

TEST(Validation, TheFileHoldsBothRunsAndTheComparison) {
  TempDir dir;
  const ExperimentOutcome predicted = outcome({1, 2, 3}, 6), measured = outcome({1.25, 2, 2}, 6);
  const ValidationPoint p = compare_runs("point", "problems/s", 12, predicted, measured, true);
  {
    RunFileWriter file(dir.file("v.h5"));
    write_validation(file, "/validate/points/0000", p, predicted, measured);
    file.close();
  }
  const std::vector<std::string> runs = list_runs(dir.file("v.h5"));
  EXPECT_EQ(runs,
            (std::vector<std::string>{"/validate/points/0000/measured", "/validate/points/0000/predicted"}));
  EXPECT_EQ(read_run(dir.file("v.h5"), "/validate/points/0000/measured").engines[0].steps.size(), 3u);
  const RunMetadata a = read_attributes(dir.file("v.h5"), "/validate/points/0000");
  auto number = [&](const std::string& key) {
    if (const double* v = a.find_number(key)) return *v;
    ADD_FAILURE() << "no attribute " << key;
    return 0.0;
  };
  EXPECT_DOUBLE_EQ(number("validation.throughput_error"), 0.0);
  EXPECT_NEAR(number("validation.llm.step_error_p90"), 0.5, 1e-12);
  EXPECT_NEAR(number("validation.llm.busy_error"), 6.0 / 5.25 - 1, 1e-12);
  EXPECT_DOUBLE_EQ(number("validation.batches_identical"), 1.0);
  // Request 1 finished 1.25 s after arrival measured, 1 s predicted.
  EXPECT_DOUBLE_EQ(number("validation.llm.ttft_request_error_pairs"), 3.0);
  EXPECT_DOUBLE_EQ(number("validation.llm.requests_unpaired"), 0.0);
  EXPECT_NEAR(number("validation.llm.ttft_request_error_p90_abs"), 0.2, 1e-12);
  EXPECT_EQ(a.find_number("validation.llm.ttft_p50_noise"), nullptr) << "one measured run: no noise to write";
}

}  // namespace
}  // namespace duet
