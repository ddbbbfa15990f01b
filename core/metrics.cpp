#include "core/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.hpp"
#include "core/sequence.hpp"

namespace duet {

namespace {

// The q-quantile of a sorted, non-empty sample, interpolating linearly between ranks.
double sorted_quantile(const std::vector<double>& v, double q) {
  const double pos = q * double(v.size() - 1);
  const std::size_t lo = std::size_t(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
}

}  // namespace

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  std::erase_if(v, [](double x) { return std::isnan(x); });
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  p.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  p.p50 = sorted_quantile(v, 0.50);
  p.p90 = sorted_quantile(v, 0.90);
  p.p99 = sorted_quantile(v, 0.99);
  return p;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return sorted_quantile(v, 0.5);
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  const std::size_t rank = std::min(v.size() - 1, std::size_t(std::lround(q * double(v.size() - 1))));
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(rank), v.end());
  return v[rank];
}

double time_to_first_token(const RequestRecord& q) { return q.first_token_s - q.arrival_s; }

double time_per_output_token(const RequestRecord& q) {
  return q.output_tokens > 1 ? (q.finish_s - q.first_token_s) / double(q.output_tokens - 1) : NAN;
}

double end_to_end_latency(const RequestRecord& q) { return q.finish_s - q.arrival_s; }

RecordLevel record_level_from_name(const std::string& name) {
  if (name == "steps") return RecordLevel::Steps;
  if (name == "requests") return RecordLevel::Requests;
  if (name == "summary") return RecordLevel::Summary;
  throw Error("unknown record level '" + name + "' (valid: steps, requests, summary)");
}

const char* record_level_name(RecordLevel level) {
  switch (level) {
    case RecordLevel::Steps:
      return "steps";
    case RecordLevel::Requests:
      return "requests";
    case RecordLevel::Summary:
      break;
  }
  return "summary";
}

SummaryAccumulator::SummaryAccumulator(std::string name, std::string model, std::int32_t total_blocks)
    : total_blocks_(total_blocks) {
  s_.name = std::move(name);
  s_.model = std::move(model);
}

void SummaryAccumulator::add(const StepRecord& st) {
  ++s_.steps;
  query_tokens_ += st.prefix_query_tokens;
  hit_tokens_ += st.prefix_hit_tokens;
  prefill_tokens_ += st.prefill_tokens;
  s_.preemptions += st.preemptions;
  s_.evictions += st.evictions;
  s_.cow_copies += st.cow_copies;
  s_.busy_s += st.duration_s + st.host_s;
  const double util = total_blocks_ ? double(st.kv_blocks_used) / total_blocks_ : 0.0;
  s_.peak_kv_utilisation = std::max(s_.peak_kv_utilisation, util);
  weighted_util_ += util * (st.duration_s + st.host_s);  // busy_s's weights: the blocks are held throughout
}

void SummaryAccumulator::add(const RequestRecord& q) {
  // An aborted request's tokens were computed (they are in the steps), but it has no latencies and
  // is not a served request.
  s_.prompt_tokens += q.prompt_tokens;
  s_.generated_tokens += q.output_tokens;
  if (q.finish_reason == std::uint8_t(FinishReason::Aborted)) return;
  ++s_.requests;
  ttft_.push_back(time_to_first_token(q));
  e2e_.push_back(end_to_end_latency(q));
  if (const double tpot = time_per_output_token(q); !std::isnan(tpot)) tpot_.push_back(tpot);
}

EngineSummary SummaryAccumulator::summary(double makespan_s) const {
  EngineSummary s = s_;
  s.mean_kv_utilisation = s.busy_s > 0 ? weighted_util_ / s.busy_s : 0.0;
  s.prefix_hit_rate = query_tokens_ ? double(hit_tokens_) / double(query_tokens_) : 0.0;
  s.ttft_s = percentiles(ttft_);
  s.tpot_s = percentiles(tpot_);
  s.e2e_s = percentiles(e2e_);
  if (makespan_s > 0) {
    s.generated_tokens_per_s = double(s.generated_tokens) / makespan_s;
    s.requests_per_s = double(s.requests) / makespan_s;
  }
  return s;
}

EngineSummary summarize(const EngineRecords& r, double makespan_s) {
  SummaryAccumulator acc(r.name, r.model, r.total_blocks);
  for (const StepRecord& st : r.steps) acc.add(st);
  for (const RequestRecord& q : r.requests) acc.add(q);
  return acc.summary(makespan_s);
}

}  // namespace duet
