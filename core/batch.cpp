#include "core/batch.hpp"

#include <algorithm>
#include <cstring>

namespace duet {

std::span<const int> positions_to_score(const BatchItem& item) {
  if (item.want != Want::Score) return {};
  const auto pending = item.seq->unscored_positions();
  const auto first = std::lower_bound(pending.begin(), pending.end(), item.context_len);
  const auto last = std::lower_bound(first, pending.end(), item.context_len + item.num_new_tokens);
  return {first, last};
}

void add_item(Batch& batch, Sequence& seq, int context_len, int num_new_tokens, Want want) {
  const BatchItem item{&seq, context_len, num_new_tokens, want, decode_shaped(num_new_tokens, context_len)};
  (item.is_decode ? batch.num_decode_tokens : batch.num_prefill_tokens) += num_new_tokens;
  batch.items.push_back(item);
}

void add_prefill_chunk(BatchShape& s, int new_tokens, std::int64_t context) {
  const double n = new_tokens;
  s.prefill_tokens += new_tokens;
  ++s.prefill_seqs;
  s.prefill_context_tokens += context;
  s.prefill_attention_keys += n * double(context) + n * (n + 1.0) / 2.0;
  s.prefill_tokens_squared += n * n;
}

void add_decode(BatchShape& s, std::int64_t context) {
  ++s.decode_tokens;
  ++s.decode_seqs;
  s.decode_context_tokens += context;
  s.decode_distinct_context_tokens += context;
}

namespace {

struct DecodeRow {
  std::span<const BlockId> blocks;  // the blocks that hold the row's context
  int context = 0;
};

// The leading blocks two rows share, given that they share the first `from`. Beams' tables agree
// for hundreds of blocks: runs of 16 are compared with memcmp (vector compares), the rest one by one.
std::size_t common_blocks(const DecodeRow& a, const DecodeRow& b, std::size_t from = 0) {
  constexpr std::size_t kRun = 16;
  const std::size_t n = std::min(a.blocks.size(), b.blocks.size());
  std::size_t k = from;
  while (k + kRun <= n && std::memcmp(&a.blocks[k], &b.blocks[k], kRun * sizeof(BlockId)) == 0) k += kRun;
  while (k < n && a.blocks[k] == b.blocks[k]) ++k;
  return k;
}

}  // namespace

// Context tokens that a decode row reads from blocks an earlier row (in the order below) reads
// along the same leading blocks. Sharing comes from forks (a child starts with its parent's table)
// and prefix-cache hits (a chain of blocks from the first): leading blocks. The tables' leading
// runs form a trie, and in lexicographic order (ties: the longer context first) each row shares
// with its predecessor all it shares with any earlier row, so summing the common prefixes of
// neighbours counts every trie node once. A row shares nothing unless its first block is shared,
// which makes the common case one sort of integers. Not counted: a block two tables share after
// different blocks (one sequence computed a prefix itself that another then hit in the cache).
std::int64_t shared_decode_context(const Batch& batch) {
  const int bs = batch.block_size;
  if (bs <= 0) return 0;
  std::vector<std::pair<BlockId, std::uint32_t>> firsts;  // (first block, item)
  for (std::uint32_t i = 0; i < batch.items.size(); ++i) {
    const BatchItem& it = batch.items[i];
    if (it.is_decode && it.context_len > 0 && !it.seq->kv.blocks.empty())
      firsts.emplace_back(it.seq->kv.blocks[0], i);
  }
  std::sort(firsts.begin(), firsts.end());
  std::int64_t shared = 0;
  std::vector<DecodeRow> rows;
  for (auto group = firsts.begin(); group != firsts.end();) {
    auto end = group + 1;
    while (end != firsts.end() && end->first == group->first) ++end;
    if (end - group > 1) {
      rows.clear();
      for (auto g = group; g != end; ++g) {
        const BatchItem& it = batch.items[g->second];
        const auto& table = it.seq->kv.blocks;
        const std::size_t used = std::min(table.size(), std::size_t((it.context_len + bs - 1) / bs));
        rows.push_back({{table.data(), used}, it.context_len});
      }
      // Beams share most of their tables: compare from the blocks that all of the group share.
      std::size_t all = rows[0].blocks.size();
      for (const DecodeRow& r : rows) all = std::min(all, common_blocks(rows[0], r));
      std::sort(rows.begin(), rows.end(), [all](const DecodeRow& a, const DecodeRow& b) {
        const std::size_t k = common_blocks(a, b, all);
        if (k == a.blocks.size() && k == b.blocks.size()) return a.context > b.context;
        return k < b.blocks.size() && (k == a.blocks.size() || a.blocks[k] < b.blocks[k]);
      });
      for (std::size_t r = 1; r < rows.size(); ++r)
        shared += std::min({std::int64_t(common_blocks(rows[r - 1], rows[r], all)) * bs,
                            std::int64_t(rows[r - 1].context), std::int64_t(rows[r].context)});
    }
    group = end;
  }
  return shared;
}

void record_shape(const BatchShape& s, StepRecord& r) {
  r.prefill_tokens = s.prefill_tokens;
  r.decode_tokens = s.decode_tokens;
  r.num_seqs = s.prefill_seqs + s.decode_seqs;
  r.decode_seqs = s.decode_seqs;
  r.decode_context_tokens = s.decode_context_tokens;
  r.decode_distinct_context_tokens = s.decode_distinct_context_tokens;
  r.prefill_attention_keys = s.prefill_attention_keys;
  r.prefill_context_tokens = s.prefill_context_tokens;
  r.prefill_tokens_squared = s.prefill_tokens_squared;
  r.logit_rows = s.logit_rows;
  r.cow_copies = s.copies;
}

BatchShape shape_of(const StepRecord& r) {
  BatchShape s;
  s.prefill_tokens = r.prefill_tokens;
  s.decode_tokens = r.decode_tokens;
  s.decode_seqs = r.decode_seqs;
  s.prefill_seqs = r.num_seqs - r.decode_seqs;
  s.logit_rows = r.logit_rows;
  s.copies = r.cow_copies;
  s.decode_context_tokens = r.decode_context_tokens;
  s.decode_distinct_context_tokens = r.decode_distinct_context_tokens;
  s.prefill_context_tokens = r.prefill_context_tokens;
  s.prefill_attention_keys = r.prefill_attention_keys;
  s.prefill_tokens_squared = r.prefill_tokens_squared;
  return s;
}

BatchShape shape_of(const Batch& batch) {
  BatchShape s;
  s.copies = static_cast<int>(batch.copies.size());
  s.block_size = batch.block_size;
  for (const BatchItem& it : batch.items) {
    if (it.is_decode) add_decode(s, it.context_len);
    else add_prefill_chunk(s, it.num_new_tokens, it.context_len);
    if (it.want == Want::Sample) s.logit_rows += 1;
    if (it.want == Want::Score) s.logit_rows += int(positions_to_score(it).size());
  }
  s.decode_distinct_context_tokens -= shared_decode_context(batch);
  return s;
}

}  // namespace duet
