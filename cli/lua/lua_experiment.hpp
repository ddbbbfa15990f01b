#pragma once
// duet.run: a Lua configuration table turned into engines, a runtime and a Lua workload, run to
// completion. Shared by duet.run and duet.sweep.
#include <atomic>
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
  std::vector<std::int64_t> computed_prefill_tokens;  // per engine
  RecordLevel record = RecordLevel::Steps;            // what `records` holds
  double problems_per_s = 0;
};

// The problems' answers as run attributes, `accuracy` (when a problem said) and `mean_score`, kept
// beside their count: a run recorded at the "summary" level has no problems table, and its result
// read back (--resume) must still say them.
void add_problem_answers(RunMetadata& metadata, const std::vector<ProblemRecord>& problems);

// One duet.run (or sweep point) of a script under duet validate: the simulator's run (absent in the
// passes that only measure again) and the real backend's.
struct ValidationRun {
  std::string label;
  const ExperimentOutcome* predicted = nullptr;
  const ExperimentOutcome* measured = nullptr;
  const std::vector<ProblemRecord>* predicted_problems = nullptr;
  const std::vector<ProblemRecord>* measured_problems = nullptr;
};

// duet validate: each duet.run (and sweep point) runs on the simulator and on `backend`.
struct ValidateMode {
  std::string backend;                // the real backend: cpu or cuda
  std::vector<std::string> profiles;  // the profiles to predict with (profile_for); none: the committed ones
  bool predict = true;                // false: a later pass that measures the real engine again
  std::function<void(const ValidationRun&)> record;
};

struct ExperimentDefaults {
  std::string backend = "sim";
  std::string source_dir;
  std::string script_text;
  std::string command_line;
  bool progress = true;
  int sweep_threads = 1;  // a sweep point's: points beside it may run (a real engine's may not)
  RecordLevel record = RecordLevel::Steps;
  const ValidateMode* validate = nullptr;
  const std::atomic<int>* stop = nullptr;  // Runtime::stop: SIGINT/SIGTERM end a run between events
};

// Runs the duet.run configuration at `index` of L's stack. Lua errors inside callbacks and the
// workload propagate as duet::Error. A run cannot start inside another (from its memory_split,
// memory_policy, policies or workload): that is an error.
ExperimentResult run_experiment(lua_State* L, int index, const ExperimentDefaults& defaults);
// Whether a duet.run is under way in L's state, from its configuration's callbacks to its end.
bool run_under_way(lua_State* L);

// The result table that duet.run returns to Lua.
void push_result(lua_State* L, const ExperimentResult& result);

// Whether the configuration of `fn` (duet.run, duet.sweep) asks not to write a file (out = false);
// any other value than a boolean is an error.
bool wants_output(lua_State* L, int index, const char* fn);

}  // namespace duet::lua
