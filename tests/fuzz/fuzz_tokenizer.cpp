// libFuzzer target: the sentencepiece model loader. duet checks the protobuf wire format before
// sentencepiece parses the model; any input must give a tokenizer or a duet::Error. A model that
// loads must then encode and decode.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "exec/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    const duet::Tokenizer tok = duet::Tokenizer::from_bytes(bytes, "fuzz.model");
    const auto ids = tok.encode("Let x = 2.\n\nThen x^2 = 4.");
    (void)tok.decode(ids);
    for (duet::TokenId id = 0; id < tok.vocab_size() && id < 64; ++id) (void)tok.id_to_piece(id);
  } catch (const duet::Error&) {
  }
  return 0;
}
