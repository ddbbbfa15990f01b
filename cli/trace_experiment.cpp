#include "cli/trace_experiment.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <stdexcept>

#include "cli/command.hpp"
#include "cli/source_dir.hpp"
#include "core/error.hpp"
#include "core/memory_plan.hpp"
#include "core/model_spec.hpp"
#include "sim/profiles.hpp"

namespace po = boost::program_options;

namespace duet::cli {

po::options_description trace_options(TraceArgs& a, BackendChoice backends) {
  po::options_description workload("Workload (one of --trace and --synthetic)");
  workload.add_options()(
      "trace", po::value(&a.trace),
      "trace file: Azure LLM 2023 CSV or Mooncake JSONL (.gz too); a relative path that is not "
      "here is looked up in the repository, as --model's is")(
      "trace-format", po::value(&a.trace_format)->default_value("auto"), "auto, azure or mooncake")(
      "rate-scale", po::value(&a.rate_scale)->default_value(1.0, "1"),
      "replay arrivals this many times faster")("max-requests", po::value(&a.max_requests)->default_value(0),
                                                "replay only the first N requests (0: all)")(
      "on-too-long", po::value(&a.on_too_long)->default_value("skip"),
      "a request longer than max_model_len: skip (alone, and counted in the summary and the file) or error")(
      "synthetic", po::value(&a.synthetic)->default_value(0), "N synthetic requests instead of a trace")(
      "input-tokens", po::value(&a.input_tokens)->default_value(512), "synthetic: prompt tokens per request")(
      "output-tokens", po::value(&a.output_tokens)->default_value(128),
      "synthetic: output tokens per request")("request-rate",
                                              po::value(&a.request_rate)->default_value(0.0, "0"),
                                              "synthetic: Poisson arrivals per second (0: all at once)")(
      "seed", po::value(&a.seed)->default_value(0),
      "seed of prompt tokens, arrivals, outputs and dummy weights");
  const std::string model_help =
      "built-in model (" + builtin_model_list() + "), or a HuggingFace config.json or its folder";
  po::options_description engine("Engine (vLLM's names)");
  engine.add_options()("model", po::value(&a.model)->default_value("llama-3.1-8b"), model_help.c_str())(
      "gpu", po::value(&a.gpu)->default_value("h100"),
      "h100, h200, a100, a100-40gb (case-insensitive), or a GPU description (.json)")(
      "gpu-memory-utilization", po::value(&a.gpu_memory_utilization)->default_value(0.9, "0.9"),
      "share of GPU memory for this engine")("block-size", po::value(&a.engine.block_size)->default_value(16),
                                             "tokens per KV block")(
      "max-num-seqs", po::value(&a.engine.max_num_seqs)->default_value(256), "sequences per step")(
      "max-num-batched-tokens", po::value(&a.engine.max_num_batched_tokens)->default_value(8192),
      "tokens per step")(
      "max-model-len", po::value(&a.engine.max_model_len)->default_value(0),
      "longest prompt + output (0: the model's max_position_embeddings, capped by what the KV pool holds)")(
      "enable-prefix-caching", po::value(&a.prefix_caching)->default_value(true), "true or false")(
      "enable-chunked-prefill", po::value(&a.chunked_prefill)->default_value(true),
      "true or false (false: --max-num-batched-tokens must be at least --max-model-len, as in vLLM)")(
      "scheduler-reserve-full-isl", po::value(&a.reserve_full_isl)->default_value(false),
      "true: admit a request only when its whole prompt's blocks are free (vLLM's "
      "scheduler_reserve_full_isl)")(
      "num-gpu-blocks-override", po::value(&a.num_gpu_blocks_override)->default_value(0),
      "what-if KV pool size in blocks instead of the plan's (0: from the budget)")(
      "allocator", po::value(&a.allocator)->default_value("paged"),
      "paged, or naive (max-length reservations)")(
      "cost-model", po::value(&a.cost_model)->default_value("auto"),
      "simulator: auto (the model's committed profile on the device, else the device's operator prior, else "
      "the "
      "roofline), roofline, operator, operator:PRIOR.json or profile:PROFILE.json");
  if (backends == BackendChoice::Any)
    engine.add_options()("backend", po::value(&a.backend)->default_value("sim"),
                         "sim (simulator), cpu or cuda (real engines, wall clock)");
  else engine.add_options()("backend", po::value(&a.backend), "cpu or cuda: the real engine to measure");
  engine.add_options()("load-format", po::value(&a.load_format)->default_value("dummy"),
                       "real engines: dummy, or a checkpoint path");
  po::options_description all;
  all.add(workload).add(engine);
  return all;
}

namespace {

Trace synthetic_trace(const TraceArgs& a) {
  check_at_least("--input-tokens", a.input_tokens, 1);
  check_at_least("--output-tokens", a.output_tokens, 1);
  if (!(a.request_rate >= 0) || !std::isfinite(a.request_rate))
    throw Error("--request-rate must be a finite number >= 0, got " + std::to_string(a.request_rate));
  Trace t;
  t.source = "synthetic";
  std::mt19937_64 rng(a.seed);
  double time = 0;
  for (int i = 0; i < a.synthetic; ++i) {
    if (a.request_rate > 0) time += -std::log((double(rng() >> 11) + 0.5) * 0x1.0p-53) / a.request_rate;
    if (time > kMaxRunTime_s) {
      std::ostringstream shown;
      shown << "--request-rate " << a.request_rate << " puts request " << i + 1 << " at " << time
            << " s, past 1e8 s (3.2 years) of run time";
      throw Error(shown.str());
    }
    t.requests.push_back({time, a.input_tokens, a.output_tokens, {}});
  }
  return t;
}

// vLLM's default: the model's own context length, but never more than the KV pool can hold for
// one sequence (a longer request could never be scheduled).
std::string choose_max_model_len(EngineConfig& cfg, const GpuSpec& gpu) {
  check_at_least("--max-model-len", cfg.max_model_len, 0);
  if (cfg.max_model_len > 0) return "max_model_len " + std::to_string(cfg.max_model_len) + " (given)";
  const EngineMemory m = plan_memory(gpu, {memory_request(cfg)}).engines.at(0);
  const std::int64_t pool = std::int64_t(m.num_blocks) * m.block_size;
  const int model = cfg.model.max_position_embeddings;
  cfg.max_model_len = int(std::min<std::int64_t>(model, pool));
  return "max_model_len " + std::to_string(cfg.max_model_len) +
         (model <= pool ? " (the model's max_position_embeddings)"
                        : " (the KV pool's " + std::to_string(pool) + " tokens; the model allows " +
                              std::to_string(model) + ")");
}

}  // namespace

std::string first_given(const TraceArgs& a, std::initializer_list<std::string_view> flags) {
  const TraceArgs d;
  const std::pair<std::string_view, bool> given[] = {{"--model", a.model != d.model},
                                                     {"--gpu", a.gpu != d.gpu},
                                                     {"--cost-model", a.cost_model != d.cost_model},
                                                     {"--trace-format", a.trace_format != d.trace_format},
                                                     {"--rate-scale", a.rate_scale != d.rate_scale},
                                                     {"--max-requests", a.max_requests != d.max_requests},
                                                     {"--input-tokens", a.input_tokens != d.input_tokens},
                                                     {"--output-tokens", a.output_tokens != d.output_tokens},
                                                     {"--request-rate", a.request_rate != d.request_rate}};
  for (std::string_view flag : flags) {
    const auto* it =
        std::find_if(std::begin(given), std::end(given), [&](const auto& g) { return g.first == flag; });
    if (it == std::end(given)) throw std::logic_error("first_given: no option " + std::string(flag));
    if (it->second) return std::string(flag);
  }
  return {};
}

TraceExperiment trace_experiment(const TraceArgs& a, const std::string& source_dir,
                                 const std::string& command_line) {
  TraceExperiment x;
  EngineConfig cfg = a.engine;
  cfg.name = "llm";
  cfg.model = model_from(a.model, source_dir);
  // Its requests (a trace's or synthetic) generate: a PRM with a score head would fail at the first.
  check_can_generate(cfg.model, "--model " + a.model);
  cfg.gpu_memory_utilization = a.gpu_memory_utilization;
  cfg.enable_prefix_caching = a.prefix_caching;
  cfg.enable_chunked_prefill = a.chunked_prefill;
  cfg.scheduler_reserve_full_isl = a.reserve_full_isl;
  cfg.allocator = allocator_kind_from_name(a.allocator);
  try {
    check_cost_model_name(a.cost_model);
  } catch (const Error& e) {
    throw Error(std::string("--cost-model: ") + e.what());
  }
  check_at_least("--num-gpu-blocks-override", a.num_gpu_blocks_override, 0);
  if (a.num_gpu_blocks_override > 0) cfg.num_gpu_blocks_override = a.num_gpu_blocks_override;
  if (a.synthetic < 0)
    throw Error("--synthetic must be a positive number of requests, got " + std::to_string(a.synthetic));
  if (a.max_requests < 0)
    throw Error("--max-requests must be >= 0 (0: the whole trace), got " + std::to_string(a.max_requests));
  if (a.trace.empty() == (a.synthetic <= 0))
    throw Error("give exactly one of --trace FILE and --synthetic N");
  // NaN compares false with everything: an unchecked one hangs the replay's clock.
  if (!(a.rate_scale > 0) || !std::isfinite(a.rate_scale))
    throw Error("--rate-scale must be a finite number > 0, got " + std::to_string(a.rate_scale));
  // The other workload's options would be ignored: they are errors.
  if (const std::string f = a.synthetic > 0
                                ? first_given(a, {"--rate-scale", "--trace-format", "--max-requests"})
                                : std::string();
      !f.empty())
    throw Error(f + " is for --trace; --synthetic takes --request-rate and --synthetic N");
  if (const std::string f = !a.trace.empty()
                                ? first_given(a, {"--input-tokens", "--output-tokens", "--request-rate"})
                                : std::string();
      !f.empty())
    throw Error(f + " is for --synthetic; a trace gives its own (--rate-scale replays it faster)");
  x.trace = a.trace.empty()
                ? synthetic_trace(a)
                : load_trace(resolve_path(a.trace, source_dir), trace_format_from_name(a.trace_format));
  x.spec.gpu = gpu_from(a.gpu, source_dir);
  x.spec.backend = a.backend;
  check_backend(a.backend);
  x.spec.seed = a.seed;
  x.spec.source_dir = source_dir;
  x.spec.profile_dir = source_dir + "/profiles";
  x.spec.command_line = command_line;
  x.max_model_len_choice = choose_max_model_len(cfg, x.spec.gpu);
  std::string load_format;
  try {
    load_format = checkpoint_from(a.load_format, source_dir);
  } catch (const Error& e) {
    throw Error(std::string("--load-format ") + e.what());
  }
  x.spec.engines.push_back({cfg, a.cost_model, load_format, {}});
  if (a.on_too_long != "skip" && a.on_too_long != "error")
    throw Error("--on-too-long must be skip or error, got '" + a.on_too_long + "'");
  x.replay = {0,
              a.rate_scale,
              std::size_t(a.max_requests),
              a.seed,
              cfg.model.vocab_size,
              cfg.max_model_len,
              a.on_too_long == "skip" ? TooLong::Skip : TooLong::Error};
  return x;
}

}  // namespace duet::cli
