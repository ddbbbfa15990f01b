#pragma once
// The state a script run shares across the duet module's functions, kept in the Lua registry.
#include <lua.hpp>

#include <memory>
#include <string>
#include <vector>

#include "cli/lua/lua_api.hpp"
#include "cli/lua/lua_util.hpp"
#include "cli/lua/sweep_points.hpp"
#include "cli/source_dir.hpp"
#include "cli/sweep_file.hpp"
#include "core/gpu_spec.hpp"
#include "core/model_spec.hpp"
#include "exec/tokenizer.hpp"
#include "io/hdf5_run.hpp"

namespace duet::lua {

// A sweep worker's share of the points (lua_api.cpp, with the sweep).
struct WorkerJob;

// Everything a script run shares across its duet.run and duet.sweep calls.
struct ScriptContext {
  ScriptOptions opt;
  std::string script_text;
  std::string out_path;
  std::unique_ptr<RunFileWriter> writer;
  int runs = 0;
  int sweeps = 0;
  std::unique_ptr<Tokenizer> tokenizer;       // loaded on first use
  const WorkerJob* worker = nullptr;          // set in a sweep worker's state
  bool worker_served = false;                 // the worker reached its sweep and served its points
  InstructionBudget budget;                   // Lua instructions per call from duet (lua_util.hpp)
  cli::RunIdentity identity;                  // written at the file's root (cli/sweep_file.hpp)
  bool resuming = false;                      // --resume found the file: its finished runs are kept
  std::vector<SweepResults> finished_sweeps;  // for sweep threads that re-run the script
  int failed_points = 0;
};

// The context of the script running in L (a duet::Error outside a script).
ScriptContext& context(lua_State* L);

// A path as given, or relative to the repository (workloads/data/..., traces/...) of the script
// running in L. resolve_path(path, dir), model_from and gpu_from are the CLI's (cli/source_dir.hpp).
std::string resolve_path(lua_State* L, const std::string& path);
using cli::checkpoint_from;
using cli::gpu_from;
using cli::model_from;
using cli::resolve_path;

}  // namespace duet::lua
