// Seeded property tests of the Scheduler, driven through duet::Engine with a scripted executor:
// random configurations, random arrivals of Generate and Score sequences, small KV pools so that
// preemption really happens. Every step is checked twice: inside the executor (the batch as the
// scheduler built it, before postprocess) and after the step (allocator state, finished
// sequences). A failing check prints the seed and the step index.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/engine.hpp"
#include "core/kv_cache_manager.hpp"
#include "core/naive_allocator.hpp"
#include "tests/support/test_support.hpp"

namespace duet {
namespace {

constexpr TokenId kVocab = 4;      // small, so that prompts share blocks and preempted
                                   // sequences resume from the prefix cache
constexpr TokenId kStopToken = 3;  // the stop token of sequences without ignore_eos
constexpr int kMaxModelLen = 128;  // prompts up to 100 tokens plus up to 20 generated
constexpr int kMaxPrompt = 100;
constexpr int kMaxNewTokens = 20;

enum class Allocator { Paged, Naive };

struct SchedCase {
  std::uint64_t seed = 0;
  SchedulerConfig config;
  Allocator allocator = Allocator::Paged;
  int block_size = 16;
  int num_blocks = 0;
  bool prefix_caching = true;
  int num_seqs = 0;      // arrivals in all
  int arrival_pct = 30;  // chance per step that a burst of 1..3 arrives
};

std::string describe(const SchedCase& c) {
  std::ostringstream os;
  os << "seed " << c.seed << " (" << (c.allocator == Allocator::Paged ? "paged" : "naive") << ", block_size "
     << c.block_size << ", " << c.num_blocks << " blocks, caching " << c.prefix_caching << ", max_num_seqs "
     << c.config.max_num_seqs << ", max_num_batched_tokens " << c.config.max_num_batched_tokens
     << ", chunked " << c.config.enable_chunked_prefill << ", reserve_full_prompt "
     << c.config.reserve_full_prompt << ", " << c.num_seqs << " sequences)";
  return os.str();
}

template <class T>
std::string str(const std::vector<T>& v) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < v.size(); ++i) os << (i ? " " : "") << v[i];
  os << "]";
  return os.str();
}

// The score positions a Score item must score: those not scored yet (a sequence recomputed after
// preemption is not scored twice) inside the item's chunk [context_len, end), in order.
std::vector<int> due_positions(const BatchItem& item) {
  std::vector<int> due;
  const Sequence& s = *item.seq;
  for (std::size_t k = std::min(s.scores.size(), s.score_positions.size()); k < s.score_positions.size();
       ++k) {
    const int p = s.score_positions[k];
    if (p >= item.context_len && p < item.context_len + item.num_new_tokens) due.push_back(p);
  }
  return due;
}

// Returns the token the test's generator draws for every Sample item and, for every due score
// position of a Score item, the position itself as the score (so that the order in which the
// engine hands scores out can be checked). Calls `inspect` on each batch first.
class ScriptedExecutor final : public Executor {
 public:
  explicit ScriptedExecutor(std::mt19937_64& rng) : rng_(rng) {}
  std::function<void(const Batch&)> inspect;

  StepResult execute(const Batch& batch) override {
    if (inspect) inspect(batch);
    StepResult r;
    r.duration_s = 0.001;
    r.tokens.assign(batch.items.size(), kNoToken);
    for (std::size_t i = 0; i < batch.items.size(); ++i) {
      const BatchItem& item = batch.items[i];
      if (item.want == Want::Sample) r.tokens[i] = TokenId(rng_() % kVocab);
      if (item.want == Want::Score)
        for (int p : due_positions(item)) r.scores.push_back(float(p));
    }
    return r;
  }

 private:
  std::mt19937_64& rng_;
};

struct RunStats {
  std::int64_t steps = 0;
  std::int64_t preemptions = 0;
  std::int64_t hit_tokens = 0;
  std::int64_t finished = 0;
};

class SchedulerRun {
 public:
  explicit SchedulerRun(const SchedCase& c) : c_(c), rng_(c.seed), executor_(rng_) {
    std::unique_ptr<KvAllocator> kv;
    if (c.allocator == Allocator::Paged) {
      auto paged = std::make_unique<KvCacheManager>(KvCacheConfig{
          .num_blocks = c.num_blocks, .block_size = c.block_size, .enable_prefix_caching = c.prefix_caching});
      paged_ = paged.get();
      kv = std::move(paged);
    } else {
      auto naive = std::make_unique<NaiveAllocator>(c.num_blocks, c.block_size, c.config.max_model_len);
      naive_ = naive.get();
      kv = std::move(naive);
    }
    engine_ = std::make_unique<Engine>("prop", c.config, std::move(kv), executor_);
    executor_.inspect = [this](const Batch& b) {
      if (batch_error_.empty()) batch_error_ = check_batch(b);
    };
    for (int p = 0; p < 3; ++p) prefixes_.push_back(random_tokens(between(1, 60)));
  }

  // A run that failed half-way still has sequences in the engine; release them first, so that
  // its failure is reported rather than EngineDestroyedWhileSequencesRun's bug.
  ~SchedulerRun() {
    for (const Sequence* s : std::vector<Sequence*>(live_)) engine_->release(s->id);
  }

  // Runs until every sequence has arrived and finished; empty when every check held.
  std::string run() {
    double now = 0.0;
    while (arrived_ < c_.num_seqs || engine_->has_work()) {
      // Arrivals: bursts at random steps, and at once whenever the engine would sit idle.
      if (arrived_ < c_.num_seqs && (!engine_->has_work() || coin(c_.arrival_pct)))
        for (int k = between(1, 3); k > 0 && arrived_ < c_.num_seqs; --k) arrive(now);

      snapshot();
      const StepOutcome out = engine_->step(now);
      now += 0.001;
      const std::string where = "step " + std::to_string(stats_.steps) + ": ";
      ++stats_.steps;
      if (!batch_error_.empty()) return where + batch_error_;
      // Progress: running_[0] (or the admitted head) computes at least one token every step and
      // is never a victim while others run, so no step is empty and the run needs at most one
      // step per token that has to be computed.
      DUET_CHECK_OR_RETURN(!out.batch.empty(), where << "empty batch while work is pending ("
                                                     << engine_->scheduler().num_waiting() << " waiting, "
                                                     << engine_->scheduler().num_running() << " running)");
      DUET_CHECK_OR_RETURN(stats_.steps <= step_cap_,
                           where << "more steps than tokens to compute: no progress");
      if (std::string err = after_step(out); !err.empty()) return where + err;
    }
    DUET_CHECK_OR_RETURN(live_.empty(), live_.size() << " sequences never finished");
    if (paged_) {
      DUET_CHECK_OR_RETURN(paged_->pool().num_free() == paged_->pool().num_blocks(),
                           "blocks still held at the end");
      stats_.hit_tokens = paged_->counters().hit_tokens;
    }
    stats_.preemptions = engine_->scheduler().num_preemptions();
    return "";
  }

  const RunStats& stats() const { return stats_; }
  const std::vector<double>& first_scheduled_by_arrival() const { return first_scheduled_; }

 private:
  struct Before {  // a sequence as it was just before the step
    SeqStatus status = SeqStatus::Waiting;
    int computed = 0;
  };
  struct Expect {  // what a sequence was created with
    SeqKind kind = SeqKind::Generate;
    int prompt = 0;
    int max_tokens = 0;
    bool ignore_eos = false;
    std::vector<int> score_positions;
  };

  std::uint64_t below(std::uint64_t n) { return rng_() % n; }
  int between(int lo, int hi) { return lo + int(below(std::uint64_t(hi - lo + 1))); }
  bool coin(int percent) { return int(below(100)) < percent; }
  std::vector<TokenId> random_tokens(int n) {
    std::vector<TokenId> t(static_cast<std::size_t>(n));
    for (TokenId& x : t) x = TokenId(below(kVocab));
    return t;
  }

  void arrive(double now) {
    Sequence s;
    s.id = SeqId(arrived_);
    const int len = between(1, kMaxPrompt);
    if (coin(60)) {  // most prompts start with a shared prefix
      s.tokens = prefixes_[below(prefixes_.size())];
      if (int(s.tokens.size()) > len) s.tokens.resize(std::size_t(len));
    }
    const auto rest = random_tokens(len - int(s.tokens.size()));
    s.tokens.insert(s.tokens.end(), rest.begin(), rest.end());
    s.num_prompt_tokens = len;
    Expect e;
    e.prompt = len;
    if (coin(75)) {
      s.kind = SeqKind::Generate;
      s.sampling.max_tokens = between(1, kMaxNewTokens);
      s.sampling.ignore_eos = coin(70);
      s.sampling.stop_token_ids = {kStopToken};
      e.max_tokens = s.sampling.max_tokens;
      e.ignore_eos = s.sampling.ignore_eos;
      step_cap_ += len + e.max_tokens;
    } else {
      s.kind = SeqKind::Score;
      for (int k = between(0, 3); k > 0; --k) s.score_positions.push_back(between(0, len - 1));
      // The scheduler wants them ascending, each once.
      std::sort(s.score_positions.begin(), s.score_positions.end());
      s.score_positions.erase(std::unique(s.score_positions.begin(), s.score_positions.end()),
                              s.score_positions.end());
      step_cap_ += len;
    }
    e.kind = s.kind;
    Sequence& ref = engine_->add(std::move(s), now);
    e.score_positions = ref.score_positions;  // as the scheduler defaulted them
    expect_.push_back(std::move(e));
    before_.emplace_back();
    first_scheduled_.push_back(kNotYet);
    live_.push_back(&ref);
    ++arrived_;
  }

  void snapshot() {
    for (Sequence* s : live_) before_[s->id] = {s->status, s->num_computed_tokens};
  }

  // The batch as the scheduler handed it to the executor, before postprocess.
  std::string check_batch(const Batch& b) {
    const SchedulerConfig& cfg = c_.config;
    const Scheduler& sched = engine_->scheduler();
    const int bs = engine_->kv().block_size();
    DUET_CHECK_OR_RETURN(b.num_tokens() <= cfg.max_num_batched_tokens,
                         "batch of " << b.num_tokens() << " tokens over max_num_batched_tokens "
                                     << cfg.max_num_batched_tokens);
    DUET_CHECK_OR_RETURN(sched.num_running() <= std::size_t(cfg.max_num_seqs),
                         sched.num_running() << " running sequences over max_num_seqs " << cfg.max_num_seqs);
    int prefill = 0, decode = 0;
    bool admitted = false;
    std::vector<SeqId> ids;
    for (const BatchItem& item : b.items) {
      const Sequence& s = *item.seq;
      const Before& was = before_[s.id];
      ids.push_back(s.id);
      (item.is_decode ? decode : prefill) += item.num_new_tokens;
      const int end = item.context_len + item.num_new_tokens;
      DUET_CHECK_OR_RETURN(s.status == SeqStatus::Running,
                           "sequence " << s.id << " in the batch is not running");
      DUET_CHECK_OR_RETURN(item.num_new_tokens >= 1 && end <= s.num_tokens(),
                           "sequence " << s.id << " scheduled for [" << item.context_len << ", " << end
                                       << ") of " << s.num_tokens() << " tokens");
      DUET_CHECK_OR_RETURN(item.context_len == s.num_computed_tokens,
                           "sequence " << s.id << ": context_len " << item.context_len << " but "
                                       << s.num_computed_tokens << " computed");
      if (was.status == SeqStatus::Running) {
        DUET_CHECK_OR_RETURN(item.context_len == was.computed,
                             "running sequence " << s.id << " resumes at " << item.context_len
                                                 << " after computing " << was.computed);
      } else {
        // An admission starts after its prefix hit: whole blocks, never the last token.
        admitted = true;
        DUET_CHECK_OR_RETURN(was.status == SeqStatus::Waiting && was.computed == 0,
                             "admitted sequence " << s.id << " was not waiting empty-handed");
        DUET_CHECK_OR_RETURN(item.context_len % bs == 0 && item.context_len <= s.num_tokens() - 1 &&
                                 (item.context_len == 0 || (paged_ && c_.prefix_caching)),
                             "sequence " << s.id << " admitted at context_len " << item.context_len);
      }
      // The block table covers every slot the step writes.
      DUET_CHECK_OR_RETURN(s.kv.blocks.size() * std::size_t(bs) >= std::size_t(end) && s.kv.num_slots == end,
                           "sequence " << s.id << " has " << s.kv.blocks.size() << " blocks ("
                                       << s.kv.num_slots << " slots) for " << end << " tokens");
      if (!cfg.enable_chunked_prefill)
        DUET_CHECK_OR_RETURN(end == s.num_tokens(),
                             "chunked prefill is off but sequence " << s.id << " got a partial chunk");
      DUET_CHECK_OR_RETURN(item.is_decode == (item.num_new_tokens == 1 && item.context_len > 0),
                           "sequence " << s.id << " is_decode wrong");
      // What the executor must produce for it.
      if (s.kind == SeqKind::Generate) {
        DUET_CHECK_OR_RETURN(
            (item.want == Want::Sample) == (end == s.num_tokens()) && item.want != Want::Score,
            "generate sequence " << s.id << " has the wrong want");
      } else {
        DUET_CHECK_OR_RETURN((item.want == Want::Score) == !due_positions(item).empty(),
                             "score sequence " << s.id << " has the wrong want");
        // Every position whose logits are still needed lies ahead of the context: a prefix hit
        // (or anything else) that skipped one would leave it unscored for good.
        const std::size_t scored = std::min(s.scores.size(), s.score_positions.size());
        DUET_CHECK_OR_RETURN(
            scored == s.score_positions.size() || s.score_positions[scored] >= item.context_len,
            "score sequence " << s.id << " resumes at " << item.context_len << " past unscored position "
                              << s.score_positions[scored] << " (prefix hit " << s.num_cached_prompt_tokens
                              << ")");
      }
      // First admissions follow arrival order (FCFS); a re-admission after preemption may not.
      if (std::isnan(first_scheduled_[s.id])) {
        DUET_CHECK_OR_RETURN(s.num_preemptions == 0,
                             "sequence " << s.id << " preempted before it was ever scheduled");
        DUET_CHECK_OR_RETURN(std::int64_t(s.arrival_order) > last_first_admitted_,
                             "sequence " << s.id << " (arrival " << s.arrival_order
                                         << ") first scheduled after arrival " << last_first_admitted_);
        last_first_admitted_ = std::int64_t(s.arrival_order);
        first_scheduled_[s.id] = double(stats_.steps);
      }
    }
    DUET_CHECK_OR_RETURN(prefill == b.num_prefill_tokens && decode == b.num_decode_tokens,
                         "batch token counts " << b.num_prefill_tokens << "+" << b.num_decode_tokens
                                               << " but items add up to " << prefill << "+" << decode);
    std::sort(ids.begin(), ids.end());
    DUET_CHECK_OR_RETURN(std::adjacent_find(ids.begin(), ids.end()) == ids.end(),
                         "a sequence appears twice in the batch");

    for (const Sequence* p : b.preempted) {
      DUET_CHECK_OR_RETURN(!std::binary_search(ids.begin(), ids.end(), p->id),
                           "preempted sequence " << p->id << " is in the batch");
      DUET_CHECK_OR_RETURN(before_[p->id].status == SeqStatus::Running,
                           "preempted sequence " << p->id << " was not running");
      DUET_CHECK_OR_RETURN(
          p->status == SeqStatus::Waiting && p->num_computed_tokens == 0 && p->kv.blocks.empty(),
          "preempted sequence " << p->id << " keeps its state");
    }
    DUET_CHECK_OR_RETURN(b.preempted.empty() || !admitted, "admissions in a step that preempted");
    DUET_CHECK_OR_RETURN(b.copies.empty(), "copies queued without any fork");
    return check_kv();
  }

  // The allocator against the sequences' block tables.
  std::string check_kv() {
    const int bs = engine_->kv().block_size();
    const KvUsage u = engine_->kv().usage();
    std::int64_t filled = 0;
    if (paged_) {
      const BlockPool& pool = paged_->pool();
      const int nb = pool.num_blocks();
      std::vector<int> holders(std::size_t(nb), 0);
      std::vector<int> fill(std::size_t(nb), 0);
      for (const Sequence* s : live_) {
        for (std::size_t i = 0; i < s->kv.blocks.size(); ++i) {
          const BlockId b = s->kv.blocks[i];
          ++holders[std::size_t(b)];
          fill[std::size_t(b)] = std::max(fill[std::size_t(b)], std::min(bs, s->kv.num_slots - int(i) * bs));
        }
      }
      int used = 0;
      for (BlockId b = 0; b < nb; ++b) {
        DUET_CHECK_OR_RETURN(pool.block(b).ref_count == holders[std::size_t(b)],
                             "block " << b << " has ref_count " << pool.block(b).ref_count << " but "
                                      << holders[std::size_t(b)] << " holders");
        if (holders[std::size_t(b)] > 0) {
          ++used;
          filled += fill[std::size_t(b)];
        }
      }
      DUET_CHECK_OR_RETURN(pool.num_free() + used == nb && u.used_blocks == used,
                           "num_free " << pool.num_free() << ", usage " << u.used_blocks << ", counted "
                                       << used << " of " << nb);
      const std::vector<BlockId> order = pool.eviction_order();
      std::vector<char> seen(std::size_t(nb), 0);
      for (BlockId b : order) {
        DUET_CHECK_OR_RETURN(!seen[std::size_t(b)] && holders[std::size_t(b)] == 0,
                             "eviction order lists block " << b << " wrongly");
        seen[std::size_t(b)] = 1;
      }
      DUET_CHECK_OR_RETURN(int(order.size()) == nb - used, "eviction order misses free blocks");
      try {
        pool.check_consistency();
      } catch (const std::exception& ex) {
        return std::string("check_consistency: ") + ex.what();
      }
    } else {
      // A region per sequence that holds KV, each a run of consecutive blocks.
      std::vector<char> region_taken(std::size_t(naive_->num_regions()), 0);
      int regions = 0;
      for (const Sequence* s : live_) {
        if (s->kv.naive_region < 0) {
          DUET_CHECK_OR_RETURN(s->kv.blocks.empty(), "sequence " << s->id << " has blocks but no region");
          continue;
        }
        DUET_CHECK_OR_RETURN(!region_taken[std::size_t(s->kv.naive_region)],
                             "region " << s->kv.naive_region << " given twice");
        region_taken[std::size_t(s->kv.naive_region)] = 1;
        ++regions;
        for (std::size_t i = 0; i < s->kv.blocks.size(); ++i)
          DUET_CHECK_OR_RETURN(
              s->kv.blocks[i] == s->kv.naive_region * naive_->blocks_per_region() + BlockId(i),
              "sequence " << s->id << "'s blocks are not its region");
        filled += s->kv.num_slots;
      }
      DUET_CHECK_OR_RETURN(naive_->num_regions() - naive_->free_regions() == regions &&
                               u.used_blocks == regions * naive_->blocks_per_region(),
                           regions << " regions held but the allocator counts "
                                   << naive_->num_regions() - naive_->free_regions());
    }
    DUET_CHECK_OR_RETURN(u.filled_tokens == filled,
                         "usage().filled_tokens " << u.filled_tokens << ", expected " << filled);
    return "";
  }

  std::string after_step(const StepOutcome& out) {
    for (Sequence* s : out.finished) {
      const Expect& e = expect_[s->id];
      DUET_CHECK_OR_RETURN(s->finished() && s->kv.blocks.empty(),
                           "finished sequence " << s->id << " keeps its KV");
      if (e.kind == SeqKind::Generate) {
        const int n = s->num_output_tokens();
        DUET_CHECK_OR_RETURN(s->num_computed_tokens == s->num_tokens() - 1,
                             "sequence " << s->id << " finished uncomputed");
        if (e.ignore_eos) {
          DUET_CHECK_OR_RETURN(s->finish_reason == FinishReason::Length && n == e.max_tokens,
                               "sequence " << s->id << " with ignore_eos finished with " << n << " of "
                                           << e.max_tokens << " tokens");
        } else {
          const bool stopped =
              s->finish_reason == FinishReason::Stop && s->tokens.back() == kStopToken && n <= e.max_tokens;
          const bool length = s->finish_reason == FinishReason::Length && n == e.max_tokens;
          DUET_CHECK_OR_RETURN(stopped || length,
                               "sequence " << s->id << " finished wrongly with " << n << " tokens");
          // No stop token before the last one.
          DUET_CHECK_OR_RETURN(std::count(s->tokens.begin() + e.prompt, s->tokens.end() - 1, kStopToken) == 0,
                               "sequence " << s->id << " generated past a stop token");
        }
      } else {
        DUET_CHECK_OR_RETURN(
            s->finish_reason == FinishReason::Scored && s->num_computed_tokens == s->num_tokens(),
            "score sequence " << s->id << " finished wrongly");
        std::vector<float> want(e.score_positions.begin(), e.score_positions.end());
        // One score per position, in position order, however often it was preempted or hit.
        DUET_CHECK_OR_RETURN(s->scores == want, "score sequence "
                                                    << s->id << " got " << s->scores.size() << " scores for "
                                                    << want.size() << " positions (" << str(want) << " <- "
                                                    << str(s->scores) << "; " << s->num_tokens()
                                                    << " tokens, prefix hit " << s->num_cached_prompt_tokens
                                                    << ", preempted " << s->num_preemptions << " times)");
      }
      std::erase(live_, s);
      engine_->release(s->id);  // at once, as Runtime::handle does
      ++stats_.finished;
    }
    std::size_t waiting = 0, running = 0;
    for (const Sequence* s : live_) {
      waiting += s->status == SeqStatus::Waiting;
      running += s->status == SeqStatus::Running;
      DUET_CHECK_OR_RETURN(
          s->status != SeqStatus::Waiting || (s->kv.blocks.empty() && s->num_computed_tokens == 0),
          "waiting sequence " << s->id << " holds KV");
      DUET_CHECK_OR_RETURN(s->status != SeqStatus::Running || s->kv.num_slots == s->num_computed_tokens,
                           "running sequence " << s->id << " covers " << s->kv.num_slots
                                               << " slots after computing " << s->num_computed_tokens);
    }
    const Scheduler& sched = engine_->scheduler();
    DUET_CHECK_OR_RETURN(sched.num_waiting() == waiting && sched.num_running() == running,
                         "scheduler counts " << sched.num_waiting() << " waiting / " << sched.num_running()
                                             << " running, sequences " << waiting << " / " << running);
    return check_kv();
  }

  SchedCase c_;
  std::mt19937_64 rng_;
  ScriptedExecutor executor_;
  std::unique_ptr<Engine> engine_;
  KvCacheManager* paged_ = nullptr;
  NaiveAllocator* naive_ = nullptr;
  std::vector<std::vector<TokenId>> prefixes_;
  std::vector<Sequence*> live_;            // added, not yet finished (owned by the engine)
  std::vector<Expect> expect_;             // by id (ids are arrival indices)
  std::vector<Before> before_;             // by id
  std::vector<double> first_scheduled_;    // step of the first scheduling, by id
  std::int64_t last_first_admitted_ = -1;  // arrival_order of the latest first admission
  int arrived_ = 0;
  std::int64_t step_cap_ = 0;
  std::string batch_error_;
  RunStats stats_;
};

// A random configuration from one seed. Paged pools hold at least one max_model_len sequence
// (otherwise a lone sequence could never finish) and at most three, so that preemption happens.
SchedCase random_case(std::uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  auto between = [&](int lo, int hi) { return lo + int(rng() % std::uint64_t(hi - lo + 1)); };
  SchedCase c;
  c.seed = seed;
  c.config.max_model_len = kMaxModelLen;
  c.config.enable_chunked_prefill = between(0, 99) < 85;
  c.config.max_num_batched_tokens =
      c.config.enable_chunked_prefill ? between(1, 256) : between(kMaxModelLen, 256);
  c.config.max_num_seqs = between(1, std::min(32, c.config.max_num_batched_tokens));  // at most the budget
  const int sizes[] = {1, 4, 16};
  c.block_size = sizes[between(0, 2)];
  const int per_seq = (kMaxModelLen + c.block_size - 1) / c.block_size;
  if (between(0, 99) < 15) {
    c.allocator = Allocator::Naive;
    c.num_blocks = per_seq * between(1, 4);
    c.prefix_caching = false;
  } else {
    c.num_blocks = between(per_seq, 3 * per_seq);
    c.prefix_caching = between(0, 99) < 75;
  }
  c.num_seqs = between(10, 60);
  c.arrival_pct = between(5, 60);
  c.config.reserve_full_prompt = between(0, 99) < 25;
  return c;
}

// Runs one case; adds its counts to `total`.
void run_case(const SchedCase& c, RunStats& total) {
  SchedulerRun run(c);
  const std::string err = run.run();
  ASSERT_TRUE(err.empty()) << describe(c) << ", " << err;
  total.steps += run.stats().steps;
  total.preemptions += run.stats().preemptions;
  total.hit_tokens += run.stats().hit_tokens;
  total.finished += run.stats().finished;
}

TEST(SchedulerProperty, RandomConfigurations) {
  // Seeds one after another until 100,000 steps (times the soak's scale) have been checked.
  const test_support::PropertySoak soak = test_support::property_soak();
  RunStats total;
  int runs = 0;
  for (std::uint64_t seed = 1 + soak.seed_offset; total.steps < 100'000 * soak.scale; ++seed, ++runs)
    ASSERT_NO_FATAL_FAILURE(run_case(random_case(seed), total));
  EXPECT_GT(total.preemptions, 0) << "the pools never ran short";
  EXPECT_GT(total.hit_tokens, 0) << "no prefix hit in any run";
  std::cout << "[ stats    ] " << runs << " runs, " << total.steps << " steps, " << total.finished
            << " sequences, " << total.preemptions << " preemptions, " << total.hit_tokens << " hit tokens\n";
}

// A case's max_num_seqs, with the budget raised to hold it (the scheduler refuses a budget below
// max_num_seqs, as vLLM does).
void set_max_num_seqs(SchedCase& c, int n) {
  c.config.max_num_seqs = n;
  c.config.max_num_batched_tokens = std::max(c.config.max_num_batched_tokens, n);
}

// Paged pools of exactly one max_model_len sequence, with and without prefix caching, so that
// preemption is frequent.
TEST(SchedulerProperty, TightPagedPool) {
  const test_support::PropertySoak soak = test_support::property_soak();
  RunStats total;
  const std::uint64_t first = 1000 + soak.seed_offset;
  for (std::uint64_t seed = first; seed < first + 6 * std::uint64_t(soak.scale); ++seed) {
    SchedCase c = random_case(seed);
    c.allocator = Allocator::Paged;
    c.num_blocks = (kMaxModelLen + c.block_size - 1) / c.block_size;
    c.prefix_caching = seed % 2 == 0;
    set_max_num_seqs(c, 16);
    ASSERT_NO_FATAL_FAILURE(run_case(c, total));
  }
  EXPECT_GT(total.preemptions, 0);
}

TEST(SchedulerProperty, NaiveAllocatorSmallPool) {
  RunStats total;
  for (std::uint64_t seed = 2000; seed < 2004; ++seed) {
    SchedCase c = random_case(seed);
    c.allocator = Allocator::Naive;
    c.prefix_caching = false;
    c.num_blocks =
        2 * ((kMaxModelLen + c.block_size - 1) / c.block_size) + 1;  // two regions and a spare block
    set_max_num_seqs(c, 8);
    ASSERT_NO_FATAL_FAILURE(run_case(c, total));
  }
}

TEST(SchedulerProperty, ChunkedPrefillOff) {
  RunStats total;
  for (std::uint64_t seed = 3000; seed < 3004; ++seed) {
    SchedCase c = random_case(seed);
    c.config.enable_chunked_prefill = false;
    c.config.max_num_batched_tokens = kMaxModelLen + int(seed % 4) * 32;
    ASSERT_NO_FATAL_FAILURE(run_case(c, total));
  }
}

// With memory and max_num_seqs to spare nothing is preempted, and sequences are first scheduled
// in arrival order (the per-step check asserts the order as it happens; here the outcome).
TEST(SchedulerProperty, FcfsWithAmpleMemory) {
  for (std::uint64_t seed = 4000; seed < 4004; ++seed) {
    SchedCase c = random_case(seed);
    c.allocator = Allocator::Paged;
    c.num_seqs = 60;
    set_max_num_seqs(c, c.num_seqs);
    c.num_blocks = c.num_seqs * ((kMaxModelLen + c.block_size - 1) / c.block_size);
    SchedulerRun run(c);
    const std::string err = run.run();
    ASSERT_TRUE(err.empty()) << describe(c) << ", " << err;
    EXPECT_EQ(run.stats().preemptions, 0) << describe(c);
    const std::vector<double>& first = run.first_scheduled_by_arrival();
    ASSERT_EQ(first.size(), std::size_t(c.num_seqs));
    EXPECT_TRUE(std::is_sorted(first.begin(), first.end())) << describe(c);
  }
}

// --- Minimised reproductions of the core bugs the random runs found -----------------------------
// Each failed against core/ as first read for these tests (scheduler.cpp with a vector running_
// and compact_running(); lookup_prefix holding back only the last token; engine.cpp scoring
// every position inside a chunk).

Sequence score_sequence(SeqId id, std::vector<TokenId> tokens, std::vector<int> positions) {
  Sequence s;
  s.id = id;
  s.kind = SeqKind::Score;
  s.tokens = std::move(tokens);
  s.num_prompt_tokens = s.num_tokens();
  s.score_positions = std::move(positions);
  return s;
}

// The same Score request twice. A prefix hit must stop before the first position still to be
// scored: when lookup_prefix held back only the last token, the second request was admitted
// after a hit of 8 tokens (two blocks of 4), position 3 was never computed, and the sequence
// finished Scored with one score for two positions.
TEST(SchedulerProperty, ScoreSequenceScoredInsidePrefixHit) {
  std::mt19937_64 rng(1);
  ScriptedExecutor executor(rng);
  Engine engine("score",
                SchedulerConfig{.max_num_seqs = 4, .max_num_batched_tokens = 64, .max_model_len = 64},
                std::make_unique<KvCacheManager>(KvCacheConfig{.num_blocks = 8, .block_size = 4}), executor);
  for (SeqId id : {1, 2}) {
    Sequence& s = engine.add(score_sequence(id, {0, 1, 2, 3, 0, 1, 2, 3, 0}, {3, 8}), 0.0);
    for (int step = 0; engine.has_work() && step < 10; ++step) engine.step(0.0);
    ASSERT_TRUE(s.finished());
    EXPECT_EQ(s.scores, (std::vector<float>{3, 8}))
        << "sequence " << id << " (prefix hit " << s.num_cached_prompt_tokens << " tokens) got "
        << str(s.scores);
  }
}

// A Score sequence that already received the score at position 1 is preempted (pool of three
// blocks of 4, no prefix caching) and recomputed from token 0 when readmitted. Position 1 must
// not be scored again: when Engine::postprocess scored every position inside a chunk, the
// sequence finished with three scores [1 1 7] for two positions.
TEST(SchedulerProperty, PreemptedScoreSequenceScoresEachPositionOnce) {
  std::mt19937_64 rng(1);
  ScriptedExecutor executor(rng);
  Engine engine("score", SchedulerConfig{.max_num_seqs = 4, .max_num_batched_tokens = 8, .max_model_len = 16},
                std::make_unique<KvCacheManager>(
                    KvCacheConfig{.num_blocks = 3, .block_size = 4, .enable_prefix_caching = false}),
                executor);
  Sequence g;
  g.id = 1;
  g.tokens = {0, 1, 2, 3};
  g.num_prompt_tokens = 4;
  g.sampling.max_tokens = 8;
  g.sampling.ignore_eos = true;
  engine.add(std::move(g), 0.0);
  // Step 1 admits both and scores position 1; in step 2 the generate sequence's decode and the
  // score sequence's second chunk do not both fit, and the score sequence is the victim.
  Sequence& s = engine.add(score_sequence(2, {0, 1, 2, 3, 0, 1, 2, 3}, {1, 7}), 0.0);
  for (int step = 0; engine.has_work() && step < 50; ++step) engine.step(0.0);
  ASSERT_TRUE(s.finished());
  ASSERT_GT(s.num_preemptions, 0) << "the scenario no longer preempts the score sequence";
  EXPECT_EQ(s.scores, (std::vector<float>{1, 7})) << "got " << str(s.scores);
}

// Runtime::handle releases a finished sequence as soon as the step that finished it is done, and
// Engine::release destroys it. The scheduler must not look at it again. When Scheduler::finish
// left it in running_ ("finished entries removed at the next step"), the next schedule() read
// the destroyed sequence in compact_running(): a heap-use-after-free under AddressSanitizer; in
// the random runs the memory had been reused and the scheduler counted a destroyed sequence as
// running. `reused` stands for any later allocation that takes the freed memory (with glibc it
// gets the very same address), so that a plain build fails the same way.
TEST(SchedulerProperty, ReleaseRightAfterFinishing) {
  std::mt19937_64 rng(1);
  ScriptedExecutor executor(rng);
  Engine engine("release",
                SchedulerConfig{.max_num_seqs = 4, .max_num_batched_tokens = 64, .max_model_len = 64},
                std::make_unique<KvCacheManager>(KvCacheConfig{.num_blocks = 8, .block_size = 4}), executor);
  for (SeqId id : {1, 2}) {
    Sequence s;
    s.id = id;
    s.tokens = {0, 1, 2, 3};
    s.num_prompt_tokens = 4;
    s.sampling.max_tokens = id == 1 ? 1 : 3;
    s.sampling.ignore_eos = true;
    engine.add(std::move(s), 0.0);
  }
  const StepOutcome first = engine.step(0.0);
  ASSERT_EQ(first.finished.size(), 1u);
  ASSERT_EQ(first.finished[0]->id, 1u);
  const auto released_at = reinterpret_cast<std::uintptr_t>(first.finished[0]);
  engine.release(1);  // what Runtime::handle does with a finished sequence
  auto reused = std::make_unique<Sequence>();
  reused->status = SeqStatus::Running;
  const bool same_memory = reinterpret_cast<std::uintptr_t>(reused.get()) == released_at;

  engine.step(0.0);
  EXPECT_EQ(engine.scheduler().num_running(), 1u)
      << "the scheduler still counts released sequence 1"
      << (same_memory ? " (its memory now holds another sequence)" : "");
  for (int step = 0; engine.has_work() && step < 10; ++step) engine.step(0.0);
  EXPECT_FALSE(engine.has_work()) << "a released sequence keeps the engine busy";
}

// An Engine destroyed while sequences still run (a simulation abandoned on an error, a test that
// fails half-way) must not touch the sequences it has already destroyed. Engine declares seqs_
// after scheduler_, so the sequences die first; with the scheduler's running list an intrusive
// list of hooks inside the sequences, ~Scheduler then unlinks freed memory. AddressSanitizer
// reports it as a heap-use-after-free; a plain build passes silently.
TEST(SchedulerProperty, EngineDestroyedWhileSequencesRun) {
  std::mt19937_64 rng(1);
  ScriptedExecutor executor(rng);
  auto engine = std::make_unique<Engine>(
      "teardown", SchedulerConfig{.max_num_seqs = 4, .max_num_batched_tokens = 64, .max_model_len = 64},
      std::make_unique<KvCacheManager>(KvCacheConfig{.num_blocks = 8, .block_size = 4}), executor);
  for (SeqId id : {1, 2}) {
    Sequence s;
    s.id = id;
    s.tokens = {0, 1, 2, 3};
    s.num_prompt_tokens = 4;
    s.sampling.max_tokens = 8;
    engine->add(std::move(s), 0.0);
  }
  engine->step(0.0);
  ASSERT_EQ(engine->scheduler().num_running(), 2u);
  engine.reset();
}

}  // namespace
}  // namespace duet
