#pragma once
// The pre-PagedAttention baseline: every sequence reserves a contiguous region of max_model_len
// token slots when it is admitted, used or not (Kwon et al., "Efficient Memory Management for
// Large Language Model Serving with PagedAttention", SOSP 2023, section 3). Regions are expressed
// as runs of consecutive blocks, so that executors read them through the same block tables.
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/kv_allocator.hpp"

namespace duet {

class NaiveAllocator final : public KvAllocator {
 public:
  NaiveAllocator(std::int32_t num_blocks, int block_size, int max_model_len);

  int lookup_prefix(Sequence&) override { return 0; }  // no sharing, no cache
  // A region holds max_model_len tokens: whatever must fit does once the region is taken.
  bool allocate_slots(Sequence& seq, int num_new_tokens, int num_hit_tokens = 0,
                      int num_must_fit = 0) override;
  // A new region with every used block copied; false (recompute) when no region is free.
  bool fork(const Sequence& src, Sequence& dst) override;
  void free(Sequence& seq) override;
  void set_priority(Sequence&, int, bool) override {}  // nothing is retained after free
  std::vector<BlockCopy> take_copies() override;
  // Regions are per sequence, not per block: floors and ceilings have no meaning here.
  void set_limits(KvLimits limits) override;

  KvUsage usage() const override;
  KvCounters counters() const override { return counters_; }
  int block_size() const override { return block_size_; }

  std::int32_t num_regions() const { return static_cast<std::int32_t>(region_free_.size()); }
  std::int32_t free_regions() const { return static_cast<std::int32_t>(free_regions_.size()); }
  int blocks_per_region() const { return blocks_per_region_; }

 private:
  std::int32_t reserve();
  BlockId pending_origin(BlockId b) const;  // where the pending copy into b reads, or b

  int block_size_;
  int max_model_len_;
  int blocks_per_region_;
  std::vector<std::int32_t> free_regions_;  // a stack: lowest region ids first
  std::vector<char> region_free_;
  std::int64_t filled_tokens_ = 0;
  std::vector<BlockCopy> copies_;
  std::unordered_map<BlockId, BlockId> pending_src_;  // copies_ by destination
  // Freed regions that pending copies still read: they return to free_regions_ in take_copies,
  // so that no copy of the same step writes into them.
  std::vector<std::int32_t> held_regions_;
  KvCounters counters_;
};

}  // namespace duet
