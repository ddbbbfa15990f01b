#pragma once
// The tokens and scores an OutputScript prescribes, shared by every executor that honours it.
#include <cstdint>

#include "core/mix.hpp"
#include "core/sequence.hpp"

namespace duet {

// Output token number `index` of `seq`: the stop token at stop_at, otherwise a token in
// [0, vocab_size) that is never one of the sequence's stop tokens.
TokenId scripted_token(const Sequence& seq, int index, int vocab_size);

// Score number `k` (in position order) of a Score sequence, in (0, 1).
float scripted_score(const Sequence& seq, int k, int position);

}  // namespace duet
