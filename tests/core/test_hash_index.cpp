#include "core/hash_index.hpp"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

namespace duet {
namespace {

// Random inserts, updates and erases against std::unordered_map, with keys whose low bits collide
// (long probe runs that wrap around the table) and with well-mixed keys.
void check_against_map(std::uint64_t seed, bool colliding) {
  const std::size_t max_keys = 64;
  HashIndex index(max_keys);
  std::unordered_map<BlockHash, BlockId> ref;
  std::mt19937_64 rng(seed);
  auto key_of = [&](std::uint64_t r) -> BlockHash {
    const std::uint64_t k = r % 200;
    return colliding ? (k << 32) | 0x7f : k * 0x9e3779b97f4a7c15ull;  // colliding: the same low bits
  };
  for (int op = 0; op < 20000; ++op) {
    const BlockHash k = key_of(rng());
    const int what = int(rng() % 3);
    if (what == 0 && ref.size() < max_keys) {
      const BlockId v = BlockId(rng() % 1000);
      auto [slot, inserted] = index.try_emplace(k, v);
      auto [it, ref_inserted] = ref.try_emplace(k, v);
      ASSERT_EQ(inserted, ref_inserted);
      ASSERT_EQ(*slot, it->second);
    } else if (what == 1 && ref.count(k)) {
      index.erase(k);
      ref.erase(k);
    } else if (BlockId* v = index.find(k)) {
      ASSERT_TRUE(ref.count(k));
      *v = ref[k] = BlockId(rng() % 1000);
    } else {
      ASSERT_FALSE(ref.count(k));
    }
    ASSERT_EQ(index.size(), ref.size());
  }
  std::size_t seen = 0;
  index.for_each([&](BlockHash k, BlockId v) {
    ++seen;
    ASSERT_EQ(ref.at(k), v);
  });
  EXPECT_EQ(seen, ref.size());
}

TEST(HashIndex, AgreesWithUnorderedMapOnRandomOperations) {
  for (std::uint64_t seed = 1; seed <= 5; ++seed) check_against_map(seed, false);
}

TEST(HashIndex, AgreesWithUnorderedMapWhenEveryKeyHasTheSameHome) {
  for (std::uint64_t seed = 1; seed <= 5; ++seed) check_against_map(seed, true);
}

TEST(HashIndex, ErasingAnAbsentKeyIsALogicError) {
  HashIndex index(4);
  index.try_emplace(1, 0);
  EXPECT_THROW(index.erase(2), std::logic_error);
}

}  // namespace
}  // namespace duet
