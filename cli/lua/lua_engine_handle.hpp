#pragma once
// The engine handle a workload's coroutine holds (ctx.engines.NAME): submit, release, tokens,
// set_priority, and the engine's vocabulary as fields. It speaks to the running LuaWorkload.
#include <lua.hpp>

namespace duet::lua {

// The handle's metatable, once per Lua state.
void register_engine_handle(lua_State* L);
// Pushes a handle to engine `index` of the running experiment.
void push_engine_ref(lua_State* L, int index);

}  // namespace duet::lua
