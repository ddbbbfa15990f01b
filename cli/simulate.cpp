// duet simulate: replay a public trace (or a synthetic workload) through one simulated engine.
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "cli/report.hpp"
#include "cli/run_metadata.hpp"
#include "core/error.hpp"
#include "core/runtime.hpp"
#include "io/hdf5_run.hpp"
#include "io/trace_replay.hpp"
#include "sim/sim_engine.hpp"

namespace po = boost::program_options;

namespace duet::cli {

namespace {

struct SimulateArgs {
  std::string trace, trace_format = "auto", model = "llama-3.1-8b", gpu = "h100", out, cost_model = "roofline";
  std::string allocator = "paged";
  int synthetic = 0, input_tokens = 512, output_tokens = 128;
  double request_rate = 0, rate_scale = 1;
  std::size_t max_requests = 0;
  bool skip_too_long = false;
  std::uint64_t seed = 0;
  EngineConfig engine;
  double gpu_memory_utilization = 0.9;
  bool prefix_caching = true, chunked_prefill = true;
  std::int32_t num_gpu_blocks_override = 0;
};

po::options_description describe(SimulateArgs& a) {
  po::options_description workload("Workload (one of --trace and --synthetic)");
  workload.add_options()
    ("trace", po::value(&a.trace), "trace file: Azure LLM 2023 CSV or Mooncake JSONL (.gz too)")
    ("trace-format", po::value(&a.trace_format)->default_value("auto"), "auto, azure or mooncake")
    ("rate-scale", po::value(&a.rate_scale)->default_value(1.0), "replay arrivals this many times faster")
    ("max-requests", po::value(&a.max_requests)->default_value(0), "replay only the first N requests (0: all)")
    ("skip-too-long", po::bool_switch(&a.skip_too_long), "skip requests longer than --max-model-len instead of failing")
    ("synthetic", po::value(&a.synthetic)->default_value(0), "N synthetic requests instead of a trace")
    ("input-tokens", po::value(&a.input_tokens)->default_value(512), "synthetic: prompt tokens per request")
    ("output-tokens", po::value(&a.output_tokens)->default_value(128), "synthetic: output tokens per request")
    ("request-rate", po::value(&a.request_rate)->default_value(0.0),
     "synthetic: Poisson arrivals per second (0: all at once)")
    ("seed", po::value(&a.seed)->default_value(0), "seed of prompt tokens, arrivals and outputs");
  po::options_description engine("Engine (vLLM's names)");
  engine.add_options()
    ("model", po::value(&a.model)->default_value("llama-3.1-8b"),
     "built-in model (llama-3.2-1b, llama-3.1-8b) or a HuggingFace config.json")
    ("gpu", po::value(&a.gpu)->default_value("h100"), "h100, h200 or a100 (case-insensitive)")
    ("gpu-memory-utilization", po::value(&a.gpu_memory_utilization)->default_value(0.9),
     "share of GPU memory for this engine")
    ("block-size", po::value(&a.engine.block_size)->default_value(16), "tokens per KV block")
    ("max-num-seqs", po::value(&a.engine.max_num_seqs)->default_value(256), "sequences per step")
    ("max-num-batched-tokens", po::value(&a.engine.max_num_batched_tokens)->default_value(8192), "tokens per step")
    ("max-model-len", po::value(&a.engine.max_model_len)->default_value(8192), "longest prompt + output")
    ("enable-prefix-caching", po::value(&a.prefix_caching)->default_value(true), "true or false")
    ("enable-chunked-prefill", po::value(&a.chunked_prefill)->default_value(true), "true or false")
    ("num-gpu-blocks-override", po::value(&a.num_gpu_blocks_override)->default_value(0),
     "what-if KV pool size in blocks instead of the plan's (0: from the budget)")
    ("allocator", po::value(&a.allocator)->default_value("paged"), "paged, or naive (max-length reservations)")
    ("cost-model", po::value(&a.cost_model)->default_value("roofline"), "roofline, or calibrated:PROFILE.json");
  po::options_description output("Output");
  output.add_options()
    ("out", po::value(&a.out), "HDF5 file to write (see analysis/README.md)")
    ("help,h", "this help");
  po::options_description all("duet simulate: replay a trace or a synthetic workload through the simulator");
  all.add(workload).add(engine).add(output);
  return all;
}

Trace synthetic_trace(const SimulateArgs& a) {
  if (a.input_tokens <= 0 || a.output_tokens <= 0)
    throw Error("--input-tokens and --output-tokens must be positive");
  if (a.request_rate < 0) throw Error("--request-rate must not be negative");
  Trace t;
  t.source = "synthetic";
  std::mt19937_64 rng(a.seed);
  double time = 0;
  for (int i = 0; i < a.synthetic; ++i) {
    if (a.request_rate > 0) time += -std::log((double(rng() >> 11) + 0.5) * 0x1.0p-53) / a.request_rate;
    t.requests.push_back({time, a.input_tokens, a.output_tokens, {}});
  }
  return t;
}

int run_simulate(const SimulateArgs& a, const std::string& command_line) {
  const auto wall0 = std::chrono::steady_clock::now();
  EngineConfig cfg = a.engine;
  cfg.name = "llm";
  cfg.model = resolve_model(a.model);
  cfg.gpu_memory_utilization = a.gpu_memory_utilization;
  cfg.enable_prefix_caching = a.prefix_caching;
  cfg.enable_chunked_prefill = a.chunked_prefill;
  cfg.allocator = allocator_kind_from_name(a.allocator);
  if (a.num_gpu_blocks_override < 0) throw Error("--num-gpu-blocks-override must not be negative");
  if (a.num_gpu_blocks_override > 0) cfg.num_gpu_blocks_override = a.num_gpu_blocks_override;
  const GpuSpec gpu = gpu_by_name(a.gpu);
  const MemoryPlan plan = plan_memory(gpu, {memory_request(cfg)});

  if (a.trace.empty() == (a.synthetic <= 0)) throw Error("give exactly one of --trace FILE and --synthetic N");
  Trace trace = a.trace.empty() ? synthetic_trace(a) : load_trace(a.trace, trace_format_from_name(a.trace_format));

  SimEngine sim(gpu, cfg, plan.engines[0], 0, a.cost_model);
  VirtualClock clock;
  Runtime rt(clock);
  rt.add_engine(sim.engine, cfg.model.name);
  TraceReplay replay(trace, {0, a.rate_scale, a.max_requests, a.seed, cfg.model.vocab_size, cfg.max_model_len,
                             a.skip_too_long ? TooLong::Skip : TooLong::Error});
  ProgressBar bar("simulate");
  rt.on_progress = [&](const Runtime& r) {
    char detail[64];
    std::snprintf(detail, sizeof detail, "requests, simulated %.0f s", r.now());
    bar.update(double(replay.finished()), double(replay.total()), detail);
  };
  rt.run(replay);
  bar.finish();

  RunSummary summary = rt.summary();
  summary.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  std::printf("%s: %zu requests (%zu skipped) on %s, %d KV blocks of %d tokens, %s\n", trace.source.c_str(),
              replay.finished(), replay.skipped(), gpu.name.c_str(), plan.engines[0].num_blocks, cfg.block_size,
              sim.cost->describe().c_str());
  print_summary(summary, stdout);
  if (!a.out.empty()) {
    RunMetadata meta = run_metadata("sim", command_line, gpu, plan, {cfg});
    meta.text.emplace_back("trace", trace.source);
    meta.text.emplace_back("cost_model", sim.cost->describe());
    meta.numbers.emplace_back("rate_scale", a.rate_scale);
    meta.numbers.emplace_back("seed", double(a.seed));
    RunFileWriter(a.out).write_run("/", meta, rt.records(), summary);
    std::printf("wrote %s\n", a.out.c_str());
  }
  return 0;
}

}  // namespace

int simulate(int argc, char** argv) {
  SimulateArgs args;
  const po::options_description options = describe(args);
  std::string command_line = "duet";
  for (int i = 0; i < argc; ++i) command_line += std::string(" ") + argv[i];
  return run_command({"simulate", options}, argc, argv,
                     [&](const po::variables_map&) { return run_simulate(args, command_line); });
}

}  // namespace duet::cli
