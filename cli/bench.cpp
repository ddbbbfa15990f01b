// duet bench: measured figures printed as ratios against their targets, so that a noisy machine
// still gives a readable answer. Each benchmark runs in one thread.
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/options_style.hpp"
#include "core/error.hpp"
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

}  // namespace

int bench(int argc, char** argv) {
  std::string which, trace = std::string(DUET_SOURCE_DIR) + "/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv";
  std::string model = "llama-3.1-8b", gpu = "h100";
  double target_s = 2.0;
  po::options_description options("duet bench NAME: benchmarks that print their figures and ratios\n"
                                  "  sim-trace   replay a whole trace through one simulated engine (speed)");
  options.add_options()
    ("name", po::value(&which), "benchmark to run")
    ("trace", po::value(&trace)->default_value(trace), "sim-trace: the trace to replay")
    ("model", po::value(&model)->default_value(model), "sim-trace: model")
    ("gpu", po::value(&gpu)->default_value(gpu), "sim-trace: GPU")
    ("target-s", po::value(&target_s)->default_value(target_s), "sim-trace: wall-time target")
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
    throw Error("unknown benchmark '" + which + "' (valid: sim-trace)");
  } catch (const po::error& e) {
    std::fprintf(stderr, "duet bench: %s (see duet bench --help)\n", e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "duet bench: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace duet::cli
