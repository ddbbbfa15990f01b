#pragma once
// The checks every real executor makes on a batch before computing it. A batch that breaks them
// is a scheduler bug (std::logic_error), except token ids outside the vocabulary, which come from
// the request (duet::Error). A model that cannot generate (a score head) is never asked to sample:
// its engine refuses such sequences.
#include "core/batch.hpp"
#include "core/kv_layout.hpp"
#include "core/model_spec.hpp"

namespace duet {

void check_batch(const Batch& batch, const KvLayout& layout, const ModelSpec& model, const char* executor);

}  // namespace duet
