#include "exec/batch_check.hpp"

#include <stdexcept>
#include <string>

#include "core/error.hpp"

namespace duet {

void check_batch(const Batch& batch, const KvLayout& layout, const ModelSpec& model, const char* executor) {
  const std::string who = executor;
  const int vocab_size = model.vocab_size;
  for (const BlockCopy& c : batch.copies)
    if (c.src < 0 || c.src >= layout.num_blocks || c.dst < 0 || c.dst >= layout.num_blocks)
      throw std::logic_error(who + ": block copy outside the pool");
  for (const BatchItem& it : batch.items) {
    if (!it.seq) throw std::logic_error(who + ": batch item without a sequence");
    const Sequence& s = *it.seq;
    if (it.want == Want::Sample && !model.can_generate())
      throw std::logic_error(who + ": sequence " + std::to_string(s.id) + " samples, but model " +
                             model.name + " has a score head and no LM head");
    const int end = it.context_len + it.num_new_tokens;
    if (it.context_len < 0 || it.num_new_tokens <= 0 || end > s.num_tokens())
      throw std::logic_error(who + ": sequence " + std::to_string(s.id) + ": tokens [" +
                             std::to_string(it.context_len) + ", " + std::to_string(end) +
                             ") are not all known");
    if (std::int64_t(s.kv.blocks.size()) * layout.block_size < end)
      throw std::logic_error(who + ": sequence " + std::to_string(s.id) +
                             ": the block table covers fewer than " + std::to_string(end) + " slots");
    for (int b = 0; b < (end + layout.block_size - 1) / layout.block_size; ++b)
      if (s.kv.blocks[std::size_t(b)] < 0 || s.kv.blocks[std::size_t(b)] >= layout.num_blocks)
        throw std::logic_error(who + ": sequence " + std::to_string(s.id) + ": block " +
                               std::to_string(s.kv.blocks[std::size_t(b)]) + " is outside the pool");
    for (int p = it.context_len; p < end; ++p)
      if (s.tokens[std::size_t(p)] < 0 || s.tokens[std::size_t(p)] >= vocab_size)
        throw Error("sequence " + std::to_string(s.id) + ": token id " +
                    std::to_string(s.tokens[std::size_t(p)]) + " at position " + std::to_string(p) +
                    " is outside the vocabulary");
  }
}

void check_prm_label_ids(const ModelSpec& model, TokenId plus_id, TokenId minus_id, const char* executor) {
  const int width = model.logits_width();
  for (const TokenId id : {plus_id, minus_id})
    if (id < 0 || id >= width)
      throw Error(std::string(executor) + ": PRM label id " + std::to_string(id) + " is outside the " +
                  (model.can_generate() ? "vocabulary" : "score head's labels") + " of " +
                  std::to_string(width));
}

}  // namespace duet
