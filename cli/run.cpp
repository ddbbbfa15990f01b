// duet run SCRIPT.lua: an experiment written in Lua.
#include <boost/program_options.hpp>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <thread>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/lua/lua_api.hpp"
#include "cli/mpi_ranks.hpp"
#include "cli/source_dir.hpp"
#include "cli/stop_signal.hpp"
#include "cli/sweep_file.hpp"
#include "core/error.hpp"
#include "exec/backend.hpp"

namespace po = boost::program_options;

namespace duet::cli {

namespace {

// The exit status of `duet run`: 0; 1 for an error; 2 for bad usage; 3 when sweep points failed
// (each recorded in the file); 128 + the signal after SIGINT or SIGTERM stopped it.
constexpr int kPointsFailed = 3;

int run_body(lua::ScriptOptions& opt) {
  try {
    const lua::ScriptOutcome outcome = lua::run_script(opt);
    if (outcome.failed_points == 0 || opt.ranks.rank != 0) return 0;
    std::fprintf(
        stderr,
        "duet run: %d sweep point%s failed; each is recorded with its error under /sweeps/*/failed in %s\n",
        outcome.failed_points, outcome.failed_points == 1 ? "" : "s", opt.out.c_str());
    return kPointsFailed;
  } catch (const Error& e) {
    int signal = g_stop_signal.load();
    // Under MPI a signal to one rank stops the sweep on all: the others exit as stopped too (as by
    // SIGTERM, which Slurm's scancel and time limit send), not with an error of their own.
    const bool elsewhere = signal == 0 && opt.ranks.size > 1 &&
                           std::string(e.what()).find(lua::kSweepStopped) != std::string::npos;
    if (elsewhere) signal = SIGTERM;
    if (signal == 0) throw;
    if (opt.ranks.rank == 0) {
      // The error's first line: where it stopped (a Lua traceback follows it), unless that says
      // no more than the signal.
      std::string what = e.what();
      what = what.substr(0, what.find('\n'));
      const std::string stopped = "stopped by signal " + std::to_string(signal);
      if (elsewhere) what += " (sent to another rank)";
      else if (what.find(stopped) == std::string::npos) what = stopped + ": " + what;
      std::fprintf(stderr, "duet run: %s\nrun the same command with --resume to finish\n", what.c_str());
    }
    return stopped_exit_status(signal);
  }
}

}  // namespace

namespace {

int run_ranked(int argc, char** argv, const Ranks& ranks) {
  lua::ScriptOptions opt;
  opt.ranks = ranks;
  std::string record, shard;
  po::options_description options(
      "duet run SCRIPT.lua [options] [-- script arguments]: run a Lua experiment (see docs/lua-api.md)");
  options.add_options()("script", po::value(&opt.script),
                        "the Lua script (a relative path that is not here is looked up in the repository)")(
      "backend", po::value(&opt.backend)->default_value("sim"),
      "sim (simulator), cpu (CPU reference engine) or cuda (CUDA engine, in CUDA builds)")(
      "out", po::value(&opt.out),
      "HDF5 file for the runs (default: SCRIPT's name with .h5, in the current directory)")(
      "record", po::value(&record)->default_value("steps"),
      "what each run's file holds, unless its duet.run `record` key says: steps (the timeline, requests, "
      "problems and summary), requests (no timeline) or summary")(
      "threads", po::value(&opt.threads)->default_value(0), "threads for duet.sweep (0: every core)")(
      "no-progress", "never draw progress bars")(
      "shard", po::value(&shard),
      "I/N: run only every N-th point of each sweep, starting with the I-th (a Slurm job array's task; "
      "combine the files with duet merge)")(
      "resume",
      "keep the finished runs and points of an existing --out file (same script and options), "
      "run the rest")(
      "lua-instruction-limit", po::value(&opt.instruction_limit)->default_value(opt.instruction_limit),
      "Lua instructions one call into the script may run before it is stopped as an endless loop")(
      "lua-memory-limit", po::value(&opt.memory_limit_mib)->default_value(opt.memory_limit_mib),
      "MiB of memory the script's Lua state (each sweep thread's) may hold")("help,h", "this help");
  po::positional_options_description positional;
  positional.add("script", 1);
  // Everything after `--` belongs to the script.
  int own = argc;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--") {
      own = i;
      break;
    }
  for (int i = own + 1; i < argc; ++i) opt.args.emplace_back(argv[i]);
  // A failed run exits 1; bad usage 2.
  return run_command(
      {"run", options, &positional, "script", 1, true}, own, argv, [&](const po::variables_map& vm) {
        opt.progress = !vm.count("no-progress");
        opt.resume = vm.count("resume") > 0;
        opt.stop = &g_stop_signal;
        check_usage([&] {
          // The repository's scripts from any directory (scripts/quickstart.lua), as --model's files.
          opt.script = resolve_path(opt.script, source_dir());
          check_script(opt.script);
          if (vm.count("shard")) opt.shard = parse_shard(shard);
          check_backend(opt.backend);
          // Before the script: a sweep would otherwise fail every point on its own.
          if (opt.backend == "cuda") device_name(opt.backend);
          opt.record = parse_record_level("--record", record);
          check_at_least("--lua-instruction-limit", opt.instruction_limit, 1);
          check_at_least("--lua-memory-limit", opt.memory_limit_mib, 1);
          if (opt.memory_limit_mib > (std::int64_t(1) << 40))
            throw Error("--lua-memory-limit " + std::to_string(opt.memory_limit_mib) +
                        " MiB: more than 2^40 MiB");
          if (opt.threads < 0)
            throw Error("--threads must be 0 (every core) or more, got " + std::to_string(opt.threads));
          if (opt.threads > 1 && is_real_backend(opt.backend))
            throw Error("--threads " + std::to_string(opt.threads) +
                        ": a sweep on a real engine (--backend " + opt.backend +
                        ") runs one point at a time, as it measures the engine's step times");
          if (opt.out.empty()) opt.out = lua::default_run_file(opt.script);
          if (opt.ranks.rank == 0) check_hdf5_output(opt.out, {opt.script});
        });
        if (opt.threads == 0)
          opt.threads =
              is_real_backend(opt.backend) ? 1 : int(std::max(1u, std::thread::hardware_concurrency()));
        opt.source_dir = source_dir();
        opt.command_line = command_line_of(argc, argv);
        install_stop_handlers();
        return run_body(opt);
      });
}

}  // namespace

int run(int argc, char** argv) {
  Ranks ranks;
  try {
    ranks = start_ranks(&argc, &argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "duet run: error: %s\n", e.what());
    return 1;
  }
  const int status = run_ranked(argc, argv, ranks);
  end_ranks(ranks, status, status == 0 || status == kPointsFailed || status > 128);
  return status;
}

}  // namespace duet::cli
