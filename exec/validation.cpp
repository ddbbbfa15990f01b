#include "exec/validation.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "core/error.hpp"
#include "core/record_columns.hpp"
#include "core/sequence.hpp"

namespace duet {

namespace {

// The columns that say what a step did, as opposed to how long it took.
constexpr std::array kBatchColumns{
    &step_column("prefill_tokens"),
    &step_column("decode_tokens"),
    &step_column("num_seqs"),
    &step_column("decode_context_tokens"),
    &step_column("decode_distinct_context_tokens"),
    &step_column("logit_rows"),
    &step_column("kv_blocks_used"),
    &step_column("prefix_hit_tokens"),
    &step_column("cow_copies"),
    &step_column("preemptions"),
};

}  // namespace

void check_identical_batches(const std::vector<EngineRecords>& predicted,
                             const std::vector<EngineRecords>& measured) {
  if (predicted.size() != measured.size()) throw Error("validate: the runs have different engines");
  for (std::size_t e = 0; e < predicted.size(); ++e) {
    const auto& a = predicted[e].steps;
    const auto& b = measured[e].steps;
    const std::string& name = predicted[e].name;
    const std::size_t n = std::min(a.size(), b.size());
    for (std::size_t i = 0; i < n; ++i)
      for (const Column* c : kBatchColumns)
        if (c->number(&a[i]) != c->number(&b[i]))
          throw Error(
              "validate: the token streams differ between the simulator and the real engine: engine '" +
              name + "' step " + std::to_string(i + 1) + " has " + c->name + " " +
              std::to_string(c->integer(&a[i])) + " predicted, " + std::to_string(c->integer(&b[i])) +
              " measured (force output lengths and scores in the workload, and use a time-independent "
              "arbiter)");
    if (a.size() != b.size())
      throw Error("validate: the token streams differ between the simulator and the real engine: engine '" +
                  name + "' ran " + std::to_string(a.size()) + " steps predicted, " +
                  std::to_string(b.size()) + " measured");
  }
}

double relative_error(double predicted, double measured) {
  if (measured == 0) return predicted == 0 ? 0.0 : INFINITY;
  return predicted / measured - 1.0;
}

namespace {

PairedErrors paired_errors(std::vector<double> err) {
  PairedErrors e;
  e.pairs = err.size();
  e.median = quantile(err, 0.5);
  for (double& x : err) x = std::abs(x);
  e.median_abs = quantile(err, 0.5);
  e.p90_abs = quantile(err, 0.9);
  return e;
}

}  // namespace

RequestComparison compare_requests(const std::vector<RequestRecord>& predicted,
                                   const std::vector<RequestRecord>& measured) {
  std::unordered_multimap<std::uint64_t, const RequestRecord*> by_id;
  // An aborted request has no latencies to compare (the workload released it unfinished).
  const auto aborted = [](const RequestRecord& q) {
    return q.finish_reason == std::uint8_t(FinishReason::Aborted);
  };
  for (const RequestRecord& q : measured)
    if (!aborted(q)) by_id.emplace(q.seq_id, &q);
  RequestComparison c;
  std::vector<double> ttft, tpot, e2e;
  for (const RequestRecord& p : predicted) {
    if (aborted(p)) continue;
    auto [it, end] = by_id.equal_range(p.seq_id);
    while (it != end && (it->second->owner != p.owner || it->second->prompt_tokens != p.prompt_tokens)) ++it;
    if (it == end) {
      ++c.unpaired;
      continue;
    }
    const RequestRecord& m = *it->second;
    by_id.erase(it);
    ttft.push_back(relative_error(time_to_first_token(p), time_to_first_token(m)));
    e2e.push_back(relative_error(end_to_end_latency(p), end_to_end_latency(m)));
    const double tpot_p = time_per_output_token(p), tpot_m = time_per_output_token(m);
    if (!std::isnan(tpot_p) && !std::isnan(tpot_m)) tpot.push_back(relative_error(tpot_p, tpot_m));
  }
  c.unpaired += by_id.size();
  c.ttft = paired_errors(std::move(ttft));
  c.tpot = paired_errors(std::move(tpot));
  c.e2e = paired_errors(std::move(e2e));
  return c;
}

ValidationPoint compare_runs(const std::string& label, const std::string& unit, double items,
                             const ExperimentOutcome& predicted, const ExperimentOutcome& measured,
                             bool batches_identical) {
  ValidationPoint p;
  p.label = label;
  p.unit = unit;
  p.items = items;
  p.batches_identical = batches_identical;
  p.predicted_makespan_s = predicted.summary.makespan_s;
  p.measured_makespan_s = measured.summary.makespan_s;
  p.predicted_throughput = p.predicted_makespan_s > 0 ? items / p.predicted_makespan_s : 0;
  p.measured_throughput = p.measured_makespan_s > 0 ? items / p.measured_makespan_s : 0;
  p.throughput_error = relative_error(p.predicted_throughput, p.measured_throughput);
  double covered = 0;
  for (std::size_t e = 0; e < measured.records.size(); ++e) {
    const EngineRecords& m = measured.records[e];
    const EngineRecords& s = predicted.records.at(e);
    const EngineSummary& ms = measured.summary.engines.at(e);
    const EngineSummary& ps = predicted.summary.engines.at(e);
    EngineComparison c;
    c.name = m.name;
    c.predicted_busy_s = ps.busy_s;
    c.measured_busy_s = ms.busy_s;
    covered += ms.busy_s;
    c.predicted_ttft = ps.ttft_s, c.measured_ttft = ms.ttft_s;
    c.predicted_tpot = ps.tpot_s, c.measured_tpot = ms.tpot_s;
    c.predicted_e2e = ps.e2e_s, c.measured_e2e = ms.e2e_s;
    c.requests = compare_requests(s.requests, m.requests);
    if (batches_identical) {
      std::vector<double> err;
      for (std::size_t i = 0; i < std::min(m.steps.size(), s.steps.size()); ++i)
        err.push_back(relative_error(s.steps[i].duration_s + s.steps[i].host_s,
                                     m.steps[i].duration_s + m.steps[i].host_s));
      c.steps = err.size();
      c.step_error_median = quantile(err, 0.5);
      c.step_error_p10 = quantile(err, 0.1);
      c.step_error_p90 = quantile(err, 0.9);
      for (double x : err) c.step_error_max_abs = std::max(c.step_error_max_abs, std::abs(x));
    }
    p.engines.push_back(c);
  }
  p.measured_outside_steps_s = std::max(0.0, p.measured_makespan_s - covered);
  return p;
}

std::size_t fastest_run(const std::vector<ExperimentOutcome*>& runs) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < runs.size(); ++i)
    if (runs[i]->summary.makespan_s < runs[best]->summary.makespan_s) best = i;
  return best;
}

namespace {

void widen(LatencyNoise& noise, const Percentiles& other, const Percentiles& compared) {
  // A latency no request has (TPOT of one-token outputs) is NaN: in both runs no noise, in one of
  // them all the noise there is.
  auto dev = [](double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0.0 : double(INFINITY);
    return std::abs(relative_error(a, b));
  };
  noise.p50 = std::max(noise.p50, dev(other.p50, compared.p50));
  noise.p90 = std::max(noise.p90, dev(other.p90, compared.p90));
}

}  // namespace

void add_repeat(ValidationPoint& p, const ExperimentOutcome& repeat) {
  const double t = repeat.summary.makespan_s > 0 ? p.items / repeat.summary.makespan_s : 0;
  p.repeat_throughputs.push_back(t);
  p.noise = std::max(p.noise, std::abs(relative_error(t, p.measured_throughput)));
  for (std::size_t e = 0; e < p.engines.size(); ++e) {
    EngineComparison& c = p.engines[e];
    const EngineSummary& r = repeat.summary.engines.at(e);
    widen(c.ttft_noise, r.ttft_s, c.measured_ttft);
    widen(c.tpot_noise, r.tpot_s, c.measured_tpot);
    widen(c.e2e_noise, r.e2e_s, c.measured_e2e);
  }
}

void write_validation(RunFileWriter& file, const std::string& group, const ValidationPoint& p,
                      const ExperimentOutcome& predicted, const ExperimentOutcome& measured,
                      const std::vector<ProblemRecord>* predicted_problems,
                      const std::vector<ProblemRecord>* measured_problems) {
  RunMetadata a;
  a.text.emplace_back("validation.label", p.label);
  a.text.emplace_back("validation.unit", p.unit);
  a.numbers.emplace_back("validation.items", p.items);
  a.numbers.emplace_back("validation.predicted_makespan_s", p.predicted_makespan_s);
  a.numbers.emplace_back("validation.measured_makespan_s", p.measured_makespan_s);
  a.numbers.emplace_back("validation.predicted_throughput", p.predicted_throughput);
  a.numbers.emplace_back("validation.measured_throughput", p.measured_throughput);
  a.numbers.emplace_back("validation.throughput_error", p.throughput_error);
  a.numbers.emplace_back("validation.measured_outside_steps_s", p.measured_outside_steps_s);
  a.numbers.emplace_back("validation.batches_identical", p.batches_identical ? 1.0 : 0.0);
  a.numbers.emplace_back("validation.noise", p.noise);
  for (std::size_t i = 0; i < p.repeat_throughputs.size(); ++i)
    a.numbers.emplace_back("validation.repeat_throughput_" + std::to_string(i + 2), p.repeat_throughputs[i]);
  for (const EngineComparison& c : p.engines) {
    const std::string k = "validation." + c.name + ".";
    a.numbers.emplace_back(k + "predicted_busy_s", c.predicted_busy_s);
    a.numbers.emplace_back(k + "measured_busy_s", c.measured_busy_s);
    a.numbers.emplace_back(k + "busy_error", relative_error(c.predicted_busy_s, c.measured_busy_s));
    a.numbers.emplace_back(k + "steps", double(c.steps));
    a.numbers.emplace_back(k + "step_error_p10", c.step_error_p10);
    a.numbers.emplace_back(k + "step_error_median", c.step_error_median);
    a.numbers.emplace_back(k + "step_error_p90", c.step_error_p90);
    a.numbers.emplace_back(k + "step_error_max_abs", c.step_error_max_abs);
    a.numbers.emplace_back(k + "ttft_p50_error", relative_error(c.predicted_ttft.p50, c.measured_ttft.p50));
    a.numbers.emplace_back(k + "ttft_p90_error", relative_error(c.predicted_ttft.p90, c.measured_ttft.p90));
    a.numbers.emplace_back(k + "tpot_p50_error", relative_error(c.predicted_tpot.p50, c.measured_tpot.p50));
    a.numbers.emplace_back(k + "tpot_p90_error", relative_error(c.predicted_tpot.p90, c.measured_tpot.p90));
    a.numbers.emplace_back(k + "e2e_p50_error", relative_error(c.predicted_e2e.p50, c.measured_e2e.p50));
    a.numbers.emplace_back(k + "e2e_p90_error", relative_error(c.predicted_e2e.p90, c.measured_e2e.p90));
    a.numbers.emplace_back(k + "requests_unpaired", double(c.requests.unpaired));
    if (!p.repeat_throughputs.empty())
      for (const auto& [name, n] : {std::pair{"ttft", &c.ttft_noise}, std::pair{"tpot", &c.tpot_noise},
                                    std::pair{"e2e", &c.e2e_noise}}) {
        a.numbers.emplace_back(k + name + "_p50_noise", n->p50);
        a.numbers.emplace_back(k + name + "_p90_noise", n->p90);
      }
    for (const auto& [name, e] : {std::pair{"ttft", &c.requests.ttft}, std::pair{"tpot", &c.requests.tpot},
                                  std::pair{"e2e", &c.requests.e2e}}) {
      const std::string r = k + name + "_request_error_";
      a.numbers.emplace_back(r + "pairs", double(e->pairs));
      a.numbers.emplace_back(r + "median", e->median);
      a.numbers.emplace_back(r + "median_abs", e->median_abs);
      a.numbers.emplace_back(r + "p90_abs", e->p90_abs);
    }
  }
  file.write_attributes(group, a);
  file.write_run(group + "/predicted", predicted.metadata, predicted.records, predicted.summary,
                 predicted_problems);
  file.write_run(group + "/measured", measured.metadata, measured.records, measured.summary,
                 measured_problems);
}

double print_validation_table(const std::vector<ValidationPoint>& points, std::FILE* out) {
  std::fprintf(out, "%-36s %12s %12s %9s %8s %11s %10s\n", "point", "predicted", "measured", "error", "noise",
               "step err", "outside");
  std::vector<double> abs_err;
  for (const ValidationPoint& p : points) {
    double step = 0;
    for (const EngineComparison& c : p.engines) step = std::max(step, std::abs(c.step_error_median));
    char step_text[32] = "-";
    if (p.batches_identical) std::snprintf(step_text, sizeof step_text, "%.1f%%", 100 * step);
    char noise_text[32] = "-";
    if (!p.repeat_throughputs.empty()) std::snprintf(noise_text, sizeof noise_text, "%.1f%%", 100 * p.noise);
    std::fprintf(out, "%-36s %12.4g %12.4g %+8.1f%% %8s %11s %9.1f%%   %s\n", p.label.substr(0, 36).c_str(),
                 p.predicted_throughput, p.measured_throughput, 100 * p.throughput_error, noise_text,
                 step_text,
                 p.measured_makespan_s > 0 ? 100 * p.measured_outside_steps_s / p.measured_makespan_s : 0.0,
                 p.unit.c_str());
    abs_err.push_back(std::abs(p.throughput_error));
  }
  const double med = quantile(abs_err, 0.5);
  const double max = abs_err.empty() ? 0 : *std::max_element(abs_err.begin(), abs_err.end());
  std::fprintf(out, "%zu points: median |error| %.1f%%, max |error| %.1f%%", points.size(), 100 * med,
               100 * max);
  std::vector<double> noise;
  for (const ValidationPoint& p : points)
    if (!p.repeat_throughputs.empty()) noise.push_back(p.noise);
  if (!noise.empty())
    std::fprintf(out, "; the real engine against itself: median %.1f%%, max %.1f%%",
                 100 * quantile(noise, 0.5), 100 * *std::max_element(noise.begin(), noise.end()));
  std::fprintf(out, "\n");
  return max;
}

}  // namespace duet
