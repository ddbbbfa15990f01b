// The host's float32 <-> bfloat16 conversions (core/bf16.hpp): round to nearest with ties to
// even, against a reference rounding in double; NaN, infinities, signed zeros and subnormals; and
// every bfloat16 surviving the round trip.
#include "core/bf16.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace duet {
namespace {

TEST(Bf16, RoundsToNearestTiesToEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80);             // tie, 0x3f80 is even
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-7f + 0x1p-8f), 0x3f82);   // tie, 0x3f81 is odd
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);  // just above the tie
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f - 0x1p-20f), 0x3f80);  // just below the tie
  EXPECT_EQ(float_to_bf16(-(1.0f + 0x1p-8f + 0x1p-20f)), 0xbf81);
  EXPECT_EQ(float_to_bf16(-(1.0f + 0x1p-7f + 0x1p-8f)), 0xbf82);
}

TEST(Bf16, InfinitiesZerosAndOverflow) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_bf16(inf), 0x7f80);
  EXPECT_EQ(float_to_bf16(-inf), 0xff80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(float_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(bf16_to_float(0x7f80), inf);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(bf16_to_float(0x8000)), 0x80000000u);
}

TEST(Bf16, NanStaysAQuietNanWithItsSign) {
  // A payload only in the low 16 bits would truncate to inf.
  for (const std::uint32_t bits : {0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7fbfffffu}) {
    const std::uint16_t b = float_to_bf16(std::bit_cast<float>(bits));
    EXPECT_TRUE(std::isnan(bf16_to_float(b))) << std::hex << bits;
    EXPECT_EQ(b & 0x0040u, 0x0040u) << std::hex << bits;  // the quiet bit
    EXPECT_EQ(b & 0x8000u, (bits >> 16) & 0x8000u) << std::hex << bits;
  }
}

TEST(Bf16, SubnormalsRoundLikeNormals) {
  // bfloat16 has float32's exponent range: subnormals keep 7 mantissa bits and round the same way.
  EXPECT_EQ(float_to_bf16(0x1p-133f), 0x0001);              // smallest bf16 subnormal
  EXPECT_EQ(float_to_bf16(0x1p-134f), 0x0000);              // half of it: tie to even 0
  EXPECT_EQ(float_to_bf16(0x1p-134f + 0x1p-149f), 0x0001);  // just above half
  EXPECT_EQ(float_to_bf16(0x3p-134f), 0x0002);              // 1.5 units: tie to even 2
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(float_to_bf16(-0x1p-133f), 0x8001);
  EXPECT_EQ(float_to_bf16(0x7fp-133f + 0x1p-134f), 0x0080);  // carries into the first normal
  EXPECT_EQ(bf16_to_float(0x0001), 0x1p-133f);
  EXPECT_EQ(bf16_to_float(0x007f), 0x7fp-133f);
}

TEST(Bf16, EveryValueRoundTrips) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bf16_to_float(std::uint16_t(b));
    if (std::isnan(f)) EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f)))) << b;
    else ASSERT_EQ(float_to_bf16(f), b) << b;
  }
}

// Nearest-even rounding to bf16 computed in double, independent of the bit trick.
std::uint16_t reference_bf16(float x) {
  const std::uint16_t down = std::uint16_t(std::bit_cast<std::uint32_t>(x) >> 16);  // toward zero
  const double lo = std::fabs(double(bf16_to_float(down)));
  const double hi =
      (down & 0x7fff) == 0x7f7f ? std::ldexp(1.0, 128) : std::fabs(double(bf16_to_float(down + 1)));
  const double ax = std::fabs(double(x));
  if (ax - lo < hi - ax || (ax - lo == hi - ax && (down & 1) == 0)) return down;
  return std::uint16_t(down + 1);
}

TEST(Bf16, MatchesReferenceRoundingOnRandomFloats) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(std::uint32_t(rng()));
    if (std::isnan(x) || std::isinf(x)) continue;
    ASSERT_EQ(float_to_bf16(x), reference_bf16(x)) << std::hexfloat << x;
  }
}

// Usable in constant expressions.
static_assert(float_to_bf16(1.0f) == 0x3f80 && bf16_to_float(0x3f80) == 1.0f);

}  // namespace
}  // namespace duet
