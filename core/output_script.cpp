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

}  // namespace duet
