// duet.uniform, duet.hash, duet.normal: randomness from keys, not from a stream.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string_view>

#include "cli/lua/lua_functions.hpp"
#include "core/mix.hpp"

namespace duet::lua {

namespace {

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

}  // namespace

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

}  // namespace duet::lua
