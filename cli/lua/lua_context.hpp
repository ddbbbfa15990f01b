#pragma once
// The state a script run shares across the duet module's functions, kept in the Lua registry.
#include <lua.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli/lua/lua_api.hpp"
#include "cli/lua/lua_experiment.hpp"
#include "exec/tokenizer.hpp"
#include "io/hdf5_run.hpp"

namespace duet::lua {

inline constexpr const char* kContextKey = "duet.script";

// A point of a duet.sweep: its parameters and, once run, its result.
struct SweepPoint {
  std::vector<std::pair<std::string, std::string>> text;   // the point's parameters
  std::vector<std::pair<std::string, double>> numbers;
  ExperimentResult result;
  bool done = false;
};

// A sweep worker re-runs the script in its own Lua state and, at the sweep it was started for,
// runs only its share of the points.
struct WorkerJob {
  int sweep = 0;                      // which duet.sweep call of the script (0-based)
  std::vector<std::size_t> points;    // indices into `slots`
  std::vector<SweepPoint>* slots = nullptr;
};

// Everything a script run shares across its duet.run and duet.sweep calls.
struct ScriptContext {
  ScriptOptions opt;
  std::string script_text;
  std::string out_path;
  std::unique_ptr<RunFileWriter> writer;
  int runs = 0;
  int sweeps = 0;
  std::unique_ptr<Tokenizer> tokenizer;  // loaded on first use
  const WorkerJob* worker = nullptr;     // set in a sweep worker's state
};

// The context of the script running in L (a duet::Error outside a script).
ScriptContext& context(lua_State* L);

// A path as given, or relative to the repository (workloads/data/..., traces/...).
std::string resolve_path(lua_State* L, const std::string& path);

}  // namespace duet::lua
