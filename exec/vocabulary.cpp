#include "exec/vocabulary.hpp"

#include <stdexcept>

#include "core/error.hpp"
#include "exec/tokenizer.hpp"

namespace duet {

namespace {

// meta-llama/Llama-3.1-8B-Instruct tokenizer.json: "\n\n" is 271 and <|eot_id|> 128009; the
// byte-level BPE numbers the printable ASCII characters from "!" = 0, so "+" is 10 and "-" 12.
constexpr int kLlama3VocabSize = 128256;
Vocabulary llama3() { return {"llama-3", kLlama3VocabSize, 271, 128009, 10, 12}; }

Vocabulary token_vocabulary(const ModelSpec& model, const std::string& source_dir,
                            const std::string& engine) {
  if (model.vocab_size == kLlama3VocabSize) return llama3();
  const std::string path = source_dir + "/workloads/data/tokenizer/duet-math.model";
  const Tokenizer t = Tokenizer::load(path);
  Vocabulary v{"duet-math", model.vocab_size,   t.step_separator_id(),
               t.eos_id(),  t.piece_to_id("+"), t.piece_to_id("-")};
  for (TokenId id : {v.step_id, v.eos_id, v.prm_plus_id, v.prm_minus_id})
    if (id < 0 || id >= model.vocab_size)
      throw Error("engine '" + engine + "': model " + model.name + " has a vocabulary of " +
                  std::to_string(model.vocab_size) + " tokens, which is neither Llama 3's (" +
                  std::to_string(kLlama3VocabSize) + ") nor large enough for " + path + "'s ids");
  return v;
}

}  // namespace

ScoreColumns score_columns(ScoreHead head) {
  switch (head) {
    case ScoreHead::Classifier:
      return {1, 0};
    case ScoreHead::Value:
      return {0, 1};
    case ScoreHead::None:
      break;
  }
  throw std::logic_error("score_columns: a model with an LM head scores two tokens' logits");
}

Vocabulary vocabulary_of(const ModelSpec& model, const std::string& source_dir, const std::string& engine) {
  Vocabulary v = token_vocabulary(model, source_dir, engine);
  if (!model.can_generate()) {
    const ScoreColumns c = score_columns(model.score_head);
    v.prm_plus_id = c.plus;
    v.prm_minus_id = c.minus;
  }
  return v;
}

}  // namespace duet
