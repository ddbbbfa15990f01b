// duet bench: measured figures printed as ratios against their targets, so that a noisy machine
// still gives a readable answer. Each benchmark runs in one thread.
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/options_style.hpp"
#include "core/error.hpp"
#include "core/kv_cache_manager.hpp"
#include "exec/cpu_executor.hpp"
#include "exec/weights.hpp"
#include "core/runtime.hpp"
#include "io/trace_replay.hpp"
#include "sim/sim_engine.hpp"

#ifndef DUET_SOURCE_DIR
#define DUET_SOURCE_DIR "."
#endif

namespace po = boost::program_options;

namespace duet::cli {

namespace {

// Replays a whole trace through one engine on the roofline: the simulator's speed, the figure that
// Vidur's third-party median (8.4 s per experiment) is compared with. Target: under 2 s wall.
int bench_sim_trace(const std::string& trace_path, const std::string& model, const std::string& gpu_name,
                    double target_s) {
  const auto t0 = std::chrono::steady_clock::now();
  const Trace trace = load_trace(trace_path);
  const auto t1 = std::chrono::steady_clock::now();
  EngineConfig cfg;
  cfg.model = resolve_model(model);
  cfg.max_model_len = 16384;
  const GpuSpec gpu = gpu_by_name(gpu_name);
  const MemoryPlan plan = plan_memory(gpu, {memory_request(cfg)});
  SimEngine sim(gpu, cfg, plan.engines[0], 0, "roofline");
  VirtualClock clock;
  Runtime rt(clock);
  rt.add_engine(sim.engine, cfg.model.name);
  TraceReplay replay(trace, {0, 1.0, 0, 0, cfg.model.vocab_size, cfg.max_model_len, TooLong::Error});
  rt.run(replay);
  const auto t2 = std::chrono::steady_clock::now();
  const double load_s = std::chrono::duration<double>(t1 - t0).count();
  const double sim_s = std::chrono::duration<double>(t2 - t1).count();
  const double wall_s = load_s + sim_s;
  const RunSummary s = rt.summary();
  std::printf("bench sim-trace: %s, %zu requests, %s on %s (%s)\n", trace.source.c_str(), replay.finished(),
              cfg.model.name.c_str(), gpu.name.c_str(), sim.cost->describe().c_str());
  std::printf("  wall time            %8.3f s  (load %.3f s + simulate %.3f s)\n", wall_s, load_s, sim_s);
  std::printf("  simulated time       %8.1f s\n", rt.now());
  std::printf("  engine steps         %8lld  (%.0f steps/s, %.2f us per step)\n", (long long)rt.steps(),
              double(rt.steps()) / sim_s, 1e6 * sim_s / double(rt.steps()));
  std::printf("  simulated / wall     %8.0f x\n", rt.now() / wall_s);
  std::printf("  generated tokens/s   %8.1f (simulated)\n", s.engines[0].generated_tokens_per_s);
  std::printf("  target               %8.3f s wall: %s (ratio %.2f)\n", target_s,
              wall_s <= target_s ? "met" : "MISSED", wall_s / target_s);
  return 0;
}

// The CPU reference engine's speed on a model (the tiny one by default), for information:
// prefill of `batch` prompts of `prompt` tokens in one step, then `decode` decode steps.
int bench_cpu(const std::string& model_path, int batch, int prompt, int decode) {
  const ModelSpec spec = resolve_model(model_path);
  const LlamaWeights weights = dummy_llama_weights(spec, 0);
  const int block_size = 16;
  const int blocks = batch * ((prompt + decode) / block_size + 2);
  CpuExecutor exec(weights, blocks, block_size);
  Engine engine("llm", {batch, batch * prompt, true, prompt + decode + 1},
                std::make_unique<KvCacheManager>(KvCacheConfig{blocks, block_size, false}), exec);
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
    if (shape_of(o.batch).prefill_tokens > 0) prefill_s += o.result.duration_s;
    else {
      decode_s += o.result.duration_s;
      ++decode_steps;
    }
  }
  std::printf("bench cpu: %s, %d layers, hidden %d, dummy weights, one thread\n", spec.name.c_str(), spec.num_layers,
              spec.hidden_size);
  std::printf("  prefill  %d x %d tokens   %8.3f s   %10.0f tokens/s\n", batch, prompt, prefill_s,
              double(batch) * prompt / prefill_s);
  std::printf("  decode   %d seqs x %d steps %8.3f s   %10.0f tokens/s (%.3f ms per step)\n", batch, decode_steps,
              decode_s, double(batch) * decode_steps / decode_s, 1e3 * decode_s / std::max(1, decode_steps));
  return 0;
}

}  // namespace

int bench(int argc, char** argv) {
  std::string which, trace = std::string(DUET_SOURCE_DIR) + "/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv";
  std::string model = "llama-3.1-8b", gpu = "h100";
  double target_s = 2.0;
  std::string cpu_model = std::string(DUET_SOURCE_DIR) + "/models/tiny-llama/config.json";
  int batch = 16, prompt = 256, decode = 64;
  po::options_description options("duet bench NAME: benchmarks that print their figures and ratios\n"
                                  "  sim-trace   replay a whole trace through one simulated engine (speed)\n"
                                  "  cpu         the CPU reference engine's prefill and decode tokens/s");
  options.add_options()
    ("name", po::value(&which), "benchmark to run")
    ("trace", po::value(&trace)->default_value(trace), "sim-trace: the trace to replay")
    ("model", po::value(&model)->default_value(model), "sim-trace: model")
    ("gpu", po::value(&gpu)->default_value(gpu), "sim-trace: GPU")
    ("target-s", po::value(&target_s)->default_value(target_s), "sim-trace: wall-time target")
    ("cpu-model", po::value(&cpu_model)->default_value(cpu_model), "cpu: model config")
    ("batch", po::value(&batch)->default_value(batch), "cpu: sequences")
    ("prompt", po::value(&prompt)->default_value(prompt), "cpu: prompt tokens")
    ("decode", po::value(&decode)->default_value(decode), "cpu: decode steps")
    ("help,h", "this help");
  po::positional_options_description positional;
  positional.add("name", 1);
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(options).style(kStyle).positional(positional).run(), vm);
    if (vm.count("help") || !vm.count("name")) {
      std::cout << options << "\n";
      return vm.count("help") ? 0 : 2;
    }
    po::notify(vm);
    if (which == "sim-trace") return bench_sim_trace(trace, model, gpu, target_s);
    if (which == "cpu") return bench_cpu(cpu_model, batch, prompt, decode);
    throw Error("unknown benchmark '" + which + "' (valid: sim-trace, cpu)");
  } catch (const po::error& e) {
    std::fprintf(stderr, "duet bench: %s (see duet bench --help)\n", e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "duet bench: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace duet::cli
