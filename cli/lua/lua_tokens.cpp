// duet.synthetic, duet.tokens, duet.tokenizer, duet.token_list: token lists for prompts.
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "cli/lua/lua_context.hpp"
#include "cli/lua/lua_functions.hpp"
#include "cli/lua/lua_types.hpp"
#include "cli/lua/lua_util.hpp"

namespace duet::lua {

namespace {

// The repository's sentencepiece model (workloads/data/tokenizer), trained on MATH-500 and
// PRM800K text: real prompt token ids and lengths for the problem sets.
const Tokenizer& tokenizer(lua_State* L) {
  ScriptContext& ctx = context(L);
  if (!ctx.tokenizer)
    ctx.tokenizer = std::make_unique<Tokenizer>(
        Tokenizer::load(ctx.opt.source_dir + "/workloads/data/tokenizer/duet-math.model"));
  return *ctx.tokenizer;
}

}  // namespace

int l_synthetic(lua_State* L) {  // duet.synthetic(n, key...) -> TokenList
  const lua_Integer n = luaL_checkinteger(L, 1);
  const lua_Integer vocab = luaL_optinteger(L, 3, 128256);
  luaL_argcheck(L, n >= 0 && n <= (1 << 24), 1, "token count out of range");
  luaL_argcheck(L, vocab >= 1 && vocab <= std::numeric_limits<std::int32_t>::max(), 3,
                "vocabulary size out of range");
  const std::uint64_t key = std::uint64_t(luaL_optinteger(L, 2, 0));
  return guarded(L, [&] {
    push_token_list(L, synthetic_tokens(int(n), key, int(vocab), kNoToken, kNoToken));
    return 1;
  });
}

int l_tokens(lua_State* L) {  // duet.tokens(text [, bos]) -> TokenList
  std::size_t n = 0;
  const char* text = luaL_checklstring(L, 1, &n);
  const bool bos = lua_toboolean(L, 2);
  // sentencepiece's working memory, outside the Lua state's account, is about 230 bytes per byte
  // of text (1e7 bytes took 2.3 GB): a text whose encoding would pass the script's memory limit
  // is refused, where it would take the machine's memory.
  constexpr std::int64_t kEncodeBytesPerByte = 256;
  if (const std::int64_t limit = memory_limit(L); limit > 0 && std::int64_t(n) > limit / kEncodeBytesPerByte)
    return luaL_error(
        L,
        "duet.tokens: a text of %I bytes would take about %I MiB to tokenize, beyond the script's "
        "Lua memory limit of %I MiB (duet run --lua-memory-limit MiB raises it)",
        lua_Integer(n), lua_Integer(std::int64_t(n) * kEncodeBytesPerByte >> 20), lua_Integer(limit >> 20));
  return guarded(L, [&] {
    const Tokenizer& t = tokenizer(L);
    std::vector<TokenId> ids;
    if (bos && t.bos_id() != kNoToken) ids.push_back(t.bos_id());
    const auto body = t.encode(std::string_view(text, n));
    ids.insert(ids.end(), body.begin(), body.end());
    push_token_list(L, std::move(ids));
    return 1;
  });
}

int l_tokenizer(lua_State* L) {  // duet.tokenizer() -> {vocab_size, step_id, eos_id, bos_id, path}
  return guarded(L, [&] {
    const Tokenizer& t = tokenizer(L);
    lua_createtable(L, 0, 5);
    set_integer(L, "vocab_size", t.vocab_size());
    set_integer(L, "step_id", t.step_separator_id());
    set_integer(L, "eos_id", t.eos_id());
    set_integer(L, "bos_id", t.bos_id());
    set_string(L, "path", t.path().c_str());
    return 1;
  });
}

// duet.token_list{ids}: ids are token ids (>= 0, 32-bit); the vocabulary is checked where the
// list is submitted to an engine. No C++ object lives across the Lua errors raised here: the
// list is a userdata on the stack, collected with it.
int l_token_list(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  const lua_Integer n = luaL_len(L, 1);
  luaL_argcheck(L, n >= 0 && n <= (1 << 24), 1, "a token list holds 0 to 2^24 ids");
  std::vector<TokenId>& ids = push_token_list(L, {}).ids;
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_geti(L, 1, i);
    int ok = 0;
    const lua_Integer v = lua_tointegerx(L, -1, &ok);
    if (!ok || v < 0 || v > std::numeric_limits<TokenId>::max())
      return luaL_error(L, "duet.token_list: entry %d is not a token id (an integer from 0 to 2^31 - 1)",
                        int(i));
    lua_pop(L, 1);
    ids.push_back(TokenId(v));
  }
  return 1;
}

}  // namespace duet::lua
