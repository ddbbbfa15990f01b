#include "core/scheduler.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include <deque>
#include <memory>
#include <numeric>

#include "core/error.hpp"
#include "core/kv_cache_manager.hpp"

namespace duet {
namespace {

// A scheduler over a paged KV pool, with the engine's postprocess reduced to its essentials.
struct Rig {
  Rig(SchedulerConfig cfg, int blocks, int block_size = 16, SchedulerPolicy policy = {})
      : kv(KvCacheConfig{blocks, block_size, true}), sched(cfg, kv, std::move(policy)) {}

  Sequence& add(int prompt, int max_tokens = 4, TokenId first = 0) {
    auto s = std::make_unique<Sequence>();
    s->id = seqs.size() + 1;
    s->tokens.resize(std::size_t(prompt));
    std::iota(s->tokens.begin(), s->tokens.end(), first);
    s->num_prompt_tokens = prompt;
    s->sampling.max_tokens = max_tokens;
    s->sampling.ignore_eos = true;
    seqs.push_back(std::move(s));
    sched.add(*seqs.back());
    return *seqs.back();
  }

  Batch step() {
    Batch b = sched.schedule();
    for (const BatchItem& it : b.items) {
      Sequence& s = *it.seq;
      s.num_computed_tokens += it.num_new_tokens;
      if (it.want == Want::Sample) {
        s.tokens.push_back(9999);
        if (s.num_output_tokens() >= s.sampling.max_tokens) sched.finish(s, s.keep_kv);
      }
    }
    return b;
  }

  KvCacheManager kv;
  Scheduler sched;
  std::deque<std::unique_ptr<Sequence>> seqs;
};

TEST(Scheduler, RespectsTokenBudgetAndMaxNumSeqs) {
  Rig r({.max_num_seqs = 3, .max_num_batched_tokens = 50}, 100);
  for (int i = 0; i < 6; ++i) r.add(30, 5, i * 100);
  while (r.sched.has_work()) {
    const Batch b = r.step();
    EXPECT_LE(b.num_tokens(), 50);
    EXPECT_LE(r.sched.num_running(), 3u);
  }
}

TEST(Scheduler, ChunksALongPromptAcrossSteps) {
  Rig r({.max_num_seqs = 4, .max_num_batched_tokens = 64}, 100);
  Sequence& s = r.add(150, 1);
  std::vector<int> chunks;
  while (s.status != SeqStatus::Finished) {
    const Batch b = r.step();
    ASSERT_EQ(b.items.size(), 1u);
    chunks.push_back(b.items[0].num_new_tokens);
    EXPECT_EQ(b.items[0].want, chunks.size() < 3 ? Want::Nothing : Want::Sample);
  }
  EXPECT_EQ(chunks, (std::vector<int>{64, 64, 22}));
}

TEST(Scheduler, WithoutChunkedPrefillALongPromptWaitsForAWholeBudget) {
  Rig r({.max_num_seqs = 4,
         .max_num_batched_tokens = 100,
         .enable_chunked_prefill = false,
         .max_model_len = 100},
        100);
  Sequence& a = r.add(60, 3);
  Sequence& b = r.add(60, 3, 1000);
  Batch first = r.step();
  ASSERT_EQ(first.items.size(), 1u);
  EXPECT_EQ(first.items[0].seq, &a);
  Batch second = r.step();  // a decodes (1 token); b's 60 tokens fit in the remaining 99
  ASSERT_EQ(second.items.size(), 2u);
  EXPECT_EQ(second.items[1].seq, &b);
  EXPECT_EQ(second.items[1].num_new_tokens, 60);
}

TEST(Scheduler, RunningSequencesAreScheduledBeforeWaitingOnes) {
  Rig r({.max_num_seqs = 8, .max_num_batched_tokens = 40}, 100);
  Sequence& a = r.add(30, 10);
  r.step();
  Sequence& b = r.add(50, 10, 500);  // gets what the decode leaves of the budget
  const Batch batch = r.step();
  ASSERT_EQ(batch.items.size(), 2u);
  EXPECT_EQ(batch.items[0].seq, &a);
  EXPECT_TRUE(batch.items[0].is_decode);
  EXPECT_EQ(batch.items[1].seq, &b);
  EXPECT_EQ(batch.items[1].num_new_tokens, 39);
}

TEST(Scheduler, FcfsAdmitsInArrivalOrder) {
  Rig r({.max_num_seqs = 2, .max_num_batched_tokens = 1000}, 200);
  std::vector<Sequence*> order;
  for (int i = 0; i < 7; ++i) order.push_back(&r.add(20 + 7 * i, 3, 100 * i));
  std::vector<Sequence*> admitted;
  while (r.sched.has_work()) {
    for (const BatchItem& it : r.step().items)
      if (it.context_len == 0) admitted.push_back(it.seq);
  }
  EXPECT_EQ(admitted, order);
}

TEST(Scheduler, PreemptsTheLatestRunningAndResumesItFromThePrefixCache) {
  // 6 blocks of 4: two 10-token prompts take 3 blocks each; the first decode that crosses a
  // block boundary has no room and must preempt the later sequence.
  Rig r({.max_num_seqs = 4, .max_num_batched_tokens = 100}, 6, 4);
  Sequence& a = r.add(10, 6);
  Sequence& b = r.add(10, 6, 100);
  r.step();  // both prefilled: 6 blocks in use
  ASSERT_EQ(r.kv.usage().used_blocks, 6);
  Batch b1 = r.step();  // tokens 11: still within block 3
  EXPECT_TRUE(b1.preempted.empty());
  Batch b2 = r.step();  // token 12 fits too; 13 needs a fourth block
  Batch b3 = r.step();
  ASSERT_EQ(b3.preempted.size(), 1u);
  EXPECT_EQ(b3.preempted[0], &b);
  EXPECT_EQ(b.status, SeqStatus::Waiting);
  EXPECT_EQ(b.num_preemptions, 1);
  EXPECT_EQ(b.num_computed_tokens, 0);
  for (const BatchItem& it : b3.items) EXPECT_NE(it.seq, &b);
  // Run a to completion; b is then readmitted and its full blocks come back as hits, which the
  // prefix-cache statistics leave out (a re-admission is no query, as in vLLM V1).
  const KvCounters before = r.kv.counters();
  while (a.status != SeqStatus::Finished) r.step();
  int resumed_at = -1;
  while (b.status == SeqStatus::Waiting)
    for (const BatchItem& it : r.step().items)
      if (it.seq == &b) resumed_at = it.context_len;
  EXPECT_GE(resumed_at, 8) << "its two full blocks, not recomputed";
  EXPECT_EQ(r.kv.counters().query_tokens, before.query_tokens);
  EXPECT_EQ(r.kv.counters().hit_tokens, before.hit_tokens);
  while (r.sched.has_work()) r.step();
  EXPECT_EQ(b.num_output_tokens(), 6);
  EXPECT_EQ(r.sched.num_preemptions(), 1);
}

// A prompt whose first chunk fits but whose whole does not: admitted for its chunk, it is preempted
// on its next (the running sequence holds the rest), and recomputes. With reserve_full_prompt
// (vLLM's scheduler_reserve_full_isl) it waits until the whole prompt's blocks are free.
TEST(Scheduler, ReserveFullPromptWaitsForTheWholePromptsBlocks) {
  for (const bool reserve : {false, true}) {
    SCOPED_TRACE(reserve ? "reserve_full_prompt" : "first chunk only");
    Rig r({.max_num_seqs = 4, .max_num_batched_tokens = 64, .reserve_full_prompt = reserve}, 10);
    Sequence& a = r.add(64, 3);
    r.step();                          // a's prompt: 4 of the 10 blocks
    Sequence& b = r.add(96, 1, 1000);  // 6 blocks; a's decodes take a fifth
    int first_step_of_b = 0;
    for (int step = 2; r.sched.has_work() && step < 20; ++step) {
      const Batch batch = r.step();
      for (const BatchItem& it : batch.items)
        if (it.seq == &b && first_step_of_b == 0) first_step_of_b = step;
    }
    EXPECT_EQ(a.status, SeqStatus::Finished);
    EXPECT_EQ(b.status, SeqStatus::Finished);
    EXPECT_EQ(first_step_of_b, reserve ? 4 : 2);  // a samples in steps 1-3 (its prefill samples one)
    EXPECT_EQ(b.num_preemptions, reserve ? 0 : 1);
  }
}

TEST(Scheduler, AdmitsNothingInAStepThatPreempted) {
  Rig r({.max_num_seqs = 4, .max_num_batched_tokens = 100}, 6, 4);
  r.add(10, 6);
  r.add(10, 6, 100);
  r.step();
  r.step();
  r.step();
  r.add(2, 1, 500);  // would fit in the block freed by the preemption
  Batch b = r.step();
  ASSERT_FALSE(b.preempted.empty());
  for (const BatchItem& it : b.items) EXPECT_NE(it.context_len, 0) << "no admission after a preemption";
}

TEST(Scheduler, ASequenceLongerThanMaxModelLenIsRejected) {
  Rig r({.max_num_seqs = 4, .max_num_batched_tokens = 100, .max_model_len = 64}, 10);
  EXPECT_THROW(r.add(60, 5), Error);
  EXPECT_NO_THROW(r.add(60, 4));
  // A scoring sequence generates nothing: its prompt is all it needs, and the message says so.
  Sequence score;
  score.id = 99;
  score.kind = SeqKind::Score;
  score.tokens.assign(65, 1);
  score.num_prompt_tokens = 65;
  try {
    r.sched.add(score);
    ADD_FAILURE() << "a 65-token score request fit a max_model_len of 64";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "sequence 99 needs 65 tokens (its prompt, scored), more than max_model_len 64");
  }
}

TEST(Scheduler, ImpossibleConfigsAreErrors) {
  KvCacheManager kv(KvCacheConfig{4, 16, true});
  EXPECT_THROW(Scheduler({.max_num_seqs = 0}, kv), Error);
  EXPECT_THROW(Scheduler({.max_num_batched_tokens = -1}, kv), Error);
  try {  // as vLLM: a budget that cannot decode every running sequence at once
    const Scheduler refused({.max_num_seqs = 8, .max_num_batched_tokens = 7}, kv);
    ADD_FAILURE() << "a budget below max_num_seqs was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(
        e.what(),
        "max_num_batched_tokens (7) must be at least max_num_seqs (8): a step could not decode every "
        "running sequence");
  }
  EXPECT_THROW(
      Scheduler({.max_num_batched_tokens = 512, .enable_chunked_prefill = false, .max_model_len = 1024}, kv),
      Error);
}

TEST(Scheduler, OrderKeyPolicyReordersTheWaitingQueue) {
  SchedulerPolicy p;
  p.order_key = [](const Sequence& s) { return -double(s.num_tokens()); };  // longest first
  Rig r({.max_num_seqs = 1, .max_num_batched_tokens = 1000}, 100, 16, p);
  Sequence& shorter = r.add(10, 1);
  Sequence& longer = r.add(50, 1, 100);
  const Batch b = r.step();
  ASSERT_EQ(b.items.size(), 1u);
  EXPECT_EQ(b.items[0].seq, &longer);
  r.step();
  EXPECT_NE(shorter.status, SeqStatus::Waiting);
}

TEST(Scheduler, ANanOrderKeyIsAnErrorNotALostSequence) {
  SchedulerPolicy p;
  p.order_key = [](const Sequence& s) { return s.num_tokens() == 50 ? std::nan("") : 1.0; };
  Rig r({.max_num_seqs = 4, .max_num_batched_tokens = 1000}, 100, 16, p);
  r.add(10, 1);
  EXPECT_THROW(r.add(50, 1, 100), Error);
}

TEST(Scheduler, AdmissionPolicyCanHoldSequencesBack) {
  SchedulerPolicy p;
  p.admit = [](const Sequence&, const SchedulerView& v) { return v.num_running < 1; };
  Rig r({.max_num_seqs = 8, .max_num_batched_tokens = 1000}, 100, 16, p);
  r.add(10, 3);
  r.add(10, 3, 100);
  EXPECT_EQ(r.step().items.size(), 1u);
  EXPECT_EQ(r.sched.num_waiting(), 1u);
}

TEST(Scheduler, VictimPolicyChoosesWhomToPreempt) {
  SchedulerPolicy p;
  p.victim = [](std::span<Sequence* const> c) { return c.size() > 1 ? c.size() - 2 : 0; };
  Rig r({.max_num_seqs = 4, .max_num_batched_tokens = 100}, 9, 4, p);
  Sequence& a = r.add(10, 8);
  Sequence& b = r.add(10, 8, 100);
  Sequence& c = r.add(10, 8, 200);
  r.step();
  r.step();
  r.step();
  Batch batch = r.step();  // a needs a fourth block: candidates {a, b, c}; the policy picks b
  ASSERT_EQ(batch.preempted.size(), 1u);
  EXPECT_EQ(batch.preempted[0], &b);
  EXPECT_EQ(a.status, SeqStatus::Running);
  EXPECT_EQ(c.status, SeqStatus::Running);
}

// Kept KV is a cache: a running sequence that needs room takes it before anything is preempted,
// and a pool with room leaves it alone.
TEST(Scheduler, KeptKvGoesBackBeforeARunningSequenceIsPreempted) {
  for (const int blocks : {6, 64}) {
    SCOPED_TRACE(std::to_string(blocks) + " blocks");
    Rig r({.max_num_seqs = 4, .max_num_batched_tokens = 64}, blocks, 4);
    Sequence& kept = r.add(7, 1);  // 8 tokens, 7 computed: 2 blocks
    kept.keep_kv = true;
    r.step();
    ASSERT_TRUE(kept.finished());
    ASSERT_EQ(kept.kv.blocks.size(), 2u);
    EXPECT_EQ(r.sched.num_kept(), 1u);
    // 12 prompt tokens + 10 generated: 3 blocks at admission, 6 by the end; 6 blocks hold it.
    Sequence& grows = r.add(12, 10, 500);
    while (r.sched.has_work()) ASSERT_FALSE(r.step().empty()) << "stuck";
    EXPECT_EQ(grows.num_output_tokens(), 10);
    EXPECT_EQ(r.sched.num_preemptions(), 0);
    const bool short_pool = blocks == 6;
    EXPECT_EQ(r.sched.num_idle_releases(), short_pool ? 1 : 0);
    EXPECT_EQ(kept.kv.blocks.empty(), short_pool);
    EXPECT_EQ(kept.num_computed_tokens, short_pool ? 0 : 7) << "what a fork from it would start from";
    EXPECT_EQ(r.sched.num_kept(), short_pool ? 0u : 1u);
    r.sched.release(kept);
    EXPECT_EQ(r.kv.usage().used_blocks, 0);
    EXPECT_EQ(r.sched.num_kept(), 0u);
    r.kv.pool().check_consistency();
  }
}

// Nor is kept KV a reservation against admissions: as vLLM V1 frees a finished request's blocks
// (cached, for any admission to evict), a waiting sequence that finds no room takes kept KV while
// other sequences run, rather than waiting for them to finish.
TEST(Scheduler, KeptKvGoesBackForAnAdmissionWhileOthersRun) {
  Rig r({.max_num_seqs = 4, .max_num_batched_tokens = 64}, 6, 4);
  Sequence& kept = r.add(7, 1);  // 8 tokens: 2 blocks, kept
  kept.keep_kv = true;
  r.step();
  ASSERT_EQ(r.sched.num_kept(), 1u);
  Sequence& runs = r.add(6, 2, 300);  // 2 blocks until it finishes
  r.step();
  ASSERT_EQ(runs.status, SeqStatus::Running);
  Sequence& late = r.add(12, 1, 600);  // 3 blocks; 2 are free
  const Batch b = r.step();
  EXPECT_EQ(r.sched.num_idle_releases(), 1);
  EXPECT_TRUE(kept.kv.blocks.empty());
  bool admitted = false;
  for (const BatchItem& it : b.items) admitted |= it.seq == &late;
  EXPECT_TRUE(admitted) << "it waited for the running sequence to finish";
  EXPECT_EQ(r.sched.num_preemptions(), 0);
  while (r.sched.has_work()) r.step();
  r.sched.release(kept);
  r.kv.pool().check_consistency();
}

// Copies made between steps (here a fork's copy-on-write outside the scheduler) are not lost to a
// step that schedules nothing: the next step that runs executes them.
TEST(Scheduler, AStepThatRunsNothingLeavesPendingCopiesForTheNext) {
  Rig r({.max_num_seqs = 4, .max_num_batched_tokens = 64}, 16, 4);
  Sequence a, b;
  a.id = 100, b.id = 101;
  a.tokens = {1, 2, 3, 4, 5, 6};  // one full block and half of another
  a.num_prompt_tokens = 6;
  ASSERT_TRUE(r.kv.allocate_slots(a, 6, 0));
  b.tokens = a.tokens;
  ASSERT_TRUE(r.kv.fork(a, b));
  b.tokens.push_back(7);
  ASSERT_TRUE(r.kv.allocate_slots(b, 1, 0));  // writes into the shared half block: a copy
  ASSERT_EQ(r.kv.counters().cow_copies, 1);

  EXPECT_TRUE(r.step().empty());
  r.add(3);
  const Batch next = r.step();
  ASSERT_FALSE(next.empty());
  ASSERT_EQ(next.copies.size(), 1u) << "the empty step dropped the copy";
  EXPECT_EQ(next.shape.copies, 1);
  EXPECT_EQ(next.copies[0].dst, b.kv.blocks[1]);
  r.kv.free(a);
  r.kv.free(b);
}

}  // namespace
}  // namespace duet
