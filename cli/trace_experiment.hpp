#pragma once
// One engine replaying a trace (or a synthetic workload): the options `duet simulate` and
// `duet validate --trace` share, and the experiment they describe.
#include <boost/program_options.hpp>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "exec/experiment.hpp"
#include "io/trace_replay.hpp"

namespace duet::cli {

struct TraceArgs {
  std::string trace, trace_format = "auto", model = "llama-3.1-8b", gpu = "h100", cost_model = "auto";
  std::string backend = "sim", load_format = "dummy", allocator = "paged";
  int synthetic = 0, input_tokens = 512, output_tokens = 128;
  double request_rate = 0, rate_scale = 1;
  std::int64_t max_requests = 0;     // 0: the whole trace
  std::string on_too_long = "skip";  // skip (count) or error
  std::uint64_t seed = 0;
  EngineConfig engine;
  double gpu_memory_utilization = 0.9;
  bool prefix_caching = true, chunked_prefill = true, reserve_full_isl = false;
  std::int32_t num_gpu_blocks_override = 0;
};

// Which backends --backend offers: any (the simulator by default), or only a real engine, which
// must then be named (duet validate measures one against the simulator).
enum class BackendChoice { Any, RealEngine };

// Workload, engine and backend options (the caller adds its own output options).
boost::program_options::options_description trace_options(TraceArgs& a, BackendChoice backends);

// The trace, read or made (synthetic), and the experiment that replays it.
struct TraceExperiment {
  std::string max_model_len_choice;  // one line for the user: the max_model_len and why
  Trace trace;
  ExperimentSpec spec;
  TraceReplayOptions replay;
};
// The first of `flags` (trace_options' names: --model, --gpu, --cost-model, --trace-format,
// --rate-scale, --max-requests, --input-tokens, --output-tokens, --request-rate) whose value is not
// its default; empty when none is. An option another mode would ignore is an error, found so.
std::string first_given(const TraceArgs& a, std::initializer_list<std::string_view> flags);

TraceExperiment trace_experiment(const TraceArgs& a, const std::string& source_dir,
                                 const std::string& command_line);

}  // namespace duet::cli
