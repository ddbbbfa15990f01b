#pragma once
// The prefix cache's index: block hash -> the first block of its collision chain, as a flat
// open-addressing table (linear probing, backward-shift deletion). It never grows: a pool of N
// blocks has at most N distinct hashes, and the table has at least 2N slots, so a probe stays
// short. std::unordered_map allocated a node per insert and freed it per eviction: on a trace
// replay that evicts a block every few steps, its find and erase were 15-20% of the simulator's
// time (perf, `duet bench sim-trace`).
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/types.hpp"

namespace duet {

class HashIndex {
 public:
  explicit HashIndex(std::size_t max_keys)
      : slots_(std::bit_ceil(std::max<std::size_t>(2 * max_keys, 8))), mask_(slots_.size() - 1) {}

  // The head of `key`'s chain, or nullptr.
  BlockId* find(BlockHash key) {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      if (slots_[i].value == kNoBlock) return nullptr;
      if (slots_[i].key == key) return &slots_[i].value;
    }
  }
  const BlockId* find(BlockHash key) const { return const_cast<HashIndex*>(this)->find(key); }

  // Inserts key -> value unless `key` is present; returns its slot's value and whether it inserted.
  std::pair<BlockId*, bool> try_emplace(BlockHash key, BlockId value) {
    std::size_t i = home(key);
    for (; slots_[i].value != kNoBlock; i = (i + 1) & mask_)
      if (slots_[i].key == key) return {&slots_[i].value, false};
    slots_[i] = {key, value};
    ++size_;
    return {&slots_[i].value, true};
  }

  // Removes `key`, which must be present. Later entries of its probe run move back into the gap,
  // so that no probe ever stops early at it.
  void erase(BlockHash key) {
    std::size_t gap = home(key);
    for (; slots_[gap].key != key || slots_[gap].value == kNoBlock; gap = (gap + 1) & mask_)
      if (slots_[gap].value == kNoBlock) throw std::logic_error("HashIndex::erase of an absent key");
    for (std::size_t i = (gap + 1) & mask_; slots_[i].value != kNoBlock; i = (i + 1) & mask_) {
      // An entry may fill the gap when its home is not cyclically within (gap, i].
      const std::size_t h = home(slots_[i].key);
      if (((i - h) & mask_) >= ((i - gap) & mask_)) {
        slots_[gap] = slots_[i];
        gap = i;
      }
    }
    slots_[gap] = {};
    --size_;
  }

  std::size_t size() const { return size_; }

  template <class F>
  void for_each(F&& f) const {  // f(key, head) for every entry
    for (const Slot& s : slots_)
      if (s.value != kNoBlock) f(s.key, s.value);
  }

 private:
  struct Slot {
    BlockHash key = 0;
    BlockId value = kNoBlock;  // kNoBlock: an empty slot
  };
  // Block hashes are splitmix64 outputs (core/block_hash.hpp): their low bits are already uniform.
  std::size_t home(BlockHash key) const { return std::size_t(key) & mask_; }

  std::vector<Slot> slots_;
  std::size_t mask_;
  std::size_t size_ = 0;
};

}  // namespace duet
