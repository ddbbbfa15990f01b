#pragma once
// Shared by the kernels/ .cu files (not a public header: it includes CUDA's): launch checks,
// argument checks and bf16 <-> float on the device.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "kernels/device.hpp"

namespace duet::kernels::detail {

// Launch errors (bad configuration, too much shared memory) surface at once, named.
inline void check_launch(const char* what) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) throw Error(std::string(what) + " launch: " + cudaGetErrorString(status));
}

inline void require(bool ok, const std::string& what) {
  if (!ok) throw Error(what);
}

__device__ __forceinline__ float bf16_to_float(bf16 b) { return __uint_as_float(std::uint32_t(b) << 16); }
__device__ __forceinline__ bf16 float_to_bf16(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

// V consecutive bf16 moved as one load or store: 16 bytes (V = 8), 4 bytes (V = 2) or 2 bytes.
template <int V>
struct Raw;
template <>
struct Raw<8> {
  using type = uint4;
};
template <>
struct Raw<2> {
  using type = std::uint32_t;
};
template <>
struct Raw<1> {
  using type = std::uint16_t;
};

}  // namespace duet::kernels::detail
