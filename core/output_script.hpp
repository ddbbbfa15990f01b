#pragma once
// The tokens and scores an OutputScript prescribes, shared by every executor that honours it.
#include <cstddef>
#include <cstdint>
#include <functional>

#include "core/batch.hpp"
#include "core/mix.hpp"
#include "core/sequence.hpp"

namespace duet {

// Output token number `index` of `seq`: the stop token at stop_at, otherwise a token in
// [0, vocab_size) that is never one of the sequence's stop tokens.
TokenId scripted_token(const Sequence& seq, int index, int vocab_size);

// Score number `k` (in position order) of a Score sequence, in (0, 1).
float scripted_score(const Sequence& seq, int k, int position);

// A real engine's StepResult tokens and scores for `batch`: per item, its token (Want::Sample,
// else kNoToken) and a score per position positions_to_score gives, from the engine's own
// sampler and PRM head, or from the sequence's script when honour_scripts and its script is
// forced (token number = output index, score number = index in score_positions, as the
// simulator numbers them). sampled(i) is asked only for an unscripted Sample item i, and
// scored(i, k) only for the k-th position to score of an unscripted item i.
using SampledToken = std::function<TokenId(std::size_t item)>;
using ScoredPosition = std::function<float(std::size_t item, std::size_t k)>;
StepResult step_outputs(const Batch& batch, bool honour_scripts, int vocab_size, const SampledToken& sampled,
                        const ScoredPosition& scored);

}  // namespace duet
