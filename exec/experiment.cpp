#include "exec/experiment.hpp"

#include <algorithm>
#include <chrono>

#include "core/error.hpp"
#include "exec/run_metadata.hpp"
#include "exec/wall_clock.hpp"
#include "sim/profiles.hpp"
#include "sim/sim_executor.hpp"

namespace duet {

std::vector<Vocabulary> vocabularies(const ExperimentSpec& spec) {
  std::vector<Vocabulary> out;
  for (const EngineSetup& e : spec.engines)
    out.push_back(vocabulary_of(e.config.model, spec.source_dir, e.config.name));
  return out;
}

namespace {

// Every engine on the shared pool gives back idle KV for the others (core/scheduler.hpp).
void link_pool_peers(const std::vector<std::unique_ptr<BuiltEngine>>& built) {
  for (const auto& e : built) {
    std::vector<Scheduler*> peers;
    for (const auto& other : built)
      if (other != e) peers.push_back(&other->engine().scheduler());
    e->engine().scheduler().set_pool_peers(std::move(peers));
  }
}

}  // namespace

std::string warnings_text(const std::vector<std::string>& warnings) {
  std::string text;
  for (const std::string& w : warnings) text += (text.empty() ? "" : "\n") + w;
  return text;
}

ExperimentOutcome run_experiment(const ExperimentSpec& spec, Workload& workload,
                                 const ExperimentHooks& hooks) {
  if (spec.engines.empty()) throw Error("an experiment needs at least one engine");
  const auto wall0 = std::chrono::steady_clock::now();
  ExperimentOutcome out;
  std::vector<EngineMemoryRequest> requests;
  std::vector<EngineConfig> configs;
  for (const EngineSetup& e : spec.engines) {
    requests.push_back(memory_request(e.config));
    configs.push_back(e.config);
  }
  out.plan = plan_memory(spec.gpu, requests, spec.kv_pool);
  const bool shared_pool = spec.kv_pool.kind == KvPoolKind::Shared;
  if (spec.memory_policy && !shared_pool) throw Error("memory_policy needs kv_pool = 'shared'");
  SharedKvPool shared;
  if (shared_pool) shared.pages = make_shared_pool(configs, out.plan, spec.kv_pool.eviction);

  DeviceTurns turns;  // the engines share one device; outlives them
  std::vector<std::unique_ptr<BuiltEngine>> built;
  for (std::size_t i = 0; i < spec.engines.size(); ++i) {
    const EngineSetup& e = spec.engines[i];
    const BackendOptions b{spec.backend, e.cost_model,  spec.cost_device, spec.profile_dir,
                           &turns,       e.load_format, spec.seed,        spec.source_dir};
    built.push_back(make_engine(b, spec.gpu, e.config, out.plan.engine(e.config.name), std::uint32_t(i),
                                e.policy, shared_pool ? &shared : nullptr));
  }
  if (shared_pool) link_pool_peers(built);
  out.metadata = run_metadata(spec.backend, spec.command_line, spec.gpu, out.plan, configs);
  out.metadata.text.emplace_back("arbiter", spec.arbiter_name);
  if (spec.arbiter.kind == ArbiterKind::Priority) {  // the order decides results as much as the kind
    std::vector<int> order = spec.arbiter.priority;  // as the script gave it, then the rest as declared
    for (int i = 0; i < int(spec.engines.size()); ++i)
      if (std::find(order.begin(), order.end(), i) == order.end()) order.push_back(i);
    std::string names;
    for (int i : order) names += (names.empty() ? "" : ",") + spec.engines[std::size_t(i)].config.name;
    out.metadata.text.emplace_back("arbiter_priority", names);
  }
  // The device that priced or ran the steps: what `duet fit` checks a profile against.
  out.metadata.text.emplace_back("device", spec.backend != "sim"       ? device_key(spec.backend, spec.gpu)
                                           : !spec.cost_device.empty() ? spec.cost_device
                                                                       : gpu_device_key(spec.gpu));
  // Where the workloads, models, profiles and traces were read from ($DUET_HOME or the source tree):
  // the build's revision does not say which data a binary copied elsewhere read.
  out.metadata.text.emplace_back("data_dir", spec.source_dir);
  out.metadata.numbers.emplace_back("seed", double(spec.seed));
  out.metadata.text.emplace_back("kv_pool", kv_pool_kind_name(spec.kv_pool.kind));
  if (out.plan.shared) {
    out.metadata.numbers.emplace_back("kv_pool_pages", double(out.plan.shared->num_pages));
    out.metadata.text.emplace_back("kv_eviction", kv_eviction_name(spec.kv_pool.eviction));
  }
  for (std::size_t i = 0; i < built.size(); ++i) {
    out.cost_models.push_back(built[i]->describe());
    out.metadata.text.emplace_back(spec.engines[i].config.name + ".cost_model", built[i]->describe());
  }

  std::unique_ptr<Clock> clock = make_clock(spec.backend);
  Runtime rt(*clock, spec.arbiter);
  rt.set_recording(spec.record, spec.keep_records, nullptr);
  rt.set_memory_policy(spec.memory_policy);
  for (std::size_t i = 0; i < built.size(); ++i)
    rt.add_engine(built[i]->engine(), spec.engines[i].config.model.name);
  if (hooks.before_run) hooks.before_run(rt, out);
  rt.run(workload);

  out.summary = rt.summary();
  out.summary.wall_s = seconds_since(wall0);
  out.records = rt.take_records();
  for (int i = 0; i < rt.num_engines(); ++i)
    out.computed_prefill_tokens.push_back(rt.tally(i).computed_prefill_tokens());
  for (std::size_t i = 0; i < built.size(); ++i) {
    if (const CostModel* cost = built[i]->cost_model()) {
      const std::string note = cost->extrapolation_report();
      if (!note.empty()) out.warnings.push_back("engine '" + spec.engines[i].config.name + "': " + note);
    }
  }
  // In the file too: a result priced beyond its cost model's measurements says so where it is read.
  if (!out.warnings.empty()) out.metadata.text.emplace_back("warnings", warnings_text(out.warnings));
  return out;
}

}  // namespace duet
