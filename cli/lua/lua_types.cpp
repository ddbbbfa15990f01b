#include "cli/lua/lua_types.hpp"

#include <new>
#include <string>

#include "cli/lua/lua_util.hpp"
#include "core/error.hpp"
#include "core/mix.hpp"

namespace duet::lua {

TokenList& push_token_list(lua_State* L, std::vector<TokenId> ids) {
  void* mem = lua_newuserdatauv(L, sizeof(TokenList), 0);
  auto* list = new (mem) TokenList{std::move(ids)};
  luaL_setmetatable(L, kTokenListMeta);
  return *list;
}

TokenList* test_token_list(lua_State* L, int index) {
  return static_cast<TokenList*>(luaL_testudata(L, index, kTokenListMeta));
}

std::vector<TokenId> synthetic_tokens(int n, std::uint64_t key, int vocab_size, TokenId avoid1,
                                      TokenId avoid2) {
  const auto avoided = [&](TokenId t) { return t >= 0 && t < vocab_size; };
  const int drawable = vocab_size - int(avoided(avoid1)) - int(avoided(avoid2) && avoid2 != avoid1);
  if (drawable <= 0)
    throw Error("synthetic tokens: a vocabulary of " + std::to_string(vocab_size) +
                " leaves no token to draw");
  std::vector<TokenId> out(std::size_t(std::max(0, n)));
  for (int i = 0; i < n; ++i) {
    TokenId t = TokenId(mix64(key * 0x9e3779b97f4a7c15ULL + std::uint64_t(i)) % std::uint64_t(vocab_size));
    while (t == avoid1 || t == avoid2) t = (t + 1) % vocab_size;
    out[std::size_t(i)] = t;
  }
  return out;
}

namespace {

// Emptied, not destroyed: the debug library can reach a __gc and call it again, and an empty
// vector owns nothing, so the userdata's memory going back to Lua leaks nothing.
int token_list_gc(lua_State* L) {
  std::vector<TokenId>().swap(static_cast<TokenList*>(luaL_checkudata(L, 1, kTokenListMeta))->ids);
  return 0;
}

int token_list_len(lua_State* L) {
  lua_pushinteger(L, lua_Integer(static_cast<TokenList*>(luaL_checkudata(L, 1, kTokenListMeta))->ids.size()));
  return 1;
}

int token_list_get(lua_State* L) {  // list:get(i), 1-based
  auto* list = static_cast<TokenList*>(luaL_checkudata(L, 1, kTokenListMeta));
  const lua_Integer i = luaL_checkinteger(L, 2);
  if (i < 1 || i > lua_Integer(list->ids.size()))
    return luaL_error(L, "TokenList index %d out of range", int(i));
  lua_pushinteger(L, list->ids[std::size_t(i - 1)]);
  return 1;
}

int token_list_concat(lua_State* L) {  // a .. b
  auto* a = static_cast<TokenList*>(luaL_checkudata(L, 1, kTokenListMeta));
  auto* b = static_cast<TokenList*>(luaL_checkudata(L, 2, kTokenListMeta));
  return guarded(L, [&] {
    std::vector<TokenId> ids = a->ids;
    ids.insert(ids.end(), b->ids.begin(), b->ids.end());
    push_token_list(L, std::move(ids));
    return 1;
  });
}

// list:fold(n): a new list whose ids at or above n become id mod n. A generator's tokens for a
// PRM of a smaller vocabulary (a Llama 3 generator's for a Mistral PRM): the same count and, since
// the map is fixed, the same prefix-cache identity for the same tokens.
int token_list_fold(lua_State* L) {
  auto* list = static_cast<TokenList*>(luaL_checkudata(L, 1, kTokenListMeta));
  const lua_Integer n = luaL_checkinteger(L, 2);
  if (n < 1 || n > lua_Integer(INT32_MAX))
    return luaL_error(L, "TokenList:fold: vocabulary size %I is not 1 to 2^31 - 1", n);
  return guarded(L, [&] {
    std::vector<TokenId> ids = list->ids;
    for (TokenId& t : ids) t = TokenId(t % TokenId(n));
    push_token_list(L, std::move(ids));
    return 1;
  });
}

int token_list_tostring(lua_State* L) {
  auto* list = static_cast<TokenList*>(luaL_checkudata(L, 1, kTokenListMeta));
  lua_pushfstring(L, "TokenList(%d tokens)", int(list->ids.size()));
  return 1;
}

}  // namespace

void register_types(lua_State* L) {
  luaL_newmetatable(L, kTokenListMeta);
  const luaL_Reg list_meta[] = {{"__gc", token_list_gc},
                                {"__len", token_list_len},
                                {"__concat", token_list_concat},
                                {"__tostring", token_list_tostring},
                                {nullptr, nullptr}};
  luaL_setfuncs(L, list_meta, 0);
  lua_newtable(L);
  lua_pushcfunction(L, token_list_get);
  lua_setfield(L, -2, "get");
  lua_pushcfunction(L, token_list_fold);
  lua_setfield(L, -2, "fold");
  lua_setfield(L, -2, "__index");
  protect_metatable(L, kTokenListMeta);
  lua_pop(L, 1);
}

}  // namespace duet::lua
