#include "core/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace duet {

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  std::erase_if(v, [](double x) { return std::isnan(x); });
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  // Nearest-rank on the sorted sample, interpolating linearly between ranks.
  auto at = [&](double q) {
    const double pos = q * double(v.size() - 1);
    const std::size_t lo = std::size_t(std::floor(pos));
    const std::size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
  };
  p.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  return p;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  const std::size_t rank = std::min(v.size() - 1, std::size_t(q * double(v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(rank), v.end());
  return v[rank];
}

EngineSummary summarize(const EngineRecords& r, double makespan_s) {
  EngineSummary s;
  s.name = r.name;
  s.model = r.model;
  s.steps = std::int64_t(r.steps.size());
  s.requests = std::int64_t(r.requests.size());
  std::int64_t query = 0, hit = 0;
  double weighted_util = 0;
  for (const StepRecord& st : r.steps) {
    query += st.prefix_query_tokens;
    hit += st.prefix_hit_tokens;
    s.preemptions += st.preemptions;
    s.evictions += st.evictions;
    s.cow_copies += st.cow_copies;
    s.busy_s += st.duration_s + st.host_s;
    const double util = r.total_blocks ? double(st.kv_blocks_used) / r.total_blocks : 0.0;
    s.peak_kv_utilisation = std::max(s.peak_kv_utilisation, util);
    weighted_util += util * st.duration_s;
  }
  s.mean_kv_utilisation = s.busy_s > 0 ? weighted_util / s.busy_s : 0.0;
  s.prefix_hit_rate = query ? double(hit) / double(query) : 0.0;
  std::vector<double> ttft, tpot, e2e;
  for (const RequestRecord& q : r.requests) {
    s.prompt_tokens += q.prompt_tokens;
    s.generated_tokens += q.output_tokens;
    ttft.push_back(q.first_token_s - q.arrival_s);
    e2e.push_back(q.finish_s - q.arrival_s);
    if (q.output_tokens > 1) tpot.push_back((q.finish_s - q.first_token_s) / double(q.output_tokens - 1));
  }
  s.ttft_s = percentiles(ttft);
  s.tpot_s = percentiles(tpot);
  s.e2e_s = percentiles(e2e);
  if (makespan_s > 0) {
    s.generated_tokens_per_s = double(s.generated_tokens) / makespan_s;
    s.requests_per_s = double(s.requests) / makespan_s;
  }
  return s;
}

}  // namespace duet
