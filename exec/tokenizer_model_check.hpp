#pragma once
// Checks on a sentencepiece model's bytes before sentencepiece reads them: the library trusts its
// input, and some malformed models load and then misbehave (a truncated model tokenizes with
// default settings; a broken normalizer table reads past its buffer on every encode).
#include <string>
#include <string_view>

namespace duet {

// An empty string when the bytes are a whole model whose normalizer tables are sound, else why not.
std::string check_tokenizer_model(std::string_view bytes);

}  // namespace duet
