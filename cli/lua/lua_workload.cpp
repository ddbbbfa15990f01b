#include "cli/lua/lua_workload.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include "cli/lua/lua_engine_handle.hpp"
#include "cli/lua/lua_types.hpp"
#include "cli/lua/lua_util.hpp"
#include "core/error.hpp"
#include "core/mix.hpp"

namespace duet::lua {

namespace {

constexpr const char* kWorkloadKey = "duet.workload";
// A million wake-ups is a day of one-per-0.1 s polling; a real workload submits or finishes
// something long before, and the check costs about a second of simulation to trip.
constexpr std::int64_t kMaxIdleWakeups = 1'000'000;

const char* finish_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Length:
      return "length";
    case FinishReason::Scored:
      return "scored";
    case FinishReason::Aborted:
      return "aborted";
    case FinishReason::None:
      break;
  }
  return "none";
}

int ref_field(lua_State* L, int index, const char* key, int type, const char* what) {
  const int found =
      with_context([&] { return std::string("workload: field '") + key + "': reading it raised an error: "; },
                   [&] { return get_field(L, index, key); });
  if (found != type) {
    lua_pop(L, 1);
    throw Error(where(L) + "duet.run.workload: field '" + key + "' must be " + what);
  }
  return luaL_ref(L, LUA_REGISTRYINDEX);
}

// ctx.engines' __index, reached only for a name that is not an engine: an error at the Lua line
// that used it (a nil engine would fail later, inside the workload, as "attempt to index a nil").
// Upvalue 1: the engines' names. No C++ object lives here: luaL_error longjmps.
int unknown_engine(lua_State* L) {
  const char* names = lua_tostring(L, lua_upvalueindex(1));
  luaL_where(L, 1);
  if (lua_rawlen(L, -1) == 0) {  // reached from a C function (ipairs): the Lua line that called it
    lua_pop(L, 1);
    luaL_where(L, 2);
  }
  if (lua_type(L, 2) == LUA_TSTRING)
    lua_pushfstring(L, "unknown engine '%s' (engines: %s)", lua_tostring(L, 2), names);
  else
    lua_pushfstring(L, "engines are named by strings (engines: %s), not by a %s", names, luaL_typename(L, 2));
  lua_concat(L, 2);
  return lua_error(L);
}

// ctx.engines' iterator for pairs(): the engines in the order duet.run declared them. Lua 5.4 seeds
// its string hashes afresh in every process, so next() would visit them in an order that changes
// from run to run, and a workload that submits in pairs() order would number and schedule its
// requests differently each time. Upvalue 1: the names, a list. No C++ object lives here.
int next_engine(lua_State* L) {
  const int names = lua_upvalueindex(1);
  const lua_Integer n = lua_Integer(lua_rawlen(L, names));
  lua_Integer at = 0;  // the position of the key given, 0 for nil (the first call)
  for (lua_Integer i = 1; i <= n && !lua_isnil(L, 2) && at == 0; ++i) {
    lua_rawgeti(L, names, i);
    if (lua_rawequal(L, -1, 2)) at = i;
    lua_pop(L, 1);
  }
  if (!lua_isnil(L, 2) && at == 0)
    return luaL_error(L, "ctx.engines: no engine named by the key given to next");
  if (at == n) return 0;  // the end: nil
  lua_rawgeti(L, names, at + 1);
  lua_pushvalue(L, -1);
  lua_rawget(L, 1);
  return 2;
}

// ctx.engines' __pairs. Upvalue 1: next_engine.
int pairs_engines(lua_State* L) {
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushvalue(L, 1);
  lua_pushnil(L);
  return 3;
}

}  // namespace

// The workload's `name` and the scalars among its `options`, its own fields (read raw: an option's
// table of problems or function is not a setting to record), in key order. An integer a double
// does not hold exactly (a seed from duet.hash) is recorded as text, so two runs stay told apart.
RunMetadata describe_workload(lua_State* L, int index) {
  RunMetadata m;
  TableReader t(L, index, "duet.run.workload");
  const std::optional<std::string> name = t.string("name");
  if (t.push("options") != LUA_TNIL) {
    if (!lua_istable(L, -1))
      t.fail("options", std::string("expected a table, got a ") + luaL_typename(L, -1));
    const int options = lua_gettop(L);
    for (lua_pushnil(L); lua_next(L, options) != 0; lua_pop(L, 1)) {
      if (lua_type(L, -2) != LUA_TSTRING) continue;
      std::size_t length = 0;
      const char* option = lua_tolstring(L, -2, &length);
      if (std::strlen(option) != length) t.fail("options", "an option's name holds a NUL byte");
      const std::string key = "workload." + std::string(option, length);
      constexpr lua_Integer kExact = lua_Integer(1) << 53;  // a double's integers are exact up to 2^53
      switch (lua_type(L, -1)) {
        case LUA_TNUMBER:
          if (lua_isinteger(L, -1) && (lua_tointeger(L, -1) > kExact || lua_tointeger(L, -1) < -kExact))
            m.text.emplace_back(key, std::to_string(lua_tointeger(L, -1)));
          else m.numbers.emplace_back(key, lua_tonumber(L, -1));
          break;
        case LUA_TBOOLEAN:
          m.numbers.emplace_back(key, lua_toboolean(L, -1) ? 1.0 : 0.0);
          break;
        case LUA_TSTRING:
          m.text.emplace_back(key, lua_tostring(L, -1));
          break;
        default:
          break;
      }
    }
  }
  lua_pop(L, 1);
  // pairs() follows per-process string hashes: the file lists them by name, after the workload's.
  std::sort(m.text.begin(), m.text.end());
  std::sort(m.numbers.begin(), m.numbers.end());
  if (name) m.text.insert(m.text.begin(), {"workload", *name});
  return m;
}

LuaWorkload::LuaWorkload(lua_State* L, int index, std::vector<EngineVocab> engines,
                         LuaWorkloadOptions options)
    : L_(L), engines_(std::move(engines)), opt_(options) {
  index = lua_absindex(L, index);
  if (!lua_istable(L, index))
    throw Error("duet.run: 'workload' must be a table {problems = ..., solve = ...}");
  if (opt_.concurrency <= 0) throw Error("workload: concurrency must be positive");
  {  // these keys and no other: a misplaced run setting is an error, not ignored
    TableReader keys(L, index, "duet.run.workload");
    keys.known({"problems", "solve", "name", "options"});
    keys.finish("run settings such as concurrency belong in duet.run{...}");
  }
  solve_ref_ = ref_field(L, index, "solve", LUA_TFUNCTION, "a function solve(ctx, problem)");
  lua_rawgeti(L, LUA_REGISTRYINDEX, solve_ref_);
  solve_where_ = defined_at(L, -1);
  lua_pop(L, 1);
  problems_ref_ = ref_field(L, index, "problems", LUA_TTABLE, "an array of problems");
  lua_rawgeti(L, LUA_REGISTRYINDEX, problems_ref_);
  try {
    total_ = std::size_t(length(L, -1));
  } catch (const Error& e) {
    lua_pop(L, 1);
    throw Error(std::string("workload: field 'problems': ") + e.what());
  }
  const std::string stray = list_stray(L, -1, total_);
  lua_pop(L, 1);
  if (total_ == 0 || !stray.empty()) {
    luaL_unref(L, LUA_REGISTRYINDEX, solve_ref_);
    luaL_unref(L, LUA_REGISTRYINDEX, problems_ref_);
    if (!stray.empty())
      throw Error(where(L) + "duet.run.workload: problems has " + stray + " in or beside its list 1.." +
                  std::to_string(total_) + " (give problems as a list without holes)");
    throw Error(where(L) +
                "duet.run.workload: problems is empty: nothing to run (a filter that matched nothing?)");
  }
  lua_pushvalue(L, index);
  workload_ref_ = luaL_ref(L, LUA_REGISTRYINDEX);
  std::string names;
  for (const EngineVocab& e : engines_) names += (names.empty() ? "" : ", ") + e.name;
  lua_createtable(L, 0, 3);
  lua_pushstring(L, names.c_str());
  lua_pushcclosure(L, unknown_engine, 1);
  lua_setfield(L, -2, "__index");
  lua_createtable(L, int(engines_.size()), 0);
  for (std::size_t e = 0; e < engines_.size(); ++e) {
    lua_pushstring(L, engines_[e].name.c_str());
    lua_rawseti(L, -2, lua_Integer(e + 1));
  }
  lua_pushcclosure(L, next_engine, 1);
  lua_pushcclosure(L, pairs_engines, 1);
  lua_setfield(L, -2, "__pairs");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");  // getmetatable sees false; setmetatable is refused
  engines_meta_ref_ = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushlightuserdata(L, this);
  lua_setfield(L, LUA_REGISTRYINDEX, kWorkloadKey);
}

LuaWorkload::~LuaWorkload() {
  for (auto& [co, task] : tasks_) luaL_unref(L_, LUA_REGISTRYINDEX, task->thread_ref);
  luaL_unref(L_, LUA_REGISTRYINDEX, solve_ref_);
  luaL_unref(L_, LUA_REGISTRYINDEX, problems_ref_);
  luaL_unref(L_, LUA_REGISTRYINDEX, workload_ref_);
  luaL_unref(L_, LUA_REGISTRYINDEX, engines_meta_ref_);
  lua_pushnil(L_);
  lua_setfield(L_, LUA_REGISTRYINDEX, kWorkloadKey);
}

LuaWorkload& LuaWorkload::from(lua_State* L, const char* what) {
  lua_getfield(L, LUA_REGISTRYINDEX, kWorkloadKey);
  auto* w = static_cast<LuaWorkload*>(lua_touserdata(L, -1));
  lua_pop(L, 1);
  if (!w) throw Error(where(L) + what + ": only inside a workload's solve() during duet.run");
  return *w;
}

void LuaWorkload::start(Runtime& rt) {
  rt_ = &rt;
  fill();
}

void LuaWorkload::fill() {
  // A problem whose solve() returns without waiting completes inside launch(), and complete()
  // calls fill() again: the loop below already launches its successor, so the inner call does
  // nothing, and 100,000 such problems do not nest 100,000 launches deep on the C stack.
  if (filling_) return;
  const std::size_t in_flight = tasks_.size();
  const bool refill = opt_.batching == ProblemBatching::Fixed
                          ? in_flight == 0
                          : in_flight < std::size_t(std::max(1, opt_.min_batch));
  if (!refill) return;
  filling_ = true;
  try {
    while (tasks_.size() < std::size_t(opt_.concurrency) && next_problem_ < total_) launch(next_problem_++);
  } catch (...) {
    filling_ = false;
    throw;
  }
  filling_ = false;
}

void LuaWorkload::launch(std::size_t problem) {
  lua_State* co = lua_newthread(L_);
  auto task = std::make_unique<Task>();
  task->co = co;
  task->thread_ref = luaL_ref(L_, LUA_REGISTRYINDEX);
  task->problem = problem;
  task->start_s = rt_->now();
  Task& t = *task;
  tasks_.emplace(co, std::move(task));
  // solve(ctx, problem) with ctx = {engines = {name = engine}, index = i, seed = s}
  lua_rawgeti(co, LUA_REGISTRYINDEX, solve_ref_);
  lua_createtable(co, 0, 4);
  lua_createtable(co, 0, int(engines_.size()));
  for (std::size_t e = 0; e < engines_.size(); ++e) {
    push_engine_ref(co, int(e));
    lua_setfield(co, -2, engines_[e].name.c_str());
  }
  lua_rawgeti(co, LUA_REGISTRYINDEX, engines_meta_ref_);
  lua_setmetatable(co, -2);
  lua_setfield(co, -2, "engines");
  set_integer(co, "index", lua_Integer(problem + 1));
  set_integer(co, "seed", lua_Integer(mix64(opt_.seed ^ (0x70726f62ULL << 20) ^ problem) >> 1));
  set_integer(co, "run_seed", lua_Integer(opt_.seed));  // duet.run's seed, as the script gave it
  // The problem is read on the main thread (a proxied list's __index may raise) and moved over.
  lua_rawgeti(L_, LUA_REGISTRYINDEX, problems_ref_);
  try {
    get_index(L_, -1, lua_Integer(problem + 1));
  } catch (const Error& e) {
    lua_pop(L_, 1);
    throw Error("workload: problems[" + std::to_string(problem + 1) +
                "]: reading it raised an error: " + e.what());
  }
  lua_remove(L_, -2);
  lua_xmove(L_, co, 1);
  resume(t, 2);
}

void LuaWorkload::resume(Task& task, int nargs) {
  int nres = 0;
  task.waits = false;
  reset_instruction_budget(task.co);
  const int status = lua_resume(task.co, L_, nargs, &nres);
  if (status == LUA_YIELD) {
    // A bare coroutine.yield() waits for nothing: no finished sequence or wake-up would ever
    // resume it, and its problem would vanish from the results.
    if (!task.waits)
      throw Error("problem " + std::to_string(task.problem + 1) +
                  ": solve() yielded without waiting for anything (coroutine.yield is not a duet call: "
                  "use duet.await or duet.sleep_until)");
    lua_pop(task.co, nres);
    task.suspended = true;
    return;
  }
  if (status != LUA_OK) {
    std::string full;
    {
      const ErrorHeadroom headroom(L_);  // the traceback allocates outside a protected call
      const std::string memory = status == LUA_ERRMEM ? memory_error(task.co) : std::string();
      const char* msg = status == LUA_ERRMEM ? memory.c_str() : lua_tostring(task.co, -1);
      // As Lua's own message handler words it: error() with a table or with nothing.
      const std::string other =
          msg ? std::string() : std::string("(error object is a ") + luaL_typename(task.co, -1) + " value)";
      luaL_traceback(L_, task.co, msg ? msg : other.c_str(), 0);
      full = std::string("problem ") + std::to_string(task.problem + 1) + ": " + lua_tostring(L_, -1);
      lua_pop(L_, 1);
    }
    throw Error(full);
  }
  complete(task);
}

void LuaWorkload::complete(Task& task) {
  lua_State* co = task.co;
  progress();
  ProblemRecord r;
  r.index = std::int64_t(task.problem) + 1;
  r.start_s = task.start_s;
  r.finish_s = rt_->now();
  r.requests = task.requests;
  // Whatever the search kept or left running is given back; what the latter generated counts.
  for (auto [e, id] : task.kept) rt_->release(e, id);
  for (auto [id, e] : task.live) {
    count_aborted(task, e, id);
    owner_.erase(id);
    rt_->release(e, id);
  }
  r.generated_tokens = task.generated;
  if (lua_gettop(co) >= 1) read_solution(co, r);
  results_.push_back(r);
  luaL_unref(L_, LUA_REGISTRYINDEX, task.thread_ref);
  tasks_.erase(co);
  fill();
}

void LuaWorkload::count_aborted(Task& task, int engine, SeqId id) {
  if (const Sequence* s = rt_->engine(engine).find(id))
    task.generated += s->kind == SeqKind::Generate ? s->num_output_tokens() : 0;
}

// solve()'s return value {score, correct, iterations, level}: each field optional, nil (or no
// table) leaving the record's default; another type, or another key, is an error naming the
// problem and the field.
void LuaWorkload::read_solution(lua_State* co, ProblemRecord& r) {
  if (lua_isnil(co, 1)) return;
  const std::string what = "problem " + std::to_string(r.index) + ": solve()'s result";
  if (!lua_istable(co, 1))
    throw Error(solve_where_ + what + " is a " + luaL_typename(co, 1) +
                ", not a table {score, correct, iterations, level}");
  // Read on the main thread (the coroutine has ended), which unwinds its stack on an error.
  lua_pushvalue(co, 1);
  lua_xmove(co, L_, 1);
  TableReader t(L_, -1, what);
  t.locate(solve_where_);  // solve()'s definition, not the line that called duet.run
  r.score = t.number("score").value_or(r.score);
  if (const auto correct = t.boolean("correct")) r.correct = *correct ? 1 : 0;
  const auto count = [&](const char* key) {
    const std::int32_t v = t.int32(key).value_or(0);
    if (v < 0) t.fail(key, "must be >= 0, got " + std::to_string(v));
    return v;
  };
  r.iterations = count("iterations");
  r.level = count("level");
  t.finish();
  lua_pop(L_, 1);
}

LuaWorkload::Task& LuaWorkload::task_of(lua_State* co) {
  auto it = tasks_.find(co);
  if (it == tasks_.end())
    throw Error(where(co) + "engines can only be used from a workload's solve() coroutine");
  return *it->second;
}

void LuaWorkload::on_finished(Runtime&, int engine, Sequence& seq) {
  auto it = owner_.find(seq.id);
  if (it == owner_.end()) return;
  Task& task = *it->second;
  owner_.erase(it);
  progress();
  task.live.erase(seq.id);
  task.generated += seq.kind == SeqKind::Generate ? seq.num_output_tokens() : 0;
  if (seq.keep_kv) task.kept.emplace_back(engine, seq.id);
  task.finished.emplace(seq.id, Finished{engine, seq.num_prompt_tokens, seq.num_output_tokens(),
                                         seq.num_tokens(), seq.finish_reason, seq.scores});
  if (!task.suspended) return;
  for (SeqId id : task.awaiting)
    if (!task.finished.count(id)) return;
  task.suspended = false;
  push_results(task, task.co);
  resume(task, 1);
}

int LuaWorkload::lua_sleep_until(lua_State* co, double t) {
  Task& task = task_of(co);
  task.sleep_where = where(co);
  // A time already reached still yields, so that what else is due now runs first (a problem may
  // wait so for another's progress); it wakes at this instant.
  if (t <= rt_->now()) check_same_instant(task);
  const std::uint64_t tag = next_tag_++;
  sleepers_[tag] = co;
  task.suspended = true;
  task.waits = true;
  rt_->wake_at(t, tag);
  return -1;
}

void LuaWorkload::on_wakeup(Runtime&, std::uint64_t tag) {
  auto it = sleepers_.find(tag);
  if (it == sleepers_.end()) return;
  lua_State* co = it->second;
  sleepers_.erase(it);
  auto task = tasks_.find(co);
  if (task == tasks_.end()) return;
  if (owner_.empty()) check_idle_wakeup(*task->second);
  task->second->suspended = false;
  task->second->awaiting.clear();
  resume(*task->second, 0);
}

// A problem's sleeps until a time reached, in a row at one instant: on the simulator's clock time
// moves only when the sleepers let a step end, so a loop that sleeps until now
// (duet.sleep_until(duet.now())) waits for ever. Other problems' sleeps do not count: a million
// requests may each wait once at the start.
void LuaWorkload::check_same_instant(Task& task) {
  const double now = rt_->now();
  if (now != task.same_instant_s) {
    task.same_instant_s = now;
    task.same_instant_sleeps = 0;
  }
  if (++task.same_instant_sleeps < kMaxIdleWakeups) return;
  throw Error(task.sleep_where + "duet.sleep_until slept " + std::to_string(task.same_instant_sleeps) +
              " times in a row until a time already reached (t = " + std::to_string(now) +
              " s): time cannot move on while it sleeps until now; sleep until a later time");
}

// A wake-up while nothing runs. Every kMaxIdleWakeups of them in a row, the run is stuck if every
// sleeping problem has woken since the last progress: all sleep in loops. A problem still asleep
// from before (one sleeping until a later time while another polls) is what they may wait for.
void LuaWorkload::check_idle_wakeup(Task& task) {
  task.woke_in = idle_stretch_;
  if (++idle_wakeups_ % kMaxIdleWakeups != 0) return;
  for (const auto& [tag, co] : sleepers_) {
    auto it = tasks_.find(co);
    if (it != tasks_.end() && it->second->woke_in != idle_stretch_) return;
  }
  throw Error(
      task.sleep_where + "problem " + std::to_string(task.problem + 1) + ": duet.sleep_until woke the run " +
      std::to_string(idle_wakeups_) +
      " times in a row with no sequence running and none submitted (now t = " + std::to_string(rt_->now()) +
      " s): solve() sleeps in a loop waiting for something that never comes");
}

void LuaWorkload::push_results(Task& task, lua_State* co) {
  lua_createtable(co, int(task.awaiting.size()), 0);
  int i = 0;
  for (SeqId id : task.awaiting) {
    auto it = task.finished.find(id);
    const Finished& f = it->second;
    lua_createtable(co, 0, 8);
    set_integer(co, "id", lua_Integer(id));
    set_string(co, "engine", engines_[std::size_t(f.engine)].name.c_str());
    set_integer(co, "prompt_tokens", f.prompt_tokens);
    set_integer(co, "output_tokens", f.output_tokens);
    set_integer(co, "num_tokens", f.num_tokens);
    set_string(co, "finish", finish_name(f.reason));
    if (!f.scores.empty()) {
      lua_createtable(co, int(f.scores.size()), 0);
      for (std::size_t k = 0; k < f.scores.size(); ++k) {
        lua_pushnumber(co, f.scores[k]);
        lua_rawseti(co, -2, lua_Integer(k + 1));
      }
      lua_setfield(co, -2, "scores");
      set_number(co, "score", f.scores.back());
    }
    lua_rawseti(co, -2, ++i);
    task.finished.erase(it);
  }
  task.awaiting.clear();
}

int LuaWorkload::lua_await(lua_State* co) {
  Task& task = task_of(co);
  task.awaiting.clear();
  auto add = [&](lua_Integer id) {
    const SeqId sid = SeqId(id);
    if (!task.live.count(sid) && !task.finished.count(sid))
      throw Error(where(co) + "duet.await: " + std::to_string(id) +
                  " is not a sequence of this problem that is running or unawaited");
    if (std::find(task.awaiting.begin(), task.awaiting.end(), sid) != task.awaiting.end())
      throw Error(where(co) + "duet.await: sequence " + std::to_string(id) + " is awaited twice");
    task.awaiting.push_back(sid);
  };
  const int n = lua_gettop(co);
  for (int a = 1; a <= n; ++a) {
    if (lua_istable(co, a)) {
      const auto context = [&] {
        return where(co) + "duet.await: reading argument " + std::to_string(a) + " raised an error: ";
      };
      const lua_Integer len = with_context(context, [&] { return length(co, a); });
      for (lua_Integer k = 1; k <= len; ++k) {
        with_context(context, [&] { return get_index(co, a, k); });
        const bool ok = lua_isinteger(co, -1);
        const lua_Integer id = lua_tointeger(co, -1);
        lua_pop(co, 1);
        if (!ok) throw Error(where(co) + "duet.await: expected sequence ids");
        add(id);
      }
    } else {
      if (!lua_isinteger(co, a))
        throw Error(where(co) + "duet.await: expected sequence ids or a list of them");
      add(lua_tointeger(co, a));
    }
  }
  for (SeqId id : task.awaiting)
    if (!task.finished.count(id)) {
      task.suspended = true;
      task.waits = true;
      return -1;  // the caller yields, outside any C++ scope
    }
  push_results(task, co);
  return 1;
}

}  // namespace duet::lua

namespace duet::lua {

namespace {

// A token list given as a TokenList or as a count of synthetic tokens.
std::vector<TokenId> read_tokens(lua_State* co, TableReader& spec, const char* key, std::uint64_t key_seed,
                                 const EngineVocab& v) {
  const int t = spec.push(key);
  std::vector<TokenId> out;
  if (TokenList* list = test_token_list(co, -1)) {
    for (std::size_t i = 0; i < list->ids.size(); ++i)
      if (list->ids[i] < 0 || list->ids[i] >= v.vocab_size) {
        lua_pop(co, 1);
        spec.fail(key, "token " + std::to_string(i + 1) + " (id " + std::to_string(list->ids[i]) +
                           ") is outside " + v.name + "'s vocabulary of " + std::to_string(v.vocab_size));
      }
    out = list->ids;
  } else if (t == LUA_TNUMBER && lua_isinteger(co, -1)) {
    const lua_Integer n = lua_tointeger(co, -1);
    if (n < 0 || n > (1 << 24)) {
      lua_pop(co, 1);
      spec.fail(key, "a synthetic token count must be in [0, 2^24], got " + std::to_string(n));
    }
    out = synthetic_tokens(int(n), key_seed, v.vocab_size, v.step_id, v.eos_id);
  } else if (t != LUA_TNIL) {
    lua_pop(co, 1);
    spec.fail(key, "expected a TokenList (duet.tokens) or a token count");
  }
  lua_pop(co, 1);
  return out;
}

TokenId token_name(const TableReader& spec, const char* key, const std::string& name, const EngineVocab& v) {
  if (name == "step") return v.step_id;
  if (name == "eos") return v.eos_id;
  spec.fail(key, "unknown token name '" + name + "' (valid: step, eos, or a token id)");
}

TokenId checked_token(const TableReader& spec, const char* key, lua_Integer id, const EngineVocab& v) {
  if (id < 0 || id >= v.vocab_size)
    spec.fail(key, "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                       std::to_string(v.vocab_size) + ")");
  return TokenId(id);
}

std::vector<TokenId> read_stop_list(lua_State* co, TableReader& spec, const EngineVocab& v) {
  std::vector<TokenId> out;
  const int t = spec.push("stop");
  if (t == LUA_TNIL) {
    lua_pop(co, 1);
    return {v.eos_id};
  }
  if (t != LUA_TTABLE) {
    lua_pop(co, 1);
    spec.fail("stop", "expected a list of token names ('step', 'eos') or ids");
  }
  const lua_Integer n = spec.checked("stop", [&] { return length(co, -1); });
  for (lua_Integer k = 1; k <= n; ++k) {
    spec.checked("stop", [&] { return get_index(co, -1, k); });
    if (const auto id = integral(co, -1)) out.push_back(checked_token(spec, "stop", *id, v));
    else if (lua_type(co, -1) == LUA_TSTRING)
      out.push_back(token_name(spec, "stop", lua_tostring(co, -1), v));
    else
      spec.fail("stop", "entry " + std::to_string(k) + " is a " + luaL_typename(co, -1) +
                            ", not a token name ('step', 'eos') or id");
    lua_pop(co, 1);
  }
  lua_pop(co, 1);
  return out;
}

// A list of numbers (T float: finite ones; T int: integers that fit), each entry checked.
template <typename T>
std::vector<T> read_number_list(lua_State* co, TableReader& spec, const char* key) {
  std::vector<T> out;
  const int t = spec.push(key);
  if (t == LUA_TTABLE) {
    const lua_Integer n = spec.checked(key, [&] { return length(co, -1); });
    out.reserve(std::size_t(std::clamp<lua_Integer>(n, 0, 1 << 20)));
    for (lua_Integer k = 1; k <= n; ++k) {
      spec.checked(key, [&] { return get_index(co, -1, k); });
      const std::string entry = "entry " + std::to_string(k);
      if (lua_type(co, -1) != LUA_TNUMBER)
        spec.fail(key, entry + " is a " + luaL_typename(co, -1) + ", not a number");
      if constexpr (std::is_integral_v<T>) {
        const std::optional<lua_Integer> x = integral(co, -1);
        if (!x || *x < std::numeric_limits<T>::min() || *x > std::numeric_limits<T>::max())
          spec.fail(key, entry + " must be an integer that fits 32 bits, got " + lua_tostring(co, -1));
        out.push_back(T(*x));
      } else {
        const T x = T(lua_tonumber(co, -1));  // finite after the narrowing too: 1e39 is no float
        if (!std::isfinite(x))
          spec.fail(key, entry + " must be finite in single precision, got " + lua_tostring(co, -1));
        out.push_back(x);
      }
      lua_pop(co, 1);
    }
  } else if (t != LUA_TNIL) {
    lua_pop(co, 1);
    spec.fail(key, "expected a list of numbers");
  }
  lua_pop(co, 1);
  return out;
}

}  // namespace

lua_Integer LuaWorkload::lua_submit(lua_State* co, int engine, int spec_index) {
  Task& task = task_of(co);
  progress();
  const EngineVocab& v = engines_[std::size_t(engine)];
  TableReader spec(co, spec_index, v.name + ":submit");
  Sequence s;
  s.id = rt_->next_seq_id();
  s.owner = task.problem;
  const std::uint64_t seed = std::uint64_t(spec.integer("seed").value_or(std::int64_t(mix64(s.id))));
  const std::string kind = spec.string("kind").value_or("generate");
  if (kind == "score") s.kind = SeqKind::Score;
  else if (kind != "generate") spec.fail("kind", "must be 'generate' or 'score', got '" + kind + "'");
  const std::optional<std::int64_t> parent = spec.integer("parent");
  std::vector<TokenId> prompt = read_tokens(co, spec, "prompt", seed, v);
  std::vector<TokenId> append = read_tokens(co, spec, "append", mix64(seed + 1), v);
  if (parent && !prompt.empty()) spec.fail("prompt", "give either a prompt or a parent to fork, not both");
  s.sampling.max_tokens = spec.int32("max_tokens").value_or(256);
  s.sampling.ignore_eos = spec.boolean("ignore_eos").value_or(false);
  // vLLM's ranges: temperature >= 0 (0: greedy), top_p in (0, 1].
  const double temperature = spec.number("temperature").value_or(0.0);
  if (temperature < 0)
    spec.fail("temperature", "must be a finite number >= 0, got " + std::to_string(temperature));
  const double top_p = spec.number("top_p").value_or(1.0);
  if (!(top_p > 0 && top_p <= 1)) spec.fail("top_p", "must be in (0, 1], got " + std::to_string(top_p));
  s.sampling.temperature = float(temperature);
  s.sampling.top_p = float(top_p);
  s.sampling.seed = seed;
  s.sampling.stop_token_ids = read_stop_list(co, spec, v);
  s.script.seed = seed;
  s.script.force = spec.boolean("force").value_or(true);
  if (const auto stop_at = spec.int32("stop_at")) {
    if (*stop_at < 0) spec.fail("stop_at", "must be an output index >= 0, got " + std::to_string(*stop_at));
    s.script.stop_at = *stop_at;
    const int t = spec.push("stop_with");
    if (const auto id = integral(co, -1)) s.script.stop_token = checked_token(spec, "stop_with", *id, v);
    else if (t == LUA_TSTRING) s.script.stop_token = token_name(spec, "stop_with", lua_tostring(co, -1), v);
    else if (t == LUA_TNIL)
      s.script.stop_token = s.sampling.stop_token_ids.empty() ? v.eos_id : s.sampling.stop_token_ids.front();
    else spec.fail("stop_with", "expected a token name ('step', 'eos') or id");
    lua_pop(co, 1);
  }
  if (!spec.has("stop_at") && spec.has("stop_with"))
    spec.fail("stop_with", "the token emitted at stop_at: needs stop_at (the output index that emits it)");
  s.script.scores = read_number_list<float>(co, spec, "scores");
  s.score_positions = read_number_list<int>(co, spec, "score_positions");
  if (s.kind != SeqKind::Score && spec.has("scores"))
    spec.fail("scores", "a PRM's scores: needs kind = 'score'");
  if (s.kind != SeqKind::Score && spec.has("score_positions"))
    spec.fail("score_positions", "positions a PRM scores: needs kind = 'score'");
  if (s.kind == SeqKind::Score)  // settings the script believes in, which would change nothing
    for (const char* key : {"max_tokens", "ignore_eos", "temperature", "top_p", "stop", "stop_at"})
      if (spec.has(key))
        spec.fail(key, "sets how tokens are generated: a kind = 'score' request generates none");
  // One scripted score per position (missing ones are drawn); more would be dropped unseen.
  const std::size_t positions = std::max<std::size_t>(1, s.score_positions.size());
  if (s.script.scores.size() > positions)
    spec.fail("scores", std::to_string(s.script.scores.size()) + " scores for " + std::to_string(positions) +
                            " score position" + (positions == 1 ? "" : "s") +
                            " (score_positions; without it, the last token's)");
  s.keep_kv = spec.boolean("keep").value_or(false);
  spec.finish();

  // A fork copies its parent as it stands; of a running parent that would be whatever step the
  // engine has reached, which the timing decides and a real engine need not repeat.
  const Sequence* const forked = parent ? rt_->engine(engine).find(SeqId(*parent)) : nullptr;
  if (forked && !forked->finished())
    spec.fail("parent",
              "sequence " + std::to_string(*parent) + " is still running: await it before forking it");
  if (!parent) {
    s.tokens = std::move(prompt);
    s.tokens.insert(s.tokens.end(), append.begin(), append.end());
    if (s.tokens.empty()) spec.fail("prompt", "a sequence needs a prompt (or a parent to fork)");
    s.num_prompt_tokens = s.num_tokens();
  } else {
    s.tokens = std::move(append);
  }
  // The engine's own checks (max_model_len, score positions) fail this call, at its line.
  const SeqId id = [&] {
    try {
      if (parent) return rt_->fork(engine, SeqId(*parent), std::move(s)).id;
      const SeqId submitted = s.id;
      rt_->submit(engine, std::move(s));
      return submitted;
    } catch (const Error& e) {
      throw Error(spec.location() + spec.where() + ": " + e.what());
    }
  }();
  owner_[id] = &task;
  task.live.emplace(id, engine);
  ++task.requests;
  return lua_Integer(id);
}

int LuaWorkload::lua_release(lua_State* co, int engine, SeqId id) {
  Task& task = task_of(co);
  // The engine that holds the sequence for this problem: running, finished or kept.
  int holder = -1;
  if (const auto live = task.live.find(id); live != task.live.end()) holder = live->second;
  if (const auto done = task.finished.find(id); done != task.finished.end()) holder = done->second.engine;
  for (const auto& [e, kept] : task.kept)
    if (kept == id) holder = e;
  const std::string& name = engines_[std::size_t(engine)].name;
  if (holder < 0)
    throw Error(where(co) + name + ":release: sequence " + std::to_string(id) + " is not this problem's on " +
                name + " (released already, finished without keep = true, or never submitted there)");
  if (holder != engine)
    throw Error(where(co) + name + ":release: sequence " + std::to_string(id) + " is " +
                engines_[std::size_t(holder)].name + "'s, not " + name + "'s");
  if (task.live.erase(id) > 0) count_aborted(task, engine, id);  // the engine still holds it
  task.finished.erase(id);
  owner_.erase(id);
  std::erase_if(task.kept, [&](const auto& k) { return k.first == engine && k.second == id; });
  rt_->release(engine, id);
  return 0;
}

int LuaWorkload::lua_tokens(lua_State* co, int engine, SeqId id, int from) {
  const Sequence* s = rt_->engine(engine).find(id);
  if (!s)
    throw Error(where(co) + engines_[std::size_t(engine)].name + ":tokens: sequence " + std::to_string(id) +
                " is gone (finished sequences are released unless submitted with keep = true)");
  from = std::clamp(from, 0, s->num_tokens());
  push_token_list(co, std::vector<TokenId>(s->tokens.begin() + from, s->tokens.end()));
  return 1;
}

int LuaWorkload::lua_set_priority(lua_State* co, int engine, SeqId id, int priority, bool shared) {
  if (!rt_->engine(engine).find(id))
    throw Error(where(co) + "set_priority: sequence " + std::to_string(id) + " is gone");
  rt_->engine(engine).set_priority(id, priority, shared);
  return 0;
}

}  // namespace duet::lua
