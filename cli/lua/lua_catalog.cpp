// duet.model, duet.gpu, duet.models, duet.gpus: the built-in shapes and specs.
#include <string>
#include <vector>

#include "cli/lua/lua_context.hpp"
#include "cli/lua/lua_functions.hpp"
#include "cli/lua/lua_util.hpp"
#include "core/gpu_spec.hpp"
#include "core/model_spec.hpp"

namespace duet::lua {

namespace {

void push_strings(lua_State* L, const std::vector<std::string>& v) {
  lua_createtable(L, int(v.size()), 0);
  for (std::size_t i = 0; i < v.size(); ++i) {
    lua_pushstring(L, v[i].c_str());
    lua_rawseti(L, -2, lua_Integer(i + 1));
  }
}

}  // namespace

int l_model(lua_State* L) {                   // duet.model(name or config.json) -> shape and derived figures
  const char* name = luaL_checkstring(L, 1);  // not a std::string: lua_error longjmps past destructors
  return guarded(L, [&] {
    const ModelSpec m = model_from(name, context(L).opt.source_dir);
    lua_createtable(L, 0, 18);
    set_string(L, "name", m.name.c_str());
    set_integer(L, "num_layers", m.num_layers);
    set_integer(L, "hidden_size", m.hidden_size);
    set_integer(L, "num_heads", m.num_heads);
    set_integer(L, "num_kv_heads", m.num_kv_heads);
    set_integer(L, "head_dim", m.head_dim);
    set_integer(L, "intermediate_size", m.intermediate_size);
    set_integer(L, "vocab_size", m.vocab_size);
    set_integer(L, "score_labels", m.score_labels());  // 0: an LM head
    set_integer(L, "max_position_embeddings", m.max_position_embeddings);
    set_number(L, "rope_theta", m.rope_theta);
    set_string(L, "dtype", dtype_name(m.dtype));
    set_integer(L, "num_parameters", m.num_parameters());
    set_integer(L, "weight_bytes", m.weight_bytes());
    set_integer(L, "kv_bytes_per_token", m.kv_bytes_per_token());
    set_number(L, "linear_flops_per_token", m.linear_flops_per_token());
    for (const auto& [key, value] : {std::pair{"qkv_bias", m.qkv_bias},
                                     {"qk_norm", m.qk_norm},
                                     {"tie_word_embeddings", m.tie_word_embeddings}}) {
      lua_pushboolean(L, value);
      lua_setfield(L, -2, key);
    }
    return 1;
  });
}

// duet.gpu(name or path): the figures duet.run's `gpu` takes back as a table (a GPU to modify).
int l_gpu(lua_State* L) {
  const char* name = luaL_checkstring(L, 1);  // not a std::string: lua_error longjmps past destructors
  return guarded(L, [&] {
    const GpuSpec g = gpu_from(name, context(L).opt.source_dir);
    lua_createtable(L, 0, 7);
    set_string(L, "name", g.name.c_str());
    set_integer(L, "hbm_bytes", g.hbm_bytes);
    set_number(L, "hbm_bandwidth", g.hbm_bandwidth);
    set_number(L, "bf16_flops", g.bf16_flops);
    set_integer(L, "sm_count", g.sm_count);
    set_number(L, "kernel_launch_s", g.kernel_launch_s);
    if (!g.efficiency_of.empty()) set_string(L, "efficiency_of", g.efficiency_of.c_str());
    return 1;
  });
}

int l_models(lua_State* L) {
  push_strings(L, builtin_model_names());
  return 1;
}

int l_gpus(lua_State* L) {
  push_strings(L, builtin_gpu_names());
  return 1;
}

}  // namespace duet::lua
