// duet bench: measured figures printed as ratios against their targets, so that a noisy machine
// still gives a readable answer. Each benchmark runs in one thread.
#include <unistd.h>
#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/source_dir.hpp"
#include "core/error.hpp"
#include "core/runtime.hpp"
#include "exec/cpu_executor.hpp"
#include "exec/experiment.hpp"
#include "exec/gpu_bench.hpp"
#include "exec/wall_clock.hpp"
#include "exec/weights.hpp"
#include "io/trace_replay.hpp"

namespace po = boost::program_options;

namespace duet::cli {

namespace {

// A whole trace through one engine priced by the roofline, the records kept in memory. A request
// longer than the model's context (16,384 at most) is skipped and counted.
ExperimentOutcome simulate_trace(const Trace& trace, const std::string& model, const std::string& gpu_name,
                                 std::size_t* finished = nullptr, std::size_t* skipped = nullptr) {
  ExperimentSpec spec;
  spec.gpu = gpu_from(gpu_name);
  spec.source_dir = source_dir();
  EngineSetup e;
  e.config.model = model_from(model);
  check_can_generate(e.config.model, "bench sim-trace");  // a trace's requests generate
  e.config.max_model_len = std::min(16384, e.config.model.max_position_embeddings);
  e.cost_model = "roofline";
  spec.engines.push_back(e);
  TraceReplay replay(trace, {0, 1.0, 0, 0, e.config.model.vocab_size, e.config.max_model_len, TooLong::Skip});
  ExperimentOutcome o = run_experiment(spec, replay);
  if (finished) *finished = replay.finished();
  if (skipped) *skipped = replay.skipped();
  return o;
}

// Replays a whole trace through one engine on the roofline: the simulator's speed, the figure that
// Vidur's third-party median (8.4 s per experiment) is compared with. Target: under 2 s wall.
int bench_sim_trace(const std::string& trace_path, const std::string& model, const std::string& gpu_name,
                    double target_s) {
  const auto t0 = std::chrono::steady_clock::now();
  const Trace trace = load_trace(resolve_path(trace_path, source_dir()));
  const auto t1 = std::chrono::steady_clock::now();
  std::size_t finished = 0, skipped = 0;
  const ExperimentOutcome o = simulate_trace(trace, model, gpu_name, &finished, &skipped);
  const GpuSpec gpu = gpu_from(gpu_name);
  std::int64_t steps = 0;
  double simulated_s = 0;
  for (const StepRecord& r : o.records[0].steps)
    simulated_s = std::max(simulated_s, r.start_s + r.duration_s + r.host_s);
  steps = std::int64_t(o.records[0].steps.size());
  const auto t2 = std::chrono::steady_clock::now();
  const double load_s = seconds_since(t0, t1);
  const double sim_s = seconds_since(t1, t2);
  const double wall_s = load_s + sim_s;
  std::printf("bench sim-trace: %s, %zu requests, %s on %s (%s)\n", trace.source.c_str(), finished,
              o.records[0].model.c_str(), gpu.name.c_str(), o.cost_models[0].c_str());
  if (skipped > 0)
    std::printf("  skipped              %8zu requests longer than the model's context\n", skipped);
  std::printf("  wall time            %8.3f s  (load %.3f s + simulate %.3f s)\n", wall_s, load_s, sim_s);
  std::printf("  simulated time       %8.1f s\n", simulated_s);
  std::printf("  engine steps         %8lld  (%.0f steps/s, %.2f us per step)\n", (long long)steps,
              double(steps) / sim_s, 1e6 * sim_s / double(steps));
  std::printf("  simulated / wall     %8.0f x\n", simulated_s / wall_s);
  std::printf("  generated tokens/s   %8.1f (simulated)\n", o.summary.engines[0].generated_tokens_per_s);
  std::printf("  target               %8.3f s wall: %s (ratio %.2f)\n", target_s,
              wall_s <= target_s ? "met" : "MISSED", wall_s / target_s);
  return 0;
}

// The run file's compression, chosen on measurement: the records of a whole trace written with each
// setting (the fastest of three writes), the file's size and the write time.
int bench_hdf5(const std::string& trace_path, const std::string& model, const std::string& gpu_name) {
  const Trace trace = load_trace(resolve_path(trace_path, source_dir()));
  const ExperimentOutcome o = simulate_trace(trace, model, gpu_name);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("duet-bench-hdf5-" + std::to_string(::getpid()) + ".h5"))
          .string();
  struct Setting {
    const char* name;
    TableCompression compression;
  };
  const Setting settings[] = {{"none", {false, 0}},
                              {"shuffle", {true, 0}},
                              {"deflate 1", {false, 1}},
                              {"shuffle + deflate 1", {true, 1}},
                              {"shuffle + deflate 4", {true, 4}},
                              {"shuffle + deflate 6", {true, 6}},
                              {"shuffle + deflate 9", {true, 9}}};
  std::size_t rows = 0;
  double raw_mb = 0;  // the rows as they are in memory
  for (const EngineRecords& r : o.records) {
    rows += r.steps.size() + r.requests.size();
    raw_mb += double(r.steps.size() * sizeof(StepRecord) + r.requests.size() * sizeof(RequestRecord)) / 1e6;
  }
  std::printf("bench hdf5: %s (%zu rows), %s on %s; the fastest of 3 writes\n", trace.source.c_str(), rows,
              o.records[0].model.c_str(), gpu_name.c_str());
  std::printf("  %-22s %10s %10s %12s\n", "compression", "size MB", "write s", "MB/s in");
  for (const Setting& s : settings) {
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      RunFileWriter writer(path, s.compression);
      writer.write_run("/", o.metadata, o.records, o.summary);
      writer.close();
      best = std::min(best, seconds_since(t0));
    }
    const double mb = double(std::filesystem::file_size(path)) / 1e6;
    std::printf("  %-22s %10.2f %10.3f %12.0f\n", s.name, mb, best, raw_mb / best);
  }
  std::filesystem::remove(path);
  return 0;
}

// The CPU reference engine's speed on a model (the tiny one by default), for information:
// prefill of `batch` prompts of `prompt` tokens in one step, then `decode` decode steps.
int bench_cpu(const std::string& model_path, int batch, int prompt, int decode) {
  const ModelSpec spec = model_from(model_path);
  check_can_generate(spec, "bench cpu");  // its decode steps generate
  // Each sequence within the model's positions, and the KV pool's block count within int32.
  if (std::int64_t(prompt) + decode >= spec.max_position_embeddings)
    throw UsageError("--prompt + --decode is " + std::to_string(std::int64_t(prompt) + decode) + ", beyond " +
                     spec.name + "'s max_position_embeddings " +
                     std::to_string(spec.max_position_embeddings));
  if (std::int64_t(batch) * ((prompt + decode) / 16 + 2) > std::numeric_limits<std::int32_t>::max())
    throw UsageError("--batch " + std::to_string(batch) + " of " + std::to_string(prompt + decode) +
                     " tokens each needs more KV blocks than an engine holds (2^31)");
  const LlamaWeights weights = dummy_llama_weights(spec, 0);
  const int block_size = 16;
  const int blocks = batch * ((prompt + decode) / block_size + 2);
  CpuExecutor exec(weights, blocks, block_size);
  EngineConfig config;
  config.model = spec;
  config.block_size = block_size;
  config.max_num_seqs = batch;
  config.max_num_batched_tokens = batch * prompt;
  config.max_model_len = prompt + decode + 1;
  config.enable_prefix_caching = false;
  EngineMemory memory;
  memory.num_blocks = blocks;
  Engine engine = assemble_engine(config, memory, 0, exec);
  for (int i = 0; i < batch; ++i) {
    Sequence s;
    s.id = SeqId(i + 1);
    for (int t = 0; t < prompt; ++t) s.tokens.push_back(TokenId((i * 7919 + t * 31) % spec.vocab_size));
    s.num_prompt_tokens = prompt;
    s.sampling.max_tokens = decode + 1;
    s.sampling.ignore_eos = true;
    engine.add(std::move(s), 0);
  }
  double prefill_s = 0, decode_s = 0;
  int decode_steps = 0;
  while (engine.has_work()) {
    const StepOutcome o = engine.step(0);
    if (o.batch.shape.prefill_tokens > 0) prefill_s += o.result.duration_s;
    else {
      decode_s += o.result.duration_s;
      ++decode_steps;
    }
  }
  std::printf("bench cpu: %s, %d layers, hidden %d, dummy weights, one thread\n", spec.name.c_str(),
              spec.num_layers, spec.hidden_size);
  std::printf("  prefill  %d x %d tokens   %8.3f s   %10.0f tokens/s\n", batch, prompt, prefill_s,
              double(batch) * prompt / prefill_s);
  std::printf("  decode   %d seqs x %d steps %8.3f s   %10.0f tokens/s (%.3f ms per step)\n", batch,
              decode_steps, decode_s, double(batch) * decode_steps / decode_s,
              1e3 * decode_s / std::max(1, decode_steps));
  return 0;
}

// The options each benchmark reads: another one given (--json to sim-trace) would be silently
// ignored, so it is an error naming what the benchmark takes.
void check_bench_options(const std::string& which, const po::variables_map& vm) {
  static const std::map<std::string, std::set<std::string>> kTakes = {
      {"sim-trace", {"trace", "model", "gpu", "target-s"}},
      {"hdf5", {"trace", "model", "gpu"}},
      {"cpu", {"cpu-model", "batch", "prompt", "decode"}},
      {"decode", {"gpu", "gpu-model", "iters", "block-size", "json", "peer"}},
      {"attention", {"gpu", "gpu-model", "iters", "block-size", "json"}},
      {"prefill", {"gpu", "gpu-model", "layers", "prefill-seq", "iters", "block-size", "json"}},
      {"cpu-overhead", {"gpu", "gpu-model", "json"}},
  };
  const auto takes = kTakes.find(which);
  if (takes == kTakes.end()) {
    std::string valid;
    for (const auto& [name, options] : kTakes) valid += (valid.empty() ? "" : ", ") + name;
    throw Error("unknown benchmark '" + which + "' (valid: " + valid + ")");
  }
  for (const auto& [name, value] : vm) {
    if (value.defaulted() || name == "name" || takes->second.count(name)) continue;
    std::string list;
    for (const std::string& o : takes->second) list += (list.empty() ? "--" : ", --") + o;
    throw Error("--" + name + " is not an option of bench " + which + " (it takes " + list + ")");
  }
}

}  // namespace

int bench(int argc, char** argv) {
  std::string which, trace = source_dir() + "/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv";
  std::string model = "llama-3.1-8b", gpu = "h100";
  double target_s = 2.0;
  std::string cpu_model = source_dir() + "/models/tiny-llama/config.json";
  int batch = 16, prompt = 256, decode = 64;
  gpu_bench::GpuBenchOptions g;
  po::options_description options(
      "duet bench NAME: benchmarks that print their figures and ratios\n"
      "  sim-trace     replay a whole trace through one simulated engine (speed)\n"
      "  hdf5          the run file's size and write time under each compression\n"
      "  cpu           the CPU reference engine's prefill and decode tokens/s\n"
      "  decode        CUDA: Llama-3.2-1B decode steps vs the HBM roofline (batch 1-256)\n"
      "  attention     CUDA: paged decode attention GB/s vs peak bandwidth, at each split count\n"
      "  prefill       CUDA: Llama-3.1-8B (PRM) prefill TFLOP/s vs dense bf16 peak\n"
      "  cpu-overhead  CUDA: host time per step (scheduling + batch preparation)");
  options.add_options()("name", po::value(&which), "benchmark to run")(
      "trace", po::value(&trace)->default_value(trace), "sim-trace: the trace to replay")(
      "model", po::value(&model)->default_value(model), "sim-trace: model")(
      "gpu", po::value(&gpu)->default_value(gpu),
      "sim-trace: GPU; CUDA benchmarks: the spec to compare with (default: detected from the device name)")(
      "target-s", po::value(&target_s)->default_value(target_s), "sim-trace: wall-time target")(
      "cpu-model", po::value(&cpu_model)->default_value(cpu_model), "cpu: model config")(
      "batch", po::value(&batch)->default_value(batch), "cpu: sequences")(
      "prompt", po::value(&prompt)->default_value(prompt), "cpu: prompt tokens")(
      "decode", po::value(&decode)->default_value(decode), "cpu: decode steps")(
      "gpu-model", po::value(&g.model),
      "CUDA benchmarks: model (default llama-3.2-1b; prefill llama-3.1-8b)")(
      "layers", po::value(&g.layers)->default_value(g.layers), "prefill: decoder layers to run (0: all)")(
      "prefill-seq", po::value(&g.prefill_seq)->default_value(g.prefill_seq),
      "prefill: tokens per sequence (0: one sequence per step)")(
      "iters", po::value(&g.iters)->default_value(g.iters), "CUDA benchmarks: timed repetitions")(
      "block-size", po::value(&g.block_size)->default_value(g.block_size),
      "CUDA benchmarks: KV block size in tokens")("json", po::value(&g.json),
                                                  "CUDA benchmarks: write the results as JSON to this file")(
      "peer", po::value(&g.peer),
      "decode: scripts/peer_hf.py's JSON; prints duet's tokens/s over HF transformers'")("help,h",
                                                                                         "this help");
  po::positional_options_description positional;
  positional.add("name", 1);
  return run_command({"bench", options, &positional, "name"}, argc, argv, [&](const po::variables_map& vm) {
    check_usage([&] { check_bench_options(which, vm); });
    if (!vm["gpu"].defaulted()) g.gpu = gpu;
    check_at_least("--iters", g.iters, 1);
    check_at_least("--block-size", g.block_size, 1);
    if (which == "sim-trace") {
      if (!(target_s > 0) || !std::isfinite(target_s))
        throw Error("--target-s must be a positive number of seconds, got " + std::to_string(target_s));
      return bench_sim_trace(trace, model, gpu, target_s);
    }
    if (which == "cpu") {
      check_at_least("--batch", batch, 1);
      check_at_least("--prompt", prompt, 1);
      check_at_least("--decode", decode, 1);
      return bench_cpu(cpu_model, batch, prompt, decode);
    }
    if (which == "hdf5") return bench_hdf5(trace, model, gpu);
    if (which == "decode") return gpu_bench::bench_decode(g);
    if (which == "attention") return gpu_bench::bench_attention(g);
    if (which == "prefill") return gpu_bench::bench_prefill(g);
    if (which == "cpu-overhead") return gpu_bench::bench_cpu_overhead(g);
    throw std::logic_error("bench: '" + which + "' is in check_bench_options' table but not run");
  });
}

}  // namespace duet::cli
