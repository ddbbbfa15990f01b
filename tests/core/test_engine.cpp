#include "core/engine.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.hpp"
#include "core/kv_cache_manager.hpp"

namespace duet {
namespace {

// Emits token 100 + output index, or the scripted stop token; a score of 0.25 per position.
class ScriptedExecutor : public Executor {
 public:
  StepResult execute(const Batch& batch) override {
    ++steps;
    copies += int(batch.copies.size());
    StepResult r;
    r.duration_s = 0.5;
    for (const BatchItem& it : batch.items) {
      const Sequence& s = *it.seq;
      r.tokens.push_back(it.want == Want::Sample ? (s.num_output_tokens() == stop_after ? stop_token : 100 + s.num_output_tokens())
                                                 : kNoToken);
      for (int p : positions_to_score(it)) r.scores.push_back(0.25f * float(p));
    }
    return r;
  }
  int steps = 0;
  int copies = 0;
  int stop_after = -1;
  TokenId stop_token = 2;
};

struct EngineRig {
  explicit EngineRig(int blocks = 64, int block_size = 4)
      : engine("llm", {.max_num_seqs = 16, .max_num_batched_tokens = 64},
               std::make_unique<KvCacheManager>(KvCacheConfig{blocks, block_size, true}), exec) {}
  ScriptedExecutor exec;
  Engine engine;
};

Sequence prompt(SeqId id, int n, int max_tokens = 3) {
  Sequence s;
  s.id = id;
  for (int i = 0; i < n; ++i) s.tokens.push_back(10 + i);
  s.num_prompt_tokens = n;
  s.sampling.max_tokens = max_tokens;
  return s;
}

TEST(Engine, StepIsScheduleExecutePostprocess) {
  EngineRig r;
  Sequence& s = r.engine.add(prompt(1, 6, 3), 1.0);
  double now = 1.0;
  std::vector<Sequence*> finished;
  while (r.engine.has_work()) {
    StepOutcome o = r.engine.step(now);
    now += o.result.duration_s;
    finished.insert(finished.end(), o.finished.begin(), o.finished.end());
  }
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0], &s);
  EXPECT_EQ(s.finish_reason, FinishReason::Length);
  EXPECT_EQ(std::vector<TokenId>(s.tokens.begin() + 6, s.tokens.end()), (std::vector<TokenId>{100, 101, 102}));
  EXPECT_EQ(r.exec.steps, 3);
  EXPECT_DOUBLE_EQ(s.arrival_time, 1.0);
  EXPECT_DOUBLE_EQ(s.first_scheduled_time, 1.0);
  EXPECT_DOUBLE_EQ(s.first_token_time, 1.5);
  EXPECT_DOUBLE_EQ(s.finish_time, 2.5);
  EXPECT_EQ(r.engine.kv().usage().used_blocks, 0) << "a finished sequence gives its blocks back";
}

TEST(Engine, StopTokenEndsASequenceUnlessEosIsIgnored) {
  EngineRig r;
  r.exec.stop_after = 1;
  Sequence a = prompt(1, 4, 10);
  a.sampling.stop_token_ids = {2};
  Sequence b = prompt(2, 4, 3);
  b.sampling.stop_token_ids = {2};
  b.sampling.ignore_eos = true;
  Sequence& sa = r.engine.add(a, 0);
  Sequence& sb = r.engine.add(b, 0);
  while (r.engine.has_work()) r.engine.step(0);
  EXPECT_EQ(sa.finish_reason, FinishReason::Stop);
  EXPECT_EQ(sa.num_output_tokens(), 2);
  EXPECT_EQ(sb.finish_reason, FinishReason::Length);
  EXPECT_EQ(sb.num_output_tokens(), 3);
}

TEST(Engine, ScoreSequencesReturnOneScorePerPosition) {
  EngineRig r;
  Sequence s = prompt(1, 100);
  s.kind = SeqKind::Score;
  s.score_positions = {99, 10, 70};
  Sequence& ref = r.engine.add(s, 0);
  while (r.engine.has_work()) r.engine.step(0);
  EXPECT_EQ(ref.finish_reason, FinishReason::Scored);
  EXPECT_EQ(ref.scores, (std::vector<float>{2.5f, 17.5f, 24.75f})) << "in position order, across two chunks";
  EXPECT_EQ(ref.num_output_tokens(), 0);
}

TEST(Engine, ForkOfAKeptSequenceSharesItsKvAndCopiesThePartialBlock) {
  EngineRig r;
  Sequence& parent = r.engine.add(prompt(1, 6, 1), 0);  // 6 prompt + 1 output = 7 tokens
  parent.keep_kv = true;
  while (r.engine.has_work()) r.engine.step(0);
  ASSERT_TRUE(parent.finished());
  ASSERT_EQ(parent.kv.blocks.size(), 2u) << "kept: 6 computed slots";
  const int used_before = r.engine.kv().usage().used_blocks;
  for (SeqId id = 10; id < 14; ++id) {
    Sequence child;
    child.id = id;
    child.tokens = {50, 51};
    child.sampling.max_tokens = 2;
    Sequence& c = r.engine.fork(1, child, 0);
    EXPECT_EQ(c.num_tokens(), 9);
    EXPECT_EQ(c.num_computed_tokens, 6);
  }
  EXPECT_EQ(r.engine.kv().usage().used_blocks, used_before) << "forks share every block";
  r.engine.release(1);
  while (r.engine.has_work()) r.engine.step(0);
  EXPECT_EQ(r.exec.copies, 3) << "the shared half-full block is copied for all but the last writer";
  for (SeqId id = 10; id < 14; ++id) EXPECT_EQ(r.engine.find(id)->num_output_tokens(), 2);
  for (SeqId id = 10; id < 14; ++id) r.engine.release(id);
  EXPECT_EQ(r.engine.kv().usage().used_blocks, 0);
}

TEST(Engine, BadRequestsAreErrors) {
  EngineRig r;
  r.engine.add(prompt(1, 4), 0);
  EXPECT_THROW(r.engine.add(prompt(1, 4), 0), Error);
  EXPECT_THROW(r.engine.add(prompt(2, 4, 0), 0), Error);
  EXPECT_THROW(r.engine.fork(77, prompt(3, 1), 0), Error);
}

TEST(Engine, ReleaseOfALiveSequenceAbortsIt) {
  EngineRig r;
  r.engine.add(prompt(1, 20, 50), 0);
  r.engine.step(0);
  EXPECT_GT(r.engine.kv().usage().used_blocks, 0);
  r.engine.release(1);
  EXPECT_EQ(r.engine.kv().usage().used_blocks, 0);
  EXPECT_FALSE(r.engine.has_work());
  EXPECT_EQ(r.engine.find(1), nullptr);
}

}  // namespace
}  // namespace duet
