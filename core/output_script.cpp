#include "core/output_script.hpp"

#include <algorithm>

namespace duet {

TokenId scripted_token(const Sequence& seq, int index, int vocab_size) {
  const OutputScript& s = seq.script;
  if (index == s.stop_at) return s.stop_token;
  const auto& stops = seq.sampling.stop_token_ids;
  TokenId t = TokenId(mix64(s.seed ^ (std::uint64_t(index) << 32)) % std::uint64_t(vocab_size));
  // Step past stop tokens (and the scripted one) so that only stop_at ends the sequence.
  for (int guard = 0; guard < vocab_size; ++guard) {
    if (t != s.stop_token && std::find(stops.begin(), stops.end(), t) == stops.end()) break;
    t = (t + 1) % vocab_size;
  }
  return t;
}

float scripted_score(const Sequence& seq, int k, int position) {
  const OutputScript& s = seq.script;
  if (k >= 0 && std::size_t(k) < s.scores.size()) return s.scores[std::size_t(k)];
  const std::uint64_t h = mix64(s.seed ^ 0x5c0e5c0e00000000ULL ^ std::uint64_t(position));
  return float((double(h >> 11) + 0.5) * 0x1.0p-53);
}

StepResult step_outputs(const Batch& batch, bool honour_scripts, int vocab_size, const SampledToken& sampled,
                        const ScoredPosition& scored) {
  StepResult r;
  r.tokens.reserve(batch.items.size());
  for (std::size_t i = 0; i < batch.items.size(); ++i) {
    const BatchItem& it = batch.items[i];
    const Sequence& s = *it.seq;
    const bool scripted = honour_scripts && s.script.force;
    TokenId token = kNoToken;
    if (it.want == Want::Sample)
      token = scripted ? scripted_token(s, s.num_output_tokens(), vocab_size) : sampled(i);
    r.tokens.push_back(token);
    const auto positions = positions_to_score(it);
    const int first = positions.empty() ? 0 : int(positions.data() - s.score_positions.data());
    for (std::size_t k = 0; k < positions.size(); ++k)
      r.scores.push_back(scripted ? scripted_score(s, first + int(k), positions[k]) : scored(i, k));
  }
  return r;
}

}  // namespace duet
