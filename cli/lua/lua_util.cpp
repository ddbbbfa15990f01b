#include "cli/lua/lua_util.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "core/error.hpp"

namespace duet::lua {

namespace {

// os.exit would end duet from inside the script: the run's file never written (or left without its
// summary), the exit status the script's (0 by default), and in a sweep the other threads' points
// lost with it. A script stops with error(), which duet reports and turns into its exit status.
int refuse_exit(lua_State* L) {
  return luaL_error(L,
                    "os.exit is not available in a duet script: it would end duet without writing the run's "
                    "file; stop the script with error(MESSAGE) instead");
}

}  // namespace

State::State() : L_(luaL_newstate()) {
  if (!L_) throw Error("cannot create a Lua state (out of memory)");
  *static_cast<InstructionBudget**>(lua_getextraspace(L_)) = nullptr;  // no budget until one is installed
  luaL_openlibs(L_);
  lua_getglobal(L_, "os");
  lua_pushcfunction(L_, refuse_exit);
  lua_setfield(L_, -2, "exit");
  lua_pop(L_, 1);
  // Lua 5.4 seeds math.random randomly at start-up; a run must be reproducible.
  luaL_dostring(L_, "math.randomseed(0)");
}

State::~State() { lua_close(L_); }

namespace {

// Memory for duet's own handling of an error (ErrorHeadroom): its traceback is built on the state
// outside a protected call, where a refusal would longjmp through C++ frames.
constexpr std::int64_t kHeadroom = 16 << 20;

// As lauxlib's allocator (realloc and free), counting what the state holds. Shrinking never fails,
// as Lua requires.
void* limited_alloc(void* ud, void* ptr, std::size_t osize, std::size_t nsize) {
  auto* m = static_cast<State::Memory*>(ud);
  const std::int64_t old = ptr ? std::int64_t(osize) : 0;  // osize is a type tag when ptr is null
  if (nsize == 0) {
    std::free(ptr);
    m->used -= old;
    return nullptr;
  }
  const std::int64_t grow = std::int64_t(nsize) - old;
  if (grow > 0 && m->used + grow > m->limit + (m->handling_error ? kHeadroom : 0)) {
    m->refused = std::int64_t(nsize);
    return nullptr;
  }
  void* p = std::realloc(ptr, nsize);
  if (p) m->used += grow;
  else m->refused = std::int64_t(nsize);
  return p;
}

std::string size_text(std::int64_t bytes) {
  char buf[32];
  if (bytes < (1 << 20)) std::snprintf(buf, sizeof buf, "%lld bytes", static_cast<long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1 << 20));
  return buf;
}

}  // namespace

void State::limit_memory(std::int64_t bytes) {
  memory_.limit = bytes;
  memory_.used = std::int64_t(lua_gc(L_, LUA_GCCOUNT)) * 1024 + lua_gc(L_, LUA_GCCOUNTB);
  lua_setallocf(L_, limited_alloc, &memory_);
}

namespace {

// The state's memory account, or null for a state without a limit.
State::Memory* memory_of(lua_State* L) {
  void* ud = nullptr;
  return lua_getallocf(L, &ud) == limited_alloc ? static_cast<State::Memory*>(ud) : nullptr;
}

}  // namespace

ErrorHeadroom::ErrorHeadroom(lua_State* L) : memory_(memory_of(L)) {
  if (memory_) {
    was_ = memory_->handling_error;
    memory_->handling_error = true;
  }
}

ErrorHeadroom::~ErrorHeadroom() {
  if (memory_) memory_->handling_error = was_;
}

std::int64_t memory_limit(lua_State* L) {
  const State::Memory* m = memory_of(L);
  return m ? m->limit : 0;
}

std::string memory_error(lua_State* L) {
  const State::Memory* m = memory_of(L);
  if (!m) return "not enough memory";
  return "the script's Lua memory reached its limit of " + size_text(m->limit) + " (" + size_text(m->used) +
         " held, an allocation of " + size_text(m->refused) +
         " refused after a full collection): a table or string that grows without end? duet run "
         "--lua-memory-limit MiB raises the limit";
}

namespace {

int traceback(lua_State* L) {
  const char* msg = lua_tostring(L, 1);
  if (!msg) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

}  // namespace

namespace {

constexpr int kHookEvery = 1 << 20;

InstructionBudget* budget_of(lua_State* L) { return *static_cast<InstructionBudget**>(lua_getextraspace(L)); }

void count_hook(lua_State* L, lua_Debug* ar) {
  InstructionBudget* b = budget_of(L);
  if (b && b->stop && b->stop->load() != 0) luaL_error(L, "stopped by signal %d", b->stop->load());
  if (!b || (b->used += b->every) < b->limit) return;
  lua_getinfo(L, "nSl", ar);
  // The message is built on the Lua stack, not in a std::string: luaL_error longjmps past C++
  // destructors (LeakSanitizer caught the string this used to leak).
  const char* what = ar->name ? lua_pushfstring(L, "function '%s'", ar->name)
                     : std::string_view(ar->what) == "main"
                         ? lua_pushliteral(L, "the script's main chunk")
                         : lua_pushfstring(L, "the function defined at line %d", ar->linedefined);
  luaL_error(L,
             "%s:%d: %s ran %I Lua instructions without returning to duet (an endless loop?); "
             "raise the limit with --lua-instruction-limit",
             ar->short_src, ar->currentline, what, (LUAI_UACINT)b->used);
}

}  // namespace

void install_instruction_budget(lua_State* L, InstructionBudget* budget) {
  *static_cast<InstructionBudget**>(lua_getextraspace(L)) = budget;
  if (budget) budget->every = int(std::clamp<std::int64_t>(budget->limit, 1, kHookEvery));
  lua_sethook(L, count_hook, LUA_MASKCOUNT, budget ? budget->every : kHookEvery);
}

void reset_instruction_budget(lua_State* L) {
  if (InstructionBudget* b = budget_of(L)) b->used = 0;
}

void pcall(lua_State* L, int nargs, int nresults) {
  reset_instruction_budget(L);
  const int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, traceback);
  lua_insert(L, base);
  const int status = lua_pcall(L, nargs, nresults, base);
  lua_remove(L, base);
  if (status != LUA_OK) {
    std::string msg = status == LUA_ERRMEM  ? memory_error(L)
                      : lua_tostring(L, -1) ? lua_tostring(L, -1)
                                            : "(non-string Lua error)";
    lua_pop(L, 1);
    throw Error(msg);
  }
}

void load_script(lua_State* L, const std::string& text, const std::string& path) {
  // As luaL_loadfile: a UTF-8 byte-order mark is skipped, then a first line starting with '#'
  // (#!/usr/bin/env duet), whose newline stays, so that line numbers are the file's.
  std::string_view chunk = text;
  if (chunk.starts_with("\xEF\xBB\xBF")) chunk.remove_prefix(3);
  if (chunk.starts_with('#')) chunk.remove_prefix(std::min(chunk.find('\n'), chunk.size()));
  const std::string name = "@" + path;
  if (luaL_loadbufferx(L, chunk.data(), chunk.size(), name.c_str(), nullptr) != LUA_OK) {
    std::string msg = lua_tostring(L, -1) ? lua_tostring(L, -1) : "cannot load";
    lua_pop(L, 1);
    throw Error(msg);
  }
}

std::optional<lua_Integer> integral(lua_State* L, int idx) {
  if (lua_type(L, idx) != LUA_TNUMBER) return std::nullopt;
  int exact = 0;
  const lua_Integer x = lua_tointegerx(L, idx, &exact);
  return exact ? std::optional<lua_Integer>(x) : std::nullopt;
}

std::string where(lua_State* L, int level) {
  luaL_where(L, level);
  std::string w = lua_tostring(L, -1);
  lua_pop(L, 1);
  return w;
}

bool callable(lua_State* L, int idx) {
  if (lua_isfunction(L, idx)) return true;
  // A table or userdata whose __call is a function: not a name or number whose type has a
  // metatable, nor a __call that is itself a table (its errors could not name a line).
  const int type = lua_type(L, idx);
  if (type != LUA_TTABLE && type != LUA_TUSERDATA) return false;
  if (luaL_getmetafield(L, idx, "__call") == LUA_TNIL) return false;
  const bool function = lua_isfunction(L, -1);
  lua_pop(L, 1);
  return function;
}

std::string defined_at(lua_State* L, int idx) {
  // A callable table or userdata is defined where its __call is.
  if (!lua_isfunction(L, idx) && luaL_getmetafield(L, idx, "__call") != LUA_TNIL) {
    std::string at = lua_isfunction(L, -1) ? defined_at(L, -1) : where(L, 1);
    lua_pop(L, 1);
    return at;
  }
  if (!lua_isfunction(L, idx)) return where(L, 1);
  lua_pushvalue(L, idx);
  lua_Debug ar;
  lua_getinfo(L, ">S", &ar);  // pops the copy
  // A C function (print, tostring) has no line of its own: the line running now, which handed it
  // over, is the script's place for it.
  if (ar.linedefined < 0) return where(L, 1);
  return std::string(ar.short_src) + ":" + std::to_string(ar.linedefined) + ": ";
}

std::string returned_text(lua_State* L, int idx) {
  switch (lua_type(L, idx)) {
    case LUA_TNIL:
      return "nil";
    case LUA_TBOOLEAN:
      return lua_toboolean(L, idx) ? "true" : "false";
    case LUA_TNUMBER: {
      if (lua_isinteger(L, idx)) return std::to_string(lua_tointeger(L, idx));
      const double v = lua_tonumber(L, idx);
      if (std::isnan(v)) return "NaN";  // printf's "-nan" reads as a sign that NaN does not have
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.17g", v);
      return buf;
    }
    case LUA_TSTRING:
      return "'" + std::string(lua_tostring(L, idx)) + "'";
    default:
      return std::string("a ") + luaL_typename(L, idx);
  }
}

namespace {

int raw_gettable(lua_State* L) {  // (table, key) -> table[key], metamethods included
  lua_gettable(L, 1);
  return 1;
}

int raw_length(lua_State* L) {  // (value) -> #value as an integer, as luaL_len
  lua_pushinteger(L, luaL_len(L, 1));
  return 1;
}

bool has_metatable(lua_State* L, int index) {
  if (!lua_getmetatable(L, index)) return false;
  lua_pop(L, 1);
  return true;
}

// Calls f(value [, key]) under lua_pcall, leaving its one result on the stack.
void protected_read(lua_State* L, lua_CFunction f, int index, int nargs_after) {
  lua_pushcfunction(L, f);
  lua_pushvalue(L, index);
  lua_rotate(L, -2 - nargs_after, 2);  // function and value below the key
  if (lua_pcall(L, 1 + nargs_after, 1, 0) != LUA_OK) {
    std::string msg = lua_tostring(L, -1) ? lua_tostring(L, -1) : "(non-string Lua error)";
    lua_pop(L, 1);
    throw Error(msg);
  }
}

}  // namespace

int get_field(lua_State* L, int index, const char* key) {
  index = lua_absindex(L, index);
  if (!has_metatable(L, index)) return lua_getfield(L, index, key);
  lua_pushstring(L, key);
  protected_read(L, raw_gettable, index, 1);
  return lua_type(L, -1);
}

int get_index(lua_State* L, int index, lua_Integer i) {
  index = lua_absindex(L, index);
  if (!has_metatable(L, index)) return lua_rawgeti(L, index, i);
  lua_pushinteger(L, i);
  protected_read(L, raw_gettable, index, 1);
  return lua_type(L, -1);
}

std::string list_stray(lua_State* L, int index, std::size_t n) {
  index = lua_absindex(L, index);
  if (lua_getmetatable(L, index)) {
    lua_pop(L, 1);
    return "";
  }
  std::size_t listed = 0;
  lua_pushnil(L);
  while (lua_next(L, index) != 0) {  // raw traversal: no metamethod runs
    lua_pop(L, 1);
    lua_Integer i = 0;
    if (lua_type(L, -1) == LUA_TNUMBER && lua_isinteger(L, -1) && (i = lua_tointeger(L, -1)) >= 1 &&
        std::size_t(i) <= n) {
      ++listed;
      continue;
    }
    std::string key;
    if (lua_type(L, -1) == LUA_TSTRING) {
      key = "key '" + std::string(lua_tostring(L, -1)) + "'";
    } else if (lua_type(L, -1) == LUA_TNUMBER) {
      char buf[64];
      if (lua_isinteger(L, -1))
        std::snprintf(buf, sizeof buf, "index %lld", static_cast<long long>(lua_tointeger(L, -1)));
      else std::snprintf(buf, sizeof buf, "index %g", double(lua_tonumber(L, -1)));
      key = buf;
    } else {
      key = std::string("a ") + luaL_typename(L, -1) + " key";
    }
    lua_pop(L, 1);
    return key;
  }
  // A hole inside the border # found: {p1, nil, p3} may have a length of 3.
  for (std::size_t i = 1; listed < n && i <= n; ++i) {
    const bool hole = lua_rawgeti(L, index, lua_Integer(i)) == LUA_TNIL;
    lua_pop(L, 1);
    if (hole) return "a hole at index " + std::to_string(i);
  }
  return "";
}

lua_Integer length(lua_State* L, int index) {
  index = lua_absindex(L, index);
  if (lua_istable(L, index) && !has_metatable(L, index)) return lua_Integer(lua_rawlen(L, index));
  protected_read(L, raw_length, index, 0);
  const lua_Integer n = lua_tointeger(L, -1);
  lua_pop(L, 1);
  // duet's lists hold tokens, engines or problems: a __len beyond 32 bits is a lie that would
  // keep a C loop (no Lua instruction counted) reading entries for hours.
  if (n < 0 || n > std::numeric_limits<std::int32_t>::max())
    throw Error("a list's length (its __len) is " + std::to_string(n) + ", outside 0 to 2^31 - 1");
  return n;
}

TableReader::TableReader(lua_State* L, int index, std::string where)
    : L_(L), index_(lua_absindex(L, index)), where_(std::move(where)) {
  if (!lua_istable(L, index_))
    throw Error(lua::where(L) + where_ + ": expected a table, got " + luaL_typename(L, index_));
}

void TableReader::fail(const char* key, const std::string& what) const {
  throw Error(location() + where_ + "." + key + ": " + what);
}

std::string TableReader::location() const { return location_.empty() ? lua::where(L_) : location_; }

int TableReader::push(const char* key) {
  asked_.emplace_back(key);
  try {
    return get_field(L_, index_, key);
  } catch (const Error& e) {
    fail(key, std::string("reading it raised an error: ") + e.what());
  }
}

bool TableReader::has(const char* key) {
  const bool present = push(key) != LUA_TNIL;
  lua_pop(L_, 1);
  return present;
}

std::optional<double> TableReader::number(const char* key) {
  const int t = push(key);
  std::optional<double> v;
  if (t == LUA_TNUMBER) v = lua_tonumber(L_, -1);
  lua_pop(L_, 1);
  if (t != LUA_TNIL && t != LUA_TNUMBER)
    fail(key, std::string("expected a number, got ") + lua_typename(L_, t));
  if (v && !std::isfinite(*v)) fail(key, "expected a finite number");
  return v;
}

std::optional<std::int64_t> TableReader::integer(const char* key) {
  const int t = push(key);
  const std::optional<lua_Integer> v = integral(L_, -1);
  if (t != LUA_TNIL && !v) {
    // A number that is not whole is named by its value ("got 2.5"), anything else by its type.
    std::string got = lua_typename(L_, t);
    if (t == LUA_TNUMBER) got = luaL_tolstring(L_, -1, nullptr), lua_pop(L_, 1);
    lua_pop(L_, 1);
    fail(key, "expected an integer, got " + got);
  }
  lua_pop(L_, 1);
  return v;
}

std::optional<int> TableReader::int32(const char* key) {
  const std::optional<std::int64_t> v = integer(key);
  if (v && (*v < std::numeric_limits<int>::min() || *v > std::numeric_limits<int>::max()))
    fail(key, std::to_string(*v) + " does not fit a 32-bit integer");
  if (!v) return std::nullopt;
  return int(*v);
}

std::optional<std::string> TableReader::string(const char* key) {
  const int t = push(key);
  std::optional<std::string> v;
  if (t == LUA_TSTRING) v = lua_tostring(L_, -1);
  lua_pop(L_, 1);
  if (t != LUA_TNIL && t != LUA_TSTRING)
    fail(key, std::string("expected a string, got ") + lua_typename(L_, t));
  return v;
}

std::optional<bool> TableReader::boolean(const char* key) {
  const int t = push(key);
  std::optional<bool> v;
  if (t == LUA_TBOOLEAN) v = lua_toboolean(L_, -1) != 0;
  lua_pop(L_, 1);
  if (t != LUA_TNIL && t != LUA_TBOOLEAN)
    fail(key, std::string("expected true or false, got ") + lua_typename(L_, t));
  return v;
}

void TableReader::known(std::initializer_list<const char*> keys) {
  asked_.insert(asked_.end(), keys.begin(), keys.end());
}

void TableReader::finish(const std::string& hint) {
  // Every unknown key, sorted: lua_next's order follows string hashes that Lua seeds afresh in each
  // process, so naming the first one met would change the message from run to run.
  std::vector<std::string> unknown;
  lua_pushnil(L_);
  while (lua_next(L_, index_) != 0) {
    lua_pop(L_, 1);  // the value; the key stays for lua_next
    const bool string_key = lua_type(L_, -1) == LUA_TSTRING;
    const std::string key =
        string_key ? lua_tostring(L_, -1) : std::string("[") + luaL_typename(L_, -1) + " key]";
    if (!string_key || std::find(asked_.begin(), asked_.end(), key) == asked_.end()) unknown.push_back(key);
  }
  if (unknown.empty()) return;
  std::sort(asked_.begin(), asked_.end());
  asked_.erase(std::unique(asked_.begin(), asked_.end()), asked_.end());
  std::sort(unknown.begin(), unknown.end());
  std::string keys, valid;
  for (const auto& k : unknown) keys += (keys.empty() ? "'" : ", '") + k + "'";
  for (const auto& k : asked_) valid += (valid.empty() ? "" : ", ") + k;
  throw Error(location() + where_ + ": unknown key" + (unknown.size() > 1 ? "s " : " ") + keys +
              " (valid keys: " + valid + (hint.empty() ? "" : "; " + hint) + ")");
}

}  // namespace duet::lua
