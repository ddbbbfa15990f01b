#include "exec/weights.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>
#include <type_traits>

#include "core/error.hpp"
#include "core/mix.hpp"
#include "exec/safetensors.hpp"

namespace duet {

namespace {

using Kind = LlamaTensorSpec::Kind;

// The tensors of `w` in llama_tensor_specs order; HostTensor* or const HostTensor* after W.
// w.layers must already hold spec.num_layers layers.
template <typename W>
auto tensor_slots(W& w) {
  using Slot = std::conditional_t<std::is_const_v<W>, const HostTensor*, HostTensor*>;
  std::vector<Slot> slots{&w.embed_tokens};
  for (auto& l : w.layers) {
    if (w.spec.qkv_bias)
      slots.insert(slots.end(),
                   {&l.input_norm, &l.q_proj, &l.q_bias, &l.k_proj, &l.k_bias, &l.v_proj, &l.v_bias});
    else slots.insert(slots.end(), {&l.input_norm, &l.q_proj, &l.k_proj, &l.v_proj});
    if (w.spec.qk_norm) slots.insert(slots.end(), {&l.q_norm, &l.k_norm});
    slots.insert(slots.end(), {&l.o_proj, &l.post_norm, &l.gate_proj, &l.up_proj, &l.down_proj});
  }
  slots.push_back(&w.final_norm);
  if (w.spec.score_head == ScoreHead::Classifier)
    slots.insert(slots.end(), {&w.score_hidden, &w.score_hidden_bias, &w.score_out, &w.score_out_bias});
  else if (w.spec.score_head == ScoreHead::Value)
    slots.insert(slots.end(), {&w.score_out, &w.score_out_bias});
  else if (!w.spec.tie_word_embeddings) slots.push_back(&w.lm_head);
  return slots;
}

HostTensor load_tensor(const Checkpoint& ckpt, const LlamaTensorSpec& t, const std::string& model) {
  const TensorView* view = ckpt.find(t.name);
  if (!view)
    throw Error("missing tensor " + in_quotes(t.name) + " in " + ckpt.describe() + " (model " +
                in_quotes(model) + " expects shape " + shape_string(t.shape) + ")");
  if (view->shape != t.shape)
    throw Error(ckpt.file_of(t.name) + ": tensor " + in_quotes(t.name) + " has shape " +
                shape_string(view->shape) + ", model " + in_quotes(model) + " expects " +
                shape_string(t.shape));
  HostTensor out{t.shape, to_float_vector(*view)};
  // A NaN or an infinity in a weight turns every logit it reaches into NaN: the engine would run
  // and sample nonsense (a NaN PRM score) without a word.
  const auto bad = std::find_if(out.data.begin(), out.data.end(), [](float v) { return !std::isfinite(v); });
  if (bad != out.data.end())
    throw Error(ckpt.file_of(t.name) + ": tensor " + in_quotes(t.name) + " holds " +
                (std::isnan(*bad) ? "NaN" : "an infinity") + " at element " +
                std::to_string(bad - out.data.begin()) + " (of " + std::to_string(out.data.size()) + ")");
  return out;
}

// A checkpoint with more layers than the config means the wrong config; loading its first
// layers only would run without complaint and compute nonsense. So do q, k or v biases, or q and k
// head norms, where the config names a model without them (a Qwen2 or Qwen3 checkpoint under a
// Llama config).
void check_no_foreign_tensors(const ModelSpec& spec, const Checkpoint& ckpt) {
  constexpr std::string_view prefix = "model.layers.";
  for (const std::string& name : ckpt.names()) {
    if (!name.starts_with(prefix)) continue;
    if (!spec.qkv_bias &&
        (name.ends_with(".self_attn.q_proj.bias") || name.ends_with(".self_attn.k_proj.bias") ||
         name.ends_with(".self_attn.v_proj.bias")))
      throw Error(ckpt.file_of(name) + ": tensor " + in_quotes(name) + " is a q, k or v bias, but model " +
                  in_quotes(spec.name) +
                  " has none (a Qwen2 checkpoint needs its config.json: Qwen2ForCausalLM)");
    if (!spec.qk_norm &&
        (name.ends_with(".self_attn.q_norm.weight") || name.ends_with(".self_attn.k_norm.weight")))
      throw Error(ckpt.file_of(name) + ": tensor " + in_quotes(name) + " is a q or k head norm, but model " +
                  in_quotes(spec.name) +
                  " has none (a Qwen3 checkpoint needs its config.json: Qwen3ForCausalLM)");
    const char* first = name.data() + prefix.size();
    const char* last = name.data() + name.size();
    long long layer = 0;
    const auto [end, ec] = std::from_chars(first, last, layer);
    if (ec != std::errc() || end == last || *end != '.') continue;  // not "model.layers.N.<...>"
    if (layer >= spec.num_layers)
      throw Error(ckpt.file_of(name) + ": tensor " + in_quotes(name) + " belongs to layer " +
                  std::to_string(layer) + ", but model " + in_quotes(spec.name) + " has " +
                  std::to_string(spec.num_layers) + " layers (num_hidden_layers)");
  }
}

std::vector<TensorData> tensors_to_write(const LlamaWeights& w, DType dtype,
                                         std::vector<std::vector<std::byte>>& buffers) {
  const ModelSpec& spec = w.spec;
  spec.validate();
  if (w.layers.size() != std::size_t(spec.num_layers))
    throw Error("save_llama_weights: " + std::to_string(w.layers.size()) + " layers, model " +
                in_quotes(spec.name) + " has " + std::to_string(spec.num_layers));
  const std::vector<LlamaTensorSpec> specs = llama_tensor_specs(spec);
  const auto slots = tensor_slots(w);
  std::vector<TensorData> out;
  buffers.clear();
  buffers.reserve(specs.size());  // the spans below point into these buffers
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const HostTensor& t = *slots[i];
    if (t.shape != specs[i].shape || std::int64_t(t.data.size()) != specs[i].numel())
      throw Error("save_llama_weights: tensor " + in_quotes(specs[i].name) + " has shape " +
                  shape_string(t.shape) + " and " + std::to_string(t.data.size()) + " values, model " +
                  in_quotes(spec.name) + " expects " + shape_string(specs[i].shape));
    buffers.push_back(floats_to_bytes(t.data, dtype));
    out.push_back(TensorData{specs[i].name, dtype, specs[i].shape, buffers.back()});
  }
  return out;
}

// transformers refuses a safetensors checkpoint whose metadata lacks a known "format".
const std::map<std::string, std::string> kSaveMetadata = {{"format", "pt"}};

}  // namespace

std::vector<LlamaTensorSpec> llama_tensor_specs(const ModelSpec& spec) {
  const std::int64_t h = spec.hidden_size;
  const std::int64_t q = std::int64_t(spec.num_heads) * spec.head_dim;
  const std::int64_t kv = std::int64_t(spec.num_kv_heads) * spec.head_dim;
  const std::int64_t inter = spec.intermediate_size;
  const std::int64_t vocab = spec.vocab_size;
  std::vector<LlamaTensorSpec> specs{{"model.embed_tokens.weight", {vocab, h}, Kind::Embedding}};
  for (int i = 0; i < spec.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    specs.push_back({p + "input_layernorm.weight", {h}, Kind::Norm});
    for (const auto& [proj, rows] : {std::pair{"q_proj", q}, {"k_proj", kv}, {"v_proj", kv}}) {
      const std::string name = p + "self_attn." + proj;
      specs.push_back({name + ".weight", {rows, h}, Kind::Projection});
      if (spec.qkv_bias) specs.push_back({name + ".bias", {rows}, Kind::Bias});
    }
    if (spec.qk_norm)
      specs.insert(specs.end(), {{p + "self_attn.q_norm.weight", {spec.head_dim}, Kind::Norm},
                                 {p + "self_attn.k_norm.weight", {spec.head_dim}, Kind::Norm}});
    specs.insert(specs.end(), {{p + "self_attn.o_proj.weight", {h, q}, Kind::Projection},
                               {p + "post_attention_layernorm.weight", {h}, Kind::Norm},
                               {p + "mlp.gate_proj.weight", {inter, h}, Kind::Projection},
                               {p + "mlp.up_proj.weight", {inter, h}, Kind::Projection},
                               {p + "mlp.down_proj.weight", {h, inter}, Kind::Projection}});
  }
  specs.push_back({"model.norm.weight", {h}, Kind::Norm});
  if (spec.score_head == ScoreHead::Classifier) {
    specs.insert(specs.end(), {{"score.0.weight", {h, h}, Kind::Projection},
                               {"score.0.bias", {h}, Kind::Bias},
                               {"score.2.weight", {2, h}, Kind::Projection},
                               {"score.2.bias", {2}, Kind::Bias}});
  } else if (spec.score_head == ScoreHead::Value) {
    specs.insert(specs.end(), {{"v_head.summary.weight", {1, h}, Kind::Projection},
                               {"v_head.summary.bias", {1}, Kind::Bias}});
  } else if (!spec.tie_word_embeddings) {
    specs.push_back({"lm_head.weight", {vocab, h}, Kind::Projection});
  }
  return specs;
}

std::vector<const HostTensor*> llama_tensors(const LlamaWeights& weights) { return tensor_slots(weights); }

LlamaWeights load_llama_weights(const ModelSpec& spec, const std::string& path) {
  spec.validate();
  const Checkpoint ckpt = Checkpoint::open(path);
  check_no_foreign_tensors(spec, ckpt);
  // A PRM's checkpoint under a causal LM's config would score through the LM head (or the tied
  // embedding), which it was not trained to, without a word: say which config it needs.
  for (const ScoreHead kind : {ScoreHead::Classifier, ScoreHead::Value}) {
    const std::string head = kind == ScoreHead::Classifier ? "score.0.weight" : "v_head.summary.weight";
    if (spec.can_generate() && ckpt.find(head))
      throw Error(ckpt.file_of(head) + ": the checkpoint has a score head (" + head + "), but model " +
                  in_quotes(spec.name) + " is a causal LM (such a PRM needs its config.json: " +
                  score_head_architecture(kind) + ")");
  }
  LlamaWeights w;
  w.spec = spec;
  w.layers.resize(std::size_t(spec.num_layers));
  const std::vector<LlamaTensorSpec> specs = llama_tensor_specs(spec);
  const auto slots = tensor_slots(w);
  for (std::size_t i = 0; i < specs.size(); ++i) *slots[i] = load_tensor(ckpt, specs[i], spec.name);
  if (spec.tie_word_embeddings && spec.can_generate()) w.lm_head = w.embed_tokens;
  return w;
}

kernels::DummyInit dummy_init(const LlamaTensorSpec& tensor, std::uint64_t seed) {
  kernels::DummyInit t;
  t.key = mix64(seed) ^ fnv1a64(tensor.name);
  // 1/sqrt(in_features) keeps y = W x at the scale of x (variance x 1/3); the embedding scale is
  // arbitrary as RMSNorm follows it, but keeps tied logits moderate.
  t.scale = tensor.kind == Kind::Projection ? 1.0 / std::sqrt(double(tensor.shape.at(1)))
            : tensor.kind == Kind::Embedding || tensor.kind == Kind::Bias ? 0.1
                                                                          : 0.05;
  t.offset = tensor.kind == Kind::Norm ? 1.0 : 0.0;
  return t;
}

HostTensor dummy_tensor(const LlamaTensorSpec& tensor, std::uint64_t seed) {
  const kernels::DummyInit init = dummy_init(tensor, seed);
  HostTensor out{tensor.shape, std::vector<float>(std::size_t(tensor.numel()))};
  for (std::size_t i = 0; i < out.data.size(); ++i) out.data[i] = kernels::dummy_value(init, i);
  return out;
}

LlamaWeights dummy_llama_weights(const ModelSpec& spec, std::uint64_t seed) {
  spec.validate();
  LlamaWeights w;
  w.spec = spec;
  w.layers.resize(std::size_t(spec.num_layers));
  const std::vector<LlamaTensorSpec> specs = llama_tensor_specs(spec);
  const auto slots = tensor_slots(w);
  for (std::size_t i = 0; i < specs.size(); ++i) *slots[i] = dummy_tensor(specs[i], seed);
  if (spec.tie_word_embeddings && spec.can_generate()) w.lm_head = w.embed_tokens;
  return w;
}

void save_llama_weights(const LlamaWeights& weights, const std::string& path, DType dtype) {
  std::vector<std::vector<std::byte>> buffers;
  write_safetensors(path, tensors_to_write(weights, dtype, buffers), kSaveMetadata);
}

void save_llama_weights_sharded(const LlamaWeights& weights, const std::string& dir, DType dtype,
                                std::int64_t max_shard_bytes) {
  std::vector<std::vector<std::byte>> buffers;
  write_safetensors_sharded(dir, tensors_to_write(weights, dtype, buffers), max_shard_bytes, kSaveMetadata);
}

}  // namespace duet
