// duet run SCRIPT.lua: an experiment written in Lua.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <thread>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/lua/lua_api.hpp"
#include "cli/source_dir.hpp"
#include "core/error.hpp"
#include "exec/backend.hpp"

namespace po = boost::program_options;

namespace duet::cli {

int run(int argc, char** argv) {
  lua::ScriptOptions opt;
  std::string record;
  po::options_description options(
      "duet run SCRIPT.lua [options] [-- script arguments]: run a Lua experiment (see docs/lua-api.md)");
  options.add_options()("script", po::value(&opt.script), "the Lua script")(
      "backend", po::value(&opt.backend)->default_value("sim"),
      "sim (simulator), cpu (CPU reference engine) or cuda (CUDA engine, in CUDA builds)")(
      "out", po::value(&opt.out),
      "HDF5 file for the runs (default: SCRIPT's name with .h5, in the current directory)")(
      "record", po::value(&record)->default_value("steps"),
      "what each run's file holds, unless its duet.run `record` key says: steps (the timeline, requests, "
      "problems and summary), requests (no timeline) or summary")(
      "threads", po::value(&opt.threads)->default_value(0), "threads for duet.sweep (0: every core)")(
      "no-progress", "never draw progress bars")(
      "lua-instruction-limit", po::value(&opt.instruction_limit)->default_value(opt.instruction_limit),
      "Lua instructions one call into the script may run before it is stopped as an endless loop")(
      "help,h", "this help");
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
  return run_command({"run", options, &positional, "script", 1}, own, argv, [&](const po::variables_map& vm) {
    opt.progress = !vm.count("no-progress");
    check_backend(opt.backend);
    opt.record = parse_record_level("--record", record);
    if (opt.instruction_limit <= 0) throw Error("--lua-instruction-limit must be positive");
    if (opt.threads <= 0) opt.threads = int(std::max(1u, std::thread::hardware_concurrency()));
    opt.source_dir = source_dir();
    opt.command_line = command_line_of(argc, argv);
    if (opt.out.empty()) opt.out = lua::default_run_file(opt.script);
    check_output(opt.out, {opt.script});
    lua::run_script(opt);
    return 0;
  });
}

}  // namespace duet::cli
