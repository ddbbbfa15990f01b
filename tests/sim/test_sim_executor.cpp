#include "sim/sim_executor.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/engine.hpp"
#include "core/error.hpp"
#include "core/kv_cache_manager.hpp"
#include "core/output_script.hpp"
#include "sim/roofline.hpp"

namespace duet {
namespace {

struct Rig {
  Rig()
      : cost(gpu_by_name("h100"), model_by_name("llama-3.2-1b")),
        exec(cost, 1000),
        engine("llm", {.max_num_seqs = 16, .max_num_batched_tokens = 512},
               std::make_unique<KvCacheManager>(KvCacheConfig{256, 16, true}), exec) {}
  Sequence& add(Sequence s) { return engine.add(std::move(s), 0); }
  void run() {
    while (engine.has_work()) engine.step(0);
  }
  RooflineCostModel cost;
  SimExecutor exec;
  Engine engine;
};

Sequence prompt(SeqId id, int n) {
  Sequence s;
  s.id = id;
  for (int i = 0; i < n; ++i) s.tokens.push_back(i);
  s.num_prompt_tokens = n;
  s.script.seed = id * 7919;
  return s;
}

TEST(SimExecutor, StepTakesWhatTheCostModelSays) {
  Rig r;
  r.add(prompt(1, 100));
  r.add(prompt(2, 30));
  Batch b = r.engine.scheduler().schedule();
  const StepResult res = r.exec.execute(b);
  EXPECT_DOUBLE_EQ(res.duration_s + res.host_s, r.cost.step_time(shape_of(b)));
  EXPECT_DOUBLE_EQ(res.host_s, r.cost.step_cost(shape_of(b)).host_s) << "the host share is priced apart";
  EXPECT_EQ(res.tokens.size(), 2u);
  EXPECT_EQ(b.shape.prefill_seqs, 2) << "the scheduler sets the batch's shape";

  Batch unshaped = b;  // a batch built by hand and never given its shape would be priced as empty
  unshaped.shape = {};
  EXPECT_THROW(r.exec.execute(unshaped), std::logic_error);
}

TEST(SimExecutor, TheStopModelEndsTheSequenceAtItsScriptedLength) {
  Rig r;
  Sequence s = prompt(1, 20);
  s.sampling.max_tokens = 100;
  s.sampling.stop_token_ids = {999};
  s.script.stop_at = 6;
  s.script.stop_token = 999;
  Sequence& ref = r.add(std::move(s));
  r.run();
  EXPECT_EQ(ref.finish_reason, FinishReason::Stop);
  EXPECT_EQ(ref.num_output_tokens(), 7);
  EXPECT_EQ(ref.tokens.back(), 999);
  for (int i = 20; i < 26; ++i) EXPECT_NE(ref.tokens[std::size_t(i)], 999);
}

TEST(SimExecutor, AForcedOutputLengthIsHonouredExactly) {
  Rig r;
  Sequence s = prompt(1, 20);
  s.sampling.max_tokens = 57;
  s.sampling.ignore_eos = true;
  s.sampling.stop_token_ids = {999};
  s.script.stop_at = 3;  // ignored: ignore_eos
  s.script.stop_token = 999;
  Sequence& ref = r.add(std::move(s));
  r.run();
  EXPECT_EQ(ref.finish_reason, FinishReason::Length);
  EXPECT_EQ(ref.num_output_tokens(), 57);
}

TEST(SimExecutor, TokensAreDeterministicPerSeed) {
  Rig a, b;
  Sequence s = prompt(1, 8);
  s.sampling.max_tokens = 10;
  Sequence& x = a.add(s);
  Sequence& y = b.add(s);
  a.run();
  b.run();
  EXPECT_EQ(x.tokens, y.tokens);
  Rig c;
  s.script.seed = 1;
  Sequence& z = c.add(s);
  c.run();
  EXPECT_NE(x.tokens, z.tokens);
}

TEST(SimExecutor, PrmRequestsReturnTheirScoreModel) {
  Rig r;
  Sequence s = prompt(1, 700);  // two chunks of the 512-token budget
  s.kind = SeqKind::Score;
  s.score_positions = {100, 600, 699};
  s.script.scores = {0.9f, 0.1f};  // the third comes from the hash
  Sequence& ref = r.add(std::move(s));
  r.run();
  ASSERT_EQ(ref.scores.size(), 3u);
  EXPECT_FLOAT_EQ(ref.scores[0], 0.9f);
  EXPECT_FLOAT_EQ(ref.scores[1], 0.1f);
  EXPECT_FLOAT_EQ(ref.scores[2], scripted_score(ref, 2, 699));
  EXPECT_GT(ref.scores[2], 0.0f);
  EXPECT_LT(ref.scores[2], 1.0f);
}

// Prices a warm step at 1 s and a cold one at 3 s, whatever the batch.
class TwoSpeeds final : public CostModel {
 public:
  StepCost step_cost(const BatchShape&) const override { return {3.0, 0.5}; }
  StepCost warm_step_cost(const BatchShape&) const override { return {1.0, 0.5}; }
  std::string describe() const override { return "two speeds"; }
};

TEST(SimExecutor, AStepIsWarmWhenItsEngineRanTheDevicesPreviousStep) {
  const TwoSpeeds cost;
  DeviceTurns turns;
  SimExecutor llm(cost, 1000, &turns, 0);
  SimExecutor prm(cost, 1000, &turns, 1);
  const Batch empty;
  std::vector<double> took;
  for (SimExecutor* e : {&llm, &llm, &llm, &prm, &prm, &llm}) took.push_back(e->execute(empty).duration_s);
  EXPECT_EQ(took, (std::vector<double>{3, 1, 1, 3, 1, 3}))
      << "cold after the other engine, warm after itself";
  EXPECT_EQ(turns.last_engine, 0u);

  SimExecutor alone(cost, 1000);  // no one to take turns with
  EXPECT_EQ(alone.execute(empty).duration_s, 3.0) << "nothing cached before the first step";
  EXPECT_EQ(alone.execute(empty).duration_s, 1.0);
  EXPECT_EQ(alone.execute(empty).host_s, 0.5);
}

// A cost model's time that is no time stops the run, naming the model: an edited profile's inf ran on
// to a makespan of inf and a file of NaN latencies, with exit status 0.
class Priced final : public CostModel {
 public:
  explicit Priced(StepCost c) : cost_(c) {}
  StepCost step_cost(const BatchShape&) const override { return cost_; }
  std::string describe() const override { return "an edited profile"; }

 private:
  StepCost cost_;
};

TEST(SimExecutor, AStepPricedAtNoTimeIsAnError) {
  const Batch empty;
  for (const StepCost bad : {StepCost{INFINITY, 0.0}, StepCost{NAN, 0.0}, StepCost{0.0, 0.0},
                             StepCost{-1.0, 0.0}, StepCost{1e-3, NAN}, StepCost{1e-3, -1e-6}}) {
    const Priced cost(bad);
    SimExecutor exec(cost, 1000);
    try {
      exec.execute(empty);
      ADD_FAILURE() << "a step priced at " << bad.device_s << " s + " << bad.host_s << " s ran";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("an edited profile priced a step of 0 tokens at"),
                std::string::npos)
          << e.what();
    }
  }
  const Priced fine(StepCost{1e-3, 0.0});
  SimExecutor exec(fine, 1000);
  EXPECT_EQ(exec.execute(empty).duration_s, 1e-3);
}

}  // namespace
}  // namespace duet
