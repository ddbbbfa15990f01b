#pragma once
// The duet module's functions that live outside lua_api.cpp, one idea a file, for its table.
#include <lua.hpp>

namespace duet::lua {

// lua_random.cpp: keyed randomness, independent of how the simulation interleaves problems.
int l_uniform(lua_State* L);
int l_hash(lua_State* L);
int l_normal(lua_State* L);
// lua_tokens.cpp: token lists and the repository's tokenizer.
int l_synthetic(lua_State* L);
int l_tokens(lua_State* L);
int l_tokenizer(lua_State* L);
int l_token_list(lua_State* L);
// lua_json.cpp: JSON files as Lua tables.
int l_read_json(lua_State* L);
int l_read_jsonl(lua_State* L);
// lua_catalog.cpp: the built-in models and GPUs.
int l_model(lua_State* L);
int l_gpu(lua_State* L);
int l_models(lua_State* L);
int l_gpus(lua_State* L);
// lua_args.cpp: the script's arguments after `--`.
int l_args(lua_State* L);

}  // namespace duet::lua
