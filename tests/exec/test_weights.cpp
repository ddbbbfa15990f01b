// Llama weights: the expected tensor list, save/load round trips (f32, bf16, sharded; tied and
// untied), the loader's error messages (missing tensor, wrong shape, missing shard, extra
// layers) and the seeded dummy weights (deterministic, seed-dependent, right shapes and scales).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "exec/safetensors.hpp"
#include "exec/weights.hpp"
#include "tests/support/test_support.hpp"

namespace duet {
namespace {

using test_support::contains;
using test_support::error_of;
using test_support::TempDir;

namespace fs = std::filesystem;

ModelSpec tiny_spec(bool tied, bool qkv_bias = false) {
  ModelSpec m;
  m.name = "tiny";
  m.num_layers = 2;
  m.hidden_size = 64;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.head_dim = 16;
  m.intermediate_size = 128;
  m.vocab_size = 256;
  m.max_position_embeddings = 512;
  m.tie_word_embeddings = tied;
  m.qkv_bias = qkv_bias;
  return m;
}

// Every tensor of `w` with its HuggingFace name; lm_head always (a copy when tied), or the score head.
std::vector<std::pair<std::string, const HostTensor*>> all_tensors(const LlamaWeights& w) {
  std::vector<std::pair<std::string, const HostTensor*>> out{{"model.embed_tokens.weight", &w.embed_tokens}};
  for (std::size_t i = 0; i < w.layers.size(); ++i) {
    const LlamaLayerWeights& l = w.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    if (w.spec.qkv_bias)
      out.insert(out.end(), {{p + "self_attn.q_proj.bias", &l.q_bias},
                             {p + "self_attn.k_proj.bias", &l.k_bias},
                             {p + "self_attn.v_proj.bias", &l.v_bias}});
    if (w.spec.qk_norm)
      out.insert(out.end(),
                 {{p + "self_attn.q_norm.weight", &l.q_norm}, {p + "self_attn.k_norm.weight", &l.k_norm}});
    out.insert(out.end(), {{p + "input_layernorm.weight", &l.input_norm},
                           {p + "self_attn.q_proj.weight", &l.q_proj},
                           {p + "self_attn.k_proj.weight", &l.k_proj},
                           {p + "self_attn.v_proj.weight", &l.v_proj},
                           {p + "self_attn.o_proj.weight", &l.o_proj},
                           {p + "post_attention_layernorm.weight", &l.post_norm},
                           {p + "mlp.gate_proj.weight", &l.gate_proj},
                           {p + "mlp.up_proj.weight", &l.up_proj},
                           {p + "mlp.down_proj.weight", &l.down_proj}});
  }
  out.emplace_back("model.norm.weight", &w.final_norm);
  if (w.spec.score_head == ScoreHead::Classifier)
    out.insert(out.end(), {{"score.0.weight", &w.score_hidden},
                           {"score.0.bias", &w.score_hidden_bias},
                           {"score.2.weight", &w.score_out},
                           {"score.2.bias", &w.score_out_bias}});
  else if (w.spec.score_head == ScoreHead::Value)
    out.insert(out.end(),
               {{"v_head.summary.weight", &w.score_out}, {"v_head.summary.bias", &w.score_out_bias}});
  else out.emplace_back("lm_head.weight", &w.lm_head);
  return out;
}

void expect_equal_weights(const LlamaWeights& a, const LlamaWeights& b) {
  const auto ta = all_tensors(a);
  const auto tb = all_tensors(b);
  ASSERT_EQ(ta.size(), tb.size());
  for (std::size_t i = 0; i < ta.size(); ++i) {
    EXPECT_EQ(ta[i].second->shape, tb[i].second->shape) << ta[i].first;
    EXPECT_EQ(ta[i].second->data, tb[i].second->data) << ta[i].first;
  }
}

// `w` with every value rounded through bf16, what a bf16 checkpoint of it holds.
LlamaWeights rounded_to_bf16(LlamaWeights w) {
  for (const auto& [name, tensor] : all_tensors(w))
    for (float& v : const_cast<HostTensor*>(tensor)->data) v = bf16_to_float(float_to_bf16(v));
  return w;
}

// The tensors of `w` as f32 TensorData, without `skip`, plus `extra` (name, shape) zero tensors.
struct RawCheckpoint {
  std::vector<std::vector<std::byte>> buffers;
  std::vector<TensorData> tensors;
};

RawCheckpoint raw_tensors(const LlamaWeights& w, const std::string& skip,
                          const std::vector<std::pair<std::string, std::vector<std::int64_t>>>& extra = {}) {
  RawCheckpoint raw;
  raw.buffers.reserve(64);
  for (const LlamaTensorSpec& t : llama_tensor_specs(w.spec)) {
    if (t.name == skip) continue;
    for (const auto& [name, tensor] : all_tensors(w))
      if (name == t.name) raw.buffers.push_back(floats_to_bytes(tensor->data, DType::F32));
    raw.tensors.push_back({t.name, DType::F32, t.shape, raw.buffers.back()});
  }
  for (const auto& [name, shape] : extra) {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    raw.buffers.emplace_back(std::size_t(n) * 4);
    raw.tensors.push_back({name, DType::F32, shape, raw.buffers.back()});
  }
  return raw;
}

// --- The tensor list -----------------------------------------------------------------------------

TEST(Weights, TensorSpecsCoverTheModelsParameters) {
  for (bool tied : {false, true}) {
    const ModelSpec spec = tiny_spec(tied);
    const auto specs = llama_tensor_specs(spec);
    EXPECT_EQ(specs.size(), std::size_t(1 + 9 * spec.num_layers + 1 + (tied ? 0 : 1)));
    std::int64_t params = 0;
    for (const LlamaTensorSpec& t : specs) {
      std::int64_t n = 1;
      for (std::int64_t d : t.shape) n *= d;
      params += n;
    }
    EXPECT_EQ(params, spec.num_parameters());  // agrees with core's count
    EXPECT_EQ(specs.front().name, "model.embed_tokens.weight");
    EXPECT_EQ(specs[3].name, "model.layers.0.self_attn.k_proj.weight");
    EXPECT_EQ(specs[3].shape, (std::vector<std::int64_t>{32, 64}));
    EXPECT_EQ(specs[5].shape, (std::vector<std::int64_t>{64, 64}));  // o_proj [hidden, heads*head_dim]
    EXPECT_EQ(specs.back().name, tied ? "model.norm.weight" : "lm_head.weight");
  }
}

// Qwen2's q, k and v biases follow their weights, and count in core's parameters.
TEST(Weights, QkvBiasesFollowTheirProjections) {
  const ModelSpec spec = tiny_spec(true, true);
  const auto specs = llama_tensor_specs(spec);
  EXPECT_EQ(specs.size(), std::size_t(1 + 12 * spec.num_layers + 1));
  std::int64_t params = 0;
  for (const LlamaTensorSpec& t : specs) params += t.numel();
  EXPECT_EQ(params, spec.num_parameters());
  EXPECT_EQ(spec.num_parameters() - tiny_spec(true).num_parameters(), 2 * (64 + 2 * 32));
  EXPECT_EQ(specs[3].name, "model.layers.0.self_attn.q_proj.bias");
  EXPECT_EQ(specs[3].shape, (std::vector<std::int64_t>{64}));
  EXPECT_EQ(specs[3].kind, LlamaTensorSpec::Kind::Bias);
  EXPECT_EQ(specs[7].name, "model.layers.0.self_attn.v_proj.bias");
  EXPECT_EQ(specs[7].shape, (std::vector<std::int64_t>{32}));
  EXPECT_EQ(specs[8].name, "model.layers.0.self_attn.o_proj.weight");
}

TEST(Weights, SaveLoadRoundTripWithQkvBiases) {
  TempDir dir;
  const LlamaWeights w = dummy_llama_weights(tiny_spec(true, true), 3);
  ASSERT_EQ(w.layers[1].k_bias.data.size(), 32u);
  save_llama_weights(w, dir.file("model.safetensors"), DType::F32);
  const LlamaWeights loaded = load_llama_weights(w.spec, dir.file("model.safetensors"));
  expect_equal_weights(w, loaded);
  // A Qwen2 checkpoint under a Llama config would lose its biases without a word: refused.
  ModelSpec llama = w.spec;
  llama.qkv_bias = false;
  try {
    load_llama_weights(llama, dir.file("model.safetensors"));
    ADD_FAILURE() << "loaded a Qwen2 checkpoint as a Llama";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a q, k or v bias, but model 'tiny' has none"), std::string::npos)
        << e.what();
  }
  // A Qwen2 checkpoint without its biases is a wrong config or a wrong file: named, not zero.
  const RawCheckpoint raw = raw_tensors(w, "model.layers.1.self_attn.v_proj.bias");
  write_safetensors(dir.file("nobias.safetensors"), raw.tensors);
  try {
    load_llama_weights(w.spec, dir.file("nobias.safetensors"));
    ADD_FAILURE() << "loaded without a bias";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor 'model.layers.1.self_attn.v_proj.bias'"),
              std::string::npos)
        << e.what();
  }
}

// Qwen3's q and k head norms: [head_dim] each after v_proj, counted in core's parameters, saved and
// loaded; under a config without them (a Llama's) the checkpoint is refused, not read without them.
TEST(Weights, QkHeadNormsRoundTripAndNeedTheirConfig) {
  ModelSpec spec = tiny_spec(true);
  spec.qk_norm = true;
  const auto specs = llama_tensor_specs(spec);
  std::int64_t params = 0;
  for (const LlamaTensorSpec& t : specs) params += t.numel();
  EXPECT_EQ(params, spec.num_parameters());
  EXPECT_EQ(spec.num_parameters() - tiny_spec(true).num_parameters(), 2 * (2 * 16));
  EXPECT_EQ(specs[5].name, "model.layers.0.self_attn.q_norm.weight");
  EXPECT_EQ(specs[6].name, "model.layers.0.self_attn.k_norm.weight");
  EXPECT_EQ(specs[6].shape, (std::vector<std::int64_t>{16}));
  EXPECT_EQ(specs[6].kind, LlamaTensorSpec::Kind::Norm);
  TempDir dir;
  const LlamaWeights w = dummy_llama_weights(spec, 5);
  save_llama_weights(w, dir.file("model.safetensors"), DType::F32);
  expect_equal_weights(w, load_llama_weights(spec, dir.file("model.safetensors")));
  try {
    load_llama_weights(tiny_spec(true), dir.file("model.safetensors"));
    ADD_FAILURE() << "loaded a Qwen3 checkpoint as a Llama";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("is a q or k head norm, but model 'tiny' has none (a Qwen3 checkpoint"),
        std::string::npos)
        << e.what();
  }
}

// A PRM's score head takes the LM head's place: Qwen2.5-Math-PRM's classifier with transformers'
// nn.Sequential names, Skywork-o1-Open-PRM's value head with its own.
TEST(Weights, AScoreHeadReplacesTheLmHead) {
  using Head = std::vector<std::pair<std::string, std::vector<std::int64_t>>>;
  const std::vector<std::tuple<ScoreHead, Head, std::string>> cases = {
      {ScoreHead::Classifier,
       {{"score.0.weight", {64, 64}},
        {"score.0.bias", {64}},
        {"score.2.weight", {2, 64}},
        {"score.2.bias", {2}}},
       "Qwen2ForProcessRewardModel"},
      {ScoreHead::Value,
       {{"v_head.summary.weight", {1, 64}}, {"v_head.summary.bias", {1}}},
       "Qwen2ForPrmModel"},
  };
  for (const auto& [kind, head, arch] : cases) {
    ModelSpec spec = tiny_spec(false, true);
    spec.score_head = kind;
    const auto specs = llama_tensor_specs(spec);
    std::int64_t params = 0;
    for (const LlamaTensorSpec& t : specs) params += t.numel();
    EXPECT_EQ(params, spec.num_parameters());
    ASSERT_GE(specs.size(), head.size() + 1);
    const std::size_t first = specs.size() - head.size();
    for (std::size_t i = 0; i < head.size(); ++i) {
      EXPECT_EQ(specs[first + i].name, head[i].first);
      EXPECT_EQ(specs[first + i].shape, head[i].second);
    }
    EXPECT_EQ(specs[first - 1].name, "model.norm.weight");
    EXPECT_EQ(specs.back().kind, LlamaTensorSpec::Kind::Bias);

    TempDir dir;
    const LlamaWeights w = dummy_llama_weights(spec, 4);
    EXPECT_TRUE(w.lm_head.data.empty());
    EXPECT_EQ(w.score_out_bias.data.size(), std::size_t(spec.score_labels()));
    save_llama_weights(w, dir.file("prm.safetensors"), DType::F32);
    expect_equal_weights(w, load_llama_weights(spec, dir.file("prm.safetensors")));
    // Under its decoder's causal-LM config, tied or not, the checkpoint would score through an LM
    // head it was not trained for: the error says which config it needs.
    ModelSpec lm = spec;
    lm.score_head = ScoreHead::None;
    for (bool tied : {false, true}) {
      lm.tie_word_embeddings = tied;
      const std::string msg = error_of([&] { load_llama_weights(lm, dir.file("prm.safetensors")); });
      EXPECT_TRUE(
          contains(msg, "has a score head (" + head[0].first + "), but model 'tiny' is a causal LM") &&
          contains(msg, arch))
          << msg;
    }
    lm.tie_word_embeddings = false;
    // A PRM config over a causal LM's checkpoint misses its head, by name.
    save_llama_weights(dummy_llama_weights(lm, 4), dir.file("lm.safetensors"), DType::F32);
    EXPECT_TRUE(contains(error_of([&] { load_llama_weights(spec, dir.file("lm.safetensors")); }),
                         "missing tensor '" + head[0].first + "'"));
  }
}

// --- Round trips ---------------------------------------------------------------------------------

TEST(Weights, SaveLoadRoundTripF32Untied) {
  TempDir dir;
  const LlamaWeights w = dummy_llama_weights(tiny_spec(false), 1);
  save_llama_weights(w, dir.file("model.safetensors"), DType::F32);
  const LlamaWeights loaded = load_llama_weights(w.spec, dir.file("model.safetensors"));
  expect_equal_weights(loaded, w);
  EXPECT_NE(loaded.lm_head.data, loaded.embed_tokens.data);
  const SafetensorsFile file = SafetensorsFile::open(dir.file("model.safetensors"));
  EXPECT_EQ(file.size(), 21u);  // 1 + 9 per layer + norm + lm_head
  EXPECT_EQ(file.metadata().at("format"), "pt");
}

// A weight that is NaN or infinite is refused at load, naming the file, the tensor and the element
// (it would otherwise turn every logit it reaches into NaN without a word).
TEST(Weights, ANonFiniteWeightIsRefusedAtLoad) {
  TempDir dir;
  LlamaWeights w = dummy_llama_weights(tiny_spec(false), 1);
  w.layers[1].down_proj.data[5] = std::numeric_limits<float>::quiet_NaN();
  save_llama_weights(w, dir.file("nan.safetensors"), DType::BF16);
  EXPECT_EQ(error_of([&] { load_llama_weights(w.spec, dir.file("nan.safetensors")); }),
            dir.file("nan.safetensors") +
                ": tensor 'model.layers.1.mlp.down_proj.weight' holds NaN at element 5 (of " +
                std::to_string(w.layers[1].down_proj.data.size()) + ")");
  w.layers[1].down_proj.data[5] = 0.5f;
  w.final_norm.data[0] = std::numeric_limits<float>::infinity();
  save_llama_weights(w, dir.file("inf.safetensors"), DType::F32);
  EXPECT_TRUE(contains(error_of([&] { load_llama_weights(w.spec, dir.file("inf.safetensors")); }),
                       "tensor 'model.norm.weight' holds an infinity at element 0"));
}

TEST(Weights, SaveLoadRoundTripBf16Tied) {
  TempDir dir;
  const LlamaWeights w = dummy_llama_weights(tiny_spec(true), 2);
  save_llama_weights(w, dir.file("model.safetensors"), DType::BF16);
  const LlamaWeights loaded =
      load_llama_weights(w.spec, dir.path().string());  // the directory's model.safetensors
  expect_equal_weights(loaded, rounded_to_bf16(w));
  EXPECT_EQ(loaded.lm_head.data, loaded.embed_tokens.data);
  const SafetensorsFile file = SafetensorsFile::open(dir.file("model.safetensors"));
  EXPECT_EQ(file.find("lm_head.weight"), nullptr);
  EXPECT_EQ(file.find("model.norm.weight")->dtype, DType::BF16);
}

TEST(Weights, SaveLoadRoundTripF16) {
  TempDir dir;
  const LlamaWeights w = dummy_llama_weights(tiny_spec(false), 3);
  save_llama_weights(w, dir.file("h.safetensors"), DType::F16);
  const LlamaWeights loaded = load_llama_weights(w.spec, dir.file("h.safetensors"));
  const float expected = f16_to_float(float_to_f16(w.layers[1].down_proj.data[17]));
  EXPECT_EQ(loaded.layers[1].down_proj.data[17], expected);
  EXPECT_NEAR(loaded.layers[1].down_proj.data[17], w.layers[1].down_proj.data[17], 1e-3);
}

TEST(Weights, SaveLoadRoundTripSharded) {
  TempDir dir;
  for (bool tied : {false, true}) {
    const LlamaWeights w = dummy_llama_weights(tiny_spec(tied), 4);
    const std::string ckpt = dir / (tied ? "tied" : "untied");
    save_llama_weights_sharded(w, ckpt, DType::F32, 64 * 1024);
    EXPECT_GE(Checkpoint::open(ckpt).files().size(), 3u);
    expect_equal_weights(load_llama_weights(w.spec, ckpt), w);
  }
}

TEST(Weights, TiedModelIgnoresAnLmHeadInTheCheckpoint) {
  TempDir dir;
  const LlamaWeights untied = dummy_llama_weights(tiny_spec(false), 5);
  save_llama_weights(untied, dir.file("model.safetensors"), DType::F32);
  const LlamaWeights tied = load_llama_weights(tiny_spec(true), dir.file("model.safetensors"));
  EXPECT_EQ(tied.lm_head.data, untied.embed_tokens.data);
  EXPECT_NE(tied.lm_head.data, untied.lm_head.data);
}

// --- Loader errors -------------------------------------------------------------------------------

TEST(Weights, MissingTensorIsNamedWithTheFile) {
  TempDir dir;
  const LlamaWeights w = dummy_llama_weights(tiny_spec(false), 6);
  const RawCheckpoint raw = raw_tensors(w, "model.layers.1.mlp.up_proj.weight");
  write_safetensors(dir.file("model.safetensors"), raw.tensors);
  EXPECT_EQ(error_of([&] { load_llama_weights(w.spec, dir.file("model.safetensors")); }),
            "missing tensor 'model.layers.1.mlp.up_proj.weight' in " + dir.file("model.safetensors") +
                " (model 'tiny' expects shape [128, 64])");
  // An untied model needs lm_head.weight, which a tied checkpoint does not have.
  save_llama_weights(dummy_llama_weights(tiny_spec(true), 6), dir.file("tied.safetensors"), DType::BF16);
  EXPECT_TRUE(contains(error_of([&] { load_llama_weights(tiny_spec(false), dir.file("tied.safetensors")); }),
                       "missing tensor 'lm_head.weight' in " + dir.file("tied.safetensors")));
  // In a sharded checkpoint the message names the checkpoint and its index.
  write_safetensors_sharded(dir.file("sharded"), raw.tensors, 64 * 1024);
  EXPECT_TRUE(contains(error_of([&] { load_llama_weights(w.spec, dir.file("sharded")); }),
                       "missing tensor 'model.layers.1.mlp.up_proj.weight' in checkpoint " +
                           dir.file("sharded") + " (index " +
                           dir.file("sharded/model.safetensors.index.json") + ")"));
}

TEST(Weights, WrongShapeNamesTheShardAndBothShapes) {
  TempDir dir;
  const LlamaWeights w = dummy_llama_weights(tiny_spec(false), 7);
  save_llama_weights_sharded(w, dir.file("ckpt"), DType::BF16, 32 * 1024);
  ModelSpec narrower = tiny_spec(false);
  narrower.intermediate_size = 96;
  const Checkpoint ckpt = Checkpoint::open(dir.file("ckpt"));
  const std::string shard = ckpt.file_of("model.layers.0.mlp.gate_proj.weight");
  EXPECT_TRUE(contains(shard, "model-0000")) << shard;
  EXPECT_EQ(error_of([&] { load_llama_weights(narrower, dir.file("ckpt")); }),
            shard +
                ": tensor 'model.layers.0.mlp.gate_proj.weight' has shape [128, 64], model 'tiny' expects "
                "[96, 64]");
  ModelSpec bigger_vocab = tiny_spec(false);
  bigger_vocab.vocab_size = 300;
  EXPECT_TRUE(
      contains(error_of([&] { load_llama_weights(bigger_vocab, dir.file("ckpt")); }),
               "tensor 'model.embed_tokens.weight' has shape [256, 64], model 'tiny' expects [300, 64]"));
}

TEST(Weights, MissingShardNamesTheIndexAndTheShard) {
  TempDir dir;
  const LlamaWeights w = dummy_llama_weights(tiny_spec(false), 8);
  save_llama_weights_sharded(w, dir.file("ckpt"), DType::BF16, 32 * 1024);
  const std::string index = dir.file("ckpt/model.safetensors.index.json");
  const Checkpoint ckpt = Checkpoint::open(dir.file("ckpt"));
  const std::string shard = ckpt.file_of("model.layers.1.mlp.up_proj.weight");
  fs::remove(shard);
  const std::string message = error_of([&] { load_llama_weights(w.spec, dir.file("ckpt")); });
  EXPECT_TRUE(contains(message, index + ": shard '" + fs::path(shard).filename().string() + "'")) << message;
  EXPECT_TRUE(contains(message, "is missing: no file " + shard)) << message;
}

TEST(Weights, ExtraTensorsAreIgnoredButExtraLayersAreNot) {
  TempDir dir;
  const LlamaWeights w = dummy_llama_weights(tiny_spec(false), 9);
  // Older exports carry RoPE buffers; PRMs may carry a value head.
  const RawCheckpoint extras =
      raw_tensors(w, "", {{"model.layers.0.self_attn.rotary_emb.inv_freq", {8}}, {"score.weight", {1, 64}}});
  write_safetensors(dir.file("extras.safetensors"), extras.tensors);
  expect_equal_weights(load_llama_weights(w.spec, dir.file("extras.safetensors")), w);
  const RawCheckpoint deeper = raw_tensors(w, "", {{"model.layers.2.input_layernorm.weight", {64}}});
  write_safetensors(dir.file("deeper.safetensors"), deeper.tensors);
  EXPECT_EQ(error_of([&] { load_llama_weights(w.spec, dir.file("deeper.safetensors")); }),
            dir.file("deeper.safetensors") +
                ": tensor 'model.layers.2.input_layernorm.weight' belongs to layer 2, but model 'tiny' has 2 "
                "layers "
                "(num_hidden_layers)");
}

TEST(Weights, InvalidSpecOrMissingPathIsAnError) {
  TempDir dir;
  ModelSpec bad = tiny_spec(false);
  bad.num_kv_heads = 3;
  EXPECT_TRUE(contains(error_of([&] { dummy_llama_weights(bad, 0); }), "num_key_value_heads"));
  EXPECT_TRUE(
      contains(error_of([&] { load_llama_weights(tiny_spec(false), dir.file("absent")); }), "absent"));
}

TEST(Weights, SaveRejectsTensorsThatDoNotMatchTheSpec) {
  TempDir dir;
  LlamaWeights w = dummy_llama_weights(tiny_spec(false), 10);
  w.layers[1].v_proj.data.pop_back();
  EXPECT_TRUE(contains(error_of([&] { save_llama_weights(w, dir.file("x.safetensors"), DType::F32); }),
                       "tensor 'model.layers.1.self_attn.v_proj.weight' has shape [32, 64] and 2047 values"));
  w.layers.pop_back();
  EXPECT_TRUE(contains(error_of([&] { save_llama_weights(w, dir.file("x.safetensors"), DType::F32); }),
                       "1 layers, model 'tiny' has 2"));
}

// --- Dummy weights -------------------------------------------------------------------------------

TEST(Weights, DummyWeightsHaveTheRealShapesAndSensibleScales) {
  const ModelSpec spec = tiny_spec(false, true);
  const LlamaWeights w = dummy_llama_weights(spec, 42);
  const auto specs = llama_tensor_specs(spec);
  for (const auto& [name, tensor] : all_tensors(w)) {
    const LlamaTensorSpec* t = nullptr;
    for (const auto& s : specs)
      if (s.name == name) t = &s;
    ASSERT_NE(t, nullptr) << name;
    ASSERT_EQ(tensor->shape, t->shape) << name;
    ASSERT_EQ(tensor->data.size(), std::size_t(tensor->rows() * tensor->cols())) << name;
    double lo = 1e9, hi = -1e9, sum = 0;
    for (float v : tensor->data) {
      lo = std::min(lo, double(v));
      hi = std::max(hi, double(v));
      sum += v;
    }
    const double mean = sum / double(tensor->data.size());
    if (t->kind == LlamaTensorSpec::Kind::Norm) {
      EXPECT_GE(lo, 0.95) << name;
      EXPECT_LE(hi, 1.05) << name;
      EXPECT_NEAR(mean, 1.0, 0.01) << name;
    } else if (t->kind == LlamaTensorSpec::Kind::Bias) {  // too few values for the range and mean checks
      EXPECT_GE(lo, -0.1) << name;
      EXPECT_LE(hi, 0.1) << name;
      EXPECT_GT(hi - lo, 0.0) << name;
    } else {
      const double a =
          t->kind == LlamaTensorSpec::Kind::Projection ? 1.0 / std::sqrt(double(t->shape[1])) : 0.1;
      EXPECT_GE(lo, -a) << name;
      EXPECT_LE(hi, a) << name;
      EXPECT_GT(hi - lo, 1.9 * a) << name;  // the whole range is used
      EXPECT_NEAR(mean, 0.0, 0.05 * a) << name;
    }
  }
}

TEST(Weights, DummyWeightsAreDeterministicAndSeedDependent) {
  const ModelSpec spec = tiny_spec(true);
  const LlamaWeights a = dummy_llama_weights(spec, 123);
  expect_equal_weights(dummy_llama_weights(spec, 123), a);
  const LlamaWeights b = dummy_llama_weights(spec, 124);
  const auto ta = all_tensors(a);
  const auto tb = all_tensors(b);
  for (std::size_t i = 0; i < ta.size(); ++i)
    EXPECT_NE(ta[i].second->data, tb[i].second->data) << ta[i].first;
  // Tensors of the same shape differ too: each has its own stream.
  EXPECT_NE(a.layers[0].gate_proj.data, a.layers[0].up_proj.data);
  EXPECT_NE(a.layers[0].q_proj.data, a.layers[1].q_proj.data);
  EXPECT_EQ(a.lm_head.data, a.embed_tokens.data);
  // Any tensor can be produced on its own.
  const auto specs = llama_tensor_specs(spec);
  EXPECT_EQ(dummy_tensor(specs[7], 123).data, a.layers[0].gate_proj.data);
}

TEST(Weights, DummyWeightsArePinnedAcrossPlatforms) {
  // Values from splitmix64's stream (core/mix.hpp) with exact integer-to-double steps: the same on
  // every platform and compiler. A change here changes every dummy-weight experiment.
  const LlamaTensorSpec q{
      "model.layers.0.self_attn.q_proj.weight", {4, 4}, LlamaTensorSpec::Kind::Projection};
  const std::vector<float> got = dummy_tensor(q, 0).data;
  const std::vector<float> expected = {-0x1.980bdcp-2f, 0x1.b0c7eap-4f,  0x1.848ff4p-6f, 0x1.55d85ep-2f,
                                       0x1.ce4cp-2f,    -0x1.8060a4p-3f, 0x1.45ab3p-3f,  0x1.8ef9ecp-3f,
                                       -0x1.9be0c2p-3f, 0x1.75bb82p-2f,  0x1.2048c4p-3f, -0x1.4ae00ep-2f,
                                       -0x1.498276p-2f, 0x1.d678p-5f,    0x1.b3a09p-3f,  0x1.a2be3p-2f};
  EXPECT_EQ(got, expected);
}

}  // namespace
}  // namespace duet
