#include "cli/lua/lua_api.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/lua/lua_experiment.hpp"
#include "cli/lua/lua_types.hpp"
#include "cli/lua/lua_util.hpp"
#include "cli/lua/lua_workload.hpp"
#include "cli/report.hpp"
#include "core/error.hpp"
#include "core/gpu_spec.hpp"
#include "core/mix.hpp"
#include "core/model_spec.hpp"
#include "exec/tokenizer.hpp"
#include "io/hdf5_run.hpp"
#include "io/trace.hpp"

namespace duet::lua {

namespace {

constexpr const char* kContextKey = "duet.script";

// Everything a script run shares across its duet.run and duet.sweep calls.
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

// Raised (as a Lua error value) to end a worker's script once its points are done.
constexpr const char* kWorkerDone = "duet.sweep: worker done";

ScriptContext& context(lua_State* L) {
  lua_getfield(L, LUA_REGISTRYINDEX, kContextKey);
  auto* ctx = static_cast<ScriptContext*>(lua_touserdata(L, -1));
  lua_pop(L, 1);
  if (!ctx) throw Error("duet: no script context");
  return *ctx;
}

ExperimentDefaults defaults_of(const ScriptContext& ctx) {
  ExperimentDefaults d;
  d.progress = ctx.opt.progress && !ctx.worker;
  d.backend = ctx.opt.backend;
  d.source_dir = ctx.opt.source_dir;
  d.script_text = ctx.script_text;
  d.command_line = "duet run " + ctx.opt.script;
  for (const auto& a : ctx.opt.args) d.command_line += " " + a;
  d.progress = d.progress && ctx.opt.progress;
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
      writer(ctx).write_run(group, r.metadata, *r.records, r.summary, &r.problems);
    }
    ++ctx.runs;
    push_result(L, r);
    return 1;
  });
}

// ---- small helpers for workloads ----

std::uint64_t key_of(lua_State* L, int first) {
  std::uint64_t h = 0x6b6579ULL;
  for (int i = first; i <= lua_gettop(L); ++i) {
    std::uint64_t v;
    if (lua_isinteger(L, i)) v = std::uint64_t(lua_tointeger(L, i));
    else if (lua_type(L, i) == LUA_TNUMBER) {
      const double d = lua_tonumber(L, i);
      std::memcpy(&v, &d, sizeof v);
    } else if (lua_type(L, i) == LUA_TSTRING) {
      std::size_t n;
      const char* s = lua_tolstring(L, i, &n);
      v = std::hash<std::string_view>{}(std::string_view(s, n));
    } else {
      luaL_argerror(L, i, "keys must be numbers or strings");
      return 0;
    }
    h = mix64(h ^ v);
  }
  return h;
}

double unit(std::uint64_t h) { return (double(h >> 11) + 0.5) * 0x1.0p-53; }

// duet.uniform(k1, k2, ...): a number in (0, 1) that depends only on the keys, so that a search's
// random choices do not depend on the order in which the simulation interleaves problems.
int l_uniform(lua_State* L) {
  lua_pushnumber(L, unit(key_of(L, 1)));
  return 1;
}

// duet.hash(k1, ...): a non-negative integer from the keys (seeds for token streams).
int l_hash(lua_State* L) {
  lua_pushinteger(L, lua_Integer(key_of(L, 1) >> 1));
  return 1;
}

// duet.normal(k1, ...): a standard normal from the keys (Box-Muller over two keyed uniforms).
int l_normal(lua_State* L) {
  const std::uint64_t h = key_of(L, 1);
  const double u1 = unit(mix64(h ^ 1)), u2 = unit(mix64(h ^ 2));
  lua_pushnumber(L, std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  return 1;
}

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

// A path as given, or relative to the repository (workloads/data/..., traces/...).
std::string resolve_path(lua_State* L, const std::string& path) {
  if (std::filesystem::exists(path)) return path;
  const std::string in_repo = context(L).opt.source_dir + "/" + path;
  return std::filesystem::exists(in_repo) ? in_repo : path;
}

int l_sleep_until(lua_State* L) {  // duet.sleep_until(t): yields until time t
  const double t = luaL_checknumber(L, 1);
  int r = 0;
  guarded(L, [&] {
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
      vocab = int(t.integer("vocab_size").value_or(vocab));
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

int l_synthetic(lua_State* L) {  // duet.synthetic(n, key...) -> TokenList
  const lua_Integer n = luaL_checkinteger(L, 1);
  const lua_Integer vocab = luaL_optinteger(L, 3, 128256);
  luaL_argcheck(L, n >= 0 && n <= (1 << 24), 1, "token count out of range");
  const std::uint64_t key = std::uint64_t(luaL_optinteger(L, 2, 0));
  return guarded(L, [&] {
    push_token_list(L, synthetic_tokens(int(n), key, int(vocab), kNoToken, kNoToken));
    return 1;
  });
}

// The repository's sentencepiece model (workloads/data/tokenizer), trained on MATH-500 and
// PRM800K text: real prompt token ids and lengths for the problem sets.
const Tokenizer& tokenizer(lua_State* L) {
  ScriptContext& ctx = context(L);
  if (!ctx.tokenizer)
    ctx.tokenizer = std::make_unique<Tokenizer>(
        Tokenizer::load(ctx.opt.source_dir + "/workloads/data/tokenizer/duet-math.model"));
  return *ctx.tokenizer;
}

int l_tokens(lua_State* L) {  // duet.tokens(text [, bos]) -> TokenList
  std::size_t n = 0;
  const char* text = luaL_checklstring(L, 1, &n);
  const bool bos = lua_toboolean(L, 2);
  return guarded(L, [&] {
    const Tokenizer& t = tokenizer(L);
    std::vector<TokenId> ids;
    if (bos && t.bos_id() != kNoToken) ids.push_back(t.bos_id());
    const auto body = t.encode(std::string_view(text, n));
    ids.insert(ids.end(), body.begin(), body.end());
    push_token_list(L, std::move(ids));
    return 1;
  });
}

int l_tokenizer(lua_State* L) {  // duet.tokenizer() -> {vocab_size, step_id, eos_id, bos_id, path}
  return guarded(L, [&] {
    const Tokenizer& t = tokenizer(L);
    lua_createtable(L, 0, 5);
    set_integer(L, "vocab_size", t.vocab_size());
    set_integer(L, "step_id", t.step_separator_id());
    set_integer(L, "eos_id", t.eos_id());
    set_integer(L, "bos_id", t.bos_id());
    set_string(L, "path", t.path().c_str());
    return 1;
  });
}

int l_token_list(lua_State* L) {  // duet.token_list{ids}
  luaL_checktype(L, 1, LUA_TTABLE);
  const lua_Integer n = luaL_len(L, 1);
  std::vector<TokenId>* ids = nullptr;
  TokenList& list = push_token_list(L, {});
  ids = &list.ids;
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_rawgeti(L, 1, i);
    const lua_Integer v = luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    ids->push_back(TokenId(v));
  }
  return 1;
}

// ---- JSON files into Lua tables (problem sets, fitted models) ----

void push_json(lua_State* L, const nlohmann::json& j) {
  luaL_checkstack(L, 4, "JSON nesting too deep");
  switch (j.type()) {
    case nlohmann::json::value_t::null: lua_pushnil(L); break;
    case nlohmann::json::value_t::boolean: lua_pushboolean(L, j.get<bool>()); break;
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: lua_pushinteger(L, j.get<lua_Integer>()); break;
    case nlohmann::json::value_t::number_float: lua_pushnumber(L, j.get<double>()); break;
    case nlohmann::json::value_t::string: lua_pushstring(L, j.get_ref<const std::string&>().c_str()); break;
    case nlohmann::json::value_t::array: {
      lua_createtable(L, int(j.size()), 0);
      lua_Integer i = 0;
      for (const auto& v : j) {
        push_json(L, v);
        lua_rawseti(L, -2, ++i);
      }
      break;
    }
    case nlohmann::json::value_t::object: {
      lua_createtable(L, 0, int(j.size()));
      for (const auto& [k, v] : j.items()) {
        push_json(L, v);
        lua_setfield(L, -2, k.c_str());
      }
      break;
    }
    default: lua_pushnil(L);
  }
}


int l_read_json(lua_State* L) {
  const std::string path = luaL_checkstring(L, 1);
  return guarded(L, [&] {
    const std::string p = resolve_path(L, path);
    std::ifstream in(p);
    if (!in) throw Error(p + ": cannot open");
    try {
      push_json(L, nlohmann::json::parse(in));
    } catch (const nlohmann::json::parse_error& e) {
      throw Error(p + ": not valid JSON (" + e.what() + ")");
    }
    return 1;
  });
}

int l_read_jsonl(lua_State* L) {  // duet.read_jsonl(path [, limit])
  const std::string path = luaL_checkstring(L, 1);
  const lua_Integer limit = luaL_optinteger(L, 2, 0);
  return guarded(L, [&] {
    const std::string p = resolve_path(L, path);
    std::ifstream in(p);
    if (!in) throw Error(p + ": cannot open");
    lua_newtable(L);
    std::string line;
    lua_Integer n = 0;
    for (int lineno = 1; std::getline(in, line) && (limit <= 0 || n < limit); ++lineno) {
      if (line.empty() || line == "\r") continue;
      try {
        push_json(L, nlohmann::json::parse(line));
      } catch (const nlohmann::json::parse_error& e) {
        throw Error(p + ":" + std::to_string(lineno) + ": not valid JSON (" + e.what() + ")");
      }
      lua_rawseti(L, -2, ++n);
    }
    return 1;
  });
}

// ---- models and GPUs ----

int l_model(lua_State* L) {  // duet.model(name or config.json) -> shape and derived figures
  const std::string name = luaL_checkstring(L, 1);
  return guarded(L, [&] {
    const ModelSpec m = resolve_model(name);
    lua_createtable(L, 0, 12);
    set_string(L, "name", m.name.c_str());
    set_number(L, "num_layers", m.num_layers);
    set_number(L, "hidden_size", m.hidden_size);
    set_number(L, "num_heads", m.num_heads);
    set_number(L, "num_kv_heads", m.num_kv_heads);
    set_number(L, "head_dim", m.head_dim);
    set_number(L, "intermediate_size", m.intermediate_size);
    set_number(L, "vocab_size", m.vocab_size);
    set_number(L, "num_parameters", double(m.num_parameters()));
    set_number(L, "weight_bytes", double(m.weight_bytes()));
    set_number(L, "kv_bytes_per_token", double(m.kv_bytes_per_token()));
    set_number(L, "linear_flops_per_token", m.linear_flops_per_token());
    return 1;
  });
}

int l_gpu(lua_State* L) {
  const std::string name = luaL_checkstring(L, 1);
  return guarded(L, [&] {
    const GpuSpec g = gpu_by_name(name);
    lua_createtable(L, 0, 6);
    set_string(L, "name", g.name.c_str());
    set_number(L, "hbm_bytes", double(g.hbm_bytes));
    set_number(L, "hbm_bandwidth", g.hbm_bandwidth);
    set_number(L, "bf16_flops", g.bf16_flops);
    set_integer(L, "sm_count", g.sm_count);
    return 1;
  });
}

void push_strings(lua_State* L, const std::vector<std::string>& v) {
  lua_createtable(L, int(v.size()), 0);
  for (std::size_t i = 0; i < v.size(); ++i) {
    lua_pushstring(L, v[i].c_str());
    lua_rawseti(L, -2, lua_Integer(i + 1));
  }
}

int l_models(lua_State* L) {
  push_strings(L, builtin_model_names());
  return 1;
}

int l_gpus(lua_State* L) {
  push_strings(L, builtin_gpu_names());
  return 1;
}

// duet.args{defaults}: the script's arguments after `--`, as --name value or --flag, checked
// against the defaults' names and types.
int l_args(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  return guarded(L, [&] {
    const auto& args = context(L).opt.args;
    lua_newtable(L);
    lua_pushnil(L);
    while (lua_next(L, 1) != 0) {  // copy the defaults
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_settable(L, -4);
    }
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      if (a.rfind("--", 0) != 0) throw Error("script argument '" + a + "': expected --name [value]");
      std::string name = a.substr(2);
      std::string value;
      const auto eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      for (char& c : name)
        if (c == '-') c = '_';
      const int t = lua_getfield(L, 1, name.c_str());
      lua_pop(L, 1);
      if (t == LUA_TNIL) {
        std::string valid;
        lua_pushnil(L);
        while (lua_next(L, 1) != 0) {
          lua_pop(L, 1);
          valid += std::string(valid.empty() ? "" : ", ") + "--" + lua_tostring(L, -1);
        }
        throw Error("unknown script argument '--" + name + "' (valid: " + valid + ")");
      }
      if (t == LUA_TBOOLEAN && eq == std::string::npos) {
        lua_pushboolean(L, 1);
      } else {
        if (eq == std::string::npos) {
          if (i + 1 >= args.size()) throw Error("script argument '--" + name + "' needs a value");
          value = args[++i];
        }
        if (t == LUA_TNUMBER) {
          char* end = nullptr;
          const double v = std::strtod(value.c_str(), &end);
          if (value.empty() || *end) throw Error("script argument '--" + name + "': '" + value + "' is not a number");
          if (std::floor(v) == v && std::abs(v) < 9e15) lua_pushinteger(L, lua_Integer(v));
          else lua_pushnumber(L, v);
        } else if (t == LUA_TBOOLEAN) {
          if (value != "true" && value != "false")
            throw Error("script argument '--" + name + "': expected true or false");
          lua_pushboolean(L, value == "true");
        } else {
          lua_pushstring(L, value.c_str());
        }
      }
      lua_setfield(L, -2, name.c_str());
    }
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
    keys.push_back(lua_tostring(L, -1));
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
        else if (lua_type(L, -1) == LUA_TBOOLEAN) p.numbers.emplace_back(key, lua_toboolean(L, -1) ? 1.0 : 0.0);
        else if (lua_type(L, -1) == LUA_TSTRING) p.text.emplace_back(key, lua_tostring(L, -1));
        else throw Error(where(L) + "duet.sweep: grid." + key + " values must be numbers, booleans or strings");
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
void run_points(lua_State* L, int grid, int fn, std::vector<SweepPoint>& points, const std::vector<std::size_t>& indices,
                const ExperimentDefaults& d) {
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
    if (t.push("run") != LUA_TFUNCTION) t.fail("run", "expected a function run(point) -> duet.run configuration");
    const int fn = lua_gettop(L);
    // Validation measures a real engine: one point at a time, nothing beside it on the cores.
    const int threads = ctx.opt.validate ? 1 : int(t.integer("threads").value_or(ctx.opt.threads));
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
                              *p.result.records, p.result.summary, &p.result.problems);
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
  register_types(L);
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
    error = "duet.sweep: the script did not reach the same sweep in a worker (does it depend on time or randomness?)";
  } catch (const Error& e) {
    if (std::string(e.what()).find(kWorkerDone) == std::string::npos) error = e.what();
  }
}

}  // namespace

void run_script(const ScriptOptions& options) {
  ScriptContext ctx;
  ctx.opt = options;
  ctx.script_text = read_text(options.script);
  ctx.out_path = options.out.empty() ? std::filesystem::path(options.script).stem().string() + ".h5" : options.out;
  execute(ctx);
  if (ctx.writer) {
    ctx.writer->close();
    std::printf("wrote %s\n", ctx.out_path.c_str());
  }
}

}  // namespace duet::lua
