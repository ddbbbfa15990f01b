#pragma once
// The arithmetic of duet's sampling rule (kernels/sampling.cu states the rule in full), host +
// device, so that the CUDA kernel and the CPU engine's sampler (exec/cpu_ops.cpp) weigh tokens,
// size the nucleus and place a draw with the very same expressions. Only the search differs: a
// block-parallel radix search on the GPU, a serial one on the CPU; integer masses make every sum
// exact, so both find the same token whatever order they add in.
#include <math.h>  // expf and ceil in the global namespace, as device code has them

#include <cmath>
#include <cstdint>

#include "kernels/host_device.hpp"

namespace duet::kernels {

// A token's mass is floor(p * 2^40): p = 1 for the top token, so a vocabulary of up to 2^23
// tokens keeps the total at most 2^63.
constexpr float kSampleMassScale = 0x1.0p40f;
constexpr int kSampleMaxVocab = 1 << 23;

// p = exp((logit - max) / temperature) in float32, in [0, 1]; a NaN logit weighs nothing.
DUET_HOST_DEVICE inline float sample_weight(float logit, float max_logit, float temperature) {
  const float p = expf((logit - max_logit) / temperature);
  return p == p ? p : 0.0f;
}

// The scale is a power of two, so the product is exact and the conversion floors.
DUET_HOST_DEVICE inline std::uint64_t sample_mass(float p) { return std::uint64_t(p * kSampleMassScale); }

// The mass the nucleus must reach: ceil(top_p * total), at least 1 and at most total.
DUET_HOST_DEVICE inline std::uint64_t nucleus_need(float top_p, std::uint64_t total) {
  const double want = ceil(double(top_p) * double(total));
  return want < 1.0 ? 1 : (want >= double(total) ? total : std::uint64_t(want));
}

// The draw's position in the kept mass: floor(u * kept), below kept (u < 1, but the product
// rounds). The token is the first in the order whose cumulative mass exceeds it.
DUET_HOST_DEVICE inline std::uint64_t draw_target(double u, std::uint64_t kept) {
  const std::uint64_t target = std::uint64_t(u * double(kept));
  return target >= kept ? kept - 1 : target;
}

}  // namespace duet::kernels
