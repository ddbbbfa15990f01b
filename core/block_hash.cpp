#include "core/block_hash.hpp"

#include "core/mix.hpp"

namespace duet {

BlockHash hash_block(BlockHash parent, std::span<const TokenId> tokens, std::uint32_t model_id) {
  std::uint64_t h = mix64(parent ^ (std::uint64_t(model_id) << 32 | tokens.size()));
  // Two 32-bit tokens per 64-bit step: half the rounds of one token per step, and as injective.
  // (Hashing was the simulator's largest cost after the index: 14% of a trace replay, perf.)
  std::size_t i = 0;
  for (; i + 1 < tokens.size(); i += 2) {
    const std::uint64_t pair = std::uint64_t(static_cast<std::uint32_t>(tokens[i + 1])) << 32 |
                               static_cast<std::uint32_t>(tokens[i]);
    h = mix64(h ^ pair);
  }
  if (i < tokens.size()) h = mix64(h ^ static_cast<std::uint32_t>(tokens[i]));
  return h;
}

}  // namespace duet
