#pragma once
// The `duet` Lua module, and running a script with it.
#include <lua.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/lua/lua_util.hpp"
#include "cli/mpi_ranks.hpp"
#include "cli/sweep_file.hpp"
#include "core/metrics.hpp"

namespace duet {
class RunFileWriter;
}

namespace duet::lua {

struct ValidateMode;

// The end of a sweep's error when a signal stopped it, on this rank or, under MPI, on another (every
// rank learns of the stop from rank 0): `duet run` then exits as stopped on every rank.
inline constexpr const char* kSweepStopped = "stopped by a signal";

struct ScriptOptions {
  std::string script;  // path of the Lua script
  // Its text, read once for every state that runs it (sweep threads, validate's passes): a script
  // from a pipe (/dev/stdin, <(...)) cannot be read twice. Empty: run_script reads `script`.
  std::string script_text;
  std::string backend = "sim";    // sim or cpu
  std::string out;                // HDF5 file; empty: <script stem>.h5
  std::string command_line;       // as typed, for the run file; empty: rebuilt from the above
  std::vector<std::string> args;  // after --
  std::string source_dir;         // repository root: workloads/, traces/, models/
  int threads = 0;                // sweep threads; 0: every core
  std::int64_t instruction_limit = kDefaultInstructionLimit;  // Lua instructions per call from duet
  std::int64_t memory_limit_mib = kDefaultMemoryLimitMiB;     // per Lua state (each sweep thread's)
  bool progress = true;                                       // draw progress bars when stderr is a terminal
  RecordLevel record = RecordLevel::Steps;  // what each run records, unless its `record` key says
  // duet validate: every duet.run and sweep point runs on the simulator and a real backend, one
  // point at a time, and goes to `validate` instead of the script's own file.
  const ValidateMode* validate = nullptr;
  cli::Ranks ranks;     // under mpirun: rank 0 writes the file and prints, the others run points
  cli::Shard shard;     // --shard I/N: each sweep runs only this shard's points
  bool resume = false;  // --resume: keep the finished runs and points of an existing --out file
  const std::atomic<int>* stop = nullptr;  // non-zero once SIGINT/SIGTERM asked to stop
};

// What a script run leaves for the command's exit status.
struct ScriptOutcome {
  int failed_points = 0;  // sweep points that raised an error (recorded as failed)
};

// The run file of a script when --out is not given: its name with .h5, in the current directory.
std::string default_run_file(const std::string& script);

// The text of a script file (a pipe is read to its end; a device other than a terminal is refused).
std::string read_script(const std::string& path);

// Runs a script to completion; errors (Lua or duet) throw duet::Error with file:line and a
// traceback. A stop (options.stop) ends it with an error after the finished points are written.
ScriptOutcome run_script(const ScriptOptions& options);

}  // namespace duet::lua
