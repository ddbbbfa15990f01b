#pragma once
// Plain identifiers shared by every layer.
#include <cstdint>
#include <limits>

namespace duet {

using TokenId = std::int32_t;
using BlockId = std::int32_t;
using SeqId = std::uint64_t;
using BlockHash = std::uint64_t;

inline constexpr BlockId kNoBlock = -1;
inline constexpr TokenId kNoToken = -1;

}  // namespace duet
