#pragma once
// A small binding layer over Lua 5.4's C API: an owned state, protected calls with tracebacks,
// and table readers that reject unknown keys. No third-party binding library: Debian packages
// none for Lua 5.4.
#include <lua.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace duet::lua {

// A limit on the memory one script's Lua state holds (tables, strings, closures, coroutines): a
// runaway `s = s .. s` or an ever-growing table becomes a Lua error naming the limit, where it
// would otherwise take the machine's memory until the kernel's OOM killer ends duet without its
// run file. A sweep thread's state has a limit of its own.
inline constexpr std::int64_t kDefaultMemoryLimitMiB = 4096;

// Owns a lua_State with the standard libraries open.
class State {
 public:
  State();
  ~State();
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  lua_State* get() const { return L_; }
  // From now on an allocation that would take the state past `bytes` fails, after Lua's emergency
  // collection, with a memory error (memory_error() describes it); what the state holds counts.
  void limit_memory(std::int64_t bytes);

  struct Memory {
    std::int64_t used = 0, limit = 0;
    std::int64_t refused = 0;     // the size of the last allocation refused
    bool handling_error = false;  // while an ErrorHeadroom lives: the limit has 16 MiB more
  };

 private:
  lua_State* L_;
  Memory memory_;
};

// While it lives, the state's memory limit has 16 MiB more: for duet's handling of an error that
// allocates on the state outside a protected call (a coroutine's traceback), which a state at its
// limit would refuse with a longjmp through C++ frames.
class ErrorHeadroom {
 public:
  explicit ErrorHeadroom(lua_State* L);
  ~ErrorHeadroom();
  ErrorHeadroom(const ErrorHeadroom&) = delete;
  ErrorHeadroom& operator=(const ErrorHeadroom&) = delete;

 private:
  State::Memory* memory_ = nullptr;
  bool was_ = false;
};

// The state's memory limit in bytes (State::limit_memory), or 0 for a state without one.
std::int64_t memory_limit(lua_State* L);

// The message for a LUA_ERRMEM status (Lua calls no message handler for it, so it has no
// traceback): the allocation refused and the limit, or Lua's own message for a state without one.
std::string memory_error(lua_State* L);

// A limit on the Lua instructions one call from duet into Lua may run (a policy, the arbiter, a
// solve() between two waits, the script's main chunk): an endless loop becomes an error naming the
// function and the line, not a run that hangs forever. Counted by a hook every 2^20 instructions
// (every `limit` where that is fewer).
// A few seconds of Lua (a spinning policy stops after 3.7 s): far beyond any sane call.
inline constexpr std::int64_t kDefaultInstructionLimit = 1'000'000'000;
struct InstructionBudget {
  std::int64_t limit = kDefaultInstructionLimit;
  std::int64_t used = 0;
  int every = 1 << 20;  // instructions between two hook calls: 2^20, or the limit if smaller
  // Non-zero once SIGINT/SIGTERM asked to stop: the hook then ends the running call with an error,
  // so that a long sweep point stops within ~2^20 instructions instead of running to its end.
  const std::atomic<int>* stop = nullptr;
};
// Installs the limit on L and every coroutine created from it later (they inherit the hook and
// the main thread's extra space, where the budget's address lives).
void install_instruction_budget(lua_State* L, InstructionBudget* budget);
// A new call from duet into Lua starts with a full budget.
void reset_instruction_budget(lua_State* L);

// Calls the function below nargs arguments; on error throws duet::Error with "file:line: message"
// and a traceback.
void pcall(lua_State* L, int nargs, int nresults);
// Loads a script (the text of the file at `path`) as a function on the stack; a syntax error throws
// duet::Error (path:line).
void load_script(lua_State* L, const std::string& text, const std::string& path);

// Table reads that may run a script's metamethods (__index, __len). Lua raises an error in a
// metamethod with longjmp, which would skip the destructors of the C++ frames between here and
// the enclosing protected call; these run the read under lua_pcall and throw duet::Error instead.
// A table without a metatable is read directly. get_field and get_index push the value and
// return its Lua type.
int get_field(lua_State* L, int index, const char* key);
int get_index(lua_State* L, int index, lua_Integer i);
lua_Integer length(lua_State* L, int index);
// What a plain table holds besides the list 1..n: a key outside it ("key 'x'", "index 7") or a hole
// in it ("a hole at index 2"); "" when nothing. A proxied list (one with a metatable) is taken as
// its __len and __index say: "".
std::string list_stray(lua_State* L, int index, std::size_t n);

// f()'s value; a duet::Error from it is thrown again as context() + its message. The context
// (a field's name and the script's line, say) is built only then.
template <typename C, typename F>
auto with_context(C&& context, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    throw Error(context() + e.what());
  }
}

// Reads the fields of a configuration table, remembering which keys it asked for; finish()
// rejects any other key, listing the valid ones. `where` names the table in errors
// ("duet.run", "engines.llm").
class TableReader {
 public:
  TableReader(lua_State* L, int index, std::string where);
  bool has(const char* key);
  std::optional<double> number(const char* key);
  std::optional<std::int64_t> integer(const char* key);
  // An integer that must fit a 32-bit field: a larger one is an error, never a silent wrap.
  std::optional<int> int32(const char* key);
  std::optional<std::string> string(const char* key);
  std::optional<bool> boolean(const char* key);
  // Pushes the field onto the stack (nil if absent) and returns its Lua type.
  int push(const char* key);
  // Marks keys as valid without reading them, so that finish() can run before they are read.
  void known(std::initializer_list<const char*> keys);
  // Throws naming the first key not asked for (or marked known), listing the valid ones; `hint`,
  // if given, follows the list.
  void finish(const std::string& hint = "");
  const std::string& where() const { return where_; }
  // Errors name `location` ("file:line: ") instead of the Lua code calling into C.
  void locate(std::string location) { location_ = std::move(location); }
  // Throws duet::Error naming the Lua caller's file:line, the table and the key.
  [[noreturn]] void fail(const char* key, const std::string& what) const;
  std::string location() const;
  // parse()'s value; its duet::Error (an unknown name, say) becomes fail(key, ...).
  template <typename F>
  auto checked(const char* key, F&& parse) const {
    try {
      return parse();
    } catch (const Error& e) {
      fail(key, e.what());
    }
  }

 private:
  lua_State* L_;
  int index_;
  std::string where_;
  std::string location_;
  // The keys asked for, repeats and all: a workload's submit reads a table of a dozen keys per
  // request, where a sorted set's nodes cost more than the reading (finish() sorts them once).
  std::vector<std::string> asked_;
};

// The value at idx as an integer: an integer, or a number with an integral value (3.0), as
// TableReader reads integer fields; nothing for anything else (a string is not converted).
std::optional<lua_Integer> integral(lua_State* L, int idx);

// The table at idx, of string keys and number, string or boolean values (a description such as a
// GPU's), as the text of a JSON object; anything else in it is an error naming the key.
std::string flat_table_json(lua_State* L, int idx);

// The "file:line:" of the Lua code that called into C (level 1 = the caller of the C function).
std::string where(lua_State* L, int level = 1);
// Whether the value at idx is a callback duet takes: a function, or a table or userdata whose
// __call is a function.
bool callable(lua_State* L, int idx);
// The "file:line: " where the Lua function at idx is defined (a callable's __call): errors in what
// a callback returns name it, not the code that happened to call into duet. For a C function, the
// running line.
std::string defined_at(lua_State* L, int idx);
// A value a callback returned, as an error message shows it: nil, true, 1.5, NaN, 'text', or
// "a table" (a type for what has no short text).
std::string returned_text(lua_State* L, int idx);

// Hides the metatable on top of the stack from getmetatable and setmetatable (its __metatable
// field), so that a script cannot call a userdata's __gc twice or swap its methods. The debug
// library still reaches it: that is what the debug library is for.
inline void protect_metatable(lua_State* L, const char* type_name) {
  lua_pushstring(L, type_name);
  lua_setfield(L, -2, "__metatable");
}

// t[key] = value for the table on top of the stack.
inline void set_number(lua_State* L, const char* key, lua_Number v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, key);
}
inline void set_integer(lua_State* L, const char* key, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, key);
}
inline void set_string(lua_State* L, const char* key, const char* v) {
  lua_pushstring(L, v);
  lua_setfield(L, -2, key);
}

// Runs a C++ body for a Lua C function. C++ errors become Lua errors only after every C++ object
// of the body is destroyed: lua_error unwinds with longjmp, which must never skip a destructor.
// That holds for the caller's frame too: a Lua C function that calls guarded() keeps its arguments
// as Lua's strings (const char* from luaL_checkstring), never in a std::string declared outside body.
template <typename F>
int guarded(lua_State* L, F&& body) {
  bool failed = false;
  try {
    return body();
  } catch (const std::exception& e) {
    lua_pushstring(L, e.what());
    failed = true;
  }
  if (failed) lua_error(L);
  return 0;
}

}  // namespace duet::lua
