#pragma once
// The checks every real executor makes on a batch before computing it. A batch that breaks them
// is a scheduler bug (std::logic_error), except token ids outside the vocabulary, which come from
// the request (duet::Error).
#include "core/batch.hpp"
#include "core/kv_layout.hpp"

namespace duet {

void check_batch(const Batch& batch, const KvLayout& layout, int vocab_size, const char* executor);

}  // namespace duet
