// duet: the command-line face of every layer.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.hpp"
#include "cli/source_dir.hpp"
#include "exec/build_revision.hpp"

namespace {

void usage() {
  std::printf(
      "duet: LLM + PRM serving testbed (simulator and engines share one scheduler)\n\n"
      "usage: duet COMMAND [options]\n\n"
      "commands:\n"
      "  run        run a Lua experiment: duet run SCRIPT.lua [--backend sim|cpu|cuda] [--out FILE.h5] [-- "
      "args]\n"
      "  merge      merge the shards of a sweep (duet run --shard I/N) into one file\n"
      "  simulate   replay a trace or a synthetic workload through the simulator, write HDF5\n"
      "  profile    measure a real engine on a grid of batches and fit its cost profile\n"
      "  validate   run a script or a trace on the simulator and a real engine, compare\n"
      "  fit        fit a calibrated cost profile to measured step timings\n"
      "  fit-ops    fit a GPU's operator prior to measured kernel tables\n"
      "  cost       price one step of a batch by operator under a cost model\n"
      "  bench      benchmarks that print measured figures as ratios to their targets\n\n"
      "`duet COMMAND --help` documents each command's options; `duet --version` says the version, the\n"
      "build's revision and where the program reads its workloads, models and profiles.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "--version" || command == "version") {
    // What a run file records of the build, and where this binary reads its data (workloads,
    // models, profiles, traces) from: $DUET_HOME or the source tree it was built from.
    std::printf("duet %s (revision %s; data from %s)\n", duet::duet_version(), duet::build_revision(),
                duet::cli::source_dir().c_str());
    return 0;
  }
  if (command == "run") return duet::cli::run(argc - 1, argv + 1);
  if (command == "merge") return duet::cli::merge(argc - 1, argv + 1);
  if (command == "simulate") return duet::cli::simulate(argc - 1, argv + 1);
  if (command == "profile") return duet::cli::profile(argc - 1, argv + 1);
  if (command == "validate") return duet::cli::validate(argc - 1, argv + 1);
  if (command == "fit") return duet::cli::fit(argc - 1, argv + 1);
  if (command == "fit-ops") return duet::cli::fit_ops(argc - 1, argv + 1);
  if (command == "cost") return duet::cli::cost(argc - 1, argv + 1);
  if (command == "bench") return duet::cli::bench(argc - 1, argv + 1);
  std::fprintf(
      stderr,
      "duet: unknown command '%s' (commands: run, merge, simulate, profile, validate, fit, fit-ops, cost, "
      "bench; see duet --help)\n",
      command.c_str());
  return 2;
}
