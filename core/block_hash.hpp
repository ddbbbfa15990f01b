#pragma once
// Chained content hashes of full KV blocks: a block's hash covers its parent's hash, its tokens
// and the model, so equal hashes mean (with high probability) equal prefixes. The pool never
// trusts a hash alone: every hit is verified against the stored tokens and the parent block.
#include <cstdint>
#include <span>

#include "core/types.hpp"

namespace duet {

using BlockHashFn = BlockHash (*)(BlockHash parent, std::span<const TokenId> tokens, std::uint32_t model_id);

// The hash of the empty prefix, the parent of a sequence's first block.
inline constexpr BlockHash kRootHash = 0x6475657400000000ULL;  // "duet"

// splitmix64's finalizer (core/mix.hpp) folded over the tokens, two 32-bit tokens per 64-bit step.
BlockHash hash_block(BlockHash parent, std::span<const TokenId> tokens, std::uint32_t model_id);

}  // namespace duet
