#include "core/naive_allocator.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace duet {

NaiveAllocator::NaiveAllocator(std::int32_t num_blocks, int block_size, int max_model_len)
    : block_size_(block_size), max_model_len_(max_model_len) {
  if (block_size <= 0) throw Error("NaiveAllocator: block_size must be positive");
  if (max_model_len <= 0) throw Error("NaiveAllocator: max_model_len must be positive");
  blocks_per_region_ = (max_model_len + block_size - 1) / block_size;
  const std::int32_t regions = num_blocks / blocks_per_region_;
  if (regions <= 0)
    throw Error("NaiveAllocator: " + std::to_string(num_blocks) + " blocks cannot hold one max_model_len (" +
                std::to_string(max_model_len) + ") reservation");
  region_free_.assign(std::size_t(regions), 1);
  for (std::int32_t r = regions - 1; r >= 0; --r) free_regions_.push_back(r);
}

std::int32_t NaiveAllocator::reserve() {
  if (free_regions_.empty()) return -1;
  const std::int32_t r = free_regions_.back();
  free_regions_.pop_back();
  region_free_[r] = 0;
  return r;
}

bool NaiveAllocator::allocate_slots(Sequence& seq, int num_new_tokens, int num_hit_tokens,
                                    int /*num_must_fit*/) {
  if (num_hit_tokens != 0) throw std::logic_error("NaiveAllocator has no prefix cache");
  KvState& kv = seq.kv;
  const int end = kv.num_slots + num_new_tokens;
  if (end > max_model_len_) return false;
  if (kv.naive_region < 0) {
    kv.naive_region = reserve();
    if (kv.naive_region < 0) return false;
  }
  const BlockId base = kv.naive_region * blocks_per_region_;
  while (int(kv.blocks.size()) * block_size_ < end) kv.blocks.push_back(base + BlockId(kv.blocks.size()));
  filled_tokens_ += num_new_tokens;
  kv.num_slots = end;
  return true;
}

bool NaiveAllocator::fork(const Sequence& src, Sequence& dst) {
  if (dst.kv.naive_region >= 0) throw std::logic_error("fork: destination already holds a region");
  const std::int32_t r = reserve();
  if (r < 0) return false;
  dst.kv.naive_region = r;
  dst.kv.num_slots = src.kv.num_slots;
  dst.kv.blocks.clear();
  const BlockId base = r * blocks_per_region_;
  for (std::size_t i = 0; i < src.kv.blocks.size(); ++i) {
    dst.kv.blocks.push_back(base + BlockId(i));
    const BlockCopy c{pending_origin(src.kv.blocks[i]), dst.kv.blocks.back()};
    copies_.push_back(c);
    pending_src_[c.dst] = c.src;
    ++counters_.cow_copies;
  }
  filled_tokens_ += dst.kv.num_slots;
  return true;
}

// The copies of one step run at once on a GPU (kernels::copy_blocks), so none may read a block
// that another writes: a fork from a sequence whose own fork copy is still pending copies from
// where that copy reads, and a region freed before its copies ran takes them back.
BlockId NaiveAllocator::pending_origin(BlockId b) const {
  const auto it = pending_src_.find(b);
  return it == pending_src_.end() ? b : it->second;
}

void NaiveAllocator::free(Sequence& seq) {
  KvState& kv = seq.kv;
  if (kv.naive_region >= 0) {
    region_free_[kv.naive_region] = 1;
    const BlockId first = kv.naive_region * blocks_per_region_, last = first + blocks_per_region_;
    auto inside = [&](BlockId b) { return b >= first && b < last; };
    counters_.cow_copies -= std::erase_if(copies_, [&](const BlockCopy& c) { return inside(c.dst); });
    for (BlockId b = first; b < last; ++b) pending_src_.erase(b);
    const bool read =
        std::any_of(copies_.begin(), copies_.end(), [&](const BlockCopy& c) { return inside(c.src); });
    (read ? held_regions_ : free_regions_).push_back(kv.naive_region);
  }
  filled_tokens_ -= kv.num_slots;
  kv = KvState{};
}

std::vector<BlockCopy> NaiveAllocator::take_copies() {
  pending_src_.clear();
  free_regions_.insert(free_regions_.end(), held_regions_.begin(), held_regions_.end());
  held_regions_.clear();
  std::vector<BlockCopy> out;
  out.swap(copies_);
  return out;
}

KvUsage NaiveAllocator::usage() const {
  KvUsage u;
  u.total_blocks = num_regions() * blocks_per_region_;
  u.used_blocks = (num_regions() - free_regions()) * blocks_per_region_;
  u.filled_tokens = filled_tokens_;
  u.block_size = block_size_;
  return u;
}

void NaiveAllocator::set_limits(KvLimits limits) {
  if (limits != KvLimits{})
    throw Error("min_blocks and max_blocks need the paged allocator on a shared pool (kv_pool = 'shared')");
}

}  // namespace duet
