#include "cli/lua/lua_api.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
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
#include "core/error.hpp"
#include "io/hdf5_run.hpp"
#include "io/trace.hpp"

namespace duet::lua {

// A point of a duet.sweep: its parameters and, once run, its result.
struct SweepPoint {
  std::vector<std::pair<std::string, std::string>> text;  // the point's parameters
  std::vector<std::pair<std::string, double>> numbers;
  ExperimentResult result;
  bool done = false;
};

// A sweep worker re-runs the script in its own Lua state and, at the sweep it was started for,
// runs only its share of the points.
struct WorkerJob {
  int sweep = 0;                    // which duet.sweep call of the script (0-based)
  std::vector<std::size_t> points;  // indices into `slots`
  std::vector<SweepPoint>* slots = nullptr;
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

// A path as given, or relative to the repository (workloads/data/..., traces/...).
std::string resolve_path(lua_State* L, const std::string& path) {
  if (std::filesystem::exists(path)) return path;
  const std::string in_repo = context(L).opt.source_dir + "/" + path;
  return std::filesystem::exists(in_repo) ? in_repo : path;
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
  d.validate = ctx.opt.validate;
  return d;
}

RunFileWriter& writer(ScriptContext& ctx) {
  if (!ctx.writer) ctx.writer = std::make_unique<RunFileWriter>(ctx.out_path);
  return *ctx.writer;
}

std::string group_name(const char* prefix, int n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s/%04d", prefix, n);
  return buf;
}

// ---- duet.run ----

int l_run(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  return guarded(L, [&] {
    ScriptContext& ctx = context(L);
    const bool write = wants_output(L, 1) && !ctx.opt.validate;
    ExperimentResult r = run_experiment(L, 1, defaults_of(ctx));
    if (write && !ctx.worker) {
      const std::string group = group_name("/runs", ctx.runs);
      writer(ctx).write_run(group, r.metadata, *r.records, r.summary, &r.problems, r.record);
    }
    ++ctx.runs;
    push_result(L, r);
    return 1;
  });
}

// ---- run-time functions of a workload ----

int l_await(lua_State* L) {
  int r = 0;
  const int status = guarded(L, [&] {
    r = LuaWorkload::from(L).lua_await(L);
    return 0;
  });
  (void)status;
  if (r < 0) return lua_yield(L, 0);  // outside every C++ scope
  return r;
}

int l_sleep_until(lua_State* L) {  // duet.sleep_until(t): yields until time t
  const double t = luaL_checknumber(L, 1);
  int r = 0;
  guarded(L, [&] {
    // A NaN would never compare as reached: the run would wait for it forever.
    if (!std::isfinite(t))
      throw Error(where(L) + "duet.sleep_until(t): t must be a finite number of seconds, got " +
                  std::to_string(t));
    r = LuaWorkload::from(L).lua_sleep_until(L, t);
    return 0;
  });
  if (r < 0) return lua_yield(L, 0);
  return 0;
}

// duet.trace(path, {max_requests, vocab_size, seed, rate_scale}) -> array of
// {arrival_s, input_tokens, output_tokens, prompt = TokenList}
int l_trace(lua_State* L) {
  const std::string path = luaL_checkstring(L, 1);
  return guarded(L, [&] {
    std::size_t max = 0;
    int vocab = 128256;
    std::uint64_t seed = 0;
    if (lua_istable(L, 2)) {
      TableReader t(L, 2, "duet.trace");
      max = std::size_t(t.integer("max_requests").value_or(0));
      vocab = t.int32("vocab_size").value_or(vocab);
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
    lua_pushnumber(L, LuaWorkload::from(L).runtime().now());
    return 1;
  });
}

// ---- duet.sweep ----

// The grid's points in a fixed order: keys sorted, the last key varying fastest.
std::vector<SweepPoint> grid_points(lua_State* L, int grid) {
  std::vector<std::string> keys;
  lua_pushnil(L);
  while (lua_next(L, grid) != 0) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) throw Error(where(L) + "duet.sweep: grid keys must be names");
    keys.emplace_back(lua_tostring(L, -1));
  }
  std::sort(keys.begin(), keys.end());
  std::vector<SweepPoint> points(1);
  for (const std::string& key : keys) {
    lua_getfield(L, grid, key.c_str());
    if (!lua_istable(L, -1) || luaL_len(L, -1) == 0)
      throw Error(where(L) + "duet.sweep: grid." + key + " must be a non-empty list of values");
    std::vector<SweepPoint> next;
    for (const SweepPoint& base : points)
      for (lua_Integer i = 1; i <= luaL_len(L, -1); ++i) {
        SweepPoint p = base;
        lua_rawgeti(L, -1, i);
        if (lua_type(L, -1) == LUA_TNUMBER) p.numbers.emplace_back(key, lua_tonumber(L, -1));
        else if (lua_type(L, -1) == LUA_TBOOLEAN)
          p.numbers.emplace_back(key, lua_toboolean(L, -1) ? 1.0 : 0.0);
        else if (lua_type(L, -1) == LUA_TSTRING) p.text.emplace_back(key, lua_tostring(L, -1));
        else
          throw Error(where(L) + "duet.sweep: grid." + key + " values must be numbers, booleans or strings");
        lua_pop(L, 1);
        next.push_back(std::move(p));
      }
    lua_pop(L, 1);
    points = std::move(next);
  }
  return points;
}

// Pushes the point as a Lua table {name = value}, values with their Lua types.
void push_point(lua_State* L, int grid, const SweepPoint& p) {
  lua_createtable(L, 0, int(p.numbers.size() + p.text.size()));
  for (const auto& [k, v] : p.numbers) {
    lua_getfield(L, grid, k.c_str());
    lua_rawgeti(L, -1, 1);
    const bool boolean = lua_type(L, -1) == LUA_TBOOLEAN;
    lua_pop(L, 2);
    if (boolean) lua_pushboolean(L, v != 0.0);
    else if (std::floor(v) == v && std::abs(v) < 9e15) lua_pushinteger(L, lua_Integer(v));
    else lua_pushnumber(L, v);
    lua_setfield(L, -2, k.c_str());
  }
  for (const auto& [k, v] : p.text) {
    lua_pushstring(L, v.c_str());
    lua_setfield(L, -2, k.c_str());
  }
}

// Runs the points in `indices` in this state: config = run(point), then duet.run's work.
void run_points(lua_State* L, int grid, int fn, std::vector<SweepPoint>& points,
                const std::vector<std::size_t>& indices, const ExperimentDefaults& d) {
  for (std::size_t i : indices) {
    lua_pushvalue(L, fn);
    push_point(L, grid, points[i]);
    pcall(L, 1, 1);
    if (!lua_istable(L, -1)) throw Error("duet.sweep: run(point) must return a duet.run configuration table");
    points[i].result = run_experiment(L, -1, d);
    points[i].done = true;
    lua_pop(L, 1);
  }
}

void run_worker(const ScriptOptions& opt, const WorkerJob& job, std::string& error);

int l_sweep(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  return guarded(L, [&] {
    ScriptContext& ctx = context(L);
    const int sweep = ctx.sweeps++;
    TableReader t(L, 1, "duet.sweep");
    if (t.push("grid") != LUA_TTABLE) t.fail("grid", "expected a table {name = {values...}}");
    const int grid = lua_gettop(L);
    if (t.push("run") != LUA_TFUNCTION)
      t.fail("run", "expected a function run(point) -> duet.run configuration");
    const int fn = lua_gettop(L);
    // Validation measures a real engine: one point at a time, nothing beside it on the cores.
    const int threads = ctx.opt.validate ? 1 : t.int32("threads").value_or(ctx.opt.threads);
    const std::string label = t.string("label").value_or("sweep");
    t.has("out");  // out = false: no file, as for duet.run
    t.finish();
    std::vector<SweepPoint> points = grid_points(L, grid);
    ExperimentDefaults d = defaults_of(ctx);
    d.progress = false;
    if (ctx.worker) {  // a worker: only the sweep it was started for, only its points
      if (sweep == ctx.worker->sweep) {
        run_points(L, grid, fn, *ctx.worker->slots, ctx.worker->points, d);
        lua_pushstring(L, kWorkerDone);
        return -1;
      }
      std::vector<std::size_t> all(points.size());
      for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
      run_points(L, grid, fn, points, all, d);
    } else if (threads <= 1 || points.size() <= 1) {
      std::vector<std::size_t> all(points.size());
      for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
      run_points(L, grid, fn, points, all, d);
    } else {
      // One simulation per thread, each in its own Lua state; points are dealt round-robin, and a
      // point's result depends only on its configuration, so the thread count changes nothing.
      const std::size_t n = std::min<std::size_t>(std::size_t(threads), points.size());
      std::vector<WorkerJob> jobs(n);
      std::vector<std::string> errors(n);
      for (std::size_t i = 0; i < points.size(); ++i) jobs[i % n].points.push_back(i);
      std::vector<std::thread> pool;
      for (std::size_t w = 0; w < n; ++w) {
        jobs[w].sweep = sweep;
        jobs[w].slots = &points;
        pool.emplace_back(run_worker, std::cref(ctx.opt), std::cref(jobs[w]), std::ref(errors[w]));
      }
      for (auto& th : pool) th.join();
      for (const std::string& e : errors)
        if (!e.empty()) throw Error(e);
      for (const SweepPoint& p : points)
        if (!p.done) throw Error("duet.sweep: a worker ended before its points were done");
    }
    // Results, in grid order: {point = {...}, result = <duet.run result>}; one HDF5 group each.
    lua_createtable(L, int(points.size()), 0);
    for (std::size_t i = 0; i < points.size(); ++i) {
      SweepPoint& p = points[i];
      if (!ctx.worker && !ctx.opt.validate && wants_output(L, 1)) {
        RunMetadata meta = p.result.metadata;
        for (const auto& [k, v] : p.text) meta.text.emplace_back("point." + k, v);
        for (const auto& [k, v] : p.numbers) meta.numbers.emplace_back("point." + k, v);
        meta.text.emplace_back("sweep", label);
        writer(ctx).write_run(group_name((group_name("/sweeps", sweep) + "/points").c_str(), int(i)), meta,
                              *p.result.records, p.result.summary, &p.result.problems, p.result.record);
      }
      lua_createtable(L, 0, 2);
      push_point(L, grid, p);
      lua_setfield(L, -2, "point");
      push_result(L, p.result);
      lua_setfield(L, -2, "result");
      lua_rawseti(L, -2, lua_Integer(i + 1));
    }
    return 1;
  });
}

int l_sweep_entry(lua_State* L) {
  const int r = l_sweep(L);
  if (r < 0) return lua_error(L);  // the worker's end, outside every C++ scope
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
  install_instruction_budget(L, &ctx.budget);
  register_types(L);
  register_engine_handle(L);
  lua_pushlightuserdata(L, &ctx);
  lua_setfield(L, LUA_REGISTRYINDEX, kContextKey);
  luaL_newlib(L, kFunctions);
  set_string(L, "backend", ctx.opt.backend.c_str());
  set_string(L, "source_dir", ctx.opt.source_dir.c_str());
  set_string(L, "out", ctx.out_path.c_str());
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

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open script");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void execute(ScriptContext& ctx) {
  State state;
  lua_State* L = state.get();
  open_duet(L, ctx);
  if (ctx.worker) {  // workers print nothing: the main state reports
    lua_pushcfunction(L, [](lua_State*) { return 0; });
    lua_setglobal(L, "print");
  }
  load_file(L, ctx.opt.script);
  pcall(L, 0, 0);
}

void run_worker(const ScriptOptions& opt, const WorkerJob& job, std::string& error) {
  try {
    ScriptContext ctx;
    ctx.opt = opt;
    ctx.opt.progress = false;
    ctx.script_text = read_text(opt.script);
    ctx.worker = &job;
    execute(ctx);
    error =
        "duet.sweep: the script did not reach the same sweep in a worker (does it depend on time or "
        "randomness?)";
  } catch (const Error& e) {
    if (std::string(e.what()).find(kWorkerDone) == std::string::npos) error = e.what();
  }
}

}  // namespace

std::string default_run_file(const std::string& script) {
  return std::filesystem::path(script).stem().string() + ".h5";
}

void run_script(const ScriptOptions& options) {
  ScriptContext ctx;
  ctx.opt = options;
  ctx.script_text = read_text(options.script);
  ctx.out_path = options.out.empty() ? default_run_file(options.script) : options.out;
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
}

}  // namespace duet::lua
