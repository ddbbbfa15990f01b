#pragma once
// Userdata types shared by the Lua bindings.
#include <lua.hpp>

#include <vector>

#include "core/types.hpp"

namespace duet::lua {

// A token sequence kept on the C++ side (prompts, trajectories): Lua passes it around by
// reference, never element by element.
struct TokenList {
  std::vector<TokenId> ids;
};

inline constexpr const char* kTokenListMeta = "duet.TokenList";
TokenList& push_token_list(lua_State* L, std::vector<TokenId> ids);
TokenList* test_token_list(lua_State* L, int index);  // nullptr if not a TokenList
void register_types(lua_State* L);

// Tokens that stand for text the simulator never sees: a deterministic function of (key, i),
// never one of the `avoid` ids.
std::vector<TokenId> synthetic_tokens(int n, std::uint64_t key, int vocab_size, TokenId avoid1,
                                      TokenId avoid2);

}  // namespace duet::lua
