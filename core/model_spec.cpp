#include "core/model_spec.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_fields.hpp"

namespace duet {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Shapes from the models' published config.json files on the HuggingFace hub
// (meta-llama/Llama-3.2-1B-Instruct and meta-llama/Llama-3.1-8B-Instruct; the PRM
// RLHFlow/Llama3.1-8B-PRM-Deepseek-Data shares the 8B shape).
ModelSpec llama_3_2_1b() {
  ModelSpec m;
  m.name = "llama-3.2-1b";
  m.num_layers = 16;
  m.hidden_size = 2048;
  m.num_heads = 32;
  m.num_kv_heads = 8;
  m.head_dim = 64;
  m.intermediate_size = 8192;
  m.vocab_size = 128256;
  m.max_position_embeddings = 131072;
  m.rope_theta = 500000.0;
  m.rms_norm_eps = 1e-5;
  m.tie_word_embeddings = true;
  m.rope_scaling = RopeScaling{32.0, 1.0, 4.0, 8192};
  return m;
}

ModelSpec llama_3_1_8b() {
  ModelSpec m;
  m.name = "llama-3.1-8b";
  m.num_layers = 32;
  m.hidden_size = 4096;
  m.num_heads = 32;
  m.num_kv_heads = 8;
  m.head_dim = 128;
  m.intermediate_size = 14336;
  m.vocab_size = 128256;
  m.max_position_embeddings = 131072;
  m.rope_theta = 500000.0;
  m.rms_norm_eps = 1e-5;
  m.tie_word_embeddings = false;
  m.rope_scaling = RopeScaling{8.0, 1.0, 4.0, 8192};
  return m;
}

// Qwen/Qwen2.5-1.5B-Instruct and Qwen/Qwen2.5-7B-Instruct, from their config.json files on the
// HuggingFace hub (Qwen2ForCausalLM: q, k and v biases). The Qwen2.5-Math models of these sizes
// share the decoder's widths but not its RoPE base or context length: give their config.json.
ModelSpec qwen2_5_1_5b() {
  ModelSpec m;
  m.name = "qwen2.5-1.5b-instruct";
  m.num_layers = 28;
  m.hidden_size = 1536;
  m.num_heads = 12;
  m.num_kv_heads = 2;
  m.head_dim = 128;
  m.intermediate_size = 8960;
  m.vocab_size = 151936;
  m.max_position_embeddings = 32768;
  m.rope_theta = 1000000.0;
  m.rms_norm_eps = 1e-6;
  m.tie_word_embeddings = true;
  m.qkv_bias = true;
  return m;
}

ModelSpec qwen2_5_7b() {
  ModelSpec m;
  m.name = "qwen2.5-7b-instruct";
  m.num_layers = 28;
  m.hidden_size = 3584;
  m.num_heads = 28;
  m.num_kv_heads = 4;
  m.head_dim = 128;
  m.intermediate_size = 18944;
  m.vocab_size = 152064;
  m.max_position_embeddings = 32768;
  m.rope_theta = 1000000.0;
  m.rms_norm_eps = 1e-6;
  m.tie_word_embeddings = false;
  m.qkv_bias = true;
  return m;
}

// Qwen/Qwen2.5-Math-PRM-7B's config.json on the HuggingFace hub: Qwen2.5-Math-7B's decoder (its
// 4096-token context and RoPE base of 10000) under a two-label score head, no LM head.
ModelSpec qwen2_5_math_prm_7b() {
  ModelSpec m = qwen2_5_7b();
  m.name = "qwen2.5-math-prm-7b";
  m.max_position_embeddings = 4096;
  m.rope_theta = 10000.0;
  m.score_head = ScoreHead::Classifier;
  return m;
}

// Qwen/Qwen3-0.6B, -1.7B, -4B and -8B, from their config.json files on the HuggingFace hub
// (Qwen3ForCausalLM: no biases, q and k head norms; head_dim 128 whatever the width, so the 0.6B
// and 4B models' attention is wider than their hidden size). One config for each size's thinking
// and non-thinking modes; the -Base checkpoints' context differs (give their config.json).
ModelSpec qwen3(const char* name, int layers, int hidden, int heads, int intermediate, bool tied) {
  ModelSpec m;
  m.name = name;
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.num_heads = heads;
  m.num_kv_heads = 8;
  m.head_dim = 128;
  m.intermediate_size = intermediate;
  m.vocab_size = 151936;
  m.max_position_embeddings = 40960;
  m.rope_theta = 1000000.0;
  m.rms_norm_eps = 1e-6;
  m.tie_word_embeddings = tied;
  m.qk_norm = true;
  return m;
}

ModelSpec qwen3_0_6b() { return qwen3("qwen3-0.6b", 28, 1024, 16, 3072, true); }
ModelSpec qwen3_1_7b() { return qwen3("qwen3-1.7b", 28, 2048, 16, 6144, true); }
ModelSpec qwen3_4b() { return qwen3("qwen3-4b", 36, 2560, 32, 9728, true); }
ModelSpec qwen3_8b() { return qwen3("qwen3-8b", 36, 4096, 32, 12288, false); }

struct BuiltinModel {
  const char* name;
  ModelSpec (*make)();
};

constexpr BuiltinModel kBuiltins[] = {
    {"llama-3.2-1b", llama_3_2_1b},
    {"llama-3.2-1b-instruct", llama_3_2_1b},
    {"llama-3.1-8b", llama_3_1_8b},
    {"llama-3.1-8b-instruct", llama_3_1_8b},
    {"llama3.1-8b-prm-deepseek-data", llama_3_1_8b},
    {"qwen2.5-1.5b-instruct", qwen2_5_1_5b},
    {"qwen2.5-7b-instruct", qwen2_5_7b},
    {"qwen2.5-math-prm-7b", qwen2_5_math_prm_7b},
    {"qwen3-0.6b", qwen3_0_6b},
    {"qwen3-1.7b", qwen3_1_7b},
    {"qwen3-4b", qwen3_4b},
    {"qwen3-8b", qwen3_8b},
};

}  // namespace

int dtype_bytes(DType dtype) {
  switch (dtype) {
    case DType::BF16:
    case DType::F16:
      return 2;
    case DType::F32:
      return 4;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::BF16:
      return "bfloat16";
    case DType::F16:
      return "float16";
    case DType::F32:
      return "float32";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  const std::string n = lower(name);
  if (n == "bfloat16" || n == "bf16") return DType::BF16;
  if (n == "float16" || n == "f16" || n == "half") return DType::F16;
  if (n == "float32" || n == "f32" || n == "float") return DType::F32;
  throw Error("unknown dtype '" + name + "' (valid: bfloat16, float16, float32)");
}

std::int64_t ModelSpec::kv_bytes_per_token() const {
  return 2LL * num_layers * num_kv_heads * head_dim * dtype_bytes(dtype);
}

const char* score_head_name(ScoreHead head) {
  switch (head) {
    case ScoreHead::None:
      return "none";
    case ScoreHead::Classifier:
      return "classifier";
    case ScoreHead::Value:
      return "value";
  }
  return "?";
}

const char* score_head_architecture(ScoreHead head) {
  switch (head) {
    case ScoreHead::Classifier:
      return "Qwen2ForProcessRewardModel";
    case ScoreHead::Value:
      return "Qwen2ForPrmModel";
    case ScoreHead::None:
      break;
  }
  return "";
}

int ModelSpec::score_labels() const {
  switch (score_head) {
    case ScoreHead::None:
      return 0;
    case ScoreHead::Classifier:
      return 2;
    case ScoreHead::Value:
      return 1;
  }
  return 0;
}

std::int64_t ModelSpec::embedding_parameters() const {
  const std::int64_t table = std::int64_t(vocab_size) * hidden_size;
  return tie_word_embeddings || !can_generate() ? table : 2 * table;
}

std::int64_t ModelSpec::score_head_parameters() const {
  const std::int64_t h = hidden_size, labels = score_labels();
  const std::int64_t hidden_layer = score_head == ScoreHead::Classifier ? h * h + h : 0;
  return hidden_layer + labels * h + labels;
}

std::int64_t ModelSpec::head_weights() const {
  return can_generate() ? std::int64_t(vocab_size) * hidden_size : score_head_parameters();
}

std::int64_t ModelSpec::layer_parameters() const {
  const std::int64_t h = hidden_size;
  const std::int64_t q = std::int64_t(num_heads) * head_dim;
  const std::int64_t kv = std::int64_t(num_kv_heads) * head_dim;
  const std::int64_t attention = h * q + 2 * h * kv + q * h;
  const std::int64_t mlp = 3 * h * intermediate_size;
  return attention + mlp + 2 * h + qkv_bias_parameters() + qk_norm_parameters();
}

std::int64_t ModelSpec::qkv_bias_parameters() const {
  return qkv_bias ? std::int64_t(num_heads + 2 * num_kv_heads) * head_dim : 0;
}

std::int64_t ModelSpec::qk_norm_parameters() const { return qk_norm ? 2LL * head_dim : 0; }

std::int64_t ModelSpec::num_parameters() const {
  return embedding_parameters() + num_layers * layer_parameters() + hidden_size + score_head_parameters();
}

std::int64_t ModelSpec::weight_bytes() const { return num_parameters() * dtype_bytes(dtype); }

double ModelSpec::layer_flops_per_token() const {
  // Two FLOPs per weight of a matmul, one per bias (an add); the norms' weights are not matmuls.
  const std::int64_t matmul =
      layer_parameters() - 2LL * hidden_size - qkv_bias_parameters() - qk_norm_parameters();
  return (2.0 * double(matmul) + double(qkv_bias_parameters())) * num_layers;
}

double ModelSpec::head_flops_per_token() const {
  if (can_generate()) return 2.0 * double(vocab_size) * hidden_size;
  // Two FLOPs per weight, one per bias and one for the ReLU of each hidden value.
  const double h = hidden_size, labels = score_labels();
  const double hidden_layer = score_head == ScoreHead::Classifier ? 2.0 * h * h + h + h : 0.0;
  return hidden_layer + 2.0 * labels * h + labels;
}

double ModelSpec::linear_flops_per_token() const { return layer_flops_per_token() + head_flops_per_token(); }

double ModelSpec::attention_flops(std::int64_t new_tokens, std::int64_t context_before) const {
  // Query i (0-based) sees context_before + i + 1 keys: QK^T and PV are 2 FLOPs per MAC each.
  const double n = double(new_tokens);
  const double keys = n * double(context_before) + n * (n + 1.0) / 2.0;
  return 4.0 * num_layers * num_heads * head_dim * keys;
}

double ModelSpec::prefill_flops(std::int64_t new_tokens, std::int64_t context_before) const {
  return double(new_tokens) * linear_flops_per_token() + attention_flops(new_tokens, context_before);
}

double ModelSpec::decode_flops(std::int64_t context_before) const { return prefill_flops(1, context_before); }

void ModelSpec::validate() const {
  auto positive = [&](const char* field, long long v) {
    if (v <= 0) throw Error("model '" + name + "': " + field + " must be positive, got " + std::to_string(v));
  };
  positive("num_hidden_layers", num_layers);
  positive("hidden_size", hidden_size);
  positive("num_attention_heads", num_heads);
  positive("num_key_value_heads", num_kv_heads);
  positive("head_dim", head_dim);
  positive("intermediate_size", intermediate_size);
  positive("vocab_size", vocab_size);
  positive("max_position_embeddings", max_position_embeddings);
  // Far beyond any published model, and small enough that every product of them (parameters,
  // KV bytes per token, FLOPs) fits 64-bit arithmetic: a larger value is a typo, not a model.
  auto at_most = [&](const char* field, long long v, long long limit) {
    if (v > limit)
      throw Error("model '" + name + "': " + field + " " + std::to_string(v) + " is beyond " +
                  std::to_string(limit) + ", larger than any model's (a typo in the config?)");
  };
  at_most("num_hidden_layers", num_layers, 4096);
  at_most("hidden_size", hidden_size, 1 << 20);
  at_most("intermediate_size", intermediate_size, 1 << 20);
  at_most("num_attention_heads", num_heads, 4096);
  at_most("num_key_value_heads", num_kv_heads, 4096);
  at_most("head_dim", head_dim, 4096);
  at_most("vocab_size", vocab_size, 1 << 24);
  if (num_heads % num_kv_heads != 0)
    throw Error("model '" + name + "': num_attention_heads (" + std::to_string(num_heads) +
                ") must be a multiple of num_key_value_heads (" + std::to_string(num_kv_heads) + ")");
  if (head_dim % 2 != 0)
    throw Error("model '" + name + "': head_dim must be even for RoPE, got " + std::to_string(head_dim));
  if (rope_theta <= 0) throw Error("model '" + name + "': rope_theta must be positive");
  if (rms_norm_eps <= 0) throw Error("model '" + name + "': rms_norm_eps must be positive");
  // No published decoder has both (Qwen2 biases q, k and v; Qwen3 normalises their heads instead).
  if (qkv_bias && qk_norm)
    throw Error("model '" + name + "': q, k and v biases (Qwen2) and q and k head norms (Qwen3) together");
}

std::string cannot_generate_reason(const ModelSpec& m) {
  if (m.can_generate()) return {};
  return "model '" + m.name + "' is a PRM with a " + score_head_name(m.score_head) +
         " head and no LM head: it scores steps and cannot generate";
}

void check_can_generate(const ModelSpec& m, const std::string& what) {
  if (!m.can_generate()) throw Error(what + ": " + cannot_generate_reason(m));
}

std::string builtin_model_list() {
  std::string valid;
  for (const auto& b : kBuiltins) valid += std::string(valid.empty() ? "" : ", ") + b.name;
  return valid;
}

ModelSpec model_by_name(const std::string& name) {
  const std::string n = lower(name);
  for (const auto& b : kBuiltins)
    if (n == b.name) return b.make();
  throw Error("unknown model '" + name + "' (built-in models: " + builtin_model_list() +
              "; or give the path of a HuggingFace config.json or of its folder)");
}

ModelSpec resolve_model(const std::string& name_or_path) {
  if (json_fields::names_a_file(name_or_path)) {
    // A hub id (meta-llama/Llama-3.2-1B) that is no file: the built-in names are the useful answer.
    if (!name_or_path.ends_with(".json") && !std::filesystem::exists(name_or_path))
      throw Error("unknown model '" + name_or_path + "' (no such file; built-in models: " +
                  builtin_model_list() + "; or give the path of a HuggingFace config.json or of its folder)");
    // A model's folder (a HuggingFace checkpoint's, as vLLM takes a model) stands for its config.json.
    const std::string in_folder = name_or_path + "/config.json";
    std::error_code ec;
    if (std::filesystem::is_directory(name_or_path, ec) && std::filesystem::is_regular_file(in_folder, ec))
      return from_hf_config(in_folder);
    return from_hf_config(name_or_path);
  }
  try {
    return model_by_name(name_or_path);
  } catch (const Error& e) {
    if (!std::filesystem::is_regular_file(name_or_path)) throw;
    throw Error(std::string(e.what()) + "; to read the file of that name, give it as ./" + name_or_path);
  }
}

std::vector<std::string> builtin_model_names() {
  std::vector<std::string> names;
  for (const auto& b : kBuiltins) names.emplace_back(b.name);
  return names;
}

namespace {

using json_fields::has_field;
using json_fields::json;
using json_fields::optional_field;
using json_fields::optional_string;
using json_fields::require_int;
using json_fields::require_number;

// Llama 3.1's scaling from the object that holds it (rope_scaling, or transformers 5's
// rope_parameters, where rope_type 'default' means none).
std::optional<RopeScaling> parse_rope_scaling(const json& rs, const std::string& where) {
  if (!rs.is_object()) throw Error(where + " must be an object");
  std::string type = optional_string(rs, "rope_type", where);
  if (type.empty()) type = optional_string(rs, "type", where);
  if (type == "default") return std::nullopt;
  if (type != "llama3")
    throw Error(where + ": rope_type '" + type + "' is not supported (only 'default' and 'llama3')");
  RopeScaling s;
  s.factor = require_number(rs, "factor", where);
  s.low_freq_factor = require_number(rs, "low_freq_factor", where);
  s.high_freq_factor = require_number(rs, "high_freq_factor", where);
  s.original_max_position_embeddings = require_int(rs, "original_max_position_embeddings", where);
  if (s.factor <= 0 || s.low_freq_factor <= 0 || s.high_freq_factor <= s.low_freq_factor)
    throw Error(where + ": needs factor > 0 and high_freq_factor > low_freq_factor > 0");
  return s;
}

// The decoders duet models: Llama, Qwen2 (Llama with q, k and v biases), Qwen3 (Llama with q and k
// head norms) and Mistral (Llama whose attention may be limited to a sliding window).
enum class Family { Llama, Qwen2, Qwen3, Mistral };

// What a config.json's "architectures" and "model_type" say (either may be absent, not both; if
// both are present they must agree): the decoder, and its score head.
struct Architecture {
  Family family = Family::Llama;
  ScoreHead score_head = ScoreHead::None;
};

// Causal LMs, whose PRM scores come from the LM head's logits of two tokens (as RLHFlow's Llama
// PRMs and Math-Shepherd score), and two PRMs with a head of their own (below). Other heads of their
// own (a sequence classifier, Qwen2ForRewardModel's one-label outcome head) are refused.
Architecture architecture_of(const json& j, const std::string& origin) {
  // The PRMs with a head of their own: Qwen2.5-Math-PRM's (its remote code, as vLLM and SGLang
  // implement it) and Skywork-o1-Open-PRM's (its own, as its vLLM plugin implements it), both on
  // Qwen2 decoders.
  const std::string qwen2_prm = score_head_architecture(ScoreHead::Classifier);
  const std::string skywork_prm = score_head_architecture(ScoreHead::Value);
  std::optional<Family> by_arch, by_type;
  Architecture out;
  if (j.contains("architectures")) {
    const auto& arch = j["architectures"];
    const std::string a =
        arch.is_array() && !arch.empty() && arch[0].is_string() ? arch[0].get<std::string>() : "";
    const bool llama = a.starts_with("Llama") || a.starts_with("LLaMA"), qwen2 = a.starts_with("Qwen2For"),
               qwen3 = a.starts_with("Qwen3For"), mistral = a.starts_with("MistralFor");
    if (a == qwen2_prm) out.score_head = ScoreHead::Classifier;
    else if (a == skywork_prm) out.score_head = ScoreHead::Value;
    else if ((llama || qwen2 || qwen3 || mistral) && !a.ends_with("ForCausalLM"))
      throw Error(origin + ": field 'architectures' is " + arch.dump() +
                  "; duet models causal LMs (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                  "MistralForCausalLM), whose "
                  "PRM scores come from the LM head's logits, Qwen2.5-Math-PRM's two-label classifier (" +
                  qwen2_prm + ") and Skywork-o1-Open-PRM's value head (" + skywork_prm +
                  "): another head of its own is not modelled");
    if (llama) by_arch = Family::Llama;
    else if (qwen2) by_arch = Family::Qwen2;
    else if (qwen3) by_arch = Family::Qwen3;
    else if (mistral) by_arch = Family::Mistral;
    else
      throw Error(origin + ": field 'architectures' is " + arch.dump() +
                  "; duet models Llama-architecture decoders (LlamaForCausalLM, Qwen2ForCausalLM, "
                  "Qwen3ForCausalLM, MistralForCausalLM, " +
                  qwen2_prm + ", " + skywork_prm + ")");
  }
  if (has_field(j, "model_type")) {
    if (j["model_type"] == "llama") by_type = Family::Llama;
    else if (j["model_type"] == "qwen2") by_type = Family::Qwen2;
    else if (j["model_type"] == "qwen3") by_type = Family::Qwen3;
    else if (j["model_type"] == "mistral") by_type = Family::Mistral;
    else
      throw Error(origin + ": field 'model_type' is " + j["model_type"].dump() +
                  "; duet models Llama-architecture decoders ('llama', 'qwen2', 'qwen3', 'mistral')");
  }
  if (by_arch && by_type && *by_arch != *by_type)
    throw Error(origin + ": fields 'architectures' (" + j["architectures"].dump() + ") and 'model_type' (" +
                j["model_type"].dump() + ") name different models");
  // Every config.json transformers writes names its model_type: without either field the file may
  // be any model's, and reading it as a Llama would be a guess.
  if (!by_arch && !by_type)
    throw Error(origin +
                ": neither field 'architectures' nor 'model_type' is present; give one (such as "
                "\"model_type\": \"llama\"), as transformers writes them");
  out.family = by_arch.value_or(by_type.value_or(Family::Llama));
  return out;
}

// Fields of a config.json that change what a step computes or stores, where duet models only the
// plain decoder: a present value that differs is an error, never a silently different model.
void check_variant(const json& j, Family family, const std::string& origin) {
  const auto refuse = [&](const char* key, const std::string& why) {
    throw Error(origin + ": field '" + key + "' is " + j[key].dump() + "; " + why);
  };
  if (has_field(j, "hidden_act") && j["hidden_act"] != "silu")
    refuse("hidden_act", "duet's MLP is Llama's SwiGLU ('silu')");
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (has_field(j, key) && j[key] != false)
      refuse(key, family == Family::Qwen2   ? "Qwen2's only biases are on q, k and v"
                  : family == Family::Qwen3 ? "Qwen3's layers have no bias terms (its models set it false)"
                                            : "duet's Llama layers have no bias terms");
  // Qwen2's layers attend within a window only when use_sliding_window is set (transformers'
  // Qwen2Config); without it the sliding_window field is inert. Per-layer kinds (layer_types, as
  // transformers writes them today) must all be full attention.
  if (has_field(j, "use_sliding_window") && j["use_sliding_window"] != false)
    refuse("use_sliding_window",
           "sliding-window attention is not modelled (duet's layers attend to the whole context)");
  if (has_field(j, "layer_types")) {
    const json& types = j["layer_types"];
    if (!types.is_array() ||
        std::any_of(types.begin(), types.end(), [](const json& t) { return t != "full_attention"; }))
      refuse("layer_types", "only full attention is modelled (duet's layers attend to the whole context)");
  }
  if (has_field(j, "quantization_config"))
    throw Error(origin +
                ": field 'quantization_config': quantized weights are not modelled (duet prices and "
                "runs the weights in 'torch_dtype', bf16 by default)");
}

}  // namespace

ModelSpec from_hf_config_text(const std::string& text, const std::string& origin) {
  const json j = json_fields::parse_object(text, origin);
  try {
    const Architecture arch = architecture_of(j, origin);
    const Family family = arch.family;
    check_variant(j, family, origin);
    ModelSpec m;
    m.qkv_bias = family == Family::Qwen2;
    m.qk_norm = family == Family::Qwen3;
    m.score_head = arch.score_head;
    // Qwen2.5-Math-PRM's head has two labels (its modelling code fixes num_labels at 2): a config
    // that says otherwise is another model, not this one with a wider head.
    if (m.score_head == ScoreHead::Classifier) {
      if (has_field(j, "num_labels") && require_int(j, "num_labels", origin) != 2)
        throw Error(origin + ": field 'num_labels' is " + j["num_labels"].dump() + "; " +
                    score_head_architecture(ScoreHead::Classifier) + "'s score head has 2 labels");
      if (has_field(j, "id2label") && (!j["id2label"].is_object() || j["id2label"].size() != 2))
        throw Error(origin + ": field 'id2label' is " + j["id2label"].dump() + "; " +
                    score_head_architecture(ScoreHead::Classifier) + "'s score head has 2 labels");
    }
    m.name = optional_string(j, "_name_or_path", origin);
    if (m.name.empty()) m.name = origin;
    m.num_layers = require_int(j, "num_hidden_layers", origin);
    m.hidden_size = require_int(j, "hidden_size", origin);
    m.num_heads = require_int(j, "num_attention_heads", origin);
    m.num_kv_heads = optional_field<int>(j, "num_key_value_heads", m.num_heads, [&](const json&) {
      return require_int(j, "num_key_value_heads", origin);
    });
    m.intermediate_size = require_int(j, "intermediate_size", origin);
    m.vocab_size = require_int(j, "vocab_size", origin);
    m.max_position_embeddings = require_int(j, "max_position_embeddings", origin);
    // Mistral's layers attend to the last sliding_window tokens only (Mistral-7B-v0.1: 4096; v0.3:
    // none). Up to the window that is full attention: duet takes the window as the model's context.
    if (family == Family::Mistral && has_field(j, "sliding_window"))
      m.max_position_embeddings =
          std::min(m.max_position_embeddings, require_int(j, "sliding_window", origin));
    if (m.num_heads <= 0) throw Error(origin + ": field 'num_attention_heads' must be positive");
    // Without a head_dim field, HF's Llama derives it: the heads must split hidden_size evenly.
    // transformers' Qwen3Config defaults it to 128 instead, whatever the width.
    if (!has_field(j, "head_dim") && family != Family::Qwen3 && m.hidden_size % m.num_heads != 0)
      throw Error(origin + ": field 'hidden_size' (" + std::to_string(m.hidden_size) +
                  ") is not a multiple of 'num_attention_heads' (" + std::to_string(m.num_heads) +
                  "), and there is no 'head_dim' field");
    m.head_dim =
        optional_field<int>(j, "head_dim", family == Family::Qwen3 ? 128 : m.hidden_size / m.num_heads,
                            [&](const json&) { return require_int(j, "head_dim", origin); });
    m.rope_theta = optional_field<double>(
        j, "rope_theta", 10000.0, [&](const json&) { return require_number(j, "rope_theta", origin); });
    m.rms_norm_eps = optional_field<double>(
        j, "rms_norm_eps", 1e-6, [&](const json&) { return require_number(j, "rms_norm_eps", origin); });
    m.tie_word_embeddings = optional_field<bool>(j, "tie_word_embeddings", false, [&](const json& v) {
      if (!v.is_boolean()) throw Error(origin + ": field 'tie_word_embeddings' must be true or false");
      return v.get<bool>();
    });
    // transformers 4.56 writes the weights' type as 'dtype', earlier versions as 'torch_dtype'.
    const auto dtype_of = [&](const char* key) {
      return optional_field<DType>(j, key, DType::BF16, [&](const json& v) {
        if (!v.is_string()) throw Error(origin + ": field '" + key + "' must be a string");
        try {
          return dtype_from_name(v.get<std::string>());
        } catch (const Error& e) {
          throw Error(origin + ": field '" + key + "': " + e.what());
        }
      });
    };
    const bool has_dtype = has_field(j, "dtype");
    m.dtype = dtype_of(has_dtype ? "dtype" : "torch_dtype");
    if (has_dtype && has_field(j, "torch_dtype") && dtype_of("torch_dtype") != m.dtype)
      throw Error(origin + ": fields 'dtype' (" + j["dtype"].dump() + ") and 'torch_dtype' (" +
                  j["torch_dtype"].dump() + ") disagree");
    // transformers 5 writes the RoPE base and its scaling as one object, rope_parameters; 4.x as
    // rope_theta and rope_scaling. Read without it, such a file's base would be 10000, silently.
    if (has_field(j, "rope_parameters")) {
      const std::string where = origin + ": rope_parameters";
      if (has_field(j, "rope_scaling"))
        throw Error(origin + ": fields 'rope_parameters' and 'rope_scaling' are both present; give one");
      const json& rp = j["rope_parameters"];
      m.rope_scaling = parse_rope_scaling(rp, where);
      const double theta = require_number(rp, "rope_theta", where);
      if (has_field(j, "rope_theta") && m.rope_theta != theta)
        throw Error(origin + ": fields 'rope_theta' and 'rope_parameters.rope_theta' disagree");
      m.rope_theta = theta;
    } else if (has_field(j, "rope_scaling")) {
      m.rope_scaling = parse_rope_scaling(j["rope_scaling"], origin + ": rope_scaling");
    }
    try {
      m.validate();
    } catch (const Error& e) {
      throw Error(origin + ": " + e.what());
    }
    return m;
  } catch (const json::exception& e) {
    throw Error(origin + ": bad field type (" + e.what() + ")");
  }
}

std::string model_config_json(const ModelSpec& m) {
  json j;
  const bool classifier = m.score_head == ScoreHead::Classifier;
  const char* family = m.qk_norm ? "Qwen3" : m.qkv_bias ? "Qwen2" : "Llama";
  j["_name_or_path"] = m.name;
  j["architectures"] = json::array({m.can_generate() ? std::string(family) + "ForCausalLM"
                                                     : std::string(score_head_architecture(m.score_head))});
  j["model_type"] = m.qk_norm ? "qwen3" : m.qkv_bias || !m.can_generate() ? "qwen2" : "llama";
  j["num_hidden_layers"] = m.num_layers;
  j["hidden_size"] = m.hidden_size;
  j["num_attention_heads"] = m.num_heads;
  j["num_key_value_heads"] = m.num_kv_heads;
  j["head_dim"] = m.head_dim;
  j["intermediate_size"] = m.intermediate_size;
  j["vocab_size"] = m.vocab_size;
  j["max_position_embeddings"] = m.max_position_embeddings;
  j["rope_theta"] = m.rope_theta;
  j["rms_norm_eps"] = m.rms_norm_eps;
  j["tie_word_embeddings"] = m.tie_word_embeddings;
  j["torch_dtype"] = dtype_name(m.dtype);
  if (m.rope_scaling)
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", m.rope_scaling->factor},
        {"low_freq_factor", m.rope_scaling->low_freq_factor},
        {"high_freq_factor", m.rope_scaling->high_freq_factor},
        {"original_max_position_embeddings", m.rope_scaling->original_max_position_embeddings}};
  if (classifier) j["num_labels"] = 2;
  return j.dump();
}

ModelSpec from_hf_config(const std::string& path) {
  return from_hf_config_text(json_fields::read_file(path, "model config", "config.json"), path);
}

}  // namespace duet
