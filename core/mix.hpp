#pragma once
#include <cstdint>

namespace duet {

// splitmix64's finalizer (Steele, Lea, Flood: "Fast splittable pseudorandom number generators",
// OOPSLA 2014): a cheap, well-mixed 64-bit hash step for block hashes and scripted outputs.
inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace duet
