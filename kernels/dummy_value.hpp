#pragma once
// The values of dummy weights (vLLM's load_format = "dummy"), element by element. The host
// (exec/weights.cpp's dummy_tensor, the CPU engine's weights) and the CUDA engine's device fill
// (ops.hpp's fill_dummy) compute this one function, so both engines hold the same weights, bit
// for bit after rounding to bf16. Header-only and host + device; it includes no CUDA header.
#include <cmath>
#include <cstdint>

#include "core/mix.hpp"
#include "kernels/host_device.hpp"

namespace duet::kernels {

// What a tensor's values depend on: its stream and its scale.
struct DummyInit {
  std::uint64_t key = 0;  // the tensor's stream: the seed's and the tensor name's hashes
  double scale = 0;       // values are offset + scale * uniform[-1, 1)
  double offset = 0;
};

// Element i: splitmix64's i-th output for the tensor's key (counter-based, so any element alone,
// one mix per value; mix64 is constexpr, which device code may call under nvcc's
// --expt-relaxed-constexpr), its 54 high bits as a uniform in [-1, 1) in steps of 2^-53 (exact
// integer-to-double steps), then scale * u + offset in one fused multiply-add: one rounding on
// every compiler and device, where a separate multiply and add would be contracted by some and
// not by others. Then one rounding to float.
DUET_HOST_DEVICE inline float dummy_value(const DummyInit& t, std::uint64_t i) {
  const std::uint64_t bits = mix64(t.key + i * 0x9e3779b97f4a7c15ULL);
  const double u = double(std::int64_t(bits >> 10) - (std::int64_t(1) << 53)) * 0x1p-53;
  return float(fma(t.scale, u, t.offset));
}

}  // namespace duet::kernels
