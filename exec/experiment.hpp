#pragma once
// An experiment without Lua: the engines of one GPU, the backend they run on and how the device is
// shared, run to completion over a workload. `duet run` (through the Lua bindings, which only
// translate tables into this), `duet simulate`, `duet bench sim-trace` and `duet validate` all
// run experiments through run_experiment.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/gpu_spec.hpp"
#include "core/memory_plan.hpp"
#include "core/runtime.hpp"
#include "exec/backend.hpp"
#include "io/hdf5_run.hpp"

namespace duet {

struct EngineSetup {
  EngineConfig config;
  std::string cost_model = "auto";    // sim: auto, roofline or profile:PATH
  std::string load_format = "dummy";  // real engines
  SchedulerPolicy policy;
};

struct ExperimentSpec {
  GpuSpec gpu;
  std::string backend = "sim";
  std::vector<EngineSetup> engines;
  Arbiter arbiter;
  std::string arbiter_name = "alternate";  // for the record
  // Static: each engine's own pool from its budget (the default). Shared: one pool of pages for
  // all engines, sized by their budgets together (core/memory_plan.hpp).
  KvPoolRequest kv_pool;
  MemoryPolicy memory_policy;    // shared pool: floors and ceilings during the run (may be empty)
  std::uint64_t seed = 0;        // dummy weights
  std::string source_dir = ".";  // the repository (tokenizer, models)
  std::string profile_dir;       // committed profiles (source_dir/profiles); empty: none
  std::string cost_device;       // sim: whose profiles to use (empty: the simulated GPU's)
  std::string command_line;
  RecordLevel record = RecordLevel::Steps;  // what the run records
  // Whether the outcome holds the records (in memory). A caller that streams them to a file
  // (ExperimentHooks::before_run sets the runtime's sink) need not keep them.
  bool keep_records = true;
};

// The vocabulary of each engine, before anything is built (a workload needs them to exist).
std::vector<Vocabulary> vocabularies(const ExperimentSpec& spec);

struct ExperimentOutcome {
  MemoryPlan plan;
  RunSummary summary;
  std::vector<EngineRecords> records;                 // as spec.record and spec.keep_records say
  std::vector<std::int64_t> computed_prefill_tokens;  // per engine, whatever was recorded
  RunMetadata metadata;                  // the configuration, the backend and each engine's cost model
  std::vector<std::string> cost_models;  // per engine: what priced or ran it
  std::vector<std::string> warnings;     // e.g. a profile extrapolated
};

struct ExperimentHooks {
  // Called with the runtime before the run (progress callbacks, a record sink), and with what is
  // known of the outcome by then: the memory plan, the metadata, the cost models and warnings.
  std::function<void(Runtime&, const ExperimentOutcome&)> before_run;
};

// The outcome's warnings as one text, a line each: the run file's `warnings` attribute.
std::string warnings_text(const std::vector<std::string>& warnings);

// Builds the engines from the memory plan, runs `workload` to completion on the backend's clock,
// and returns what the run recorded.
ExperimentOutcome run_experiment(const ExperimentSpec& spec, Workload& workload,
                                 const ExperimentHooks& hooks = {});

}  // namespace duet
