// duet validate: predicted against measured. Every duet.run and sweep point of a Lua script (or a
// replayed trace) runs on the simulator, priced by the real device's profile, and on the real
// backend; the table says how far apart they are, point by point.
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/lua/lua_api.hpp"
#include "cli/lua/lua_experiment.hpp"
#include "cli/source_dir.hpp"
#include "cli/trace_experiment.hpp"
#include "core/error.hpp"
#include "exec/backend.hpp"
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
  const bool repeated = !p.repeat_throughputs.empty();
  for (const EngineComparison& c : p.engines) {
    std::printf("%s latencies (predicted / measured, error%s):\n", c.name.c_str(),
                repeated ? "; noise: the real engine's other runs against the measured one" : "");
    auto row = [repeated](const char* name, const Percentiles& a, const Percentiles& b,
                          const LatencyNoise& n) {
      char noise50[32] = "", noise90[32] = "";
      if (repeated) {
        std::snprintf(noise50, sizeof noise50, ", noise %4.1f%%", 100 * n.p50);
        std::snprintf(noise90, sizeof noise90, ", noise %4.1f%%", 100 * n.p90);
      }
      std::printf("  %-5s p50 %9.4f / %9.4f s (%+6.1f%%%s)   p90 %9.4f / %9.4f s (%+6.1f%%%s)\n", name, a.p50,
                  b.p50, 100 * relative_error(a.p50, b.p50), noise50, a.p90, b.p90,
                  100 * relative_error(a.p90, b.p90), noise90);
    };
    row("TTFT", c.predicted_ttft, c.measured_ttft, c.ttft_noise);
    row("TPOT", c.predicted_tpot, c.measured_tpot, c.tpot_noise);
    row("E2E", c.predicted_e2e, c.measured_e2e, c.e2e_noise);
    std::printf(
        "  each request against itself (%zu paired, %zu unpaired): median error, median |error|, p90 "
        "|error|\n",
        c.requests.ttft.pairs, c.requests.unpaired);
    auto paired = [](const char* name, const PairedErrors& e) {
      std::printf("  %-5s %+7.1f%%  %7.1f%%  %7.1f%%\n", name, 100 * e.median, 100 * e.median_abs,
                  100 * e.p90_abs);
    };
    paired("TTFT", c.requests.ttft);
    paired("TPOT", c.requests.tpot);
    paired("E2E", c.requests.e2e);
  }
}

int finish(const std::vector<ValidationPoint>& points, double max_error, const std::string& out) {
  if (points.empty()) throw Error("validate: the script ran no duet.run or duet.sweep");
  const double worst = print_validation_table(points, stdout);
  std::printf("wrote %s\nopen analysis/notebooks/validation.ipynb with DUET_RUN=%s\n", out.c_str(),
              absolute_path(out).c_str());
  if (max_error > 0 && !(worst <= max_error)) {
    std::printf("validate: max |error| %.3g%% exceeds --max-error %.3g%%\n", 100 * worst, 100 * max_error);
    return 1;
  }
  return 0;
}

// A trace slice through the simulator (with the device's profile) and the real engine.
int validate_trace(const TraceArgs& args, const std::vector<std::string>& profiles, int repeats,
                   double max_error, const std::string& out, const std::string& command_line) {
  if (!is_real_backend(args.backend))
    throw Error("--backend must be a real engine (cpu or cuda) to validate against");
  // The flags, the model and the trace are the command's input: an error in them is bad usage
  // (exit status 2), as for duet simulate, not a failed validation.
  TraceExperiment x;
  ExperimentSpec sim;
  std::string path;
  check_usage([&] {
    // The prediction is the device profile's (the point of validating it): another cost model
    // asked for would be ignored.
    if (!first_given(args, {"--cost-model"}).empty())
      throw Error("--cost-model " + args.cost_model +
                  ": validate predicts with the device's measured profile (--profile P.json gives another)");
    x = trace_experiment(args, source_dir(), command_line);
    sim = x.spec;
    sim.backend = "sim";
    sim.cost_device = device_key(args.backend, sim.gpu);
    if (profiles.size() > 1)
      throw Error("--profile is given " + std::to_string(profiles.size()) +
                  " times; a trace runs one model, priced by one profile");
    path = profile_for(profiles, sim.engines[0].config.model, sim.profile_dir, sim.cost_device);
    if (!std::filesystem::exists(path))
      throw Error("validate: no profile of " + sim.engines[0].config.model.name + " on " + sim.cost_device +
                  " (" + path + "); measure one with `duet profile` or pass --profile");
  });
  sim.engines[0].cost_model = "profile:" + path;
  TraceReplay predicted_replay(x.trace, x.replay);
  const ExperimentOutcome predicted = run_experiment(sim, predicted_replay);
  std::vector<ExperimentOutcome> runs;
  std::size_t finished = 0;
  for (int r = 0; r < repeats; ++r) {
    TraceReplay replay(x.trace, x.replay);
    runs.push_back(run_experiment(x.spec, replay));
    finished = replay.finished();
  }
  std::vector<ExperimentOutcome*> outcomes;
  for (ExperimentOutcome& o : runs) outcomes.push_back(&o);
  const std::size_t m = fastest_run(outcomes);
  const ExperimentOutcome& measured = runs[m];
  for (const std::string& w : predicted.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  // Arrivals meet different step boundaries on the two clocks: batches need not match.
  ValidationPoint p = compare_runs(std::filesystem::path(x.trace.source).filename().string(), "requests/s",
                                   double(finished), predicted, measured, false);
  for (std::size_t r = 0; r < runs.size(); ++r)
    if (r != m) add_repeat(p, runs[r]);
  RunFileWriter file(out);
  write_validation(file, point_group(0), p, predicted, measured);
  file.close();
  print_latencies(p);
  return finish({p}, max_error, out);
}

// One point of a script across the passes: the prediction, and the real engine's runs.
struct ScriptPoint {
  std::string label;
  ExperimentOutcome predicted;
  std::vector<ProblemRecord> predicted_problems;
  std::vector<ExperimentOutcome> measured;
  std::vector<std::vector<ProblemRecord>> measured_problems;
};

// The script runs `repeats` times: the first pass predicts and measures each point, later passes
// measure again. Repeating whole passes, rather than each point in place, spreads a slow spell of
// a shared machine over all points instead of charging it to one.
int validate_script(lua::ScriptOptions opt, const std::string& backend,
                    const std::vector<std::string>& profiles, int repeats, double max_error,
                    const std::string& out, bool progress) {
  std::vector<ScriptPoint> points;
  std::size_t next = 0;
  lua::ValidateMode mode;
  mode.backend = backend;
  mode.profiles = profiles;
  mode.record = [&](const lua::ValidationRun& run) {
    if (mode.predict) {
      ScriptPoint p;
      p.label = run.label.empty() ? "run " + std::to_string(points.size() + 1) : run.label;
      p.predicted = *run.predicted;
      p.predicted_problems = *run.predicted_problems;
      points.push_back(std::move(p));
    } else if (next >= points.size()) {
      throw Error("validate: pass " + std::to_string(points.front().measured.size() + 1) +
                  " of the script ran more points than the first (does it depend on time?)");
    }
    ScriptPoint& p = points[mode.predict ? points.size() - 1 : next++];
    check_identical_batches(p.predicted.records, run.measured->records);
    p.measured.push_back(*run.measured);
    p.measured_problems.push_back(*run.measured_problems);
    const double t = p.measured.back().summary.makespan_s > 0
                         ? double(run.measured_problems->size()) / p.measured.back().summary.makespan_s
                         : 0;
    std::printf("validate: pass %zu: %s: measured %.4g problems/s\n", p.measured.size(), p.label.c_str(), t);
    std::fflush(stdout);
  };
  opt.backend = "sim";
  opt.validate = &mode;
  opt.threads = 1;
  opt.progress = progress;
  opt.source_dir = source_dir();
  opt.out = out + ".script.h5";  // the script's own writes are off in validation; never created
  opt.script_text = lua::read_script(opt.script);  // once for every pass: a pipe is read once
  for (int pass = 0; pass < repeats; ++pass) {
    mode.predict = pass == 0;
    next = 0;
    lua::run_script(opt);
    if (!mode.predict && next != points.size())
      throw Error("validate: pass " + std::to_string(pass + 1) + " of the script ran " +
                  std::to_string(next) + " points, the first " + std::to_string(points.size()));
  }
  RunFileWriter file(out);
  std::vector<ValidationPoint> compared;
  for (std::size_t i = 0; i < points.size(); ++i) {
    ScriptPoint& p = points[i];
    std::vector<ExperimentOutcome*> runs;
    for (ExperimentOutcome& o : p.measured) runs.push_back(&o);
    const std::size_t m = fastest_run(runs);
    ValidationPoint v = compare_runs(p.label, "problems/s", double(p.measured_problems[m].size()),
                                     p.predicted, p.measured[m], true);
    for (std::size_t r = 0; r < runs.size(); ++r)
      if (r != m) add_repeat(v, p.measured[r]);
    write_validation(file, point_group(i), v, p.predicted, p.measured[m], &p.predicted_problems,
                     &p.measured_problems[m]);
    compared.push_back(v);
  }
  file.close();
  return finish(compared, max_error, out);
}

}  // namespace

int validate(int argc, char** argv) {
  lua::ScriptOptions opt;
  TraceArgs trace;
  std::vector<std::string> profiles;
  std::string out;
  double max_error = 0.10;
  int repeats = 1;
  po::options_description options(
      "duet validate SCRIPT.lua --backend cpu|cuda [options] [-- script arguments]\n"
      "duet validate --trace FILE --backend cpu|cuda --model M [trace options]\n"
      "Runs every duet.run and sweep point of the script (or the trace) on the simulator, priced by the real "
      "device's "
      "profile, and on the real backend, and prints predicted against measured throughput");
  po::options_description own("Validation");
  own.add_options()("script", po::value(&opt.script), "the Lua script")(
      "profile", po::value(&profiles),
      "the profile to predict with (default: profiles/DEVICE/MODEL.json); again for each model when the "
      "engines run different ones")("max-error", po::value(&max_error)->default_value(0.10, "0.1"),
                                    "exit 1 when a point's |throughput error| exceeds this "
                                    "(0: never)")(
      "repeats", po::value(&repeats)->default_value(1),
      "passes of the real engine over every point (the script, or "
      "the trace): each point's fastest run is compared, and from "
      "2 on the table shows how far the real engine is from itself")(
      "out", po::value(&out), "HDF5 file (default: SCRIPT's name, or the trace's, with .validate.h5)")(
      "no-progress", "never draw progress bars")("help,h", "this help");
  options.add(own).add(trace_options(trace, BackendChoice::RealEngine));
  po::positional_options_description positional;
  positional.add("script", 1);
  int own_argc = argc;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--") {
      own_argc = i;
      break;
    }
  for (int i = own_argc + 1; i < argc; ++i) opt.args.emplace_back(argv[i]);
  const std::string command_line = command_line_of(argc, argv);
  return run_command(
      {"validate", options, &positional, nullptr, 1, true}, own_argc, argv, [&](const po::variables_map& vm) {
        check_usage([&] {
          if (!(max_error >= 0))
            throw Error("--max-error must be at least 0, got " + std::to_string(max_error));
          check_at_least("--repeats", repeats, 1);
          const bool replay = !trace.trace.empty() || trace.synthetic > 0;
          if (opt.script.empty() && !replay) throw Error("give a script or --trace FILE (or --synthetic N)");
          if (!opt.script.empty() && replay)
            throw Error("give a script or --trace FILE (or --synthetic N), not both: the script is " +
                        opt.script);
          // A script configures its own engines and cost models: the replay's options would be ignored.
          if (const std::string f = opt.script.empty()
                                        ? std::string()
                                        : first_given(trace, {"--model", "--gpu", "--cost-model",
                                                              "--rate-scale", "--max-requests"});
              !f.empty())
            throw Error(
                f + " is for --trace or --synthetic; a script sets its own (give its arguments after --)");
          if (!is_real_backend(trace.backend))
            throw Error("--backend must be a real engine (cpu or cuda) to validate against");
          if (trace.backend == "cuda") device_name(trace.backend);  // before any point runs
          if (!opt.script.empty()) {
            opt.script = resolve_path(opt.script, source_dir());  // as duet run finds it
            check_script(opt.script);
          }
          if (out.empty())
            out = std::filesystem::path(opt.script.empty() ? (trace.trace.empty() ? "synthetic" : trace.trace)
                                                           : opt.script)
                      .stem()
                      .string() +
                  ".validate.h5";
          for (std::string& profile : profiles)
            profile = resolve_path(profile, source_dir());  // as --model's
          std::vector<std::string> inputs{opt.script, trace.trace};
          inputs.insert(inputs.end(), profiles.begin(), profiles.end());
          check_hdf5_output(out, inputs);
          for (const std::string& profile : profiles)
            if (!std::filesystem::is_regular_file(profile))
              throw Error("--profile " + profile + ": no such file (a profile that `duet profile` wrote)");
        });
        if (opt.script.empty()) return validate_trace(trace, profiles, repeats, max_error, out, command_line);
        opt.command_line = command_line;  // the file records this command, not a `duet run` one
        return validate_script(opt, trace.backend, profiles, repeats, max_error, out,
                               !vm.count("no-progress"));
      });
}

}  // namespace duet::cli
