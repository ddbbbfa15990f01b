// duet validate: predicted against measured. Every duet.run and sweep point of a Lua script (or a
// replayed trace) runs on the simulator, priced by the real device's profile, and on the real
// backend; the table says how far apart they are, point by point.
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/lua/lua_api.hpp"
#include "cli/lua/lua_experiment.hpp"
#include "cli/source_dir.hpp"
#include "cli/trace_experiment.hpp"
#include "core/error.hpp"
#include "exec/validation.hpp"
#include "sim/profiles.hpp"

namespace po = boost::program_options;

namespace duet::cli {

namespace {

std::string point_group(std::size_t i) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "/validate/points/%04zu", i);
  return buf;
}

void print_latencies(const ValidationPoint& p) {
  for (const EngineComparison& c : p.engines) {
    std::printf("%s latencies (predicted / measured, error):\n", c.name.c_str());
    auto row = [](const char* name, const Percentiles& a, const Percentiles& b) {
      std::printf("  %-5s p50 %9.4f / %9.4f s (%+6.1f%%)   p90 %9.4f / %9.4f s (%+6.1f%%)\n", name, a.p50, b.p50,
                  100 * relative_error(a.p50, b.p50), a.p90, b.p90, 100 * relative_error(a.p90, b.p90));
    };
    row("TTFT", c.predicted_ttft, c.measured_ttft);
    row("TPOT", c.predicted_tpot, c.measured_tpot);
    row("E2E", c.predicted_e2e, c.measured_e2e);
  }
}

int finish(const std::vector<ValidationPoint>& points, double max_error, const std::string& out) {
  if (points.empty()) throw Error("validate: the script ran no duet.run or duet.sweep");
  const double worst = print_validation_table(points, stdout);
  std::printf("wrote %s\n", out.c_str());
  if (max_error > 0 && !(worst <= max_error)) {
    std::printf("validate: max |error| %.1f%% exceeds --max-error %.1f%%\n", 100 * worst, 100 * max_error);
    return 1;
  }
  return 0;
}

// A trace slice through the simulator (with the device's profile) and the real engine.
int validate_trace(TraceArgs args, const std::string& profile, int repeats, double max_error, const std::string& out,
                   const std::string& command_line) {
  if (!is_real_backend(args.backend)) throw Error("--backend must be a real engine (cpu or cuda) to validate against");
  TraceExperiment x = trace_experiment(args, source_dir(), command_line);
  ExperimentSpec sim = x.spec;
  sim.backend = "sim";
  sim.cost_device = device_key(args.backend, sim.gpu);
  const std::string path = profile.empty() ? profile_path(sim.profile_dir, sim.cost_device, sim.engines[0].config.model)
                                           : profile;
  if (!std::filesystem::exists(path))
    throw Error("validate: no profile of " + sim.engines[0].config.model.name + " on " + sim.cost_device + " (" + path +
                "); measure one with `duet profile` or pass --profile");
  sim.engines[0].cost_model = "profile:" + path;
  TraceReplay predicted_replay(x.trace, x.replay);
  const ExperimentOutcome predicted = run_experiment(sim, predicted_replay);
  TraceReplay measured_replay(x.trace, x.replay);
  const ExperimentOutcome measured = run_experiment(x.spec, measured_replay);
  for (const std::string& w : predicted.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  // Arrivals meet different step boundaries on the two clocks: batches need not match.
  ValidationPoint p = compare_runs(std::filesystem::path(x.trace.source).filename().string(), "requests/s", double(measured_replay.finished()), predicted,
                                         measured, false);
  for (int r = 1; r < repeats; ++r) {
    TraceReplay again(x.trace, x.replay);
    add_repeat(p, run_experiment(x.spec, again));
  }
  RunFileWriter file(out);
  write_validation(file, point_group(0), p, predicted, measured);
  file.close();
  print_latencies(p);
  return finish({p}, max_error, out);
}

}  // namespace

int validate(int argc, char** argv) {
  lua::ScriptOptions opt;
  TraceArgs trace;
  std::string profile, out;
  double max_error = 0.10;
  int repeats = 1;
  po::options_description options(
      "duet validate SCRIPT.lua --backend cpu|cuda [options] [-- script arguments]\n"
      "duet validate --trace FILE --backend cpu|cuda --model M [trace options]\n"
      "Runs every duet.run and sweep point of the script (or the trace) on the simulator, priced by the real device's "
      "profile, and on the real backend, and prints predicted against measured throughput");
  po::options_description own("Validation");
  own.add_options()
    ("script", po::value(&opt.script), "the Lua script")
    ("profile", po::value(&profile), "the profile to predict with (default: profiles/DEVICE/MODEL.json)")
    ("max-error", po::value(&max_error)->default_value(0.10), "exit 1 when a point's |throughput error| exceeds this "
                                                              "(0: never)")
    ("repeats", po::value(&repeats)->default_value(1), "real-engine runs per point; from 2, the table shows how far "
                                                       "the real engine is from itself (noise)")
    ("out", po::value(&out), "HDF5 file (default: SCRIPT's name, or the trace's, with .validate.h5)")
    ("no-progress", "never draw progress bars")
    ("help,h", "this help");
  options.add(own).add(trace_options(trace, true));
  po::positional_options_description positional;
  positional.add("script", 1);
  int own_argc = argc;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--") {
      own_argc = i;
      break;
    }
  for (int i = own_argc + 1; i < argc; ++i) opt.args.emplace_back(argv[i]);
  std::string command_line = "duet";
  for (int i = 0; i < argc; ++i) command_line += std::string(" ") + argv[i];
  return run_command({"validate", options, &positional, nullptr, 1}, own_argc, argv, [&](const po::variables_map& vm) {
    if (max_error < 0) throw Error("--max-error must not be negative");
    if (repeats < 1) throw Error("--repeats must be at least 1");
    if (opt.script.empty() == trace.trace.empty() && trace.synthetic <= 0)
      throw Error("give a script or --trace FILE (or --synthetic N)");
    if (!is_real_backend(trace.backend)) throw Error("--backend must be a real engine (cpu or cuda) to validate against");
    if (opt.script.empty()) {
      if (out.empty()) out = std::filesystem::path(trace.trace.empty() ? "synthetic" : trace.trace).stem().string() + ".validate.h5";
      return validate_trace(trace, profile, repeats, max_error, out, command_line);
    }
    if (out.empty()) out = std::filesystem::path(opt.script).stem().string() + ".validate.h5";
    RunFileWriter file(out);
    std::vector<ValidationPoint> points;
    lua::ValidateMode mode;
    mode.backend = trace.backend;
    mode.profile = profile;
    mode.repeats = repeats;
    mode.points = [&] { return points.size(); };
    mode.record = [&](const ValidationPoint& p, const ExperimentOutcome& predicted, const ExperimentOutcome& measured,
                      const std::vector<ProblemRecord>& pp, const std::vector<ProblemRecord>& mp) {
      write_validation(file, point_group(points.size()), p, predicted, measured, &pp, &mp);
      points.push_back(p);
      std::printf("validate: %s: predicted %.4g, measured %.4g %s (%+.1f%%)\n", p.label.c_str(), p.predicted_throughput,
                  p.measured_throughput, p.unit.c_str(), 100 * p.throughput_error);
      std::fflush(stdout);
    };
    opt.backend = "sim";
    opt.validate = &mode;
    opt.threads = 1;
    opt.progress = !vm.count("no-progress");
    opt.source_dir = source_dir();
    opt.out = out + ".script.h5";  // the script's own writes are off in validation; never created
    lua::run_script(opt);
    file.close();
    return finish(points, max_error, out);
  });
}

}  // namespace duet::cli
