#pragma once
// A Llama-architecture model's weights (Qwen2's q, k and v biases and Qwen3's head norms included) on the
// host, in float32, in the shapes the CPU reference computes with. Matrices are stored as HuggingFace stores
// them, [out_features, in_features] row-major, so that y = W x; Eigen maps them as RowMajor.
#include <cstdint>
#include <string>
#include <vector>

#include "core/model_spec.hpp"

namespace duet {

struct HostTensor {
  std::vector<std::int64_t> shape;
  std::vector<float> data;  // row-major
  std::int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  std::int64_t cols() const { return shape.size() < 2 ? 1 : shape[1]; }
};

struct LlamaLayerWeights {
  HostTensor input_norm;  // model.layers.N.input_layernorm.weight            [hidden]
  HostTensor q_proj;      // model.layers.N.self_attn.q_proj.weight           [heads*head_dim, hidden]
  HostTensor k_proj;      // model.layers.N.self_attn.k_proj.weight           [kv_heads*head_dim, hidden]
  HostTensor v_proj;      // model.layers.N.self_attn.v_proj.weight           [kv_heads*head_dim, hidden]
  HostTensor o_proj;      // model.layers.N.self_attn.o_proj.weight           [hidden, heads*head_dim]
  HostTensor post_norm;   // model.layers.N.post_attention_layernorm.weight   [hidden]
  HostTensor gate_proj;   // model.layers.N.mlp.gate_proj.weight              [intermediate, hidden]
  HostTensor up_proj;     // model.layers.N.mlp.up_proj.weight                [intermediate, hidden]
  HostTensor down_proj;   // model.layers.N.mlp.down_proj.weight              [hidden, intermediate]
  // Qwen2 only (ModelSpec::qkv_bias), empty otherwise:
  HostTensor q_bias;  // model.layers.N.self_attn.q_proj.bias  [heads*head_dim]
  HostTensor k_bias;  // model.layers.N.self_attn.k_proj.bias  [kv_heads*head_dim]
  HostTensor v_bias;  // model.layers.N.self_attn.v_proj.bias  [kv_heads*head_dim]
  // Qwen3 only (ModelSpec::qk_norm), empty otherwise:
  HostTensor q_norm;  // model.layers.N.self_attn.q_norm.weight [head_dim]
  HostTensor k_norm;  // model.layers.N.self_attn.k_norm.weight [head_dim]
};

struct LlamaWeights {
  ModelSpec spec;
  HostTensor embed_tokens;  // model.embed_tokens.weight [vocab, hidden]
  std::vector<LlamaLayerWeights> layers;
  HostTensor final_norm;  // model.norm.weight [hidden]
  HostTensor lm_head;     // lm_head.weight [vocab, hidden]; a copy of embed_tokens when tied; empty
                          // with a score head
  // A score head (ModelSpec::score_head) in place of the LM head, empty otherwise. A classifier's:
  HostTensor score_hidden;       // score.0.weight [hidden, hidden]
  HostTensor score_hidden_bias;  // score.0.bias   [hidden]
  HostTensor score_out;       // score.2.weight [2, hidden]; a value head's v_head.summary.weight [1, hidden]
  HostTensor score_out_bias;  // score.2.bias   [2];         a value head's v_head.summary.bias   [1]
};

}  // namespace duet
