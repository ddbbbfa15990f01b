#include "cli/report.hpp"

namespace duet {

void print_summary(const RunSummary& s, std::FILE* out) {
  std::fprintf(out, "makespan %.3f s (simulated/measured device time), wall %.3f s\n", s.makespan_s,
               s.wall_s);
  std::fprintf(out, "%-6s %-16s %8s %9s %10s %9s %8s %8s %8s %8s %8s %8s %7s %7s %6s %6s\n", "engine",
               "model", "requests", "req/s", "gen tok/s", "steps", "ttft p50", "ttft p90", "ttft p99",
               "tpot p50", "e2e p50", "e2e p99", "hit %", "kv pk%", "preem", "evict");
  for (const EngineSummary& e : s.engines) {
    std::fprintf(
        out,
        "%-6s %-16s %8lld %9.2f %10.1f %9lld %8.3f %8.3f %8.3f %8.4f %8.2f %8.2f %7.2f %7.1f %6lld %6lld\n",
        e.name.c_str(), e.model.c_str(), (long long)e.requests, e.requests_per_s, e.generated_tokens_per_s,
        (long long)e.steps, e.ttft_s.p50, e.ttft_s.p90, e.ttft_s.p99, e.tpot_s.p50, e.e2e_s.p50, e.e2e_s.p99,
        100 * e.prefix_hit_rate, 100 * e.peak_kv_utilisation, (long long)e.preemptions,
        (long long)e.evictions);
  }
}

}  // namespace duet
