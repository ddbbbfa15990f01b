#include "core/batch.hpp"

#include <algorithm>

namespace duet {

std::span<const int> positions_to_score(const BatchItem& item) {
  if (item.want != Want::Score) return {};
  const auto pending = item.seq->unscored_positions();
  const auto first = std::lower_bound(pending.begin(), pending.end(), item.context_len);
  const auto last = std::lower_bound(first, pending.end(), item.context_len + item.num_new_tokens);
  return {first, last};
}

void add_prefill_chunk(BatchShape& s, int new_tokens, std::int64_t context) {
  const double n = new_tokens;
  s.prefill_tokens += new_tokens;
  ++s.prefill_seqs;
  s.prefill_context_tokens += context;
  s.prefill_attention_keys += n * double(context) + n * (n + 1.0) / 2.0;
  s.prefill_tokens_squared += n * n;
}

void add_decode(BatchShape& s, std::int64_t context) {
  ++s.decode_tokens;
  ++s.decode_seqs;
  s.decode_context_tokens += context;
}

BatchShape shape_of(const Batch& batch) {
  BatchShape s;
  s.copies = static_cast<int>(batch.copies.size());
  for (const BatchItem& it : batch.items) {
    if (it.is_decode) add_decode(s, it.context_len);
    else add_prefill_chunk(s, it.num_new_tokens, it.context_len);
    if (it.want == Want::Sample) s.logit_rows += 1;
    if (it.want == Want::Score) s.logit_rows += int(positions_to_score(it).size());
  }
  return s;
}

}  // namespace duet
