#include "cli/lua/lua_api.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli/command.hpp"
#include "cli/lua/lua_context.hpp"
#include "cli/lua/lua_engine_handle.hpp"
#include "cli/lua/lua_experiment.hpp"
#include "cli/lua/lua_functions.hpp"
#include "cli/lua/lua_types.hpp"
#include "cli/lua/lua_util.hpp"
#include "cli/lua/lua_workload.hpp"
#include "cli/lua/point_queue.hpp"
#include "cli/lua/result_codec.hpp"
#include "cli/lua/sweep_handout.hpp"
#include "cli/sweep_file.hpp"
#include "core/error.hpp"
#include "exec/backend.hpp"
#include "exec/wall_clock.hpp"
#include "io/hdf5_run.hpp"
#include "io/trace.hpp"
#include "nlohmann/json.hpp"

namespace duet::lua {

// A sweep thread re-runs the script in its own Lua state and, at the sweep it was started for,
// runs the points its queue hands it. The sweeps before that one return the main state's results.
struct WorkerJob {
  int sweep = 0;  // which duet.sweep call of the script (0-based)
  PointQueue* queue = nullptr;
  const std::vector<SweepResults>* earlier = nullptr;  // the main state's finished sweeps
  const std::string* grid_json = nullptr;              // the main state's grid of this sweep
};

// Where open_duet leaves the script's context in the registry.
constexpr const char* kContextKey = "duet.script";

ScriptContext& context(lua_State* L) {
  lua_getfield(L, LUA_REGISTRYINDEX, kContextKey);
  auto* ctx = static_cast<ScriptContext*>(lua_touserdata(L, -1));
  lua_pop(L, 1);
  if (!ctx) throw Error("duet: no script context");
  return *ctx;
}

std::string resolve_path(lua_State* L, const std::string& path) {
  return resolve_path(path, context(L).opt.source_dir);
}

namespace {

// Raised (as a Lua error value) to end a worker's script once its points are done.
constexpr const char* kWorkerDone = "duet.sweep: worker done";

ExperimentDefaults defaults_of(const ScriptContext& ctx) {
  ExperimentDefaults d;
  d.progress = ctx.opt.progress && !ctx.worker;
  d.backend = ctx.opt.backend;
  d.source_dir = ctx.opt.source_dir;
  d.script_text = ctx.script_text;
  d.command_line = ctx.opt.command_line;
  if (d.command_line.empty()) {
    d.command_line = "duet run " + ctx.opt.script;
    for (const auto& a : ctx.opt.args) d.command_line += " " + a;
  }
  d.progress = d.progress && ctx.opt.progress;
  d.record = ctx.opt.record;
  d.stop = ctx.opt.stop;
  d.validate = ctx.opt.validate;
  return d;
}

// Rank 0 of an MPI job, outside sweep threads, writes the file; the others only compute.
bool writes(const ScriptContext& ctx) { return !ctx.worker && ctx.opt.ranks.rank == 0 && !ctx.opt.validate; }

RunFileWriter& writer(ScriptContext& ctx) {
  if (!ctx.writer) {
    ctx.writer = std::make_unique<RunFileWriter>(ctx.out_path);
    ctx.writer->write_attributes("/", cli::identity_metadata(ctx.identity));
  }
  return *ctx.writer;
}

// --resume: a run the file already holds is read back instead of run again; a group that a kill
// left unfinished is removed, to be written again.
std::optional<ExperimentResult> resumed_run(ScriptContext& ctx, const std::string& group) {
  if (!ctx.resuming) return std::nullopt;
  const std::vector<std::string> runs = list_runs(ctx.out_path);
  if (std::find(runs.begin(), runs.end(), group) != runs.end())
    return result_of_run(read_run(ctx.out_path, group));
  writer(ctx).remove_group(group);
  return std::nullopt;
}

// ---- duet.run ----

int l_run(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  return guarded(L, [&] {
    ScriptContext& ctx = context(L);
    const bool write = wants_output(L, 1, "duet.run") && writes(ctx);
    const std::string group = cli::run_group(ctx.runs);
    std::optional<ExperimentResult> r = write ? resumed_run(ctx, group) : std::nullopt;
    if (!r) {
      r = run_experiment(L, 1, defaults_of(ctx));
      if (write) writer(ctx).write_run(group, r->metadata, *r->records, r->summary, &r->problems, r->record);
    }
    ++ctx.runs;
    push_result(L, *r);
    return 1;
  });
}

// ---- run-time functions of a workload ----

// A yield from a C function longjmps out of it, into lua_resume. Debian's liblua5.4 is built with
// _FORTIFY_SOURCE, so that longjmp is __longjmp_chk, which GCC 12's ThreadSanitizer runtime does
// not intercept: an instrumented frame that yields is never popped from TSan's shadow stack, every
// later stack trace is one frame longer, and a long sweep's stack depot grew past 24 GB. These
// functions are therefore not instrumented (the calls they make are, and return normally).
#define DUET_YIELDS_FROM_C __attribute__((no_sanitize("thread")))

DUET_YIELDS_FROM_C int l_await(lua_State* L) {
  int r = 0;
  const int status = guarded(L, [&] {
    r = LuaWorkload::from(L, "duet.await").lua_await(L);
    return 0;
  });
  (void)status;
  if (r < 0) return lua_yield(L, 0);  // outside every C++ scope
  return r;
}

DUET_YIELDS_FROM_C int l_sleep_until(lua_State* L) {  // duet.sleep_until(t): yields until time t
  const double t = luaL_checknumber(L, 1);
  int r = 0;
  guarded(L, [&] {
    // A NaN would never compare as reached: the run would wait for it forever.
    if (!std::isfinite(t))
      throw Error(where(L) + "duet.sleep_until(t): t must be a finite number of seconds, got " +
                  std::to_string(t));
    // Run time starts at 0: a date (Unix seconds are past 1.7e9) or milliseconds would have the
    // wall clock sleep for years, and the virtual one end the run there.
    if (t > kMaxRunTime_s) {
      std::ostringstream shown;
      shown << t;
      throw Error(where(L) + "duet.sleep_until(t): t = " + shown.str() +
                  " s is past 1e8 s (3.2 years); t is seconds since the run began (duet.now()), not a date");
    }
    r = LuaWorkload::from(L, "duet.sleep_until").lua_sleep_until(L, t);
    return 0;
  });
  if (r < 0) return lua_yield(L, 0);
  return 0;
}

// duet.trace(path, {max_requests, vocab_size, seed}) -> array of
// {arrival_s, input_tokens, output_tokens, prompt = TokenList}
int l_trace(lua_State* L) {
  const char* path = luaL_checkstring(L, 1);  // not a std::string: lua_error longjmps past destructors
  return guarded(L, [&] {
    std::size_t max = 0;
    int vocab = 128256;
    std::uint64_t seed = 0;
    if (!lua_isnoneornil(L, 2) && !lua_istable(L, 2))
      throw Error(where(L) + "duet.trace: options must be a table {max_requests, vocab_size, seed}, got a " +
                  luaL_typename(L, 2));
    if (lua_istable(L, 2)) {
      TableReader t(L, 2, "duet.trace");
      const std::int64_t max_requests = t.integer("max_requests").value_or(0);
      if (max_requests < 0) t.fail("max_requests", "must be >= 0 (0: every request)");
      max = std::size_t(max_requests);
      vocab = t.int32("vocab_size").value_or(vocab);
      if (vocab < 1)
        t.fail("vocab_size", "must be a positive number of token ids, got " + std::to_string(vocab));
      seed = std::uint64_t(t.integer("seed").value_or(0));
      t.finish();
    }
    const Trace trace = load_trace(resolve_path(L, path));
    const std::size_t n = max ? std::min(max, trace.requests.size()) : trace.requests.size();
    lua_createtable(L, int(n), 0);
    for (std::size_t i = 0; i < n; ++i) {
      const TraceRequest& r = trace.requests[i];
      lua_createtable(L, 0, 5);
      set_number(L, "arrival_s", r.arrival_s);
      set_integer(L, "input_tokens", r.input_tokens);
      set_integer(L, "output_tokens", r.output_tokens);
      set_integer(L, "index", lua_Integer(i + 1));
      push_token_list(L, trace_prompt_tokens(trace, i, vocab, seed));
      lua_setfield(L, -2, "prompt");
      lua_rawseti(L, -2, lua_Integer(i + 1));
    }
    return 1;
  });
}

int l_now(lua_State* L) {
  return guarded(L, [&] {
    lua_pushnumber(L, LuaWorkload::from(L, "duet.now").runtime().now());
    return 1;
  });
}

// ---- duet.sweep ----

void run_worker(const ScriptOptions& opt, const WorkerJob& job, std::string& error);

// A grid value as the script wrote it: 2, not JSON's 2.0.
std::string shown(const nlohmann::ordered_json& v) {
  if (!v.is_number()) return v.dump();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.14g", v.get<double>());
  return buf;
}

// The values of grid.KEY (on the stack top) as JSON, checked: numbers, booleans or strings.
nlohmann::ordered_json grid_values(lua_State* L, const std::string& key) {
  const auto context = [&] {
    return where(L) + "duet.sweep: grid." + key + ": reading it raised an error: ";
  };
  const lua_Integer n = lua_istable(L, -1) ? with_context(context, [&] { return length(L, -1); }) : 0;
  if (n <= 0) throw Error(where(L) + "duet.sweep: grid." + key + " must be a non-empty list of values");
  nlohmann::ordered_json values = nlohmann::ordered_json::array();
  std::map<std::string, lua_Integer> first_index;  // each value's JSON text -> its position
  int first_type = LUA_TNONE;
  for (lua_Integer i = 1; i <= n; ++i) {
    with_context(context, [&] { return get_index(L, -1, i); });
    const int type = lua_type(L, -1);
    if (type == LUA_TNUMBER && !std::isfinite(lua_tonumber(L, -1))) {
      lua_pop(L, 1);
      throw Error(where(L) + "duet.sweep: grid." + key + " value " + std::to_string(i) +
                  " is not a finite number");
    }
    if (type == LUA_TNUMBER) values.push_back(lua_tonumber(L, -1));
    else if (type == LUA_TBOOLEAN) values.push_back(bool(lua_toboolean(L, -1)));
    else if (type == LUA_TSTRING) values.push_back(std::string(lua_tostring(L, -1)));
    lua_pop(L, 1);
    if (type != LUA_TNUMBER && type != LUA_TBOOLEAN && type != LUA_TSTRING)
      throw Error(where(L) + "duet.sweep: grid." + key + " values must be numbers, booleans or strings");
    // One type per key: a point's value keeps its type, and the file's point.KEY column has one.
    if (i > 1 && type != first_type)
      throw Error(where(L) + "duet.sweep: grid." + key + " mixes " + lua_typename(L, first_type) + "s and " +
                  lua_typename(L, type) + "s (value " + std::to_string(i) + ")");
    first_type = type;
    // A repeated value would run the same point twice, and the file would hold it twice.
    const auto [seen, fresh] = first_index.emplace(values.back().dump(), i);
    if (!fresh)
      throw Error(where(L) + "duet.sweep: grid." + key + " holds " + shown(values.back()) +
                  " twice (values " + std::to_string(seen->second) + " and " + std::to_string(i) + ")");
  }
  return values;
}

// More points than any sweep runs (a day at 1 s each), and few enough to hold in memory with
// their results: a grid of ten lists of ten values (1e10 points) once took all of a machine's RAM.
constexpr std::size_t kMaxSweepPoints = 100'000;

// The grid's points in a fixed order: keys sorted, the last key varying fastest. `grid_json`
// receives the grid ({key: [values]}), by which the file recognises the sweep.
std::vector<SweepPoint> grid_points(lua_State* L, int grid, std::string& grid_json) {
  std::vector<std::string> keys;
  lua_pushnil(L);
  while (lua_next(L, grid) != 0) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) throw Error(where(L) + "duet.sweep: grid keys must be names");
    keys.emplace_back(lua_tostring(L, -1));
  }
  std::sort(keys.begin(), keys.end());
  // Every list first, then the points: a grid too large to hold is refused before it is built.
  std::vector<nlohmann::ordered_json> lists;
  double total = 1;
  for (const std::string& key : keys) {
    with_context([&] { return where(L) + "duet.sweep: grid." + key + ": reading it raised an error: "; },
                 [&] { return get_field(L, grid, key.c_str()); });
    lists.push_back(grid_values(L, key));
    lua_pop(L, 1);
    total *= double(lists.back().size());
  }
  if (total > double(kMaxSweepPoints))
    throw Error(where(L) + "duet.sweep: grid has " + std::to_string(std::llround(std::min(total, 1e18))) +
                " points (the product of its lists' lengths), more than " + std::to_string(kMaxSweepPoints) +
                "; split the sweep, or sample the points in Lua");
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  std::vector<SweepPoint> points(1);
  for (std::size_t k = 0; k < keys.size(); ++k) {
    const std::string& key = keys[k];
    const nlohmann::ordered_json& values = lists[k];
    json[key] = values;
    std::vector<SweepPoint> next;
    for (const SweepPoint& base : points)
      for (const auto& v : values) {
        SweepPoint p = base;
        if (v.is_string()) p.text.emplace_back(key, v.get<std::string>());
        else if (v.is_boolean())
          p.numbers.emplace_back(key, v.get<bool>() ? 1.0 : 0.0), p.booleans.push_back(key);
        else p.numbers.emplace_back(key, v.get<double>());
        next.push_back(std::move(p));
      }
    points = std::move(next);
  }
  grid_json = json.dump();
  return points;
}

// A sweep point's __index, reached only for a key the grid does not have: an error at the line that
// read it (a misspelt key would be nil, and the run would take that setting's default). Upvalue 1:
// the grid's keys. No C++ object lives here: lua_error longjmps.
int unknown_point_key(lua_State* L) {
  luaL_where(L, 1);
  if (lua_type(L, 2) == LUA_TSTRING)
    lua_pushfstring(L, "the sweep point has no key '%s' (the grid's keys: %s)", lua_tostring(L, 2),
                    lua_tostring(L, lua_upvalueindex(1)));
  else
    lua_pushfstring(L, "a sweep point's keys are the grid's names (%s), not a %s",
                    lua_tostring(L, lua_upvalueindex(1)), luaL_typename(L, 2));
  lua_concat(L, 2);
  return lua_error(L);
}

// Pushes the point as a Lua table {name = value}, values with their Lua types; reading a key the
// grid does not have is an error.
void push_point(lua_State* L, const SweepPoint& p) {
  std::vector<std::string> keys;
  for (const auto& kv : p.numbers) keys.push_back(kv.first);
  for (const auto& kv : p.text) keys.push_back(kv.first);
  std::sort(keys.begin(), keys.end());
  std::string names;
  for (const std::string& k : keys) names += (names.empty() ? "" : ", ") + k;
  lua_createtable(L, 0, int(p.numbers.size() + p.text.size()));
  lua_createtable(L, 0, 1);
  lua_pushstring(L, names.c_str());
  lua_pushcclosure(L, unknown_point_key, 1);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
  for (const auto& [k, v] : p.numbers) {
    if (std::find(p.booleans.begin(), p.booleans.end(), k) != p.booleans.end()) lua_pushboolean(L, v != 0.0);
    else if (std::floor(v) == v && std::abs(v) < 9e15) lua_pushinteger(L, lua_Integer(v));
    else lua_pushnumber(L, v);
    lua_setfield(L, -2, k.c_str());
  }
  for (const auto& [k, v] : p.text) {
    lua_pushstring(L, v.c_str());
    lua_setfield(L, -2, k.c_str());
  }
}

// The sweep being run, as its points need it.
struct SweepCall {
  int sweep = 0;
  int grid = 0, fn = 0;  // stack indices of the grid and run(point)
  std::string label;
  std::string grid_json;
  std::vector<SweepPoint> points;
  ExperimentDefaults defaults;
};

bool stop_asked(const ScriptContext& ctx) { return ctx.opt.stop && ctx.opt.stop->load() != 0; }

// config = run(point), then duet.run's work. An error fails this point only; a stop interrupts it.
PointOutcome run_point(lua_State* L, const SweepCall& call, std::size_t index) {
  const ScriptContext& ctx = context(L);
  PointOutcome o;
  o.index = index;
  o.rank = ctx.opt.ranks.rank;
  if (stop_asked(ctx)) return o.status = PointStatus::Interrupted, o;
  const auto start = std::chrono::steady_clock::now();
  const int top = lua_gettop(L);
  try {
    lua_pushvalue(L, call.fn);
    push_point(L, call.points[index]);
    pcall(L, 1, 1);
    if (!lua_istable(L, -1)) throw Error("duet.sweep: run(point) must return a duet.run configuration table");
    o.result = run_experiment(L, -1, call.defaults);
    o.status = PointStatus::Done;
  } catch (const Error& e) {
    // duet validate compares every point: one that cannot run is the validation's error.
    if (ctx.opt.validate) throw;
    o.status = stop_asked(ctx) ? PointStatus::Interrupted : PointStatus::Failed;
    o.error = e.what();
  }
  lua_settop(L, top);
  o.busy_s = seconds_since(start);
  return o;
}

// A sweep thread's share: points from the queue until it is closed.
void serve_points(lua_State* L, const SweepCall& call, PointQueue& queue) {
  while (const std::optional<std::size_t> index = queue.next()) queue.report(run_point(L, call, *index));
}

RunMetadata point_metadata(const SweepCall& call, std::size_t index, RunMetadata meta) {
  const SweepPoint& p = call.points[index];
  for (const auto& [k, v] : p.text) meta.text.emplace_back("point." + k, v);
  for (const auto& [k, v] : p.numbers) meta.numbers.emplace_back("point." + k, v);
  meta.text.emplace_back("sweep", call.label);
  return meta;
}

// Written as each point finishes, and flushed: a killed sweep keeps every finished point.
void write_outcome(ScriptContext& ctx, const SweepCall& call, const PointOutcome& o) {
  if (o.status == PointStatus::Done) {
    const ExperimentResult& r = o.result;
    writer(ctx).write_run(cli::point_group(call.sweep, o.index), point_metadata(call, o.index, r.metadata),
                          *r.records, r.summary, &r.problems, r.record);
  } else if (o.status == PointStatus::Failed) {
    writer(ctx).write_attributes(cli::failed_group(call.sweep, o.index),
                                 point_metadata(call, o.index, {{{"error", o.error}}, {}}));
  }
}

// --resume, for a sweep the file already has: the points it holds are read back; failed points and
// points a kill left unfinished are removed, to be run again. Returns the points still to run.
std::vector<std::size_t> resume_sweep(ScriptContext& ctx, const SweepCall& call, SweepResults& results,
                                      std::vector<std::size_t> pending) {
  const std::string& path = ctx.out_path;
  const std::string points = cli::sweep_group(call.sweep) + "/points";
  const std::vector<std::string> runs = list_runs(path);
  for (std::size_t i : cli::point_indices(path, points)) {
    const std::string group = cli::point_group(call.sweep, i);
    if (i >= call.points.size() || !ctx.opt.shard.owns(i))
      throw Error("--resume: " + path + ": " + group + " is not a point of this sweep and shard");
    if (std::find(runs.begin(), runs.end(), group) == runs.end()) {
      writer(ctx).remove_group(group);
      continue;
    }
    PointOutcome& o = results.outcomes[i];
    o.status = PointStatus::Done;
    o.rank = -1;
    o.result = result_of_run(read_run(path, group));
    std::erase(pending, i);
  }
  writer(ctx).remove_group(cli::sweep_group(call.sweep) + "/failed");
  return pending;
}

// Runs this rank's part of the sweep; rank 0 writes each outcome as it arrives.
SweepBalance run_sweep_points(lua_State* L, ScriptContext& ctx, const SweepCall& call, int threads,
                              std::vector<std::size_t> pending, SweepResults& results, bool write) {
  const cli::Ranks& ranks = ctx.opt.ranks;
  std::vector<std::thread> pool;
  std::vector<WorkerJob> jobs;
  std::vector<std::string> errors;
  SweepHandout h;
  // One thread alone runs on the main state; a rank of an MPI job keeps its main thread for MPI.
  h.threads = ranks.size > 1 ? threads : int(std::min<std::size_t>(std::size_t(threads), pending.size()));
  h.use_threads = ranks.size > 1 || h.threads > 1;
  h.pending = std::move(pending);
  h.stop = ctx.opt.stop;
  h.grid = call.grid_json;
  h.start_threads = [&](PointQueue& queue) {
    jobs.assign(std::size_t(h.threads), WorkerJob{call.sweep, &queue, &ctx.finished_sweeps, &call.grid_json});
    errors.assign(jobs.size(), "");
    for (std::size_t w = 0; w < jobs.size(); ++w)
      pool.emplace_back(run_worker, std::cref(ctx.opt), std::cref(jobs[w]), std::ref(errors[w]));
  };
  h.join_threads = [&] {
    for (std::thread& t : pool) t.join();
  };
  h.thread_error = [&] {
    for (const std::string& e : errors)
      if (!e.empty()) return e;
    return std::string();
  };
  // Points on the main state run one at a time, whatever was asked: a real engine's may run.
  SweepCall alone = call;
  alone.defaults.sweep_threads = 1;
  h.run_here = [&](std::size_t index) { return run_point(L, alone, index); };
  h.on_outcome = [&](PointOutcome& o) {
    if (write) write_outcome(ctx, call, o);
    results.outcomes[o.index] = std::move(o);
  };
  SweepBalance balance = hand_out(ranks, h);
  for (const std::string& e : errors)
    if (!e.empty() && !balance.stopped) throw Error(e);
  return balance;
}

// Rank 0's outcomes, and whether the sweep stopped, on every rank: the script goes on the same
// everywhere.
void share_outcomes(const cli::Ranks& ranks, SweepResults& results, SweepBalance& balance) {
  std::vector<char> bytes;
  if (ranks.rank == 0) {
    bytes.push_back(char(balance.stopped));
    for (const PointOutcome& o : results.outcomes)
      if (o.status == PointStatus::Done || o.status == PointStatus::Failed) {
        const std::vector<char> one = encode_outcome(o);
        const auto size = std::uint64_t(one.size());
        bytes.insert(bytes.end(), reinterpret_cast<const char*>(&size),
                     reinterpret_cast<const char*>(&size + 1));
        bytes.insert(bytes.end(), one.begin(), one.end());
      }
  }
  bytes = cli::broadcast_bytes(std::move(bytes), ranks);
  if (ranks.rank == 0) return;
  balance.stopped = bytes.at(0) != 0;
  for (std::size_t at = 1; at < bytes.size();) {
    std::uint64_t size = 0;
    std::memcpy(&size, bytes.data() + at, sizeof size);
    at += sizeof size;
    PointOutcome o = decode_outcome(
        std::vector<char>(bytes.begin() + std::ptrdiff_t(at), bytes.begin() + std::ptrdiff_t(at + size)));
    at += size;
    if (o.index >= results.outcomes.size()) throw Error("duet.sweep: rank 0 sent a point beyond the grid");
    results.outcomes[o.index] = std::move(o);
  }
}

// The failures' first three distinct messages, not only in the file: a point that fails fails
// most often as the others do (a mistyped option), and a user should not need h5py to read it.
// Each names its first point and the others alike, by duet.sweep's 1-based index (the file's
// failed/NNNN groups count from 0), and what is left unshown is counted.
void report_failures(const SweepResults& results) {
  std::vector<std::pair<std::string, std::vector<std::size_t>>> by_error;
  for (const PointOutcome& o : results.outcomes) {
    if (o.status != PointStatus::Failed) continue;
    auto same =
        std::find_if(by_error.begin(), by_error.end(), [&](const auto& e) { return e.first == o.error; });
    if (same == by_error.end()) by_error.push_back({o.error, {o.index + 1}});
    else same->second.push_back(o.index + 1);
  }
  std::size_t unshown = 0;
  for (std::size_t e = 0; e < by_error.size(); ++e) {
    const auto& [error, points] = by_error[e];
    if (e >= 3) {
      unshown += points.size();
      continue;
    }
    std::fprintf(stderr, "  point %zu failed: %s\n", points[0], error.c_str());
    if (points.size() == 1) continue;
    std::string alike;
    for (std::size_t i = 1; i < points.size() && i <= 8; ++i)
      alike += (i > 1 ? ", " : "") + std::to_string(points[i]);
    if (points.size() > 9) alike += ", ...";
    std::fprintf(stderr, "    and %zu more point%s alike: %s\n", points.size() - 1,
                 points.size() > 2 ? "s" : "", alike.c_str());
  }
  if (unshown)
    std::fprintf(
        stderr,
        "  and %zu more failed points with %zu other messages (each in the run file's failed groups)\n",
        unshown, by_error.size() - 3);
}

// One line on stderr: how the points went, and each rank's busy seconds (the load balance).
void report_sweep(const ScriptContext& ctx, const SweepCall& call, const SweepResults& results,
                  const SweepBalance& balance) {
  int ran = 0, resumed = 0, failed = 0, elsewhere = 0;
  for (const PointOutcome& o : results.outcomes) {
    if (o.status == PointStatus::Failed) ++failed;
    else if (o.status == PointStatus::Done) ++(o.rank < 0 ? resumed : ran);
    else if (!ctx.opt.shard.owns(o.index)) ++elsewhere;
  }
  const std::size_t points = results.outcomes.size();
  std::string line = "duet.sweep '" + call.label + "': " + std::to_string(points) +
                     (points == 1 ? " point: " : " points: ") + std::to_string(ran) + " ran, " +
                     std::to_string(failed) + " failed";
  if (resumed) line += ", " + std::to_string(resumed) + " kept from the file (--resume)";
  if (elsewhere) line += ", " + std::to_string(elsewhere) + " in other shards";
  if (balance.stopped) line += std::string(", ") + kSweepStopped;
  if (ctx.opt.ranks.size > 1) {
    line += "; busy seconds per rank:";
    char part[96];
    for (std::size_t r = 0; r < balance.busy_s.size(); ++r) {
      std::snprintf(part, sizeof part, " %zu: %.2f s (%d point%s)", r, balance.busy_s[r], balance.points[r],
                    balance.points[r] == 1 ? "" : "s");
      line += part;
    }
  }
  std::fprintf(stderr, "%s\n", line.c_str());
  report_failures(results);
}

// Results, in grid order: {point = {...}, result = <duet.run result>, index = i} for the points
// that ran; results.failed lists {point, index, error} for those that raised an error.
void push_results(lua_State* L, const SweepCall& call, const SweepResults& results) {
  lua_createtable(L, int(results.outcomes.size()), 1);
  lua_newtable(L);  // failed
  lua_Integer n = 0, failed = 0;
  for (const PointOutcome& o : results.outcomes) {
    if (o.status != PointStatus::Done && o.status != PointStatus::Failed) continue;
    lua_createtable(L, 0, 3);
    push_point(L, call.points[o.index]);
    lua_setfield(L, -2, "point");
    set_integer(L, "index", lua_Integer(o.index + 1));
    if (o.status == PointStatus::Done) {
      push_result(L, o.result);
      lua_setfield(L, -2, "result");
      lua_rawseti(L, -3, ++n);
    } else {
      set_string(L, "error", o.error.c_str());
      lua_rawseti(L, -2, ++failed);
    }
  }
  lua_setfield(L, -2, "failed");
}

int l_sweep(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  return guarded(L, [&] {
    ScriptContext& ctx = context(L);
    SweepCall call;
    // Each point is a duet.run, which cannot run inside another: refused here, not point by point.
    if (run_under_way(L))
      throw Error(where(L) +
                  "duet.sweep: cannot sweep inside a run's workload or callbacks (call it from the script's "
                  "top level)");
    TableReader t(L, 1, "duet.sweep");
    t.known({"grid", "run", "threads", "label", "out"});
    t.finish();  // a misspelt key is named before the keys it replaces are missed
    if (t.push("grid") != LUA_TTABLE) t.fail("grid", "expected a table {name = {values...}}");
    call.grid = lua_gettop(L);
    if (t.push("run") != LUA_TFUNCTION)
      t.fail("run", "expected a function run(point) -> duet.run configuration");
    call.fn = lua_gettop(L);
    // A real engine's sweep (and validation) runs one point at a time: the engine's step times are
    // what it measures, nothing may run beside it on the cores, and two CUDA points would each take
    // most of the one GPU's memory.
    const std::optional<int> asked = t.int32("threads");
    if (asked && *asked < 0)
      t.fail("threads", "must be 0 (as duet run --threads) or more, got " + std::to_string(*asked));
    const bool real = is_real_backend(ctx.opt.backend);
    if (real && !ctx.opt.validate && asked && *asked > 1)
      t.fail("threads", "a sweep on a real engine (--backend " + ctx.opt.backend +
                            ") runs one point at a time, got " + std::to_string(*asked));
    const int threads = ctx.opt.validate || real ? 1 : (asked && *asked > 0 ? *asked : ctx.opt.threads);
    call.label = t.string("label").value_or("sweep");
    t.has("out");  // out = false: no file, as for duet.run
    t.finish();
    call.points = grid_points(L, call.grid, call.grid_json);
    call.defaults = defaults_of(ctx);
    call.defaults.progress = false;
    call.defaults.sweep_threads = threads;
    // Numbered only once it is sure to run: a refused call (caught by a pcall) takes no number, or
    // sweep threads, which find earlier sweeps by number, would look up the wrong one.
    call.sweep = ctx.sweeps++;
    if (ctx.worker) {  // a sweep thread: serve the sweep it was started for; earlier ones are done
      if (call.sweep == ctx.worker->sweep) {
        // Points are numbered in the main state's grid: another grid here would run other points
        // under its numbers, silently.
        if (call.grid_json != *ctx.worker->grid_json)
          throw Error(where(L) + "duet.sweep '" + call.label +
                      "': a sweep thread's run of the script built the grid " + call.grid_json +
                      ", the main one " + *ctx.worker->grid_json +
                      " (a grid must not depend on time, randomness, the thread or the MPI rank)");
        serve_points(L, call, *ctx.worker->queue);
        ctx.worker_served = true;
        lua_pushstring(L, kWorkerDone);
        return -1;
      }
      if (std::size_t(call.sweep) >= ctx.worker->earlier->size())
        throw Error("duet.sweep: a sweep thread reached a sweep the script had not run");
      push_results(L, call, (*ctx.worker->earlier)[std::size_t(call.sweep)]);
      return 1;
    }
    const bool write = wants_output(L, 1, "duet.sweep") && writes(ctx);
    SweepResults results;
    results.outcomes.resize(call.points.size());
    std::vector<std::size_t> pending;
    for (std::size_t i = 0; i < call.points.size(); ++i) {
      results.outcomes[i].index = i;
      if (ctx.opt.shard.owns(i)) pending.push_back(i);
    }
    const bool known = write && ctx.resuming &&
                       cli::check_sweep(ctx.out_path, call.sweep, call.label, call.grid_json,
                                        call.points.size(), "--resume");
    if (known) pending = resume_sweep(ctx, call, results, std::move(pending));
    else if (write)
      writer(ctx).write_attributes(cli::sweep_group(call.sweep),
                                   cli::sweep_metadata(call.label, call.grid_json, call.points.size()));
    SweepBalance balance = run_sweep_points(L, ctx, call, threads, std::move(pending), results, write);
    if (ctx.opt.ranks.size > 1) share_outcomes(ctx.opt.ranks, results, balance);
    if (ctx.opt.ranks.rank == 0) report_sweep(ctx, call, results, balance);
    if (balance.stopped) throw Error("duet.sweep '" + call.label + "': " + kSweepStopped);
    for (const PointOutcome& o : results.outcomes) ctx.failed_points += o.status == PointStatus::Failed;
    push_results(L, call, results);
    ctx.finished_sweeps.push_back(std::move(results));
    return 1;
  });
}

// A worker's script ends once its points are served. A pcall around duet.sweep would catch that
// end and run the rest of the script in the worker, so from then on every Lua instruction raises
// it again, until it leaves the script: the hooks are per thread, so the main thread's is set too
// (a sweep inside a coroutine returns the end to its resumer as a value).
void worker_done_hook(lua_State* L, lua_Debug*) { luaL_error(L, "%s", kWorkerDone); }

int l_sweep_entry(lua_State* L) {
  const int r = l_sweep(L);
  if (r < 0) {  // the worker's end, outside every C++ scope
    lua_sethook(L, worker_done_hook, LUA_MASKCOUNT, 1);
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
    lua_State* main = lua_tothread(L, -1);
    lua_pop(L, 1);
    if (main && main != L) lua_sethook(main, worker_done_hook, LUA_MASKCOUNT, 1);
    return lua_error(L);
  }
  return r;
}

const luaL_Reg kFunctions[] = {
    {"run", l_run},
    {"sweep", l_sweep_entry},
    {"await", l_await},
    {"now", l_now},
    {"sleep_until", l_sleep_until},
    {"trace", l_trace},
    {"uniform", l_uniform},
    {"normal", l_normal},
    {"hash", l_hash},
    {"synthetic", l_synthetic},
    {"token_list", l_token_list},
    {"tokens", l_tokens},
    {"tokenizer", l_tokenizer},
    {"read_json", l_read_json},
    {"read_jsonl", l_read_jsonl},
    {"model", l_model},
    {"gpu", l_gpu},
    {"models", l_models},
    {"gpus", l_gpus},
    {"args", l_args},
    {nullptr, nullptr},
};

void open_duet(lua_State* L, ScriptContext& ctx) {
  ctx.budget.limit = ctx.opt.instruction_limit;
  ctx.budget.stop = ctx.opt.stop;
  install_instruction_budget(L, &ctx.budget);
  register_types(L);
  register_engine_handle(L);
  lua_pushlightuserdata(L, &ctx);
  lua_setfield(L, LUA_REGISTRYINDEX, kContextKey);
  luaL_newlib(L, kFunctions);
  set_string(L, "backend", ctx.opt.backend.c_str());
  set_string(L, "source_dir", ctx.opt.source_dir.c_str());
  // Absolute: scripts print it for a notebook. (A sweep thread's state has no file of its own.)
  set_string(L, "out", cli::absolute_path(ctx.out_path).c_str());
  // require("duet") and the global `duet` are the same table.
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "loaded");
  lua_pushvalue(L, -3);
  lua_setfield(L, -2, "duet");
  lua_pop(L, 1);
  // Workload modules load from the repository: require("workloads.beam_search").
  lua_getfield(L, -1, "path");
  const std::string path = ctx.opt.source_dir + "/?.lua;" + ctx.opt.source_dir + "/?/init.lua;" +
                           std::filesystem::path(ctx.opt.script).parent_path().string() + "/?.lua;" +
                           lua_tostring(L, -1);
  lua_pop(L, 1);
  set_string(L, "path", path.c_str());
  lua_pop(L, 1);
  lua_setglobal(L, "duet");
}

}  // namespace

namespace {

void execute(ScriptContext& ctx) {
  State state;
  lua_State* L = state.get();
  open_duet(L, ctx);
  // Set after duet's own set-up, whose Lua calls are unprotected; the script's run under pcall.
  state.limit_memory(ctx.opt.memory_limit_mib << 20);
  if (ctx.worker || ctx.opt.ranks.rank != 0) {  // sweep threads and ranks > 0 print nothing: rank 0 reports
    lua_pushcfunction(L, [](lua_State*) { return 0; });
    lua_setglobal(L, "print");
    // io.write goes to the default output file: /dev/null here, so that io.write(...):write(...) still
    // chains.
    if (luaL_dostring(L, "io.output('/dev/null')") != LUA_OK)
      throw Error(std::string("cannot silence io.write: ") + lua_tostring(L, -1));
  }
  load_script(L, ctx.script_text, ctx.opt.script);
  pcall(L, 0, 0);
}

void run_worker(const ScriptOptions& opt, const WorkerJob& job, std::string& error) {
  try {
    ScriptContext ctx;
    ctx.opt = opt;
    ctx.opt.progress = false;
    ctx.script_text = opt.script_text;
    ctx.worker = &job;
    execute(ctx);
    if (!ctx.worker_served)
      error =
          "duet.sweep: the script did not reach the same sweep in a worker (does it depend on time or "
          "randomness?)";
  } catch (const Error& e) {
    if (std::string(e.what()).find(kWorkerDone) == std::string::npos) error = e.what();
  }
  job.queue->worker_exited();  // after its last report, whatever happened
}

}  // namespace

std::string default_run_file(const std::string& script) {
  return std::filesystem::path(script).stem().string() + ".h5";
}

namespace {

// --resume with an existing file: it must have been written by this script with these options, and
// be readable to its end; then runs are added to it. Without the file, the run starts afresh.
void open_to_resume(ScriptContext& ctx) {
  std::error_code ec;
  if (!std::filesystem::exists(ctx.out_path, ec)) return;
  const std::string& path = ctx.out_path;
  try {
    list_runs(path);  // every group visited: a truncated or damaged file stops here
    cli::check_identity(path, cli::read_identity(path), ctx.identity, "--resume", true);
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.rfind("--resume", 0) == 0) throw;
    throw Error("--resume: " + what + "; cannot continue this file (remove it, or choose another --out)");
  }
  ctx.writer = std::make_unique<RunFileWriter>(RunFileWriter::append(path));
  ctx.resuming = true;
}

}  // namespace

std::string read_script(const std::string& path) {
  cli::check_script(path);  // a pipe is a script (/dev/stdin), and so is a terminal; /dev/zero is not
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open script");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

ScriptOutcome run_script(const ScriptOptions& options) {
  ScriptContext ctx;
  ctx.opt = options;
  if (ctx.opt.ranks.rank != 0) ctx.opt.progress = false;
  ctx.script_text = ctx.opt.script_text =
      options.script_text.empty() ? read_script(options.script) : options.script_text;
  ctx.out_path = options.out.empty() ? default_run_file(options.script) : options.out;
  ctx.identity = cli::identity_of(ctx.script_text, cli::library_hash(options.source_dir), options.backend,
                                  record_level_name(options.record), options.args, options.shard);
  if (options.resume && ctx.opt.ranks.rank == 0 && !options.validate) open_to_resume(ctx);
  try {
    execute(ctx);
  } catch (const Error& e) {
    if (!ctx.writer) throw;
    // The runs written before the error stay in the file; a file the failure left unreadable (a
    // full disk) is removed.
    cli::rethrow_after_write_failure(*ctx.writer, ctx.out_path, e.what());
  }
  if (ctx.writer) {
    ctx.writer->close();
    std::printf("wrote %s\n", ctx.out_path.c_str());
  }
  return {ctx.failed_points};
}

}  // namespace duet::lua
