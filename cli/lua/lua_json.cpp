// duet.read_json, duet.read_jsonl: JSON files (problem sets, fitted models) as Lua tables.
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/lua/lua_context.hpp"
#include "cli/lua/lua_functions.hpp"
#include "cli/lua/lua_util.hpp"
#include "core/error.hpp"
#include "core/json_fields.hpp"
#include "io/file_bytes.hpp"

namespace duet::lua {

namespace {

// Deeper than any problem set or fitted model; the bound keeps the recursion off the C stack's end.
constexpr int kMaxJsonDepth = 256;

void push_json(lua_State* L, const nlohmann::json& j, int depth = 0) {
  if (depth > kMaxJsonDepth)
    throw Error("JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  if (!lua_checkstack(L, 4)) throw Error("JSON nesting too deep for the Lua stack");
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      lua_pushnil(L);
      break;
    case nlohmann::json::value_t::boolean:
      lua_pushboolean(L, j.get<bool>());
      break;
    case nlohmann::json::value_t::number_integer:
      lua_pushinteger(L, j.get<lua_Integer>());
      break;
    case nlohmann::json::value_t::number_unsigned:  // beyond int64: a float, as Lua reads 2^63
      if (j.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<lua_Integer>::max()))
        lua_pushnumber(L, double(j.get<std::uint64_t>()));
      else lua_pushinteger(L, j.get<lua_Integer>());
      break;
    case nlohmann::json::value_t::number_float:
      lua_pushnumber(L, j.get<double>());
      break;
    case nlohmann::json::value_t::string:
      lua_pushstring(L, j.get_ref<const std::string&>().c_str());
      break;
    case nlohmann::json::value_t::array: {
      lua_createtable(L, int(j.size()), 0);
      lua_Integer i = 0;
      for (const auto& v : j) {
        push_json(L, v, depth + 1);
        lua_rawseti(L, -2, ++i);
      }
      break;
    }
    case nlohmann::json::value_t::object: {
      lua_createtable(L, 0, int(j.size()));
      for (const auto& [k, v] : j.items()) {
        push_json(L, v, depth + 1);
        lua_setfield(L, -2, k.c_str());
      }
      break;
    }
    default:
      lua_pushnil(L);
  }
}

}  // namespace

std::string flat_table_json(lua_State* L, int idx) {
  idx = lua_absindex(L, idx);
  nlohmann::json j = nlohmann::json::object();
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {  // raw traversal: no metamethod runs
    if (lua_type(L, -2) != LUA_TSTRING) {
      const std::string type = luaL_typename(L, -2);
      lua_pop(L, 2);
      throw Error("expected a table of named fields, got a " + type + " key");
    }
    const std::string key = lua_tostring(L, -2);
    // An integral float (2^7) is an integer, as TableReader takes integer fields.
    if (const auto i = integral(L, -1)) j[key] = *i;
    else if (lua_type(L, -1) == LUA_TNUMBER && std::isfinite(lua_tonumber(L, -1)))
      j[key] = lua_tonumber(L, -1);
    else if (lua_type(L, -1) == LUA_TSTRING) j[key] = lua_tostring(L, -1);
    else if (lua_type(L, -1) == LUA_TBOOLEAN) j[key] = bool(lua_toboolean(L, -1));
    else {
      const std::string type = luaL_typename(L, -1);
      lua_pop(L, 2);
      throw Error("field '" + key + "' is " + (type == "number" ? "not finite" : "a " + type) +
                  ": expected a finite number, a string or a boolean");
    }
    lua_pop(L, 1);
  }
  return j.dump();
}

int l_read_json(lua_State* L) {
  const char* path = luaL_checkstring(L, 1);  // not a std::string: lua_error longjmps past destructors
  return guarded(L, [&] {
    const std::string p = resolve_path(L, path);
    const nlohmann::json j = read_json_file(p);
    try {
      push_json(L, j);
    } catch (const Error& e) {
      throw Error(p + ": " + e.what());
    }
    return 1;
  });
}

int l_read_jsonl(lua_State* L) {              // duet.read_jsonl(path [, limit])
  const char* path = luaL_checkstring(L, 1);  // not a std::string: lua_error longjmps past destructors
  const lua_Integer limit = luaL_optinteger(L, 2, 0);
  luaL_argcheck(L, limit >= 0, 2, "the number of lines to read (0: all) must not be negative");
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
        push_json(L, json_fields::parse_unique_keys(line));
      } catch (const nlohmann::json::exception& e) {
        throw Error(p + ":" + std::to_string(lineno) + ": not valid JSON (" + e.what() + ")");
      } catch (const Error& e) {
        throw Error(p + ":" + std::to_string(lineno) + ": " + e.what());
      }
      lua_rawseti(L, -2, ++n);
    }
    return 1;
  });
}

}  // namespace duet::lua
