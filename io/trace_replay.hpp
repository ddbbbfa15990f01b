#pragma once
// Replays a trace into one engine: each request arrives at its timestamp (scaled), with the
// trace's prompt tokens and exactly its output length (vLLM's ignore_eos + max_tokens), so that
// every backend sees the same token counts. Sequences are created when they arrive, not before:
// a long trace never holds more prompts in memory than are in flight.
#include <cstdint>
#include <string>

#include "core/runtime.hpp"
#include "io/trace.hpp"

namespace duet {

enum class TooLong { Error, Skip };

struct TraceReplayOptions {
  int engine = 0;
  double rate_scale = 1.0;       // 2: arrivals twice as dense
  std::size_t max_requests = 0;  // 0: the whole trace
  std::uint64_t seed = 0;
  int vocab_size = 128256;
  int max_model_len = 0;  // requests longer than this are an error, or skipped
  TooLong too_long = TooLong::Error;
};

class TraceReplay final : public Workload {
 public:
  TraceReplay(const Trace& trace, TraceReplayOptions options);
  void start(Runtime& rt) override;
  void on_finished(Runtime& rt, int engine, Sequence& seq) override;
  void on_wakeup(Runtime& rt, std::uint64_t tag) override;

  std::size_t total() const { return total_; }
  std::size_t submitted() const { return next_; }
  std::size_t finished() const { return finished_; }
  std::size_t skipped() const { return skipped_; }

 private:
  void submit_due(Runtime& rt);

  const Trace& trace_;
  TraceReplayOptions opt_;
  std::size_t total_;
  std::size_t next_ = 0;
  std::size_t finished_ = 0;
  std::size_t skipped_ = 0;
};

}  // namespace duet
