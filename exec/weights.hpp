#pragma once
// Filling LlamaWeights: from a HuggingFace checkpoint (safetensors, one file or sharded), from a
// seed (vLLM's load_format = "dummy": the real shapes, seeded values, no files), and back to a
// safetensors file so that tests and the CUDA engine can produce checkpoints.
#include <cstdint>
#include <string>
#include <vector>

#include "core/model_spec.hpp"
#include "exec/llama_weights.hpp"
#include "kernels/dummy_value.hpp"

namespace duet {

// One tensor of a Llama checkpoint: its HuggingFace name and the shape the ModelSpec implies.
struct LlamaTensorSpec {
  enum class Kind { Embedding, Norm, Projection, Bias };
  std::string name;
  std::vector<std::int64_t> shape;
  Kind kind = Kind::Projection;

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    return n;
  }
};

// Every tensor a checkpoint of `spec` holds, in HuggingFace's order (embeddings, layer by layer,
// final norm, LM head). lm_head.weight is left out when the embeddings are tied; a Qwen2 model's
// q, k and v biases follow their weights. A PRM with a score head has no LM head, but
// score.0.{weight,bias} and score.2.{weight,bias} (a classifier; transformers' nn.Sequential
// numbering: 1 is the ReLU) or v_head.summary.{weight,bias} (a value head).
std::vector<LlamaTensorSpec> llama_tensor_specs(const ModelSpec& spec);
// The tensors of `weights` in llama_tensor_specs order (weights.layers must hold every layer).
std::vector<const HostTensor*> llama_tensors(const LlamaWeights& weights);

// Loads `path` (see Checkpoint::open: a directory, an index or a safetensors file) into float32.
// Every expected tensor must be present with exactly the expected shape; BF16, F16 and F32 are
// all converted. Errors name the file and the tensor, and both shapes for a mismatch.
//   - Unexpected extra tensors are ignored (old exports carry rotary_emb.inv_freq buffers, PRMs
//     may carry heads), except layers beyond spec.num_layers: a checkpoint with more layers than
//     the config is a wrong config, and loading a prefix of it would run silently wrong; and so
//     are q, k and v biases for a model without them (a Qwen2 checkpoint under a Llama config).
//   - A tied model (tie_word_embeddings) ignores a lm_head.weight in the checkpoint, as
//     transformers does: some exporters write the tied copy, and the config decides. lm_head
//     is then a copy of embed_tokens.
LlamaWeights load_llama_weights(const ModelSpec& spec, const std::string& path);

// Seeded values with the real shapes, deterministic for a seed on every platform (only 64-bit
// integer hashing, splitmix64's stream, and exact integer-to-double steps are used). Each tensor
// has its own stream, derived from the seed and its name, so any tensor (or any range of one) can
// be generated on its own.
// Scales keep activations O(1): projections uniform in [-1, 1] / sqrt(in_features), embeddings
// and biases uniform in [-0.1, 0.1], norm weights 1 + uniform in [-0.05, 0.05].
LlamaWeights dummy_llama_weights(const ModelSpec& spec, std::uint64_t seed);
HostTensor dummy_tensor(const LlamaTensorSpec& tensor, std::uint64_t seed);
// A tensor's stream and scale: element i of dummy_tensor is dummy_value(dummy_init(tensor, seed), i)
// (kernels/dummy_value.hpp), which the CUDA engine also computes on the device.
kernels::DummyInit dummy_init(const LlamaTensorSpec& tensor, std::uint64_t seed);

// Writes `weights` as one safetensors file at `path` (or, sharded, into directory `dir`) with
// HuggingFace names, converting to `dtype` (bf16 and f16 round to nearest even). A tied model
// writes no lm_head.weight. Throws duet::Error when a tensor's shape or size does not match
// weights.spec.
void save_llama_weights(const LlamaWeights& weights, const std::string& path, DType dtype);
void save_llama_weights_sharded(const LlamaWeights& weights, const std::string& dir, DType dtype,
                                std::int64_t max_shard_bytes);

}  // namespace duet
