#include "cli/lua/lua_engine_handle.hpp"

#include <string>

#include "cli/lua/lua_util.hpp"
#include "cli/lua/lua_workload.hpp"
#include "core/block_pool.hpp"

namespace duet::lua {

namespace {

constexpr const char* kEngineRefMeta = "duet.Engine";

struct EngineRef {
  int index;
};

EngineRef& check_engine(lua_State* L, int index) {
  return *static_cast<EngineRef*>(luaL_checkudata(L, index, kEngineRefMeta));
}

int engine_submit(lua_State* L) {
  const int engine = check_engine(L, 1).index;
  return guarded(L, [&] {
    lua_pushinteger(L, LuaWorkload::from(L, "engine:submit").lua_submit(L, engine, 2));
    return 1;
  });
}

int engine_release(lua_State* L) {
  const int engine = check_engine(L, 1).index;
  const lua_Integer id = luaL_checkinteger(L, 2);
  return guarded(L, [&] { return LuaWorkload::from(L, "engine:release").lua_release(L, engine, SeqId(id)); });
}

int engine_tokens(lua_State* L) {
  const int engine = check_engine(L, 1).index;
  const lua_Integer id = luaL_checkinteger(L, 2);
  const lua_Integer from = luaL_optinteger(L, 3, 0);
  luaL_argcheck(L, from >= 0 && from <= std::numeric_limits<int>::max(), 3,
                "the first token's index must be in 0 to 2^31 - 1");
  return guarded(
      L, [&] { return LuaWorkload::from(L, "engine:tokens").lua_tokens(L, engine, SeqId(id), int(from)); });
}

int engine_set_priority(lua_State* L) {
  const int engine = check_engine(L, 1).index;
  const lua_Integer id = luaL_checkinteger(L, 2);
  const lua_Integer p = luaL_checkinteger(L, 3);
  if (p < 0 || p >= kNumPriorities)
    return luaL_argerror(L, 3,
                         lua_pushfstring(L, "retention priority must be in [0, %d]", kNumPriorities - 1));
  const bool shared = lua_toboolean(L, 4);
  return guarded(L, [&] {
    return LuaWorkload::from(L, "engine:set_priority").lua_set_priority(L, engine, SeqId(id), int(p), shared);
  });
}

int engine_index(lua_State* L) {  // fields and methods
  const int engine = check_engine(L, 1).index;
  const char* key = luaL_checkstring(L, 2);
  if (luaL_getmetafield(L, 1, "__methods") != LUA_TNIL) {
    lua_getfield(L, -1, key);
    if (!lua_isnil(L, -1)) return 1;
    lua_pop(L, 2);
  }
  return guarded(L, [&] {
    LuaWorkload& w = LuaWorkload::from(L, "an engine's fields");
    const EngineVocab& v = w.engines().at(std::size_t(engine));
    const std::string k = key;
    if (k == "name") lua_pushstring(L, v.name.c_str());
    else if (k == "vocab_size") lua_pushinteger(L, v.vocab_size);
    else if (k == "step_id") lua_pushinteger(L, v.step_id);
    else if (k == "eos_id") lua_pushinteger(L, v.eos_id);
    else if (k == "index") lua_pushinteger(L, engine + 1);
    else if (k == "max_model_len")
      lua_pushinteger(L, w.runtime().engine(engine).scheduler().config().max_model_len);
    else lua_pushnil(L);
    return 1;
  });
}

}  // namespace

void push_engine_ref(lua_State* L, int index) {
  auto* ref = static_cast<EngineRef*>(lua_newuserdatauv(L, sizeof(EngineRef), 0));
  ref->index = index;
  luaL_setmetatable(L, kEngineRefMeta);
}

void register_engine_handle(lua_State* L) {
  luaL_newmetatable(L, kEngineRefMeta);
  lua_pushcfunction(L, engine_index);
  lua_setfield(L, -2, "__index");
  const luaL_Reg methods[] = {{"submit", engine_submit},
                              {"release", engine_release},
                              {"tokens", engine_tokens},
                              {"set_priority", engine_set_priority},
                              {nullptr, nullptr}};
  lua_newtable(L);
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__methods");
  protect_metatable(L, kEngineRefMeta);
  lua_pop(L, 1);
}

}  // namespace duet::lua
