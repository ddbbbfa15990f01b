#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
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

// The fingerprint a file records of a text it was made from (a script, a profile, a library):
// "fnv1a64:" and 16 hex digits. It tells an edited input from the one used; it is no defence
// against forgery.
inline std::string fingerprint(std::string_view bytes) {
  char out[32];
  std::snprintf(out, sizeof out, "fnv1a64:%016llx", static_cast<unsigned long long>(fnv1a64(bytes)));
  return out;
}

}  // namespace duet
