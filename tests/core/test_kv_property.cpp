// Seeded property tests of KvCacheManager: random operation sequences, with every invariant
// checked after every operation against a model that the test keeps by itself.
//
// The model records, for every block, the token whose KV sits in each slot (copy-on-write copies
// and the forward pass's writes applied in the order an executor runs them) and, for every
// cached block, the whole token prefix it was cached as. The checks that matter most follow from
// these: a sequence's block table always holds the KV of its own tokens, and a prefix hit never
// returns a block cached for a different prefix, even when every block hashes to one value.
//
// A failing check prints the case, its seed and the index of the operation after which the
// invariant broke; rerunning that case reproduces it exactly (the generator is std::mt19937_64
// and the test draws from it with plain modulo arithmetic, which is the same everywhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/batch.hpp"
#include "core/kv_cache_manager.hpp"
#include "tests/support/test_support.hpp"

namespace duet {
namespace {

// Every block hashes to the same value, so every cached block lands in one collision chain and
// the pool has to tell blocks apart by their parent and stored tokens alone.
BlockHash constant_hash(BlockHash, std::span<const TokenId>, std::uint32_t) { return 0xC0111DEULL; }

constexpr TokenId kVocab = 4;             // tokens 0..3: equal blocks (and so hits) are common
constexpr std::size_t kMaxLive = 12;      // sequences holding blocks
constexpr std::size_t kMaxPreempted = 8;  // preempted sequences waiting to be readmitted

// An independent fingerprint of a token prefix (FNV-1a), so that "this cached block stands for
// exactly this prefix" can be checked on every operation without comparing whole prefixes.
constexpr std::uint64_t kFpStart = 0xcbf29ce484222325ULL;
std::uint64_t fp_extend(std::uint64_t fp, TokenId t) { return (fp ^ std::uint32_t(t)) * 0x100000001b3ULL; }

struct KvCase {
  const char* name;
  std::uint64_t seed;
  int block_size;
  int num_blocks;
  bool prefix_caching;
  bool constant_hash;
  int num_ops;
};

void PrintTo(const KvCase& c, std::ostream* os) { *os << c.name << " (seed " << c.seed << ")"; }

enum class Op { Admit, Prefill, Append, Fork, Free, Preempt, Readmit, SetPriority, Mass };
constexpr int kNumOps = 9;
constexpr const char* kOpNames[kNumOps] = {"admit",   "prefill", "append",       "fork", "free",
                                           "preempt", "readmit", "set_priority", "mass"};
// Relative frequencies. Growth (admit, prefill, append, readmit) outweighs release so that the
// pools keep filling up: allocations then evict cached blocks or are refused.
constexpr int kOpWeights[kNumOps] = {14, 14, 22, 8, 9, 7, 10, 6, 2};

struct KvStats {
  std::int64_t ops[kNumOps] = {};
  std::int64_t admissions = 0;
  std::int64_t hit_admissions = 0;  // admissions (and readmissions) that hit the prefix cache
  std::int64_t hit_tokens = 0;
  std::int64_t own_hit_checks = 0;  // preemptions whose immediate lookup was checked
  std::int64_t memo_lookups = 0;    // lookups that began from an earlier one's hits (prefix_memo)
  std::int64_t failed_allocations = 0;
  std::int64_t copies = 0;
  std::int64_t evictions = 0;
};

// What an operation did that the model must replay: the sequence whose allocate_slots succeeded
// writes its tokens' KV into slots [write_begin, write_end).
struct Effect {
  Sequence* writer = nullptr;
  int write_begin = 0;
  int write_end = 0;
  int hit_tokens = 0;
};

class KvModel {
 public:
  explicit KvModel(const KvCase& c)
      : bs_(c.block_size),
        caching_(c.prefix_caching),
        kv_(KvCacheConfig{.num_blocks = c.num_blocks,
                          .block_size = c.block_size,
                          .enable_prefix_caching = c.prefix_caching,
                          .model_id = 7,
                          .hash_fn = c.constant_hash ? constant_hash : hash_block}),
        rng_(c.seed),
        max_len_(std::max(24, 10 * c.block_size)),
        content_(std::size_t(c.num_blocks), std::vector<TokenId>(std::size_t(c.block_size), kNoToken)),
        state_(std::size_t(c.num_blocks)),
        holders_(std::size_t(c.num_blocks), 0) {
    // A few shared prompt prefixes: most prompts start with one of them, so prefix hits happen.
    for (int p = 0; p < 4; ++p)
      prefixes_.push_back(random_tokens(int(below(std::uint64_t(max_len_ / 2) + 1))));
  }

  // One random applicable operation, then every invariant. Empty when all hold.
  std::string step() {
    Effect e;
    std::string err;
    for (bool applied = false; !applied;) {
      op_ = pick_op();
      err = run(op_, e, applied);
      if (!err.empty()) return err;
    }
    ++stats_.ops[int(op_)];
    if (err = apply(e); !err.empty()) return err;
    if (e.hit_tokens > 0)
      if (err = check_hit(*e.writer, e.hit_tokens); !err.empty()) return err;
    return check_all();
  }

  // Frees every sequence; the pool must then be entirely free.
  std::string release_all() {
    for (auto& s : live_) kv_.free(*s);
    live_.clear();
    Effect none;
    if (std::string err = apply(none); !err.empty()) return err;
    if (std::string err = check_all(); !err.empty()) return err;
    DUET_CHECK_OR_RETURN(kv_.pool().num_free() == kv_.pool().num_blocks(),
                         "blocks still in use after freeing every sequence");
    DUET_CHECK_OR_RETURN(kv_.usage().filled_tokens == 0,
                         "filled_tokens " << kv_.usage().filled_tokens << " with nothing held");
    return "";
  }

  const char* op_name() const { return kOpNames[int(op_)]; }
  const KvStats& stats() const { return stats_; }
  std::int64_t shared_block_checks() const { return distinct_checked_; }
  std::int64_t content_copy_checks() const { return copies_checked_; }
  const KvCacheManager& kv() const { return kv_; }

 private:
  struct CacheState {
    bool cached = false;
    std::uint32_t generation = 0;
    BlockRef content = kNoContent;
  };
  struct CachedPrefix {
    std::vector<TokenId> tokens;  // the whole prefix, this block's tokens last
    std::uint64_t fp = 0;         // fp of `tokens`
    std::uint64_t parent_fp = 0;  // fp of `tokens` without the last block
  };

  // --- randomness ---------------------------------------------------------------------------
  std::uint64_t below(std::uint64_t n) { return rng_() % n; }
  int between(int lo, int hi) { return lo + int(below(std::uint64_t(hi - lo + 1))); }
  bool coin(int percent) { return int(below(100)) < percent; }

  std::vector<TokenId> random_tokens(int n) {
    std::vector<TokenId> t(std::size_t(std::max(n, 0)));
    for (TokenId& x : t) x = TokenId(below(kVocab));
    return t;
  }

  Op pick_op() {
    int total = 0;
    for (int w : kOpWeights) total += w;
    int r = int(below(std::uint64_t(total)));
    for (int i = 0; i < kNumOps; ++i) {
      if (r < kOpWeights[i]) return Op(i);
      r -= kOpWeights[i];
    }
    return Op::Admit;
  }

  // A new prompt: usually a shared prefix plus a short suffix, sometimes a copy of part of a
  // sequence seen before (its generated tokens included), sometimes random.
  std::vector<TokenId> make_prompt() {
    std::vector<TokenId> t;
    const int kind = int(below(10));
    if (kind < 6) {
      t = prefixes_[below(prefixes_.size())];
      const auto suffix = random_tokens(between(1, 2 * bs_));
      t.insert(t.end(), suffix.begin(), suffix.end());
    } else if (kind < 8 && !(live_.empty() && preempted_.empty())) {
      const std::size_t j = below(live_.size() + preempted_.size());
      const Sequence& other = j < live_.size() ? *live_[j] : *preempted_[j - live_.size()];
      t.assign(other.tokens.begin(), other.tokens.begin() + between(1, other.num_tokens()));
      const auto suffix = random_tokens(between(0, bs_));
      t.insert(t.end(), suffix.begin(), suffix.end());
    } else {
      t = random_tokens(between(1, max_len_));
    }
    if (int(t.size()) > max_len_) t.resize(std::size_t(max_len_));
    return t;
  }

  std::unique_ptr<Sequence> new_sequence(std::vector<TokenId> tokens) {
    auto s = std::make_unique<Sequence>();
    s->id = next_id_++;
    s->tokens = std::move(tokens);
    s->num_prompt_tokens = s->num_tokens();
    return s;
  }

  template <class V>
  std::size_t pick_where(const V& v, auto pred, bool& found) {
    std::vector<std::size_t> eligible;
    for (std::size_t i = 0; i < v.size(); ++i)
      if (pred(*v[i])) eligible.push_back(i);
    found = !eligible.empty();
    return found ? eligible[below(eligible.size())] : 0;
  }

  // --- operations -----------------------------------------------------------------------------
  std::string run(Op op, Effect& e, bool& applied) {
    applied = false;
    bool found = false;
    switch (op) {
      case Op::Admit: {
        if (live_.size() >= kMaxLive) return "";
        applied = true;
        auto s = new_sequence(make_prompt());
        if (coin(15)) {
          // A PRM scoring request: the logits at its score positions are needed, so a prefix hit
          // must stop before the first of them.
          s->kind = SeqKind::Score;
          for (int k = between(1, 2); k > 0; --k)
            s->score_positions.push_back(between(0, s->num_tokens() - 1));
          std::sort(s->score_positions.begin(), s->score_positions.end());  // ascending, each once
          s->score_positions.erase(std::unique(s->score_positions.begin(), s->score_positions.end()),
                                   s->score_positions.end());
        }
        bool admitted = false;
        if (std::string err = try_admit(*s, coin(40), e, admitted); !err.empty()) return err;
        if (admitted) live_.push_back(std::move(s));
        return "";
      }
      case Op::Prefill: {  // the next chunk of a sequence whose tokens are not all computed
        const std::size_t i = pick_where(
            live_, [](const Sequence& s) { return s.num_computed_tokens < s.num_tokens(); }, found);
        if (!found) return "";
        applied = true;
        Sequence& s = *live_[i];
        // A sequence that holds blocks never looks up the cache.
        DUET_CHECK_OR_RETURN(kv_.lookup_prefix(s) == 0,
                             "lookup_prefix of sequence " << s.id << " that holds blocks returned a hit");
        const int remaining = s.num_tokens() - s.num_computed_tokens;
        const int n = coin(50) ? remaining : between(1, remaining);
        std::string err;
        if (allocate(s, n, 0, e, err)) s.num_computed_tokens += n;
        return err;
      }
      case Op::Append: {  // a decode step: one generated token, one more slot
        const std::size_t i = pick_where(
            live_,
            [&](const Sequence& s) {
              return s.num_computed_tokens == s.num_tokens() && s.num_tokens() < max_len_;
            },
            found);
        if (!found) return "";
        applied = true;
        Sequence& s = *live_[i];
        s.tokens.push_back(TokenId(below(kVocab)));
        std::string err;
        // Refused: the token stays, and a later prefill operation computes it.
        if (allocate(s, 1, 0, e, err)) ++s.num_computed_tokens;
        return err;
      }
      case Op::Fork: {
        if (live_.empty() || live_.size() >= kMaxLive) return "";
        applied = true;
        const Sequence& src = *live_[below(live_.size())];
        auto dst = new_sequence(src.tokens);
        dst->num_prompt_tokens = src.num_prompt_tokens;
        dst->num_computed_tokens = src.num_computed_tokens;
        kv_.fork(src, *dst);
        DUET_CHECK_OR_RETURN(dst->kv.blocks == src.kv.blocks && dst->kv.num_slots == src.kv.num_slots,
                             "fork of sequence " << src.id << " does not share its block table");
        live_.push_back(std::move(dst));
        return "";
      }
      case Op::Free: {
        if (live_.empty()) return "";
        applied = true;
        const std::size_t i = below(live_.size());
        const std::vector<BlockId> table = live_[i]->kv.blocks;
        kv_.free(*live_[i]);
        DUET_CHECK_OR_RETURN(live_[i]->kv.blocks.empty() && live_[i]->kv.num_slots == 0,
                             "free left a block table behind");
        live_.erase(live_.begin() + std::ptrdiff_t(i));
        return check_freed_tail_first(table);
      }
      case Op::Preempt:
        if (live_.empty()) return "";
        applied = true;
        return preempt(below(live_.size()));
      case Op::Readmit: {
        if (preempted_.empty() || live_.size() >= kMaxLive) return "";
        applied = true;
        const std::size_t i = below(preempted_.size());
        bool admitted = false;
        if (std::string err = try_admit(*preempted_[i], coin(30), e, admitted); !err.empty()) return err;
        if (admitted) {
          live_.push_back(std::move(preempted_[i]));
          preempted_.erase(preempted_.begin() + std::ptrdiff_t(i));
        }
        return "";
      }
      case Op::SetPriority: {
        if (live_.empty()) return "";
        applied = true;
        Sequence& s = *live_[below(live_.size())];
        const int priority = int(below(kNumPriorities));
        const bool shared = coin(50);
        kv_.set_priority(s, priority, shared);
        for (BlockId b : s.kv.blocks) {
          const Block& blk = kv_.pool().block(b);
          DUET_CHECK_OR_RETURN(!(shared || blk.ref_count == 1) || blk.priority == priority,
                               "set_priority(" << priority << ", shared " << shared << ") left block " << b
                                               << " at priority " << int(blk.priority));
        }
        return "";
      }
      case Op::Mass: {
        // One long sequence sized to every free block (sometimes one more): admitting it evicts
        // the cached free blocks, or is refused.
        if (live_.size() >= kMaxLive) return "";
        applied = true;
        const int free_blocks = kv_.pool().num_free();
        int len = coin(25) ? (free_blocks + 1) * bs_ : free_blocks * bs_ - int(below(std::uint64_t(bs_)));
        auto s = new_sequence(random_tokens(std::max(len, 1)));
        bool admitted = false;
        if (std::string err = try_admit(*s, true, e, admitted); !err.empty()) return err;
        if (admitted) live_.push_back(std::move(s));
        return "";
      }
    }
    return "";
  }

  // Admission as Scheduler::schedule_waiting does it: look up the prefix, then allocate the hit
  // and a chunk after it. The whole step is modelled at once, so the chunk counts as computed.
  // The most a prefix hit may cover: never the last token, nor a score position (their logits
  // are needed; this test never hands scores out, so every position is still to be scored).
  static int max_hit(const Sequence& s) {
    int limit = s.num_tokens() - 1;
    if (s.kind == SeqKind::Score && !s.score_positions.empty())
      limit = std::min(limit, s.score_positions.front());
    return limit;
  }

  // The pool's own walk of the sequence's prefix. The manager starts from its last lookup's hits
  // where they still stand (KvState::prefix_memo); it must find exactly these blocks.
  std::vector<BlockId> pool_walk(const Sequence& s) const {
    std::vector<BlockId> out;
    if (!caching_ || s.num_tokens() == 0) return out;
    const BlockPool& pool = kv_.pool();
    BlockHash h = kRootHash;
    BlockRef parent;
    for (int i = 0; i < std::max(0, s.max_prefix_hit_tokens()) / bs_; ++i) {
      const std::span<const TokenId> tokens(s.tokens.data() + std::size_t(i) * std::size_t(bs_),
                                            std::size_t(bs_));
      h = pool.hash(h, tokens, 0);
      const BlockId b = pool.lookup(h, parent, tokens, 0);
      if (b == kNoBlock) break;
      out.push_back(b);
      parent = pool.ref(b);
    }
    return out;
  }

  std::string try_admit(Sequence& s, bool whole, Effect& e, bool& admitted) {
    const std::vector<BlockId> walk = pool_walk(s);
    stats_.memo_lookups += !s.kv.prefix_memo.empty();
    const int hit = kv_.lookup_prefix(s);
    DUET_CHECK_OR_RETURN(hit == int(walk.size()) * bs_,
                         "lookup_prefix of sequence " << s.id << " hit " << hit << " tokens, the pool's walk "
                                                      << walk.size() * std::size_t(bs_));
    DUET_CHECK_OR_RETURN(hit >= 0 && hit % bs_ == 0,
                         "lookup_prefix returned " << hit << ", not whole blocks");
    DUET_CHECK_OR_RETURN(hit <= s.num_tokens() - 1,
                         "lookup_prefix counted the last token: " << hit << " of " << s.num_tokens());
    DUET_CHECK_OR_RETURN(hit <= max_hit(s), "lookup_prefix hit " << hit << " tokens of Score sequence "
                                                                 << s.id << ", past score position "
                                                                 << max_hit(s));
    DUET_CHECK_OR_RETURN(caching_ || hit == 0,
                         "lookup_prefix hit " << hit << " tokens with prefix caching off");
    const int remaining = s.num_tokens() - hit;
    const int n = whole ? remaining : between(1, remaining);
    std::string err;
    admitted = allocate(s, n, hit, e, err);
    if (!err.empty()) return err;
    if (admitted) {
      DUET_CHECK_OR_RETURN(
          std::equal(walk.begin(), walk.end(), s.kv.blocks.begin()),
          "sequence " << s.id << " was admitted on other hit blocks than the pool's walk finds");
      s.num_computed_tokens = hit + n;
      ++stats_.admissions;
      if (hit > 0) ++stats_.hit_admissions;
      stats_.hit_tokens += hit;
    }
    return "";
  }

  std::string preempt(std::size_t i) {
    Sequence& s = *live_[i];
    // The blocks an immediate readmission must find again: the leading run of blocks that are
    // cached and chained to the block before them. (free() keeps them cached, or drops a block
    // whose content another block still caches; lookup finds one of the copies either way.)
    int own = 0;
    BlockRef parent;
    for (BlockId b : s.kv.blocks) {
      const Block& blk = kv_.pool().block(b);
      if (!blk.cached || blk.parent != parent) break;
      parent = kv_.pool().ref(b);
      ++own;
    }
    const std::vector<BlockId> table = s.kv.blocks;
    kv_.free(s);
    if (std::string err = check_freed_tail_first(table); !err.empty()) return err;
    s.num_computed_tokens = 0;
    ++s.num_preemptions;  // as the scheduler's preemption: its readmission is no prefix query
    preempted_.push_back(std::move(live_[i]));
    live_.erase(live_.begin() + std::ptrdiff_t(i));
    if (preempted_.size() > kMaxPreempted) preempted_.erase(preempted_.begin());
    Sequence& p = *preempted_.back();
    if (caching_ && coin(50)) {
      const int expect = std::min(own, max_hit(p) / bs_) * bs_;
      const int hit = kv_.lookup_prefix(p);
      ++stats_.own_hit_checks;
      DUET_CHECK_OR_RETURN(hit >= expect, "sequence " << p.id << " preempted holding " << own
                                                      << " chained cached blocks finds only " << hit
                                                      << " tokens (expected >= " << expect << ")");
    }
    return "";
  }

  // free() releases a table tail first, so that a sequence's later blocks are evicted before the
  // earlier ones that more prefixes share: among the cached blocks it just freed that went to the
  // same retention list, a later table index comes earlier in the eviction order.
  std::string check_freed_tail_first(const std::vector<BlockId>& table) {
    const std::vector<BlockId> order = kv_.pool().eviction_order();
    std::vector<int> pos(std::size_t(kv_.pool().num_blocks()), -1);
    for (std::size_t k = 0; k < order.size(); ++k) pos[std::size_t(order[k])] = int(k);
    int last_pos[kNumPriorities];
    std::fill(std::begin(last_pos), std::end(last_pos), -1);
    for (std::size_t i = table.size(); i-- > 0;) {
      const BlockId b = table[i];
      const Block& blk = kv_.pool().block(b);
      if (blk.ref_count != 0 || !blk.cached) continue;
      DUET_CHECK_OR_RETURN(pos[std::size_t(b)] > last_pos[blk.priority],
                           "free did not release tail first: block " << b << " (index " << i
                                                                     << ") is evicted after a later one");
      last_pos[blk.priority] = pos[std::size_t(b)];
    }
    return "";
  }

  // allocate_slots, checking that a refusal changes nothing ("all or nothing").
  bool allocate(Sequence& s, int n, int hit, Effect& e, std::string& err) {
    const std::vector<BlockId> blocks = s.kv.blocks;
    const int slots = s.kv.num_slots;
    const int cached_blocks = s.kv.num_cached_blocks;
    const KvUsage u0 = kv_.usage();
    const KvCounters k0 = kv_.counters();
    const std::vector<BlockId> order0 = kv_.pool().eviction_order();
    const int begin = std::max(slots, hit);
    if (!kv_.allocate_slots(s, n, hit)) {
      ++stats_.failed_allocations;
      const KvUsage u1 = kv_.usage();
      const KvCounters k1 = kv_.counters();
      const bool unchanged = s.kv.blocks == blocks && s.kv.num_slots == slots &&
                             s.kv.num_cached_blocks == cached_blocks && u1.used_blocks == u0.used_blocks &&
                             u1.cached_blocks == u0.cached_blocks && u1.filled_tokens == u0.filled_tokens &&
                             k1.query_tokens == k0.query_tokens && k1.hit_tokens == k0.hit_tokens &&
                             k1.evictions == k0.evictions && k1.cow_copies == k0.cow_copies &&
                             kv_.pool().eviction_order() == order0;
      if (!unchanged)
        err = "refused allocate_slots(seq " + std::to_string(s.id) + ", " + std::to_string(n) + ", hit " +
              std::to_string(hit) + ") changed the allocator's state";
      return false;
    }
    if (blocks.empty() && caching_ && s.num_preemptions == 0) {
      expected_query_tokens_ += s.num_tokens();
      expected_hit_tokens_ += hit;
    }
    e = {&s, begin, begin + n, hit};
    return true;
  }

  // --- the model ------------------------------------------------------------------------------
  // Replays an operation on the model: queued copies, then the writes of the forward pass, then
  // which blocks became cached (recording the prefix each stands for) or lost their content.
  std::string apply(const Effect& e) {
    const BlockPool& pool = kv_.pool();
    std::fill(holders_.begin(), holders_.end(), 0);
    for (const auto& s : live_)
      for (BlockId b : s->kv.blocks) ++holders_[std::size_t(b)];

    for (const BlockCopy& c : kv_.take_copies()) {
      ++copies_taken_;
      ++stats_.copies;
      DUET_CHECK_OR_RETURN(c.src != c.dst, "block copy " << c.src << " -> " << c.dst << " onto itself");
      DUET_CHECK_OR_RETURN(e.writer != nullptr,
                           "a block copy was queued by an operation that allocated nothing");
      DUET_CHECK_OR_RETURN(
          holders_[std::size_t(c.dst)] == 1 && pool.block(c.dst).ref_count == 1,
          "copy destination " << c.dst << " is held by " << holders_[std::size_t(c.dst)] << " sequences");
      DUET_CHECK_OR_RETURN(std::find(e.writer->kv.blocks.begin(), e.writer->kv.blocks.end(), c.dst) !=
                               e.writer->kv.blocks.end(),
                           "copy destination " << c.dst << " is not in the writing sequence's table");
      content_[std::size_t(c.dst)] = content_[std::size_t(c.src)];
    }
    if (e.writer) {
      const Sequence& s = *e.writer;
      for (int slot = e.write_begin; slot < e.write_end; ++slot)
        content_[std::size_t(s.kv.blocks[std::size_t(slot / bs_)])][std::size_t(slot % bs_)] =
            s.tokens[std::size_t(slot)];
    }

    for (BlockId b = 0; b < pool.num_blocks(); ++b) {
      const Block& blk = pool.block(b);
      CacheState& was = state_[std::size_t(b)];
      if (blk.generation != was.generation) {
        DUET_CHECK_OR_RETURN(was.cached,
                             "generation of block " << b << " changed although it held nothing cached");
        evictions_seen_ += blk.generation - was.generation;
        stats_.evictions += blk.generation - was.generation;
      }
      if (blk.cached && (!was.cached || pool.ref(b) != was.content)) {
        // Newly cached: only the writing sequence can have done it, from its own tokens.
        DUET_CHECK_OR_RETURN(e.writer != nullptr,
                             "block " << b << " became cached in an operation that allocated nothing");
        const auto& table = e.writer->kv.blocks;
        const auto it = std::find(table.begin(), table.end(), b);
        DUET_CHECK_OR_RETURN(it != table.end(),
                             "block " << b << " became cached but the writing sequence does not hold it");
        const std::size_t len = std::size_t(it - table.begin() + 1) * std::size_t(bs_);
        DUET_CHECK_OR_RETURN(len <= e.writer->tokens.size(),
                             "block " << b << " cached before its tokens are known");
        CachedPrefix& entry = cached_[b];
        entry.tokens.assign(e.writer->tokens.begin(), e.writer->tokens.begin() + std::ptrdiff_t(len));
        entry.fp = kFpStart;
        for (std::size_t j = 0; j < len; ++j) {
          if (j + std::size_t(bs_) == len) entry.parent_fp = entry.fp;
          entry.fp = fp_extend(entry.fp, entry.tokens[j]);
        }
      } else if (!blk.cached) {
        cached_.erase(b);
      }
      was = {blk.cached, blk.generation, pool.ref(b)};
    }
    return "";
  }

  // The key property of prefix caching: every block a hit handed out stands for exactly the
  // prefix of the hitting sequence up to and including that block.
  std::string check_hit(const Sequence& s, int hit) {
    for (int i = 0; i < hit / bs_; ++i) {
      const BlockId b = s.kv.blocks[std::size_t(i)];
      const auto it = cached_.find(b);
      DUET_CHECK_OR_RETURN(it != cached_.end(), "prefix hit returned block " << b << " that is not cached");
      const std::vector<TokenId> want(s.tokens.begin(), s.tokens.begin() + std::ptrdiff_t((i + 1) * bs_));
      DUET_CHECK_OR_RETURN(it->second.tokens == want, "prefix hit of sequence "
                                                          << s.id << " returned block " << b << " at index "
                                                          << i << ", cached for a different prefix");
    }
    return "";
  }

  // A decode batch of every live sequence, whatever forks, hits and copies made the tables:
  // decode_distinct_context_tokens (shape_of's sorted trie) counts each run of leading blocks once,
  // as a map keyed by the runs themselves does; and it lies between the tokens of the distinct
  // blocks (which also counts a block shared after different blocks once) and every token read.
  std::string check_distinct_context() {
    Batch batch;
    batch.block_size = bs_;
    // A run of leading blocks is its last block after the run before it: (parent run, block) ->
    // (run, tokens read from its last block).
    std::map<std::pair<int, BlockId>, std::pair<int, int>> runs;
    std::map<BlockId, int> blocks;  // tokens read from each block
    for (const auto& sp : live_) {
      const int context = sp->kv.num_slots;
      if (context == 0) continue;
      batch.items.push_back({sp.get(), context, 1, Want::Sample, true});
      int parent = -1;
      for (int i = 0; i * bs_ < context; ++i) {
        const BlockId b = sp->kv.blocks[std::size_t(i)];
        const int tokens = std::min(bs_, context - i * bs_);
        auto& [run, run_tokens] = runs.try_emplace({parent, b}, int(runs.size()), 0).first->second;
        run_tokens = std::max(run_tokens, tokens);
        parent = run;
        int& block = blocks[b];
        block = std::max(block, tokens);
      }
    }
    std::int64_t by_runs = 0, by_blocks = 0;
    for (const auto& [key, run] : runs) by_runs += run.second;
    for (const auto& [block, tokens] : blocks) by_blocks += tokens;
    const BatchShape shape = shape_of(batch);
    DUET_CHECK_OR_RETURN(shape.decode_distinct_context_tokens == by_runs,
                         "decode_distinct_context_tokens "
                             << shape.decode_distinct_context_tokens << " of " << shape.decode_context_tokens
                             << ", counting runs of leading blocks " << by_runs);
    DUET_CHECK_OR_RETURN(by_blocks <= by_runs && by_runs <= shape.decode_context_tokens,
                         "distinct blocks hold " << by_blocks << " tokens, runs " << by_runs << ", all "
                                                 << shape.decode_context_tokens);
    distinct_checked_ += shape.decode_context_tokens > by_runs;
    return "";
  }

  std::string check_all() {
    if (std::string err = check_distinct_context(); !err.empty()) return err;
    const BlockPool& pool = kv_.pool();
    const int nb = pool.num_blocks();
    std::unordered_map<std::uint64_t, BlockId> holder;  // a block caching each content
    int copies_seen = 0;
    for (BlockId b = 0; b < nb; ++b)
      if (pool.block(b).cached && !holder.emplace(pool.ref(b).content, b).second) ++copies_seen;
    copies_checked_ += copies_seen > 0;
    std::vector<std::int64_t> fill(std::size_t(nb), 0);  // tokens written per block, by our model
    std::vector<SeqId> stamp(std::size_t(nb), 0);

    for (const auto& sp : live_) {
      const Sequence& s = *sp;
      const KvState& kv = s.kv;
      DUET_CHECK_OR_RETURN(kv.num_slots == s.num_computed_tokens,
                           "sequence " << s.id << " covers " << kv.num_slots << " slots but computed "
                                       << s.num_computed_tokens);
      DUET_CHECK_OR_RETURN(
          int(kv.blocks.size()) == (kv.num_slots + bs_ - 1) / bs_,
          "sequence " << s.id << " holds " << kv.blocks.size() << " blocks for " << kv.num_slots << " slots");
      const int full = std::min(kv.num_slots, s.num_tokens()) / bs_;
      DUET_CHECK_OR_RETURN(kv.num_cached_blocks == (caching_ ? full : 0),
                           "sequence " << s.id << " has num_cached_blocks " << kv.num_cached_blocks
                                       << ", expected " << (caching_ ? full : 0));
      std::uint64_t fp = kFpStart;
      for (std::size_t i = 0; i < kv.blocks.size(); ++i) {
        const BlockId b = kv.blocks[i];
        DUET_CHECK_OR_RETURN(stamp[std::size_t(b)] != s.id,
                             "sequence " << s.id << " holds block " << b << " twice");
        stamp[std::size_t(b)] = s.id;
        const int slots_here = std::min(bs_, kv.num_slots - int(i) * bs_);
        fill[std::size_t(b)] = std::max<std::int64_t>(fill[std::size_t(b)], slots_here);
        // The KV in every slot the sequence covers is that of its own token.
        for (int j = 0; j < slots_here; ++j) {
          const TokenId want = s.tokens[i * std::size_t(bs_) + std::size_t(j)];
          DUET_CHECK_OR_RETURN(content_[std::size_t(b)][std::size_t(j)] == want,
                               "sequence " << s.id << " slot " << i * std::size_t(bs_) + std::size_t(j)
                                           << " (block " << b << ") holds the KV of token "
                                           << content_[std::size_t(b)][std::size_t(j)] << " instead of "
                                           << want);
          fp = fp_extend(fp, want);
        }
        // A cached block in its table stands for exactly its prefix.
        if (pool.block(b).cached) {
          const auto it = cached_.find(b);
          DUET_CHECK_OR_RETURN(it != cached_.end(), "cached block " << b << " unknown to the model");
          DUET_CHECK_OR_RETURN(slots_here == bs_ && it->second.tokens.size() == (i + 1) * std::size_t(bs_) &&
                                   it->second.fp == fp,
                               "sequence " << s.id << " holds block " << b << " at index " << i
                                           << ", which is cached for a different prefix");
        }
      }
      if (caching_ && kv.num_cached_blocks > 0) {
        // A block in use keeps its content, so the last cached block of the table still caches it.
        const BlockId lb = kv.blocks[std::size_t(kv.num_cached_blocks - 1)];
        DUET_CHECK_OR_RETURN(pool.block(lb).cached && kv.last_cached == pool.ref(lb),
                             "last_cached of sequence " << s.id << " is not the content of its block " << lb);
        const auto it = cached_.find(lb);
        DUET_CHECK_OR_RETURN(
            it != cached_.end() &&
                it->second.tokens ==
                    std::vector<TokenId>(s.tokens.begin(),
                                         s.tokens.begin() + std::ptrdiff_t(kv.num_cached_blocks * bs_)),
            "last_cached of sequence " << s.id << " (block " << lb << ") stands for a different prefix");
      }
    }
    for (const auto& sp : preempted_)
      DUET_CHECK_OR_RETURN(sp->kv.blocks.empty() && sp->kv.num_slots == 0 && sp->num_computed_tokens == 0,
                           "preempted sequence " << sp->id << " still holds KV");

    // Reference counts: exactly the table entries naming the block.
    std::fill(holders_.begin(), holders_.end(), 0);
    for (const auto& s : live_)
      for (BlockId b : s->kv.blocks) ++holders_[std::size_t(b)];
    int used = 0, cached = 0;
    std::int64_t filled = 0;
    for (BlockId b = 0; b < nb; ++b) {
      const Block& blk = pool.block(b);
      DUET_CHECK_OR_RETURN(blk.ref_count == holders_[std::size_t(b)],
                           "block " << b << " has ref_count " << blk.ref_count << " but "
                                    << holders_[std::size_t(b)] << " holders");
      if (blk.ref_count > 0) {
        ++used;
        filled += fill[std::size_t(b)];
      }
      cached += blk.cached;
    }
    DUET_CHECK_OR_RETURN(pool.num_free() + used == nb,
                         "num_free " << pool.num_free() << " + used " << used << " != " << nb);
    const KvUsage u = kv_.usage();
    DUET_CHECK_OR_RETURN(
        u.total_blocks == nb && u.used_blocks == used && u.cached_blocks == cached && u.block_size == bs_,
        "usage() reports " << u.used_blocks << " used / " << u.cached_blocks << " cached, expected " << used
                           << " / " << cached);
    DUET_CHECK_OR_RETURN(u.filled_tokens == filled,
                         "usage().filled_tokens " << u.filled_tokens << ", expected " << filled);

    // The eviction order: every free block once, nothing else; priorities ascending; blocks
    // holding nothing worth keeping ahead of every cached one.
    const std::vector<BlockId> order = pool.eviction_order();
    std::vector<char> seen(std::size_t(nb), 0);
    int last_key = 0;
    bool cached_seen = false;
    for (BlockId b : order) {
      const Block& blk = pool.block(b);
      DUET_CHECK_OR_RETURN(!seen[std::size_t(b)], "block " << b << " twice in the eviction order");
      seen[std::size_t(b)] = 1;
      DUET_CHECK_OR_RETURN(blk.ref_count == 0, "block " << b << " in the eviction order is held");
      const int key = blk.cached ? blk.priority : 0;
      DUET_CHECK_OR_RETURN(key >= last_key, "eviction order not by priority at block " << b);
      last_key = key;
      DUET_CHECK_OR_RETURN(blk.cached || !cached_seen,
                           "uncached free block " << b << " queued behind a cached one");
      cached_seen |= blk.cached;
    }
    DUET_CHECK_OR_RETURN(int(order.size()) == nb - used,
                         "eviction order has " << order.size() << " blocks, " << nb - used << " free");
    try {
      pool.check_consistency();
    } catch (const std::exception& ex) {
      return std::string("check_consistency: ") + ex.what();
    }

    // Cached blocks store the last block of the prefix the model says they stand for, and the
    // parent link (while live) names the block of the prefix one block shorter. By induction
    // along the links this is the walk from each block back to the root.
    DUET_CHECK_OR_RETURN(int(cached_.size()) == cached,
                         "model knows " << cached_.size() << " cached blocks, pool " << cached);
    for (const auto& [b, entry] : cached_) {
      const Block& blk = pool.block(b);
      DUET_CHECK_OR_RETURN(blk.cached, "block " << b << " in the model is not cached");
      const std::size_t len = entry.tokens.size();
      DUET_CHECK_OR_RETURN(len >= std::size_t(bs_) && len % std::size_t(bs_) == 0,
                           "cached prefix of block " << b << " has length " << len);
      const auto stored = pool.stored_tokens(b);
      DUET_CHECK_OR_RETURN(std::equal(stored.begin(), stored.end(), entry.tokens.end() - bs_),
                           "block " << b << " stores tokens other than the last block of its prefix");
      DUET_CHECK_OR_RETURN(
          std::equal(stored.begin(), stored.end(), content_[std::size_t(b)].begin()),
          "cached block " << b << " holds KV other than its stored tokens (written after caching?)");
      const BlockRef parent = blk.parent;
      if (parent == BlockRef{}) {
        DUET_CHECK_OR_RETURN(len == std::size_t(bs_),
                             "root block " << b << " stands for a prefix of " << len << " tokens");
      } else {
        DUET_CHECK_OR_RETURN(len > std::size_t(bs_),
                             "block " << b << " stands for a one-block prefix but has a parent");
        if (const auto h = holder.find(parent.content); h != holder.end()) {
          const auto pit = cached_.find(h->second);
          DUET_CHECK_OR_RETURN(
              pit != cached_.end() && pit->second.tokens.size() == len - std::size_t(bs_) &&
                  pit->second.fp == entry.parent_fp,
              "block " << b << "'s parent " << h->second << " stands for a different prefix");
        }
      }
    }

    const KvCounters k = kv_.counters();
    DUET_CHECK_OR_RETURN(k.cow_copies == copies_taken_,
                         "cow_copies " << k.cow_copies << " but " << copies_taken_ << " copies taken");
    DUET_CHECK_OR_RETURN(k.query_tokens == expected_query_tokens_ && k.hit_tokens == expected_hit_tokens_,
                         "query/hit tokens " << k.query_tokens << "/" << k.hit_tokens << ", expected "
                                             << expected_query_tokens_ << "/" << expected_hit_tokens_);
    DUET_CHECK_OR_RETURN(k.evictions == evictions_seen_,
                         "evictions " << k.evictions << " but " << evictions_seen_ << " seen");
    return "";
  }

  int bs_;
  bool caching_;
  KvCacheManager kv_;
  std::mt19937_64 rng_;
  int max_len_;  // ordinary sequences stop growing here (mass allocations may be longer)
  std::vector<std::vector<TokenId>> prefixes_;
  std::vector<std::unique_ptr<Sequence>> live_;       // hold blocks
  std::vector<std::unique_ptr<Sequence>> preempted_;  // hold nothing until readmitted
  SeqId next_id_ = 1;
  Op op_ = Op::Admit;

  std::vector<std::vector<TokenId>> content_;  // per block: the token whose KV is in each slot
  std::vector<CacheState> state_;              // per block, as of the end of the last operation
  std::map<BlockId, CachedPrefix> cached_;     // per cached block: the prefix it stands for
  std::vector<int> holders_;
  std::int64_t copies_taken_ = 0;
  std::int64_t expected_query_tokens_ = 0;
  std::int64_t expected_hit_tokens_ = 0;
  std::int64_t evictions_seen_ = 0;
  std::int64_t distinct_checked_ = 0;  // checks where the live sequences shared a block
  std::int64_t copies_checked_ = 0;    // checks where two blocks cached one content
  KvStats stats_;
};

class KvProperty : public ::testing::TestWithParam<KvCase> {};

TEST_P(KvProperty, RandomOperationsKeepInvariants) {
  const test_support::PropertySoak soak = test_support::property_soak();
  KvCase c = GetParam();
  c.seed += soak.seed_offset;
  c.num_ops = int(std::min<std::int64_t>(std::int64_t(c.num_ops) * soak.scale, 1'000'000'000));
  KvModel model(c);
  for (int i = 0; i < c.num_ops; ++i) {
    const std::string err = model.step();
    ASSERT_TRUE(err.empty()) << c.name << ": seed " << c.seed << ", operation " << i << " ("
                             << model.op_name() << "): " << err;
  }
  const std::string err = model.release_all();
  ASSERT_TRUE(err.empty()) << c.name << ": seed " << c.seed << ", releasing everything: " << err;

  const KvStats& st = model.stats();
  for (int op = 0; op < kNumOps; ++op)
    EXPECT_GT(st.ops[op], 0) << "operation " << kOpNames[op] << " never ran";
  EXPECT_GT(st.failed_allocations, 0) << "the pool never ran out: the case does not test refusals";
  if (c.prefix_caching) {
    // Shared prefixes must really hit (with the constant hash too: lookup still finds blocks by
    // parent and tokens), and pool pressure must really evict.
    EXPECT_GT(st.hit_admissions, 0);
    EXPECT_GT(st.evictions, 0);
    EXPECT_GT(st.own_hit_checks, 0);
    EXPECT_GT(st.memo_lookups, 0) << "no lookup began from an earlier one's hits";
    EXPECT_GT(model.content_copy_checks(), 0) << "no two sequences ever cached one content side by side";
  } else {
    EXPECT_EQ(st.hit_tokens, 0);
    EXPECT_EQ(model.kv().usage().cached_blocks, 0);
  }
  if (c.block_size > 1) {
    EXPECT_GT(st.copies, 0) << "no copy-on-write happened";
  }
  EXPECT_GT(model.shared_block_checks(), 0) << "the live sequences never shared a block";
  std::cout << "[ stats    ] " << c.name << ": " << c.num_ops << " ops, " << st.admissions << " admissions ("
            << st.hit_admissions << " with hits, " << st.hit_tokens << " hit tokens), "
            << st.failed_allocations << " refused allocations, " << st.copies << " copies, " << st.evictions
            << " evictions\n";
}

// Block sizes 1, 4 and 16; pools from 8 to 512 blocks; prefix caching on and off; two cases with
// a hash function that makes every block collide. kv_bs4_pool64 alone runs 100,000 operations.
// No instantiation prefix, so that the tests are named KvProperty.RandomOperationsKeepInvariants/<case>.
INSTANTIATE_TEST_SUITE_P(
    , KvProperty,
    ::testing::Values(KvCase{"bs4_pool64", 0x5eed0001, 4, 64, true, false, 100'000},
                      KvCase{"bs1_pool8", 0x5eed0002, 1, 8, true, false, 20'000},
                      KvCase{"bs1_pool48", 0x5eed0003, 1, 48, true, false, 20'000},
                      KvCase{"bs4_pool24_nocache", 0x5eed0004, 4, 24, false, false, 20'000},
                      KvCase{"bs16_pool16", 0x5eed0005, 16, 16, true, false, 20'000},
                      KvCase{"bs16_pool512", 0x5eed0006, 16, 512, true, false, 10'000},
                      KvCase{"bs16_pool128_nocache", 0x5eed0007, 16, 128, false, false, 10'000},
                      KvCase{"bs1_pool32_collide", 0x5eed0008, 1, 32, true, true, 20'000},
                      KvCase{"bs4_pool64_collide", 0x5eed0009, 4, 64, true, true, 20'000},
                      KvCase{"bs16_pool32_collide", 0x5eed000a, 16, 32, true, true, 10'000}),
    [](const ::testing::TestParamInfo<KvCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace duet
