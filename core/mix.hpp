#pragma once
#include <cstdint>
#include <string_view>

namespace duet {

// splitmix64's finalizer (Steele, Lea, Flood: "Fast splittable pseudorandom number generators",
// OOPSLA 2014): a cheap, well-mixed 64-bit hash step for block hashes and scripted outputs.
constexpr std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// FNV-1a, 64 bits (Fowler, Noll, Vo; the offset basis and prime of IETF draft-eastlake-fnv): the
// same value on every platform and build, for splits and fingerprints that files record.
inline std::uint64_t fnv1a64(std::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

}  // namespace duet
