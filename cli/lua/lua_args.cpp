// duet.args: the script's arguments after `--`, checked against its defaults.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>

#include "cli/lua/lua_context.hpp"
#include "cli/lua/lua_functions.hpp"
#include "cli/lua/lua_util.hpp"
#include "core/error.hpp"

namespace duet::lua {

// duet.args{defaults}: the script's arguments after `--`, as --name value or --flag, checked
// against the defaults' names and types.
int l_args(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  return guarded(L, [&] {
    const auto& args = context(L).opt.args;
    lua_newtable(L);
    lua_pushnil(L);
    while (lua_next(L, 1) != 0) {  // copy the defaults, which also say each argument's type
      const int type = lua_type(L, -1);
      if (lua_type(L, -2) != LUA_TSTRING)
        throw Error(where(L) + "duet.args: the defaults' keys must be argument names, got a " +
                    luaL_typename(L, -2));
      if (type != LUA_TNUMBER && type != LUA_TBOOLEAN && type != LUA_TSTRING)
        throw Error(where(L) + "duet.args: default '" + lua_tostring(L, -2) +
                    "' must be a number, boolean or string, got a " + luaL_typename(L, -1));
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_settable(L, -4);
    }
    std::set<std::string> given;
    std::string last_flag;  // the previous argument, when it was a flag given alone
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      if (a.rfind("--", 0) != 0)
        throw Error("script argument '" + a + "': expected --name [value]" +
                    (last_flag.empty() ? ""
                                       : " (--" + last_flag +
                                             " is a flag: alone it is true; its value can only be "
                                             "true or false)"));
      last_flag.clear();
      std::string name = a.substr(2);
      std::string value;
      const auto eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      const std::string spelled = name;
      for (char& c : name)
        if (c == '-') c = '_';
      if (!given.insert(name).second)
        throw Error("script argument '--" + spelled +
                    "' is given more than once ('-' and '_' in a name are the same)");
      const int t = lua_getfield(L, -1, name.c_str());  // the copy: no metamethods
      lua_pop(L, 1);
      if (t == LUA_TNIL) {
        std::set<std::string> names;  // sorted: the table's own order changes from run to run
        lua_pushnil(L);
        while (lua_next(L, -2) != 0) {
          lua_pop(L, 1);
          if (lua_type(L, -1) == LUA_TSTRING) names.insert(lua_tostring(L, -1));
        }
        // As a user types them: '-' for '_' (both are taken), and the name as given.
        std::string valid;
        for (std::string n : names) {
          std::replace(n.begin(), n.end(), '_', '-');
          valid += (valid.empty() ? "--" : ", --") + n;
        }
        throw Error("unknown script argument '--" + spelled + "' (valid: " + valid + ")");
      }
      // A flag alone is true; "--flag false" and "--flag=false" are false (a bare "false" could
      // be nothing else: every other argument starts with "--").
      const bool bare_flag = t == LUA_TBOOLEAN && eq == std::string::npos &&
                             !(i + 1 < args.size() && (args[i + 1] == "true" || args[i + 1] == "false"));
      if (bare_flag) {
        lua_pushboolean(L, 1);
        last_flag = spelled;
      } else {
        if (eq == std::string::npos) {
          if (i + 1 >= args.size()) throw Error("script argument '--" + name + "' needs a value");
          value = args[++i];
        }
        if (t == LUA_TNUMBER) {
          char* end = nullptr;
          const double v = std::strtod(value.c_str(), &end);
          if (value.empty() || *end || !std::isfinite(v))
            throw Error("script argument '--" + name + "': '" + value + "' is not a finite number");
          const bool integral = std::floor(v) == v && std::abs(v) < 9e15;
          if (integral) lua_pushinteger(L, lua_Integer(v));
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

}  // namespace duet::lua
