#pragma once
// bfloat16 on the host, as its 16 bits: the upper half of a float32. Checkpoint files, the CUDA
// engine's weight upload and its tests convert through these; device code has its own
// conversions (kernels/launch.cuh). Inline: an 8B model's upload converts 8e9 values.
#include <bit>
#include <cstdint>

namespace duet {

// Round to nearest, ties to even. A NaN stays a quiet NaN with its sign and top payload bits:
// truncating one whose payload lies only in the low 16 bits would give inf. Overflow gives inf,
// the correctly rounded result.
constexpr std::uint16_t float_to_bf16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((bits >> 16) | 0x0040u);
  // Adding 0x7fff, plus 1 when the kept part is odd, carries into the kept part exactly when the
  // dropped part is above half, or half with an odd kept part; a carry into the exponent is right.
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return std::uint16_t((bits + rounding) >> 16);
}

// Exact: every bfloat16 is a float32.
constexpr float bf16_to_float(std::uint16_t bits) { return std::bit_cast<float>(std::uint32_t(bits) << 16); }

}  // namespace duet
