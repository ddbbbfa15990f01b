#pragma once
// duet.run: a Lua configuration table turned into engines, a runtime and a Lua workload, run to
// completion. Shared by duet.run and duet.sweep.
#include <lua.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cli/lua/lua_workload.hpp"
#include "core/metrics.hpp"
#include "exec/experiment.hpp"
#include "exec/validation.hpp"
#include "io/hdf5_run.hpp"

namespace duet::lua {

struct ExperimentResult {
  std::string label;
  RunMetadata metadata;
  RunSummary summary;
  std::shared_ptr<std::vector<EngineRecords>> records;
  std::vector<ProblemRecord> problems;
  double problems_per_s = 0;
};

// duet validate: each duet.run (and sweep point) runs on the simulator and on `backend`.
struct ValidateMode {
  std::string backend;   // the real backend: cpu or cuda
  std::string profile;   // the profile to predict with; empty: the committed one for the device
  int repeats = 1;       // real-engine runs per point: the later ones measure the noise
  // Receives each compared point with both runs (for the HDF5 file and the table).
  std::function<void(const ValidationPoint&, const ExperimentOutcome& predicted, const ExperimentOutcome& measured,
                     const std::vector<ProblemRecord>& predicted_problems,
                     const std::vector<ProblemRecord>& measured_problems)>
      record;
  std::function<std::size_t()> points;  // how many points were recorded so far
};

struct ExperimentDefaults {
  std::string backend = "sim";
  std::string source_dir;
  std::string script_text;
  std::string command_line;
  bool progress = true;
  const ValidateMode* validate = nullptr;
};

// Runs the duet.run configuration at `index` of L's stack. Lua errors inside callbacks and the
// workload propagate as duet::Error.
ExperimentResult run_experiment(lua_State* L, int index, const ExperimentDefaults& defaults);

// The result table that duet.run returns to Lua.
void push_result(lua_State* L, const ExperimentResult& result);

// Whether the configuration asks not to write a file (out = false).
bool wants_output(lua_State* L, int index);

}  // namespace duet::lua
