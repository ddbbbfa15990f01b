#pragma once
// The scheduler's view of a KV allocator. Two implementations exist: KvCacheManager (paged, with
// prefix caching and copy-on-write forks) and NaiveAllocator (a contiguous max_model_len
// reservation per sequence, the pre-PagedAttention baseline).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/block_pool.hpp"
#include "core/sequence.hpp"

namespace duet {

// Copy the KV of block src into block dst before the next forward pass.
struct BlockCopy {
  BlockId src = kNoBlock;
  BlockId dst = kNoBlock;
  bool operator==(const BlockCopy&) const = default;
};

struct KvCounters {
  // Prompt tokens looked up in the prefix cache at admission, and of them those found cached; a
  // re-admission after a preemption counts in neither (vLLM V1's exported statistics).
  std::int64_t query_tokens = 0;
  std::int64_t hit_tokens = 0;
  std::int64_t evictions = 0;   // cached blocks dropped for reuse
  std::int64_t cow_copies = 0;  // blocks copied on write
};

struct KvUsage {
  std::int32_t total_blocks = 0;  // the pool's blocks (a shared pool's pages)
  std::int32_t used_blocks = 0;   // held by at least one sequence (or reserved)
  // Shared pool: pages this model may not take now (the other models hold them, their floors
  // reserve them, or they lie beyond this model's ceiling). 0 for a private pool.
  std::int32_t unavailable_blocks = 0;
  std::int32_t cached_blocks = 0;  // holding cached content, used or free (copies in use each count)
  std::int64_t filled_tokens = 0;  // token slots holding a token, in used blocks
  int block_size = 0;
  KvLimits limits;  // the floor and ceiling on used_blocks

  // What the scheduler may still allocate: on a shared pool, the free pages within its reach.
  std::int32_t free_blocks() const { return total_blocks - used_blocks - unavailable_blocks; }
  double block_utilisation() const { return total_blocks ? double(used_blocks) / total_blocks : 0.0; }
  // The share in use of the blocks this engine may hold at most: its ceiling on a shared pool, else
  // the pool. What a policy compares with a threshold (Lua's kv_used): against the whole shared
  // pool, an engine capped at a tenth of it never passes 0.1.
  double reach_utilisation() const {
    // Above 1 while a lowered ceiling is below what the engine holds (a ceiling of 0 counts as 1).
    const std::int32_t reach = std::min(total_blocks, limits.max_blocks);
    return double(used_blocks) / std::max(reach, 1);
  }
  // Share of the reserved slots that hold a token: internal fragmentation shows here.
  double token_utilisation() const {
    return used_blocks ? double(filled_tokens) / (double(used_blocks) * block_size) : 1.0;
  }
};

class KvAllocator {
 public:
  virtual ~KvAllocator() = default;

  // Tokens of the sequence already cached, in whole blocks, never more than
  // seq.max_prefix_hit_tokens() (tokens whose logits are needed are recomputed). For a sequence
  // that holds no blocks; remembers the hit for allocate_slots.
  virtual int lookup_prefix(Sequence& seq) = 0;
  // Makes the table cover `num_new_tokens` more slots after num_computed_tokens, taking the
  // `num_hit_tokens` that lookup_prefix just found first. All or nothing: false changes nothing.
  // `num_must_fit` (when larger) is a check only: false unless the blocks of that many tokens
  // would fit now.
  virtual bool allocate_slots(Sequence& seq, int num_new_tokens, int num_hit_tokens = 0,
                              int num_must_fit = 0) = 0;
  // Gives dst (holding no blocks) the KV of src. False when it cannot (no memory to copy into):
  // dst then holds nothing and must recompute its tokens.
  virtual bool fork(const Sequence& src, Sequence& dst) = 0;
  // Releases every block of the sequence, tail first.
  virtual void free(Sequence& seq) = 0;
  // Sets the retention priority of the sequence's blocks (those it holds alone, unless `shared`).
  virtual void set_priority(Sequence& seq, int priority, bool shared = false) = 0;
  // Block copies queued since the last call, for the executor to run before the next step. They run
  // at once (a GPU kernel copies them in parallel): no two share a destination, and no destination
  // is another copy's source.
  virtual std::vector<BlockCopy> take_copies() = 0;
  // Floor and ceiling on the blocks this allocator holds (a shared pool's policy moves them).
  virtual void set_limits(KvLimits limits) = 0;

  virtual KvUsage usage() const = 0;
  virtual KvCounters counters() const = 0;
  virtual int block_size() const = 0;
};

}  // namespace duet
