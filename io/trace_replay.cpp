#include "io/trace_replay.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.hpp"
#include "core/mix.hpp"

namespace duet {

TraceReplay::TraceReplay(const Trace& trace, TraceReplayOptions options) : trace_(trace), opt_(options) {
  if (!(opt_.rate_scale > 0) || !std::isfinite(opt_.rate_scale))
    throw Error("rate scale must be a finite number > 0, got " + std::to_string(opt_.rate_scale));
  total_ = opt_.max_requests ? std::min(opt_.max_requests, trace.requests.size()) : trace.requests.size();
  for (std::size_t i = 0; i < total_; ++i)  // arrivals need not be sorted here: check each
    if (const double t = trace.requests[i].arrival_s / opt_.rate_scale; t > kMaxRunTime_s) {
      std::ostringstream m;
      m << trace.source << ": request " << i + 1 << " arrives at " << t << " s (rate scale "
        << opt_.rate_scale
        << "), past 1e8 s (3.2 years) of run time: a date, a unit error or a vanishing rate";
      throw Error(m.str());
    }
}

void TraceReplay::start(Runtime& rt) {
  if (total_ > 0) rt.wake_at(trace_.requests[0].arrival_s / opt_.rate_scale, 0);
}

void TraceReplay::on_wakeup(Runtime& rt, std::uint64_t) { submit_due(rt); }

void TraceReplay::submit_due(Runtime& rt) {
  // Every request due by now is submitted now, with its own arrival time (on the wall clock a
  // wake-up can come late, after a step); then sleep until the next one.
  for (; next_ < total_ && trace_.requests[next_].arrival_s / opt_.rate_scale <= rt.now(); ++next_) {
    const TraceRequest& r = trace_.requests[next_];
    const std::int64_t longest = std::int64_t(r.input_tokens) + r.output_tokens;  // two ints may overflow one
    if (opt_.max_model_len > 0 && longest > opt_.max_model_len) {
      if (opt_.too_long == TooLong::Skip) {
        ++skipped_;
        continue;
      }
      throw Error(trace_.source + ": request " + std::to_string(next_ + 1) + " needs " +
                  std::to_string(longest) + " tokens, more than max_model_len " +
                  std::to_string(opt_.max_model_len) +
                  " (raise --max-model-len, or skip such requests with --on-too-long skip)");
    }
    Sequence s;
    s.id = rt.next_seq_id();
    s.owner = next_;
    s.tokens = trace_prompt_tokens(trace_, next_, opt_.vocab_size, opt_.seed);
    s.num_prompt_tokens = s.num_tokens();
    s.sampling.max_tokens = std::max(1, r.output_tokens);
    s.sampling.ignore_eos = true;
    s.script.seed = mix64(opt_.seed ^ (0x7472616365ULL + next_));
    rt.submit_arrived(opt_.engine, std::move(s), r.arrival_s / opt_.rate_scale);
  }
  if (next_ < total_) rt.wake_at(trace_.requests[next_].arrival_s / opt_.rate_scale, 0);
}

void TraceReplay::on_finished(Runtime&, int, Sequence&) { ++finished_; }

}  // namespace duet
