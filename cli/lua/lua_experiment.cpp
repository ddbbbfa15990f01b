#include "cli/lua/lua_experiment.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>

#include "cli/lua/lua_context.hpp"
#include "cli/lua/lua_util.hpp"
#include "cli/progress.hpp"
#include "core/error.hpp"
#include "core/record_columns.hpp"
#include "core/runtime.hpp"
#include "exec/backend.hpp"
#include "exec/experiment.hpp"
#include "exec/validation.hpp"
#include "sim/profiles.hpp"

namespace duet::lua {

namespace {

// A registry reference to a Lua function, released with the experiment.
struct FunctionRef {
  lua_State* L = nullptr;
  int ref = LUA_NOREF;
  std::string where;  // "file:line: " of the function's definition, for errors in what it returns
  FunctionRef() = default;
  FunctionRef(const FunctionRef&) = delete;
  FunctionRef& operator=(const FunctionRef&) = delete;
  FunctionRef(FunctionRef&& o) noexcept : L(o.L), ref(o.ref), where(std::move(o.where)) {
    o.L = nullptr;
    o.ref = LUA_NOREF;
  }
  // Takes the function on top of the stack.
  void take(lua_State* state) {
    L = state;
    where = defined_at(L, -1);
    ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  ~FunctionRef() {
    if (L) luaL_unref(L, LUA_REGISTRYINDEX, ref);
  }
  explicit operator bool() const { return ref != LUA_NOREF; }
  void push() const { lua_rawgeti(L, LUA_REGISTRYINDEX, ref); }
};

// Reads an optional function field into a FunctionRef.
void read_function(lua_State* L, TableReader& t, const char* key, FunctionRef& out) {
  const int type = t.push(key);
  if (callable(L, -1)) {  // a function, or a table of its own state with a __call
    out.take(L);
    return;
  }
  lua_pop(L, 1);
  if (type != LUA_TNIL) t.fail(key, "expected a function (or a table whose __call is a function)");
}

struct EnginePolicies {
  FunctionRef order, admit, victim;
};

struct Experiment {
  GpuSpec gpu;
  std::string backend;
  std::vector<EngineConfig> engines;
  std::vector<std::string> cost_models;
  std::vector<std::string> load_formats;
  std::vector<std::unique_ptr<EnginePolicies>> policies;
  ArbiterKind arbiter = ArbiterKind::Alternate;
  std::vector<int> arbiter_priority;  // engine indices, most important first
  FunctionRef arbiter_fn, memory_split, memory_policy;
  KvPoolRequest kv_pool;
  std::vector<bool> block_size_given;
  LuaWorkloadOptions workload;
  std::string label;
  bool progress = true;
  RecordLevel record = RecordLevel::Steps;
};

EngineConfig read_engine(lua_State* L, int index, Experiment& ex, const std::string& default_cost,
                         const std::string& source_dir) {
  TableReader t(L, index, "engines[" + std::to_string(ex.engines.size() + 1) + "]");
  EngineConfig c;
  c.name = t.string("name").value_or("");
  if (c.name.empty()) t.fail("name", "every engine needs a name (e.g. 'llm', 'prm')");
  for (const auto& e : ex.engines)
    if (e.name == c.name) t.fail("name", "engine name '" + c.name + "' is used twice");
  // The run's file names an engine's settings ENGINE.KEY and the workload's options workload.KEY.
  if (c.name == "workload") t.fail("name", "'workload' names the workload's attributes in the run's file");
  const auto model = t.string("model");
  if (!model) t.fail("model", "missing: a built-in model name or a HuggingFace config.json path");
  c.model = t.checked("model", [&] { return model_from(*model, source_dir); });
  const auto utilization = t.number("gpu_memory_utilization");
  if (utilization) c.gpu_memory_utilization = *utilization;
  if (auto g = t.number("budget_gib")) {
    if (utilization) t.fail("budget_gib", "give either budget_gib or gpu_memory_utilization, not both");
    // 2^33 GiB is 2^63 bytes, beyond the int64 of budget_bytes.
    if (!(*g > 0) || !(*g < 8589934592.0))
      t.fail("budget_gib", "must be a positive number of GiB below 2^33, got " + std::to_string(*g));
    c.budget_bytes = std::int64_t(*g * 1024.0 * 1024.0 * 1024.0);
    c.gpu_memory_utilization.reset();
  }
  const auto block_size = t.int32("block_size");
  c.block_size = block_size.value_or(c.block_size);
  ex.block_size_given.push_back(block_size.has_value());
  const auto min_blocks = t.int32("min_blocks");
  const auto max_blocks = t.int32("max_blocks");
  if ((min_blocks || max_blocks) && ex.kv_pool.kind != KvPoolKind::Shared)
    t.fail(min_blocks ? "min_blocks" : "max_blocks", "floors and ceilings need kv_pool = 'shared'");
  c.limits = {min_blocks.value_or(0), max_blocks.value_or(kNoCeiling)};
  c.max_num_seqs = t.int32("max_num_seqs").value_or(c.max_num_seqs);
  c.max_num_batched_tokens = t.int32("max_num_batched_tokens").value_or(c.max_num_batched_tokens);
  // 8192, or the model's own limit where it is shorter (Qwen2.5-Math's 4096): vLLM's default is
  // the model's limit, which a search's beams never approach.
  c.max_model_len =
      t.int32("max_model_len").value_or(std::min(c.max_model_len, c.model.max_position_embeddings));
  t.checked("max_model_len", [&] { check_model_len(c); });
  c.enable_prefix_caching = t.boolean("enable_prefix_caching").value_or(true);
  c.enable_chunked_prefill = t.boolean("enable_chunked_prefill").value_or(true);
  c.scheduler_reserve_full_isl = t.boolean("scheduler_reserve_full_isl").value_or(false);
  const std::string allocator = t.string("allocator").value_or("paged");
  c.allocator = t.checked("allocator", [&] { return allocator_kind_from_name(allocator); });
  const std::string fork_kv = t.string("fork_kv").value_or("share");
  c.fork_kv = t.checked("fork_kv", [&] { return fork_kv_from_name(fork_kv); });
  if (auto n = t.int32("num_gpu_blocks_override")) c.num_gpu_blocks_override = std::int32_t(*n);
  ex.cost_models.push_back(t.string("cost_model").value_or(default_cost));
  t.checked("cost_model", [&] { return check_cost_model_name(ex.cost_models.back()); });
  const std::string load_format = t.string("load_format").value_or("dummy");
  ex.load_formats.push_back(
      t.checked("load_format", [&] { return checkpoint_from(load_format, source_dir); }));
  auto policies = std::make_unique<EnginePolicies>();
  if (t.push("policy") == LUA_TTABLE) {
    TableReader p(L, -1, "engines." + c.name + ".policy");
    read_function(L, p, "order", policies->order);
    read_function(L, p, "admit", policies->admit);
    read_function(L, p, "victim", policies->victim);
    p.finish();
  } else if (!lua_isnil(L, -1)) {
    t.fail("policy", "expected a table {order = f, admit = f, victim = f}");
  }
  lua_pop(L, 1);
  ex.policies.push_back(std::move(policies));
  t.finish();
  return c;
}

// A shared pool needs equal block bytes: block_size given for every engine (and checked by the
// memory plan), or for none, and then the default pairing.
void shared_block_sizes(TableReader& t, Experiment& ex) {
  const auto given = std::count(ex.block_size_given.begin(), ex.block_size_given.end(), true);
  if (given == std::ssize(ex.engines)) return;
  if (given > 0)
    t.fail("engines",
           "kv_pool 'shared': give block_size for every engine (with equal block bytes) or for none");
  std::vector<ModelSpec> models;
  for (const EngineConfig& c : ex.engines) models.push_back(c.model);
  const std::vector<int> sizes =
      t.checked("engines", [&] { return equal_byte_block_sizes(models, kSharedPoolBlockSize); });
  for (std::size_t i = 0; i < sizes.size(); ++i) ex.engines[i].block_size = sizes[i];
}

// arbiter_priority: engine names, most important first, each at most once; only with arbiter =
// "priority", where it defaults to the engines' order (engines it leaves out follow in that order).
void read_arbiter_priority(lua_State* L, TableReader& t, Experiment& ex) {
  const int type = t.push("arbiter_priority");
  if (type != LUA_TNIL) {
    if (ex.arbiter != ArbiterKind::Priority)
      t.fail("arbiter_priority", "orders engines for arbiter = 'priority' only");
    if (type != LUA_TTABLE) t.fail("arbiter_priority", "expected a list of engine names");
    const lua_Integer n = t.checked("arbiter_priority", [&] { return length(L, -1); });
    if (n == 0)
      t.fail("arbiter_priority",
             "names no engine: list at least one, or leave it out for the engines' order");
    for (lua_Integer i = 1; i <= n; ++i) {
      t.checked("arbiter_priority", [&] { return get_index(L, -1, i); });
      if (lua_type(L, -1) != LUA_TSTRING)
        t.fail("arbiter_priority",
               "entry " + std::to_string(i) + " is a " + luaL_typename(L, -1) + ", not an engine name");
      const std::string name = lua_tostring(L, -1);
      const auto engine = std::find_if(ex.engines.begin(), ex.engines.end(),
                                       [&](const EngineConfig& e) { return e.name == name; });
      if (engine == ex.engines.end())
        t.fail("arbiter_priority", "entry " + std::to_string(i) + " names unknown engine '" + name + "'");
      const int index = int(engine - ex.engines.begin());
      if (std::find(ex.arbiter_priority.begin(), ex.arbiter_priority.end(), index) !=
          ex.arbiter_priority.end())
        t.fail("arbiter_priority",
               "entry " + std::to_string(i) + " names engine '" + name + "' a second time");
      ex.arbiter_priority.push_back(index);
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
}

// gpu: a built-in's name (default h100), a GPU description's .json path, or the description as a
// table of the fields duet.gpu() returns (core/gpu_spec.hpp).
GpuSpec read_gpu(lua_State* L, TableReader& t, const std::string& source_dir) {
  const int type = t.push("gpu");
  std::string name = "h100";
  if (type == LUA_TSTRING) name = lua_tostring(L, -1);
  else if (type == LUA_TTABLE) name = t.checked("gpu", [&] { return flat_table_json(L, -1); });
  else if (type != LUA_TNIL)
    t.fail("gpu",
           std::string("expected a GPU's name, a .json description or a table of its figures, got a ") +
               luaL_typename(L, -1));
  lua_pop(L, 1);
  if (type == LUA_TTABLE) return t.checked("gpu", [&] { return gpu_from_json_text(name, "table"); });
  return t.checked("gpu", [&] { return gpu_from(name, source_dir); });
}

Experiment read_experiment(lua_State* L, int index, const ExperimentDefaults& d) {
  TableReader t(L, index, "duet.run");
  Experiment ex;
  ex.gpu = read_gpu(L, t, d.source_dir);
  const std::optional<std::string> backend = t.string("backend");
  ex.backend = backend.value_or(d.backend);
  if (d.validate) ex.backend = d.validate->backend;  // validate decides: the simulator and this
  if (backend && !d.validate) t.checked("backend", [&] { check_backend(ex.backend); });
  check_backend(ex.backend);
  // A real engine measures its step times alone (and two CUDA engines' runs would each take most of
  // the GPU): no point of a sweep that runs several at once may choose one.
  if (backend && !d.validate && d.sweep_threads > 1 && is_real_backend(ex.backend))
    t.fail("backend", "'" + ex.backend + "' in a sweep of " + std::to_string(d.sweep_threads) +
                          " threads: a real engine's points run one at a time (duet.sweep{threads = 1}, or "
                          "duet run --backend " +
                          ex.backend + ")");
  const std::string cost = t.string("cost_model").value_or("auto");
  t.checked("cost_model", [&] { return check_cost_model_name(cost); });
  const std::string kv_pool = t.string("kv_pool").value_or("static");
  ex.kv_pool.kind = t.checked("kv_pool", [&] { return kv_pool_kind_from_name(kv_pool); });
  if (auto pages = t.int32("kv_pool_blocks")) {
    if (ex.kv_pool.kind != KvPoolKind::Shared)
      t.fail("kv_pool_blocks", "sizes a shared pool: needs kv_pool = 'shared'");
    ex.kv_pool.num_pages_override = *pages;
  }
  if (auto eviction = t.string("kv_eviction")) {
    if (ex.kv_pool.kind != KvPoolKind::Shared)
      t.fail("kv_eviction", "orders a shared pool's evictions: needs kv_pool = 'shared'");
    ex.kv_pool.eviction = t.checked("kv_eviction", [&] { return kv_eviction_from_name(*eviction); });
  }
  if (t.push("engines") != LUA_TTABLE) t.fail("engines", "expected a list of engine tables");
  const lua_Integer n = t.checked("engines", [&] { return length(L, -1); });
  if (n < 1) {
    lua_pushnil(L);
    const bool keyed = lua_next(L, -2) != 0;  // a map {llm = {...}} has no list part
    if (keyed) lua_pop(L, 2);
    t.fail("engines",
           keyed ? "expected a list of engine tables {{name = 'llm', ...}, ...}, got a table of named "
                   "entries (give each engine its name inside its table)"
                 : "needs at least one engine");
  }
  if (const std::string stray = list_stray(L, -1, std::size_t(n)); !stray.empty())
    t.fail("engines", "has " + stray + " in or beside its list of " + std::to_string(n) +
                          " engine tables (give engines as a list without holes)");
  for (lua_Integer i = 1; i <= n; ++i) {
    t.checked("engines", [&] { return get_index(L, -1, i); });
    ex.engines.push_back(read_engine(L, -1, ex, cost, d.source_dir));
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  const int arb = t.push("arbiter");
  if (callable(L, -1)) {
    ex.arbiter = ArbiterKind::Callback;
    ex.arbiter_fn.take(L);
  } else {
    if (arb == LUA_TSTRING) {
      ex.arbiter = t.checked("arbiter", [&] { return arbiter_kind_from_name(lua_tostring(L, -1)); });
      if (ex.arbiter == ArbiterKind::Callback)
        t.fail("arbiter", "'callback' is given as a function, not a name");
    } else if (arb != LUA_TNIL) {
      t.fail("arbiter",
             "expected a name (alternate, priority, oldest) or a function (or a table whose __call is one)");
    }
    lua_pop(L, 1);
  }
  read_arbiter_priority(L, t, ex);
  read_function(L, t, "memory_split", ex.memory_split);
  read_function(L, t, "memory_policy", ex.memory_policy);
  if (ex.memory_policy && ex.kv_pool.kind != KvPoolKind::Shared)
    t.fail("memory_policy", "moves the floors and ceilings of a shared pool: needs kv_pool = 'shared'");
  if (ex.kv_pool.kind == KvPoolKind::Shared) shared_block_sizes(t, ex);
  ex.workload.concurrency = t.int32("concurrency").value_or(64);
  if (ex.workload.concurrency < 1)
    t.fail("concurrency",
           "problems in flight must be at least 1, got " + std::to_string(ex.workload.concurrency));
  const std::string batching = t.string("batching").value_or("continuous");
  if (batching == "fixed") ex.workload.batching = ProblemBatching::Fixed;
  else if (batching != "continuous") t.fail("batching", "must be 'continuous' or 'fixed'");
  const std::optional<int> min_batch = t.int32("min_batch");
  // Fixed batches refill only when all have finished: a min_batch would be ignored, silently.
  if (min_batch && ex.workload.batching == ProblemBatching::Fixed)
    t.fail("min_batch",
           "applies to batching = 'continuous' only (fixed batches refill when all have finished)");
  ex.workload.min_batch = min_batch.value_or(ex.workload.concurrency);
  if (ex.workload.min_batch < 1 || ex.workload.min_batch > ex.workload.concurrency)
    t.fail("min_batch", "must be in [1, concurrency = " + std::to_string(ex.workload.concurrency) +
                            "], got " + std::to_string(ex.workload.min_batch));
  ex.workload.seed = std::uint64_t(t.integer("seed").value_or(0));
  ex.label = t.string("label").value_or("");
  ex.progress = t.boolean("progress").value_or(d.progress);
  if (const auto record = t.string("record")) {
    ex.record = t.checked("record", [&] { return record_level_from_name(*record); });
  } else {
    ex.record = d.record;
  }
  if (!t.has("workload")) t.fail("workload", "missing: a workload table {problems = ..., solve = ...}");
  t.boolean("out");  // read by wants_output for duet.run; checked here for sweep points too
  t.finish();
  return ex;
}

// memory_split(info) -> {engine name = gpu_memory_utilization, ...}
void apply_memory_split(lua_State* L, Experiment& ex) {
  if (!ex.memory_split) return;
  ex.memory_split.push();
  lua_createtable(L, 0, 3);
  set_string(L, "gpu", ex.gpu.name.c_str());
  set_number(L, "hbm_bytes", double(ex.gpu.hbm_bytes));
  lua_createtable(L, 0, int(ex.engines.size()));
  for (const EngineConfig& c : ex.engines) {
    lua_createtable(L, 0, 3);
    set_string(L, "model", c.model.name.c_str());
    set_number(L, "weight_bytes", double(c.model.weight_bytes()));
    set_number(L, "kv_bytes_per_token", double(c.model.kv_bytes_per_token()));
    lua_setfield(L, -2, c.name.c_str());
  }
  lua_setfield(L, -2, "engines");
  pcall(L, 1, 1);
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    throw Error(ex.memory_split.where +
                "duet.run: memory_split must return a table {engine name = gpu_memory_utilization}");
  }
  TableReader split(L, -1, "memory_split()");
  split.locate(ex.memory_split.where);
  for (EngineConfig& c : ex.engines)
    if (auto u = split.number(c.name.c_str())) {
      // Checked here, where the error can name memory_split's line rather than duet.run's.
      if (const std::string why = memory_share_problem(*u); !why.empty())
        split.fail(c.name.c_str(), "a share of the GPU's memory (gpu_memory_utilization) " + why);
      c.gpu_memory_utilization = *u;
      c.budget_bytes.reset();
    }
  split.finish();
  lua_pop(L, 1);
}

// The scheduler policies of one engine as std::functions that call into Lua.
SchedulerPolicy make_policy(lua_State* L, const EnginePolicies& p, const std::string& engine) {
  SchedulerPolicy policy;
  if (p.order)
    policy.order_key = [L, &p, engine](const Sequence& s) {
      p.order.push();
      lua_pushinteger(L, lua_Integer(s.id));
      lua_pushinteger(L, s.num_tokens());
      lua_pushinteger(L, lua_Integer(s.owner) + 1);
      lua_pushstring(L, s.kind == SeqKind::Score ? "score" : "generate");
      pcall(L, 4, 1);
      const bool number = lua_type(L, -1) == LUA_TNUMBER;
      const double key = lua_tonumber(L, -1);
      // Keys are compared as doubles: integers past 2^53 would round into silent ties.
      constexpr lua_Integer exact = lua_Integer(1) << 53;
      const lua_Integer as_integer = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
      const bool inexact = as_integer > exact || as_integer < -exact;
      const std::string got = number && std::isfinite(key) ? std::string() : returned_text(L, -1);
      lua_pop(L, 1);
      if (inexact)
        throw Error(p.order.where + "engines." + engine + ".policy.order returned the integer " +
                    std::to_string(as_integer) + " for sequence " + std::to_string(s.id) +
                    ", beyond 2^53: keys are compared as doubles, and larger integers would tie; return a "
                    "smaller key");
      // A NaN breaks the waiting queue's order, and the sequences it loses are never run.
      if (!number || !std::isfinite(key))
        throw Error(p.order.where + "engines." + engine + ".policy.order returned " + got + " for sequence " +
                    std::to_string(s.id) + " of problem " + std::to_string(s.owner + 1) +
                    "; it must return a finite number");
      return key;
    };
  if (p.admit)
    policy.admit = [L, &p, engine](const Sequence& s, const SchedulerView& v) {
      p.admit.push();
      lua_pushinteger(L, lua_Integer(s.id));
      lua_pushinteger(L, s.num_tokens());
      lua_pushinteger(L, lua_Integer(s.owner) + 1);
      lua_pushinteger(L, lua_Integer(v.num_running));
      lua_pushinteger(L, lua_Integer(v.num_waiting));
      lua_pushnumber(L, v.kv.reach_utilisation());
      pcall(L, 6, 1);
      // A forgotten return (nil) would refuse every admission, silently, until the engine is stuck.
      if (!lua_isboolean(L, -1)) {
        const std::string got = returned_text(L, -1);
        lua_pop(L, 1);
        throw Error(p.admit.where + "engines." + engine + ".policy.admit returned " + got + " for sequence " +
                    std::to_string(s.id) + "; it must return true (admit) or false (not yet)");
      }
      const bool ok = lua_toboolean(L, -1);
      lua_pop(L, 1);
      return ok;
    };
  if (p.victim)
    policy.victim = [L, &p, engine](std::span<Sequence* const> c) {
      p.victim.push();
      lua_createtable(L, int(c.size()), 0);
      for (std::size_t i = 0; i < c.size(); ++i) {
        lua_createtable(L, 0, 3);
        set_integer(L, "id", lua_Integer(c[i]->id));
        set_integer(L, "num_tokens", c[i]->num_tokens());
        set_integer(L, "problem", lua_Integer(c[i]->owner) + 1);
        lua_rawseti(L, -2, lua_Integer(i + 1));
      }
      pcall(L, 1, 1);
      const std::optional<lua_Integer> pick = integral(L, -1);
      const std::string got = returned_text(L, -1);
      lua_pop(L, 1);
      if (!pick || *pick < 1 || *pick > lua_Integer(c.size()))
        throw Error(p.victim.where + "engines." + engine + ".policy.victim returned " + got +
                    ", not the index of a candidate (1 to " + std::to_string(c.size()) + ")");
      return std::size_t(*pick - 1);  // Lua is 1-based
    };
  return policy;
}

// One engine's {min_blocks, max_blocks} from memory_policy(), each defaulting to `now`; checked
// here, where the error can name the policy, rather than when the pool applies them.
KvLimits read_kv_limits(TableReader& t, KvLimits now) {
  const KvLimits l{t.int32("min_blocks").value_or(now.min_blocks),
                   t.int32("max_blocks").value_or(now.max_blocks)};
  if (const auto e = kv_limits_error(l)) t.fail(e->field, e->reason);
  return l;
}

// memory_policy(info) -> nil, or {engine name = {min_blocks = n, max_blocks = n}, ...}. Called
// before every arbiter decision (each device step) while an engine has work.
MemoryPolicy make_memory_policy(lua_State* L, const Experiment& ex) {
  if (!ex.memory_policy) return {};
  const FunctionRef* fn = &ex.memory_policy;
  std::vector<std::string> names;
  std::vector<int> block_sizes;  // tokens a page holds for each engine (a page is bytes, shared)
  for (const auto& c : ex.engines) names.push_back(c.name), block_sizes.push_back(c.block_size);
  return [L, fn, names, block_sizes](const std::vector<EngineStatus>& statuses) {
    fn->push();
    lua_createtable(L, 0, 2);
    set_integer(L, "pages", statuses.empty() ? 0 : statuses.front().kv.total_blocks);
    lua_createtable(L, 0, int(statuses.size()));
    for (const EngineStatus& s : statuses) {
      lua_createtable(L, 0, 12);
      set_integer(L, "block_size", block_sizes[std::size_t(s.index)]);
      set_integer(L, "waiting", lua_Integer(s.num_waiting));
      set_integer(L, "running", lua_Integer(s.num_running));
      set_integer(L, "used_blocks", s.kv.used_blocks);
      set_integer(L, "free_blocks", s.kv.free_blocks());
      set_integer(L, "cached_blocks", s.kv.cached_blocks);
      set_integer(L, "min_blocks", s.kv.limits.min_blocks);
      set_integer(L, "max_blocks",
                  std::min(s.kv.limits.max_blocks, s.kv.total_blocks));  // no ceiling: the pool
      set_integer(L, "preemptions", lua_Integer(s.preemptions));
      set_integer(L, "evictions", lua_Integer(s.evictions));
      lua_pushboolean(L, s.has_work);
      lua_setfield(L, -2, "has_work");
      lua_setfield(L, -2, names[std::size_t(s.index)].c_str());
    }
    lua_setfield(L, -2, "engines");
    pcall(L, 1, 1);
    std::vector<std::optional<KvLimits>> out(statuses.size());
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      return out;
    }
    if (!lua_istable(L, -1)) {
      lua_pop(L, 1);
      throw Error(
          fn->where +
          "duet.run: memory_policy must return nil or {engine name = {min_blocks = n, max_blocks = n}}");
    }
    TableReader result(L, -1, "memory_policy()");
    result.locate(fn->where);  // the policy's definition: the error surfaces in a device step
    std::int64_t floors = 0;
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (result.push(names[i].c_str()) == LUA_TTABLE) {
        TableReader limits(L, -1, "memory_policy()." + names[i]);
        limits.locate(fn->where);
        out[i] = read_kv_limits(limits, statuses[i].kv.limits);
        limits.finish();
      } else if (!lua_isnil(L, -1)) {
        result.fail(names[i].c_str(), "expected a table {min_blocks = n, max_blocks = n}");
      }
      floors += (out[i] ? *out[i] : statuses[i].kv.limits).min_blocks;
      lua_pop(L, 1);
    }
    const std::int32_t pages = statuses.empty() ? 0 : statuses.front().kv.total_blocks;
    if (floors > pages)
      throw Error(fn->where + "memory_policy(): the engines' min_blocks sum to " + std::to_string(floors) +
                  " pages, more than the pool's " + std::to_string(pages));
    result.finish();
    lua_pop(L, 1);
    return out;
  };
}

Arbiter make_arbiter(lua_State* L, const Experiment& ex) {
  Arbiter a;
  a.kind = ex.arbiter;
  a.priority = ex.arbiter_priority;
  if (ex.arbiter == ArbiterKind::Callback) {
    const FunctionRef* fn = &ex.arbiter_fn;
    std::vector<std::string> names;
    for (const auto& c : ex.engines) names.push_back(c.name);
    a.pick = [L, fn, names](const std::vector<EngineStatus>& statuses) {
      fn->push();
      lua_createtable(L, int(statuses.size()), 0);
      for (const EngineStatus& s : statuses) {
        lua_createtable(L, 0, 6);
        set_string(L, "name", names[std::size_t(s.index)].c_str());
        lua_pushboolean(L, s.has_work);
        lua_setfield(L, -2, "has_work");
        set_integer(L, "waiting", lua_Integer(s.num_waiting));
        set_integer(L, "running", lua_Integer(s.num_running));
        set_number(L, "ready_since", s.ready_since);
        set_number(L, "kv_used", s.kv.reach_utilisation());
        lua_rawseti(L, -2, s.index + 1);
      }
      pcall(L, 1, 1);
      const int n = int(names.size());
      int pick = -1;
      std::string returned;
      if (const auto i = integral(L, -1)) {
        returned = std::to_string(*i);
        if (*i >= 1 && *i <= n) pick = int(*i) - 1;
      } else if (lua_type(L, -1) == LUA_TSTRING) {
        returned = "'" + std::string(lua_tostring(L, -1)) + "'";
        for (int i = 0; i < n; ++i)
          if (names[std::size_t(i)] == lua_tostring(L, -1)) pick = i;
      } else {
        returned = returned_text(L, -1);
      }
      lua_pop(L, 1);
      if (pick < 0)
        throw Error(fn->where + "the arbiter returned " + returned +
                    ", not an engine's name or its index (1 to " + std::to_string(n) + ")");
      // Runtime checks this too, without the line.
      if (!statuses[std::size_t(pick)].has_work)
        throw Error(fn->where + "the arbiter chose engine '" + names[std::size_t(pick)] + "' (" +
                    std::to_string(pick + 1) + "), which has no work");
      return pick;
    };
  }
  return a;
}

}  // namespace

bool wants_output(lua_State* L, int index, const char* fn) {
  const int t = with_context([&] { return where(L) + fn + ".out: reading it raised an error: "; },
                             [&] { return get_field(L, index, "out"); });
  if (t != LUA_TNIL && t != LUA_TBOOLEAN) {
    const std::string type = luaL_typename(L, -1);
    lua_pop(L, 1);
    throw Error(where(L) + fn + ": out: expected true or false, got a " + type +
                " (the file is duet run's --out; a run's group in it is named by label)");
  }
  const bool no = t == LUA_TBOOLEAN && !lua_toboolean(L, -1);
  lua_pop(L, 1);
  return !no;
}

namespace {

const char* arbiter_name(ArbiterKind kind) {
  switch (kind) {
    case ArbiterKind::Alternate:
      return "alternate";
    case ArbiterKind::Priority:
      return "priority";
    case ArbiterKind::OldestReady:
      return "oldest";
    case ArbiterKind::Callback:
      return "callback";
  }
  return "alternate";
}

// The Lua configuration as an experiment description: everything Lua-specific (the workload
// table, policy callbacks) stays behind std::functions.
ExperimentSpec spec_of(lua_State* L, Experiment& ex, const ExperimentDefaults& d) {
  ExperimentSpec spec;
  spec.gpu = ex.gpu;
  spec.backend = ex.backend;
  spec.arbiter = make_arbiter(L, ex);
  spec.arbiter_name = arbiter_name(ex.arbiter);
  spec.kv_pool = ex.kv_pool;
  spec.memory_policy = make_memory_policy(L, ex);
  spec.seed = ex.workload.seed;
  spec.source_dir = d.source_dir;
  spec.profile_dir = d.source_dir + "/profiles";
  spec.command_line = d.command_line;
  spec.record = ex.record;
  for (std::size_t i = 0; i < ex.engines.size(); ++i)
    spec.engines.push_back({ex.engines[i], ex.cost_models[i], ex.load_formats[i],
                            make_policy(L, *ex.policies[i], ex.engines[i].name)});
  return spec;
}

struct LuaRun {
  ExperimentOutcome outcome;
  std::vector<ProblemRecord> problems;
  RunMetadata workload;  // describe_workload
};

// While it lives, duet.backend names `backend`: the workload of a run reads where that run goes
// (its own `backend`, or under duet validate the simulator and then the real engine), not the
// command line's default.
class BackendShown {
 public:
  BackendShown(lua_State* L, const std::string& backend) : L_(L) {
    if (!push_duet()) return;
    lua_pushliteral(L_, "backend");
    lua_rawget(L_, -2);
    before_ = luaL_ref(L_, LUA_REGISTRYINDEX);  // whatever it was, nil too
    lua_pushliteral(L_, "backend");
    lua_pushstring(L_, backend.c_str());
    lua_rawset(L_, -3);
    lua_pop(L_, 1);
  }
  ~BackendShown() {
    if (before_ == LUA_NOREF) return;
    if (push_duet()) {
      lua_pushliteral(L_, "backend");
      lua_rawgeti(L_, LUA_REGISTRYINDEX, before_);
      lua_rawset(L_, -3);
      lua_pop(L_, 1);
    }
    luaL_unref(L_, LUA_REGISTRYINDEX, before_);
  }
  BackendShown(const BackendShown&) = delete;
  BackendShown& operator=(const BackendShown&) = delete;

 private:
  // The duet table, as require("duet") finds it (a script may rebind the global name); raw reads
  // and writes, so that no metamethod runs (the destructor may run while an error unwinds).
  bool push_duet() {
    lua_pushliteral(L_, LUA_LOADED_TABLE);
    lua_rawget(L_, LUA_REGISTRYINDEX);
    if (lua_istable(L_, -1)) {
      lua_pushliteral(L_, "duet");
      lua_rawget(L_, -2);
      lua_remove(L_, -2);
      if (lua_istable(L_, -1)) return true;
    }
    lua_pop(L_, 1);
    return false;
  }
  lua_State* L_;
  int before_ = LUA_NOREF;
};

LuaRun run_once(lua_State* L, int index, const Experiment& ex, const ExperimentSpec& spec,
                const ExperimentDefaults& d) {
  const BackendShown shown(L, spec.backend);
  std::vector<EngineVocab> vocabs;
  const std::vector<Vocabulary> v = vocabularies(spec);
  for (std::size_t i = 0; i < v.size(); ++i)
    vocabs.push_back({spec.engines[i].config.name, v[i].vocab_size, v[i].step_id, v[i].eos_id});
  get_field(L, index, "workload");
  LuaWorkload workload(L, -1, vocabs, ex.workload);
  RunMetadata described = describe_workload(L, -1);
  lua_pop(L, 1);
  const std::string what = spec.backend == "sim" ? "simulated" : "measured";
  ProgressBar bar(ex.label.empty() ? "duet.run" : ex.label);
  ExperimentHooks hooks;
  bool started = false;
  hooks.before_run = [&](Runtime& rt, const ExperimentOutcome&) {
    started = true;
    rt.stop = d.stop;
    if (!ex.progress || !bar.enabled()) return;
    rt.progress_every = 256;
    rt.on_progress = [&, what](const Runtime& r) {
      char detail[64];
      std::snprintf(detail, sizeof detail, "problems, %s %.0f s", what.c_str(), r.now());
      bar.update(double(workload.done()), double(workload.total()), detail);
    };
  };
  std::optional<ExperimentOutcome> outcome;
  try {
    outcome = duet::run_experiment(spec, workload, hooks);
  } catch (const Error& e) {
    // Before the run began, an error is the configuration's (a memory plan that cannot hold, an
    // engine's out-of-range value): it names the script line that called duet.run. Errors from
    // the run itself name their own place (the problem, the policy, the line in solve()).
    if (started) throw;
    throw Error(where(L) + "duet.run: " + e.what());
  }
  LuaRun run{std::move(*outcome), workload.results(), std::move(described)};
  bar.finish();
  // Named by the run's label: in a sweep, which point it came from.
  const std::string whose = ex.label.empty() ? "" : ex.label + ": ";
  for (const std::string& w : run.outcome.warnings)
    std::fprintf(stderr, "warning: %s%s\n", whose.c_str(), w.c_str());
  return run;
}

// What a Lua run adds to its outcome's attributes: the script and its run settings, the workload's
// description and policies, the problems' count, rate and answers, and each engine's computed
// prefill tokens. A duet validate file's predicted and measured runs get them too.
void add_lua_metadata(const Experiment& ex, const ExperimentDefaults& d, LuaRun& run) {
  RunMetadata& m = run.outcome.metadata;
  const RunSummary& summary = run.outcome.summary;
  m.text.emplace_back("script", d.script_text);
  if (!ex.label.empty()) m.text.emplace_back("label", ex.label);
  m.numbers.emplace_back("concurrency", ex.workload.concurrency);
  m.text.emplace_back("batching", ex.workload.batching == ProblemBatching::Fixed ? "fixed" : "continuous");
  m.numbers.emplace_back("min_batch", ex.workload.min_batch);
  for (auto& kv : run.workload.text) m.text.push_back(std::move(kv));
  for (auto& kv : run.workload.numbers) m.numbers.push_back(std::move(kv));
  run.workload = {};
  // The script's own policies, by where each is defined: absent, the engine's default ran.
  auto defined = [&](const std::string& key, const FunctionRef& f) {
    if (f) m.text.emplace_back(key, f.where.substr(0, f.where.rfind(": ")));
  };
  for (std::size_t i = 0; i < ex.engines.size(); ++i) {
    defined(ex.engines[i].name + ".order", ex.policies[i]->order);
    defined(ex.engines[i].name + ".admit", ex.policies[i]->admit);
    defined(ex.engines[i].name + ".victim", ex.policies[i]->victim);
  }
  defined("arbiter_function", ex.arbiter_fn);
  defined("memory_split", ex.memory_split);
  defined("memory_policy", ex.memory_policy);
  const double problems = double(run.problems.size());
  m.numbers.emplace_back("problems", problems);
  m.numbers.emplace_back("problems_per_s", summary.makespan_s > 0 ? problems / summary.makespan_s : 0);
  add_problem_answers(m, run.problems);
  // What result.engines.NAME.prefill_tokens reports, kept so that a run read back from its file
  // (duet run --resume) returns the same result table.
  const std::vector<EngineRecords>& records = run.outcome.records;
  for (std::size_t i = 0; i < records.size() && i < run.outcome.computed_prefill_tokens.size(); ++i)
    m.numbers.emplace_back(records[i].name + ".prefill_tokens",
                           double(run.outcome.computed_prefill_tokens[i]));
}

// The result of a run whose attributes add_lua_metadata completed.
ExperimentResult result_of(const Experiment& ex, LuaRun run) {
  ExperimentResult r;
  r.label = ex.label;
  r.summary = run.outcome.summary;
  r.records = std::make_shared<std::vector<EngineRecords>>(std::move(run.outcome.records));
  r.problems = std::move(run.problems);
  r.computed_prefill_tokens = run.outcome.computed_prefill_tokens;
  r.record = ex.record;
  r.metadata = std::move(run.outcome.metadata);
  r.problems_per_s = *r.metadata.find_number("problems_per_s");
  return r;
}

// duet validate: the configuration on the simulator with the real device's profile, then on the
// real backend; the batches must agree step by step. Lua gets the measured result.
ExperimentResult validate_experiment(lua_State* L, int index, Experiment& ex, const ExperimentDefaults& d) {
  const ValidateMode& v = *d.validate;
  ExperimentSpec real = spec_of(L, ex, d);
  real.backend = v.backend;
  ExperimentSpec sim = spec_of(L, ex, d);
  sim.backend = "sim";
  sim.cost_device = device_key(v.backend, ex.gpu);
  std::set<std::string> used;
  for (EngineSetup& e : sim.engines) {
    const std::string path = profile_for(v.profiles, e.config.model, sim.profile_dir, sim.cost_device);
    used.insert(path);
    if (!std::filesystem::exists(path))
      throw Error("validate: no profile of " + e.config.model.name + " on " + sim.cost_device + " (" + path +
                  "); measure one with `duet profile --backend " + v.backend +
                  " --model ...` or pass --profile");
    e.cost_model = "profile:" + path;
  }
  // A profile given for no engine is a mistake (another model's, or a typo's twin), not a spare.
  std::string models;
  for (const EngineSetup& e : sim.engines) models += (models.empty() ? "" : ", ") + e.config.model.name;
  for (const std::string& p : v.profiles)
    if (!used.count(p))
      throw Error("validate: --profile " + p + " prices none of the run's engines (their models: " + models +
                  ")");
  std::optional<LuaRun> predicted;
  if (v.predict) predicted = run_once(L, index, ex, sim, d);
  LuaRun measured = run_once(L, index, ex, real, d);
  if (predicted) add_lua_metadata(ex, d, *predicted);
  add_lua_metadata(ex, d, measured);
  ValidationRun run{ex.label, predicted ? &predicted->outcome : nullptr, &measured.outcome,
                    predicted ? &predicted->problems : nullptr, &measured.problems};
  v.record(run);
  return result_of(ex, std::move(measured));
}

}  // namespace

namespace {

constexpr const char* kRunKey = "duet.run_under_way";

// While it lives, run_under_way(L) is true.
class RunUnderWay {
 public:
  explicit RunUnderWay(lua_State* L) : L_(L) {
    lua_pushboolean(L_, 1);
    lua_setfield(L_, LUA_REGISTRYINDEX, kRunKey);
  }
  ~RunUnderWay() {
    lua_pushnil(L_);
    lua_setfield(L_, LUA_REGISTRYINDEX, kRunKey);
  }
  RunUnderWay(const RunUnderWay&) = delete;
  RunUnderWay& operator=(const RunUnderWay&) = delete;

 private:
  lua_State* L_;
};

}  // namespace

bool run_under_way(lua_State* L) {
  lua_getfield(L, LUA_REGISTRYINDEX, kRunKey);
  const bool set = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return set;
}

ExperimentResult run_experiment(lua_State* L, int index, const ExperimentDefaults& d) {
  if (run_under_way(L))
    throw Error(
        "duet.run: cannot run inside another run's workload or callbacks (call it from the script's top "
        "level)");
  const RunUnderWay under_way(L);
  index = lua_absindex(L, index);
  Experiment ex = read_experiment(L, index, d);
  apply_memory_split(L, ex);
  if (d.validate) return validate_experiment(L, index, ex, d);
  LuaRun run = run_once(L, index, ex, spec_of(L, ex, d), d);
  add_lua_metadata(ex, d, run);
  return result_of(ex, std::move(run));
}

}  // namespace duet::lua

namespace duet::lua {

namespace {

constexpr const char* kRecordsMeta = "duet.RunRecords";

using RecordsPtr = std::shared_ptr<std::vector<EngineRecords>>;

// Idempotent (emptied, not destroyed): the debug library can reach a __gc and call it again.
int records_gc(lua_State* L) {
  static_cast<RecordsPtr*>(luaL_checkudata(L, 1, kRecordsMeta))->reset();
  return 0;
}

// One column of the steps table as a Lua array: integers stay integers.
void push_column(lua_State* L, const std::vector<StepRecord>& steps, const Column& column) {
  lua_createtable(L, int(steps.size()), 0);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (column.kind == ColumnKind::F64) lua_pushnumber(L, column.number(&steps[i]));
    else lua_pushinteger(L, column.integer(&steps[i]));
    lua_rawseti(L, -2, lua_Integer(i + 1));
  }
  lua_setfield(L, -2, column.name);
}

// result.timeline(engine name) -> {start_s = {...}, duration_s = {...}, ...}: the per-step
// timeline as columns, those of the run file's steps table, for quick prints and plots from Lua.
int timeline(lua_State* L) {
  auto* records = static_cast<RecordsPtr*>(luaL_checkudata(L, lua_upvalueindex(1), kRecordsMeta));
  const char* name = luaL_checkstring(L, 1);  // not a std::string: lua_error longjmps past destructors
  if (!*records) return luaL_error(L, "timeline: the run's records were collected");
  for (const EngineRecords& r : **records) {
    if (r.name != name) continue;
    if (lua_toboolean(L, lua_upvalueindex(2)))
      return luaL_error(L, "timeline: this run kept no timeline (record = '%s'; 'steps' keeps it)",
                        lua_tostring(L, lua_upvalueindex(3)));
    const auto& s = r.steps;
    lua_createtable(L, 0, int(kStepColumns.size()) + 2);
    for (const Column& column : kStepColumns) push_column(L, s, column);
    set_integer(L, "total_blocks", r.total_blocks);
    set_integer(L, "block_size", r.block_size);
    return 1;
  }
  return luaL_error(L, "timeline: no engine '%s' in this run", name);
}

void push_percentiles(lua_State* L, const char* key, const Percentiles& p) {
  lua_createtable(L, 0, 4);
  set_number(L, "mean", p.mean);
  set_number(L, "p50", p.p50);
  set_number(L, "p90", p.p90);
  set_number(L, "p99", p.p99);
  lua_setfield(L, -2, key);
}

}  // namespace

void add_problem_answers(RunMetadata& m, const std::vector<ProblemRecord>& problems) {
  int correct = 0, known = 0;
  double score = 0;
  for (const ProblemRecord& p : problems) {
    known += p.correct >= 0;
    correct += p.correct == 1;
    score += p.score;
  }
  if (known) m.numbers.emplace_back("accuracy", double(correct) / known);
  m.numbers.emplace_back("mean_score", problems.empty() ? 0.0 : score / double(problems.size()));
}

void push_result(lua_State* L, const ExperimentResult& r) {
  lua_createtable(L, 0, 10);
  set_number(L, "makespan_s", r.summary.makespan_s);
  set_number(L, "wall_s", r.summary.wall_s);
  // From the run's attributes (result_of), which a run read back from its file has whatever its
  // record level kept.
  auto number = [&](const char* name) {
    const double* v = r.metadata.find_number(name);
    return v ? std::optional<double>(*v) : std::nullopt;
  };
  set_integer(L, "problems", lua_Integer(number("problems").value_or(0)));
  set_number(L, "problems_per_s", r.problems_per_s);
  set_number(L, "problems_per_hour", 3600.0 * r.problems_per_s);
  if (const auto accuracy = number("accuracy")) set_number(L, "accuracy", *accuracy);  // absent: none said
  set_number(L, "mean_score", number("mean_score").value_or(0));
  lua_createtable(L, 0, int(r.summary.engines.size()));
  for (const EngineSummary& e : r.summary.engines) {
    lua_createtable(L, 0, 20);
    set_string(L, "model", e.model.c_str());
    // What priced (or ran) its steps, as the run file's ENGINE.cost_model records it.
    if (const std::string* cost_model = r.metadata.find_text(e.name + ".cost_model"))
      set_string(L, "cost_model", cost_model->c_str());
    visit_summary(e, [&](const char* name, const auto& v) {
      using T = std::remove_cvref_t<decltype(v)>;
      if constexpr (std::is_same_v<T, Percentiles>) push_percentiles(L, name, v);
      else if constexpr (std::is_integral_v<T>) set_integer(L, name, lua_Integer(v));
      else set_number(L, name, v);
    });
    set_number(L, "prompt_tokens_per_s",
               r.summary.makespan_s > 0 ? double(e.prompt_tokens) / r.summary.makespan_s : 0);
    for (std::size_t i = 0; i < r.records->size(); ++i) {
      const EngineRecords& rec = (*r.records)[i];
      if (rec.name != e.name) continue;
      set_integer(L, "total_blocks", rec.total_blocks);
      // Tokens the engine actually computed (prefix hits and forked KV are not recomputed).
      const std::int64_t prefill = i < r.computed_prefill_tokens.size() ? r.computed_prefill_tokens[i] : 0;
      set_integer(L, "prefill_tokens", lua_Integer(prefill));
      set_number(L, "prefill_tokens_per_s",
                 r.summary.makespan_s > 0 ? double(prefill) / r.summary.makespan_s : 0);
    }
    lua_setfield(L, -2, e.name.c_str());
  }
  lua_setfield(L, -2, "engines");
  // The timeline closure keeps the records alive as long as Lua holds the result.
  void* mem = lua_newuserdatauv(L, sizeof(RecordsPtr), 0);
  new (mem) RecordsPtr(r.records);
  if (luaL_newmetatable(L, kRecordsMeta)) {
    lua_pushcfunction(L, records_gc);
    lua_setfield(L, -2, "__gc");
    protect_metatable(L, kRecordsMeta);
  }
  lua_setmetatable(L, -2);
  lua_pushboolean(L, !keeps_steps(r.record));
  lua_pushstring(L, record_level_name(r.record));
  lua_pushcclosure(L, timeline, 3);
  lua_setfield(L, -2, "timeline");
}

}  // namespace duet::lua
