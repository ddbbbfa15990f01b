#pragma once
// The shape of a Llama-architecture decoder and the figures derived from it (bytes, FLOPs). Qwen2
// (Qwen2.5, Qwen2.5-Math) is the same decoder with biases on the q, k and v projections; Qwen3 with
// an RMSNorm on each head of q and k instead; Mistral the same as Llama, its sliding window read as
// its context length. Its output head is the LM head,
// or a PRM's score head (Qwen2.5-Math-PRM's classifier, Skywork-o1-Open-PRM's value head).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace duet {

enum class DType { BF16, F16, F32 };

// A PRM's head in place of the LM head.
enum class ScoreHead : std::uint8_t {
  None,  // the LM head: a PRM's score is the two-way softmax of two tokens' logits
  // transformers' Qwen2ForProcessRewardModel (Qwen2.5-Math-PRM): `score` is Linear(hidden, hidden)
  // + bias, ReLU, Linear(hidden, 2) + bias; the score is the second label's softmax.
  Classifier,
  // Skywork-o1-Open-PRM's Qwen2ForPrmModel: `v_head.summary` is Linear(hidden, 1) + bias; the score
  // is the value's sigmoid.
  Value,
};
const char* score_head_name(ScoreHead head);  // "none", "classifier", "value"
// The config.json architecture of a PRM with this head: "Qwen2ForProcessRewardModel" (classifier),
// "Qwen2ForPrmModel" (value); "" for the LM head.
const char* score_head_architecture(ScoreHead head);

int dtype_bytes(DType dtype);
DType dtype_from_name(const std::string& name);  // "bfloat16", "bf16", "float16", "f16", "float32", "f32"
const char* dtype_name(DType dtype);

// Llama 3.1's long-context RoPE frequency rescaling ("rope_type": "llama3" in config.json).
struct RopeScaling {
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

struct ModelSpec {
  std::string name;
  int num_layers = 0;
  int hidden_size = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int intermediate_size = 0;
  int vocab_size = 0;
  int max_position_embeddings = 0;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  std::optional<RopeScaling> rope_scaling;
  DType dtype = DType::BF16;
  // Qwen2's q_proj, k_proj and v_proj carry biases (its o_proj and MLP do not): transformers'
  // Qwen2Attention. Llama's "attention_bias" would bias o_proj too, which duet does not model.
  bool qkv_bias = false;
  // Qwen3 normalises each head of q and of k (RMSNorm over head_dim, one weight vector shared by
  // the heads) after the projections and before RoPE: transformers' Qwen3Attention q_norm, k_norm.
  bool qk_norm = false;
  // A PRM whose head scores the final hidden state instead of predicting tokens (ScoreHead). Such a
  // model has no lm_head and cannot generate.
  ScoreHead score_head = ScoreHead::None;

  // The outputs of the score head's last Linear: 2, 1, or 0 with an LM head.
  int score_labels() const;
  // The width of a logits row: the vocabulary, or 2 with a score head (a value head's row is the
  // value and a constant 0, so that both heads' scores are a two-way softmax).
  int logits_width() const { return score_head == ScoreHead::None ? vocab_size : 2; }
  bool can_generate() const { return score_head == ScoreHead::None; }

  // Bytes of K and V for one token across all layers.
  std::int64_t kv_bytes_per_token() const;
  // Parameters by group; weight bytes at `dtype`. The embedding's count holds an untied LM head.
  std::int64_t embedding_parameters() const;
  std::int64_t score_head_parameters() const;  // the score head's weights and biases (0 without)
  // The weights the output head reads per step: vocab x hidden for the LM head, tied or not; the
  // score head's parameters for a PRM with one.
  std::int64_t head_weights() const;
  std::int64_t layer_parameters() const;     // one decoder layer: attention + MLP + norms (+ biases)
  std::int64_t qkv_bias_parameters() const;  // one layer's q, k and v biases (0 without)
  std::int64_t qk_norm_parameters() const;   // one layer's q and k head norms (0 without)
  std::int64_t num_parameters() const;
  std::int64_t weight_bytes() const;

  // FLOPs of the dense matmuls (QKV, O, gate/up, down, LM head) for one token: 2 per MAC.
  double linear_flops_per_token() const;
  // The same without the LM head: what a token whose logits are not needed costs.
  double layer_flops_per_token() const;
  // The output head's FLOPs for one logits row (the LM head's, or the score head's).
  double head_flops_per_token() const;
  // Attention score and value FLOPs for `new_tokens` queries causally attending to a context
  // that already holds `context_before` tokens: sum over queries of 4 * layers * heads * head_dim
  // * (keys visible to that query).
  double attention_flops(std::int64_t new_tokens, std::int64_t context_before) const;
  double prefill_flops(std::int64_t new_tokens, std::int64_t context_before) const;
  double decode_flops(std::int64_t context_before) const;

  // Throws duet::Error naming the field when a shape is impossible.
  void validate() const;
};

// Why the model cannot generate ("" when it can): a PRM with a score head. The engine's refusal
// and check_can_generate say it.
std::string cannot_generate_reason(const ModelSpec& m);
// Throws duet::Error, `what` first, when the model cannot generate: for the commands whose
// requests generate.
void check_can_generate(const ModelSpec& m, const std::string& what);

// Built-ins by name, case-insensitive: "llama-3.2-1b", "llama-3.1-8b", "qwen2.5-1.5b-instruct",
// "qwen2.5-7b-instruct", "qwen2.5-math-prm-7b", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b",
// and their aliases.
ModelSpec model_by_name(const std::string& name);
std::vector<std::string> builtin_model_names();
// The same as one text, "llama-3.2-1b, ...": for messages and help.
std::string builtin_model_list();

// A built-in name, or the path of a HuggingFace config.json (anything ending in .json or
// naming an existing file), or of the folder that holds one.
ModelSpec resolve_model(const std::string& name_or_path);

// The model as a HuggingFace config.json that from_hf_config_text reads back to the same ModelSpec
// (a Mistral's window as its context): what a run file records of each engine's model, so that a
// result names the shape it ran, whatever file or name the model came from.
std::string model_config_json(const ModelSpec& m);

// Reads a HuggingFace config.json. Errors name the file and the missing or bad field.
ModelSpec from_hf_config(const std::string& path);
ModelSpec from_hf_config_text(const std::string& json_text, const std::string& origin);

}  // namespace duet
