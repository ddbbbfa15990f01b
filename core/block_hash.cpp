#include "core/block_hash.hpp"

#include "core/mix.hpp"

namespace duet {

BlockHash hash_block(BlockHash parent, std::span<const TokenId> tokens, std::uint32_t model_id) {
  std::uint64_t h = mix64(parent ^ (std::uint64_t(model_id) << 32 | tokens.size()));
  for (TokenId t : tokens) h = mix64(h ^ static_cast<std::uint32_t>(t));
  return h;
}

}  // namespace duet
