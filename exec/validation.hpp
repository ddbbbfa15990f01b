#pragma once
// Predicted against measured: one experiment run on the simulator (with the device's profile) and
// on a real backend, compared point by point. For a search workload both runs see identical token
// streams (forced lengths, scripted scores), so the batches must agree step by step and the only
// difference is time; for a trace replayed on the wall clock the batches may differ (arrivals
// meet different step boundaries), and throughput and latency percentiles are compared.
#include <string>
#include <vector>

#include "exec/experiment.hpp"

namespace duet {

// Throws duet::Error naming the engine, the step and the column where two runs' batches first
// differ (their token streams are not the same: an unforced length, a time-dependent policy).
void check_identical_batches(const std::vector<EngineRecords>& predicted,
                             const std::vector<EngineRecords>& measured);

// Relative error of a prediction: predicted / measured - 1 (0 when both are 0).
double relative_error(double predicted, double measured);

// One latency compared request by request: the relative errors of the requests both runs
// finished. Percentiles of the two runs compare the distributions, which on a small slice with a
// bimodal latency (short prompts served at once, long ones queued) can move far when a few
// requests cross the gap; the paired errors say how far each request's own latency was predicted.
struct PairedErrors {
  std::size_t pairs = 0;
  double median = 0;  // signed: the bias
  double median_abs = 0, p90_abs = 0;
};

struct RequestComparison {
  // Requests of either run that the other has no record of (or records with another prompt).
  std::size_t unpaired = 0;
  PairedErrors ttft, tpot, e2e;
};

// Pairs the requests of two runs by seq_id (the same request when both give it the same owner and
// prompt length) and compares their TTFT, TPOT and end-to-end latency.
RequestComparison compare_requests(const std::vector<RequestRecord>& predicted,
                                   const std::vector<RequestRecord>& measured);

// The real engine against itself for one latency: the largest |other run / compared run - 1| of
// its p50 and of its p90 over a point's other measured runs (0 with one run). A trace served near
// saturation queues its requests, and queueing multiplies a small change in step time into a
// large one in TTFT: this says how far the real engine's own percentiles move between runs.
struct LatencyNoise {
  double p50 = 0, p90 = 0;
};

struct EngineComparison {
  std::string name;
  double predicted_busy_s = 0, measured_busy_s = 0;  // sum of step spans (device + host)
  // Per-step relative errors of the step span, over steps matched one to one (identical batches).
  double step_error_median = 0, step_error_p10 = 0, step_error_p90 = 0, step_error_max_abs = 0;
  std::size_t steps = 0;
  Percentiles predicted_ttft, measured_ttft, predicted_tpot, measured_tpot, predicted_e2e, measured_e2e;
  RequestComparison requests;
  LatencyNoise ttft_noise, tpot_noise, e2e_noise;
};

struct ValidationPoint {
  std::string label;
  std::string unit;  // what throughput counts: "problems/s" or "requests/s"
  double items = 0;  // problems or requests finished (the same in both runs)
  double predicted_makespan_s = 0, measured_makespan_s = 0;
  double predicted_throughput = 0, measured_throughput = 0;
  double throughput_error = 0;  // relative_error(predicted, measured)
  // Measured time that no engine step covers: the workload's own host work between steps (Lua,
  // the runtime's event handling) and idle waits; the simulator prices none of it.
  double measured_outside_steps_s = 0;
  bool batches_identical = false;
  std::vector<EngineComparison> engines;
  // The real engine against itself: the throughputs of the point's other measured runs (the one
  // compared is the fastest, fastest_run), and the largest |other / compared - 1| (0 with one
  // run): how much of the error noise can explain.
  std::vector<double> repeat_throughputs;
  double noise = 0;
};

// Of several measured runs of one point, the one with the shortest makespan: interference on a
// shared machine only ever slows a run down, so the fastest run is the least disturbed (the
// profile is fitted on each point's fastest repeat for the same reason).
std::size_t fastest_run(const std::vector<ExperimentOutcome*>& runs);

// Adds a further measured run of the same point to `point`: its throughput and the noise, and each
// engine's latency noise.
void add_repeat(ValidationPoint& point, const ExperimentOutcome& repeat);

ValidationPoint compare_runs(const std::string& label, const std::string& unit, double items,
                             const ExperimentOutcome& predicted, const ExperimentOutcome& measured,
                             bool batches_identical);

// Writes both runs under `group`/predicted and `group`/measured, and the comparison as `group`'s
// attributes (validation.*).
void write_validation(RunFileWriter& file, const std::string& group, const ValidationPoint& point,
                      const ExperimentOutcome& predicted, const ExperimentOutcome& measured,
                      const std::vector<ProblemRecord>* predicted_problems = nullptr,
                      const std::vector<ProblemRecord>* measured_problems = nullptr);

// The table, one row per point, then the median and max |throughput error|; returns the max.
double print_validation_table(const std::vector<ValidationPoint>& points, std::FILE* out);

}  // namespace duet
