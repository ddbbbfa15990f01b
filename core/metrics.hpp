#pragma once
// What a run records: one row per engine step, one row per finished sequence, and the summary
// computed from them. The same records come from the simulator and the real engine, so that their
// HDF5 files share one schema.
#include <cstdint>
#include <string>
#include <vector>

namespace duet {

struct StepRecord {
  double start_s = 0.0;     // device time the step began
  double duration_s = 0.0;  // device time of the step (cost model or measured)
  // The engine's host work around the forward pass: scheduling, postprocessing and the runtime's
  // bookkeeping. Measured as (step end - start) - duration_s on the wall clock; the cost model's
  // host share in simulation. The step spans duration_s + host_s on the run's timeline.
  double host_s = 0.0;
  double cpu_s = 0.0;  // host time of the executor: batch preparation, launches, outputs (CUDA engine)
  std::int32_t prefill_tokens = 0;
  std::int32_t decode_tokens = 0;
  std::int32_t num_seqs = 0;  // batch items
  std::int32_t decode_seqs = 0;
  std::int64_t decode_context_tokens = 0;           // KV tokens the decodes read
  std::int64_t decode_distinct_context_tokens = 0;  // the same, a block read by several counted once
  double prefill_attention_keys = 0;                // see BatchShape: the prefill attention work
  std::int64_t prefill_context_tokens = 0;          // KV tokens before the prefill chunks, summed
  double prefill_tokens_squared = 0;                // sum over prefill chunks of n*n (see BatchShape)
  std::int32_t logit_rows = 0;                      // LM-head rows: one per sample, one per scored position
  std::int32_t num_running = 0;                     // after the step
  std::int32_t num_waiting = 0;                     // after the step
  std::int32_t kv_blocks_used = 0;  // as the batch ran (after scheduling, before finishes free)
  std::int32_t kv_blocks_free = 0;
  std::int32_t kv_blocks_cached = 0;
  std::int64_t kv_filled_tokens = 0;
  std::int64_t prefix_query_tokens = 0;  // this step's admissions
  std::int64_t prefix_hit_tokens = 0;
  std::int32_t evictions = 0;  // this step
  std::int32_t preemptions = 0;
  std::int32_t cow_copies = 0;
};

struct RequestRecord {
  std::uint64_t seq_id = 0;
  std::uint64_t owner = 0;         // the workload's handle (problem, trace row)
  std::uint8_t kind = 0;           // SeqKind
  std::uint8_t finish_reason = 0;  // FinishReason; Aborted: released unfinished, no latencies
  double arrival_s = 0.0;
  double first_scheduled_s = 0.0;
  double first_token_s = 0.0;  // first sampled token, or the score for a PRM request
  double finish_s = 0.0;
  std::int32_t prompt_tokens = 0;
  std::int32_t output_tokens = 0;
  std::int32_t cached_tokens = 0;  // prefix-cache hits at first admission
  std::int32_t preemptions = 0;
};

// One problem of a search workload (Lua): when it ran, what it cost and what it found.
struct ProblemRecord {
  std::int64_t index = 0;       // 1-based, in the problem set
  std::int32_t level = 0;       // difficulty (MATH: 1-5), 0 when unknown
  std::int32_t iterations = 0;  // search iterations (e.g. beam-search depth reached)
  std::int32_t correct = -1;    // 1 or 0 by the workload's answer model, -1 unknown
  double start_s = 0.0;
  double finish_s = 0.0;
  std::int64_t requests = 0;          // sequences submitted, all engines
  std::int64_t generated_tokens = 0;  // tokens generated for it, all engines
  double score = 0.0;                 // the search's final (aggregated PRM) score
};

struct Percentiles {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
};

// A request's latencies, in seconds. TTFT is arrival to the first token (or a PRM request's
// score); TPOT is the mean gap between later tokens, NaN with fewer than two output tokens.
double time_to_first_token(const RequestRecord& request);
double time_per_output_token(const RequestRecord& request);
double end_to_end_latency(const RequestRecord& request);

struct EngineSummary {
  std::string name;
  std::string model;
  std::int64_t steps = 0;
  std::int64_t requests = 0;
  std::int64_t prompt_tokens = 0;
  std::int64_t generated_tokens = 0;
  double generated_tokens_per_s = 0;
  double requests_per_s = 0;
  Percentiles ttft_s, tpot_s, e2e_s;
  double prefix_hit_rate = 0;      // hit tokens / query tokens
  double peak_kv_utilisation = 0;  // used blocks / total
  double mean_kv_utilisation = 0;  // time-weighted over steps
  std::int64_t preemptions = 0;
  std::int64_t evictions = 0;
  std::int64_t cow_copies = 0;
  double busy_s = 0;  // sum of step spans: device time plus host time
};

struct EngineRecords {
  std::string name;
  std::string model;
  std::int32_t total_blocks = 0;
  int block_size = 0;
  std::vector<StepRecord> steps;
  std::vector<RequestRecord> requests;
};

struct RunSummary {
  double makespan_s = 0;  // first arrival to last finish, device time
  double wall_s = 0;      // host time the run took
  std::vector<EngineSummary> engines;
};

// What a run keeps of its records: the step timeline and everything below it, the per-request
// table without the timeline, or only the summary (a sweep of thousands of points often wants
// nothing more, and should not pay for timelines).
enum class RecordLevel : std::uint8_t { Steps, Requests, Summary };

RecordLevel record_level_from_name(const std::string& name);  // steps, requests, summary
const char* record_level_name(RecordLevel level);
// What each level keeps: the step timeline; the requests (and a search's problems).
constexpr bool keeps_steps(RecordLevel level) { return level == RecordLevel::Steps; }
constexpr bool keeps_requests(RecordLevel level) { return level != RecordLevel::Summary; }

// Receives a run's records as they are made, e.g. a file written as the run goes.
class RecordSink {
 public:
  virtual ~RecordSink() = default;
  virtual void add_step(int engine, const StepRecord& step) = 0;
  virtual void add_request(int engine, const RequestRecord& request) = 0;
};

// An engine's summary, built as its records arrive, so that a run need not keep its timeline to
// summarize it. summarize() adds kept records through it in the same order, so the two agree bit
// for bit (but a run's evictions on a shared pool: Runtime::summary also counts those after an
// engine's last step, which no step record holds). It keeps three latencies per request (the
// percentiles need the sample).
class SummaryAccumulator {
 public:
  SummaryAccumulator(std::string name, std::string model, std::int32_t total_blocks);
  void add(const StepRecord& step);
  void add(const RequestRecord& request);
  EngineSummary summary(double makespan_s) const;
  // Tokens the engine computed in prefill (prefix hits and forked KV are not recomputed).
  std::int64_t computed_prefill_tokens() const { return prefill_tokens_; }

 private:
  EngineSummary s_;
  std::int32_t total_blocks_ = 0;
  std::int64_t query_tokens_ = 0, hit_tokens_ = 0, prefill_tokens_ = 0;
  double weighted_util_ = 0;
  std::vector<double> ttft_, tpot_, e2e_;
};

// Its mean, and quantiles interpolated linearly between ranks (numpy's default); NaNs are left out.
Percentiles percentiles(std::vector<double> values);
// The sample's median, interpolated (the mean of the middle two of an even sample); 0 if empty.
double median(std::vector<double> values);

// The nearest-rank q-quantile (q in [0, 1]) of `values`: the sorted sample's element at rank
// round(q * (n - 1)); 0 for an empty sample. Fit and validation reports use it (a measured value,
// never an interpolated one); Percentiles interpolate between ranks.
double quantile(std::vector<double> values, double q);
EngineSummary summarize(const EngineRecords& records, double makespan_s);

}  // namespace duet
