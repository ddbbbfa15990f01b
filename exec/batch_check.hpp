#pragma once
// The checks every real executor makes on a batch before computing it. A batch that breaks them
// is a scheduler bug (std::logic_error), except token ids outside the vocabulary, which come from
// the request (duet::Error). A model that cannot generate (a score head) is never asked to sample:
// its engine refuses such sequences.
#include "core/batch.hpp"
#include "core/kv_layout.hpp"
#include "core/model_spec.hpp"
#include "core/types.hpp"

namespace duet {

void check_batch(const Batch& batch, const KvLayout& layout, const ModelSpec& model, const char* executor);

// The PRM's two label ids must be columns of the model's logits rows (the vocabulary, or a score
// head's two columns): checked once, when the executor is built. Throws duet::Error naming both.
void check_prm_label_ids(const ModelSpec& model, TokenId plus_id, TokenId minus_id, const char* executor);

}  // namespace duet
