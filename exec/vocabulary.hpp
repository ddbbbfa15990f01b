#pragma once
// The token ids an engine's workload and executor must agree on: the reasoning-step separator,
// the end of a turn, and the PRM's "+"/"-" labels. One per engine, from its model's vocabulary.
#include <string>

#include "core/model_spec.hpp"
#include "core/types.hpp"

namespace duet {

struct Vocabulary {
  std::string name;  // "llama-3" or "duet-math"
  int vocab_size = 0;
  TokenId step_id = kNoToken;  // "\n\n"
  TokenId eos_id = kNoToken;   // the end of an assistant turn
  // The PRM's "+"/"-" tokens; for a model with a score head, its logits columns (score_columns).
  TokenId prm_plus_id = kNoToken;
  TokenId prm_minus_id = kNoToken;
};

// The columns of a score head's logits row whose two-way softmax is a step's score: a classifier's
// second label against its first (Qwen2.5-Math-PRM's model card reads probabilities[..., 1]); a
// value head's value against its constant 0, which gives the value's sigmoid (Skywork-o1-Open-PRM).
struct ScoreColumns {
  TokenId plus = kNoToken, minus = kNoToken;
};
ScoreColumns score_columns(ScoreHead head);

// Llama 3's ids for its 128,256-token vocabulary; otherwise the repository's sentencepiece model
// (workloads/data/tokenizer/duet-math.model under source_dir), whose ids must fit the model's
// vocabulary. Anything else is an error naming the engine.
Vocabulary vocabulary_of(const ModelSpec& model, const std::string& source_dir, const std::string& engine);

}  // namespace duet
