#pragma once
// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC'11)
// and the sampling uniform derived from it. Header-only and host + device, so that the sampling
// kernel (sampling.cu) and a CPU replay of its draws (tests) run the very same code; it includes
// no CUDA header (the host/device qualifiers appear only when nvcc compiles it).
#include <cstdint>

#include "kernels/host_device.hpp"

namespace duet::kernels {

struct Philox4x32 {
  std::uint32_t v[4];
};

// Ten rounds of the Philox S-box on a 128-bit counter under a 64-bit key. Each round multiplies
// words 0 and 2 by the paper's constants, swaps in the high halves XORed with the other words and
// the round key; the key is bumped by the Weyl constants (golden ratio, sqrt(3) - 1) between
// rounds. Checked against Random123's known-answer vectors in tests/kernels/test_ops.cpp.
DUET_HOST_DEVICE inline Philox4x32 philox4x32_10(Philox4x32 c, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    const std::uint64_t p0 = std::uint64_t(kMul0) * c.v[0];
    const std::uint64_t p1 = std::uint64_t(kMul1) * c.v[2];
    c = Philox4x32{{std::uint32_t(p1 >> 32) ^ c.v[1] ^ k0, std::uint32_t(p1),
                    std::uint32_t(p0 >> 32) ^ c.v[3] ^ k1, std::uint32_t(p0)}};
  }
  return c;
}

// The uniform in [0, 1) of draw `counter` in stream `seed`:
//   key     = (k0, k1) = (seed & 0xffffffff, seed >> 32)
//   counter = (counter & 0xffffffff, counter >> 32, 0, 0)
//   x       = philox4x32_10(counter, key)
//   u       = ((uint64(x[1]) << 32 | x[0]) >> 11) * 2^-53
// i.e. the top 53 bits of the first two output words, so u is a multiple of 2^-53 and < 1.
DUET_HOST_DEVICE inline double philox_uniform(std::uint64_t seed, std::uint64_t counter) {
  const Philox4x32 x =
      philox4x32_10(Philox4x32{{std::uint32_t(counter), std::uint32_t(counter >> 32), 0u, 0u}},
                    std::uint32_t(seed), std::uint32_t(seed >> 32));
  const std::uint64_t bits = (std::uint64_t(x.v[1]) << 32) | x.v[0];
  return double(bits >> 11) * 0x1.0p-53;
}

}  // namespace duet::kernels
