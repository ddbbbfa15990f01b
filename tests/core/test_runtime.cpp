#include "core/runtime.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "core/error.hpp"
#include "core/kv_cache_manager.hpp"

namespace duet {
namespace {

// Every step takes `step_s`; tokens are 7.
class FixedTimeExecutor : public Executor {
 public:
  explicit FixedTimeExecutor(double step_s) : step_s_(step_s) {}
  StepResult execute(const Batch& b) override {
    StepResult r;
    r.duration_s = step_s_;
    r.tokens.assign(b.items.size(), 7);
    for (const BatchItem& it : b.items)
      for (std::size_t k = 0; k < positions_to_score(it).size(); ++k) r.scores.push_back(0.5f);
    return r;
  }

 private:
  double step_s_;
};

Arbiter arbiter_of(ArbiterKind kind, std::vector<int> priority = {}) {
  Arbiter a;
  a.kind = kind;
  a.priority = std::move(priority);
  return a;
}

struct TwoEngines {
  explicit TwoEngines(Arbiter arbiter = {}, int blocks = 64)
      : llm_exec(1.0),
        prm_exec(0.25),
        llm("llm", {.max_num_seqs = 8, .max_num_batched_tokens = 256},
            std::make_unique<KvCacheManager>(KvCacheConfig{blocks, 4, true}), llm_exec),
        prm("prm", {.max_num_seqs = 8, .max_num_batched_tokens = 256},
            std::make_unique<KvCacheManager>(KvCacheConfig{blocks, 4, true}), prm_exec),
        rt(clock, std::move(arbiter)) {
    rt.add_engine(llm, "llm-model");
    rt.add_engine(prm, "prm-model");
  }
  FixedTimeExecutor llm_exec, prm_exec;
  Engine llm, prm;
  VirtualClock clock;
  Runtime rt;
};

Sequence gen(SeqId id, int prompt, int max_tokens) {
  Sequence s;
  s.id = id;
  s.tokens.assign(std::size_t(prompt), TokenId(id));
  s.num_prompt_tokens = prompt;
  s.sampling.max_tokens = max_tokens;
  return s;
}

// A workload made of lambdas.
struct Script : Workload {
  std::function<void(Runtime&)> on_start;
  std::function<void(Runtime&, int, Sequence&)> finished = [](Runtime&, int, Sequence&) {};
  std::function<void(Runtime&, std::uint64_t)> wakeup = [](Runtime&, std::uint64_t) {};
  void start(Runtime& rt) override { on_start(rt); }
  void on_finished(Runtime& rt, int e, Sequence& s) override { finished(rt, e, s); }
  void on_wakeup(Runtime& rt, std::uint64_t tag) override { wakeup(rt, tag); }
};

void expect_one_device_timeline(const Runtime& rt) {
  std::vector<std::pair<double, double>> spans;
  for (const EngineRecords& r : rt.records())
    for (const StepRecord& s : r.steps) spans.emplace_back(s.start_s, s.start_s + s.duration_s);
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].second, spans[i].first + 1e-12);
}

TEST(Runtime, ArrivalsWaitForTheirTimestamps) {
  TwoEngines t;
  Script w;
  w.on_start = [](Runtime& rt) {
    rt.submit_at(10.0, 0, gen(1, 4, 2));
    rt.submit_at(10.0, 0, gen(2, 4, 2));
    rt.submit_at(30.0, 0, gen(3, 4, 1));
  };
  t.rt.run(w);
  const auto& steps = t.rt.records()[0].steps;
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_DOUBLE_EQ(steps[0].start_s, 10.0);
  EXPECT_EQ(steps[0].num_seqs, 2) << "simultaneous arrivals share a step";
  EXPECT_DOUBLE_EQ(steps[1].start_s, 11.0);
  EXPECT_DOUBLE_EQ(steps[2].start_s, 30.0);
  const auto& reqs = t.rt.records()[0].requests;
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_DOUBLE_EQ(reqs[0].arrival_s, 10.0);
  EXPECT_DOUBLE_EQ(reqs[0].first_token_s, 11.0);
  EXPECT_DOUBLE_EQ(reqs[0].finish_s, 12.0);
  EXPECT_DOUBLE_EQ(t.rt.summary().makespan_s, 21.0);
  EXPECT_EQ(t.llm.find(1), nullptr) << "finished sequences are released";
}

// The wall clock's way: a step blocks the host, so time passes while it runs and events due
// during it are handled after it.
class BlockingClock final : public Clock {
 public:
  double now() const override { return now_; }
  void wait_until(double t, const std::atomic<int>*) override { now_ = std::max(now_, t); }
  double step_end(double start, double device_s) const override { return now_ = start + device_s; }

 private:
  mutable double now_ = 0.0;
};

TEST(Runtime, ARequestThatArrivesDuringABlockingStepKeepsItsArrivalTime) {
  // Regression: on the wall clock a request arriving mid-step was stamped when the step ended,
  // so the real engine's TTFT left out the wait that the simulator's TTFT counts.
  FixedTimeExecutor exec(1.0);
  Engine engine("llm", {.max_num_seqs = 8, .max_num_batched_tokens = 256},
                std::make_unique<KvCacheManager>(KvCacheConfig{64, 4, true}), exec);
  BlockingClock clock;
  Runtime rt(clock);
  rt.add_engine(engine, "m");
  Script w;
  w.on_start = [](Runtime& rt) {
    rt.submit(0, gen(1, 4, 3));          // steps at 0, 1, 2
    rt.submit_at(0.5, 0, gen(2, 4, 1));  // arrives while the first step runs
    rt.wake_at(0.7, 0);                  // a trace replay's wake-up, due during that step too
  };
  w.wakeup = [](Runtime& rt, std::uint64_t) { rt.submit_arrived(0, gen(3, 4, 1), 0.7); };
  rt.run(w);
  const auto& reqs = rt.records()[0].requests;
  ASSERT_EQ(reqs.size(), 3u);
  for (const RequestRecord& r : reqs) {
    if (r.seq_id == 1) continue;
    const double due = r.seq_id == 2 ? 0.5 : 0.7;
    EXPECT_DOUBLE_EQ(r.arrival_s, due);
    EXPECT_DOUBLE_EQ(r.first_token_s, 2.0) << "handled at 1.0, in the step 1.0-2.0";
  }
}

TEST(Runtime, TwoEnginesShareOneDeviceAndAlternate) {
  TwoEngines t(arbiter_of(ArbiterKind::Alternate));
  Script w;
  w.on_start = [](Runtime& rt) {
    rt.submit(0, gen(1, 4, 3));
    rt.submit(1, gen(2, 4, 3));
  };
  t.rt.run(w);
  expect_one_device_timeline(t.rt);
  // llm at 0 (1 s), prm at 1 (0.25 s), llm at 1.25, prm at 2.25, ...
  EXPECT_DOUBLE_EQ(t.rt.records()[1].steps[0].start_s, 1.0);
  EXPECT_DOUBLE_EQ(t.rt.records()[0].steps[1].start_s, 1.25);
  EXPECT_EQ(t.rt.records()[0].steps.size(), 3u);
  EXPECT_EQ(t.rt.records()[1].steps.size(), 3u);
}

TEST(Runtime, PriorityArbiterRunsThePreferredEngineWhileItHasWork) {
  TwoEngines t(arbiter_of(ArbiterKind::Priority, {1}));
  Script w;
  w.on_start = [](Runtime& rt) {
    rt.submit(0, gen(1, 4, 2));
    rt.submit(1, gen(2, 4, 4));
  };
  t.rt.run(w);
  expect_one_device_timeline(t.rt);
  const double prm_done = t.rt.records()[1].requests[0].finish_s;
  EXPECT_DOUBLE_EQ(prm_done, 1.0);
  EXPECT_DOUBLE_EQ(t.rt.records()[0].steps[0].start_s, 1.0);
}

TEST(Runtime, OldestReadyArbiterServesTheLongestWaitingEngine) {
  TwoEngines t(arbiter_of(ArbiterKind::OldestReady));
  Script w;
  w.on_start = [](Runtime& rt) {
    rt.submit(1, gen(2, 4, 1));
    rt.submit_at(0.1, 0, gen(1, 4, 1));
  };
  t.rt.run(w);
  EXPECT_DOUBLE_EQ(t.rt.records()[1].steps[0].start_s, 0.0);
  EXPECT_DOUBLE_EQ(t.rt.records()[0].steps[0].start_s, 0.25);
}

TEST(Runtime, CallbackArbiterChoosesAndIsChecked) {
  int calls = 0;
  Arbiter a{ArbiterKind::Callback, {}, [&](const std::vector<EngineStatus>& s) {
              ++calls;
              return s[1].has_work ? 1 : 0;
            }};
  TwoEngines t(a);
  Script w;
  w.on_start = [](Runtime& rt) {
    rt.submit(0, gen(1, 4, 1));
    rt.submit(1, gen(2, 4, 2));
  };
  t.rt.run(w);
  EXPECT_GT(calls, 0);
  EXPECT_DOUBLE_EQ(t.rt.records()[0].steps[0].start_s, 0.5);

  TwoEngines bad(Arbiter{ArbiterKind::Callback, {}, [](const std::vector<EngineStatus>&) { return 5; }});
  EXPECT_THROW(bad.rt.run(w), Error);
  EXPECT_THROW(Runtime(bad.clock, arbiter_of(ArbiterKind::Callback)), Error);
}

TEST(Runtime, WorkloadsChainRequestsAndWakeUps) {
  TwoEngines t;
  Script w;
  int finished = 0;
  std::vector<double> wakes;
  w.on_start = [](Runtime& rt) {
    rt.submit(0, gen(rt.next_seq_id(), 4, 1));
    rt.wake_at(5.0, 42);
  };
  w.finished = [&](Runtime& rt, int e, Sequence& s) {
    ++finished;
    if (e == 0) {  // score what the generator produced
      Sequence score = gen(rt.next_seq_id(), 0, 1);
      score.kind = SeqKind::Score;
      score.tokens = s.tokens;
      score.num_prompt_tokens = s.num_tokens();
      rt.submit(1, std::move(score));
    }
  };
  w.wakeup = [&](Runtime& rt, std::uint64_t tag) {
    wakes.push_back(rt.now());
    EXPECT_EQ(tag, 42u);
  };
  t.rt.run(w);
  EXPECT_EQ(finished, 2);
  EXPECT_EQ(wakes, (std::vector<double>{5.0}));
  EXPECT_DOUBLE_EQ(t.rt.records()[1].requests[0].finish_s, 1.25);
}

// A request released before it finished (a search that stops waiting for it) is recorded as
// aborted at its release, so that the requests table accounts for every token the steps computed;
// the summary counts its tokens but not its latencies.
TEST(Runtime, ARequestReleasedUnfinishedIsRecordedAsAborted) {
  TwoEngines t;
  Script w;
  SeqId slow = 0;
  w.on_start = [&](Runtime& rt) {
    rt.submit(0, gen(rt.next_seq_id(), 4, 1));
    slow = rt.next_seq_id();
    rt.submit(0, gen(slow, 4, 50));
  };
  w.finished = [&](Runtime& rt, int, Sequence&) { rt.release(0, slow); };  // the first is enough
  t.rt.run(w);
  const auto& requests = t.rt.records()[0].requests;
  ASSERT_EQ(requests.size(), 2u);
  const RequestRecord& aborted = requests[1];
  EXPECT_EQ(aborted.seq_id, slow);
  EXPECT_EQ(aborted.finish_reason, std::uint8_t(FinishReason::Aborted));
  EXPECT_DOUBLE_EQ(aborted.finish_s, 1.0);  // released at the first step's end
  EXPECT_EQ(aborted.output_tokens, 1);
  const EngineSummary s = t.rt.summary().engines[0];
  EXPECT_EQ(s.requests, 1);
  EXPECT_EQ(s.generated_tokens, 2);
  std::int64_t decoded = 0;
  for (const StepRecord& r : t.rt.records()[0].steps) decoded += r.prefill_tokens + r.decode_tokens;
  EXPECT_EQ(decoded, 8) << "both prompts; the released one is never stepped again";
}

// A request that finished is recorded as it finished even when the workload releases it before
// its step's end is handled: from another's on_finished in the same step, or from a wake-up while
// the step is in flight (it was lost from the requests table both ways).
TEST(Runtime, ARequestReleasedOnceFinishedIsRecordedAsFinished) {
  for (const bool in_flight : {false, true}) {
    TwoEngines t;
    Script w;
    SeqId second = 0;
    w.on_start = [&](Runtime& rt) {
      rt.submit(0, gen(rt.next_seq_id(), 4, 1));
      second = rt.next_seq_id();
      rt.submit(0, gen(second, 4, 1));  // both finish in the first step (1 s)
      if (in_flight) rt.wake_at(0.5, 1);
    };
    w.wakeup = [&](Runtime& rt, std::uint64_t) { rt.release(0, second); };
    w.finished = [&](Runtime& rt, int, Sequence& s) {
      if (!in_flight && s.id != second) rt.release(0, second);
    };
    t.rt.run(w);
    const auto& requests = t.rt.records()[0].requests;
    ASSERT_EQ(requests.size(), 2u) << (in_flight ? "in flight" : "same event");
    for (const RequestRecord& r : requests) {
      EXPECT_EQ(r.finish_reason, std::uint8_t(FinishReason::Length));
      EXPECT_DOUBLE_EQ(r.finish_s, 1.0);
    }
    EXPECT_EQ(t.rt.summary().engines[0].requests, 2);
    EXPECT_DOUBLE_EQ(t.rt.summary().makespan_s, 1.0);
  }
}

TEST(Runtime, KeptSequencesCanBeForkedLater) {
  TwoEngines t;
  Script w;
  w.on_start = [](Runtime& rt) {
    Sequence s = gen(1, 6, 1);
    s.keep_kv = true;
    rt.submit(0, std::move(s));
  };
  int children = 0;
  w.finished = [&](Runtime& rt, int, Sequence& s) {
    if (s.id != 1) return ++children, void();
    for (SeqId id = 10; id < 13; ++id) rt.fork(0, 1, gen(id, 2, 2));
    rt.release(0, 1);
  };
  t.rt.run(w);
  EXPECT_EQ(children, 3);
  EXPECT_EQ(t.llm.kv().usage().used_blocks, 0);
}

// 4 kept sequences of 3 blocks each, all kept until the last has finished, on 8 blocks: the
// kept KV goes back to the pool instead of stopping the run as stuck, and forks from parents
// whose KV went back recompute it.
TEST(Runtime, KeptSequencesDoNotDeadlockASmallPool) {
  TwoEngines t({}, 8);
  Script w;
  w.on_start = [](Runtime& rt) {
    for (SeqId id = 1; id <= 4; ++id) {
      Sequence s = gen(id, 10, 2);  // 12 tokens, 11 computed: 3 blocks of 4
      s.keep_kv = true;
      rt.submit(0, std::move(s));
    }
  };
  int parents = 0, children = 0;
  w.finished = [&](Runtime& rt, int, Sequence& s) {
    if (s.id > 4) return ++children, void();
    if (++parents < 4) return;
    for (SeqId id = 1; id <= 4; ++id) {
      rt.fork(0, id, gen(10 + id, 2, 2));
      rt.release(0, id);
    }
  };
  t.rt.run(w);
  EXPECT_EQ(children, 4);
  EXPECT_GT(t.llm.scheduler().num_idle_releases(), 0);
  EXPECT_EQ(t.llm.kv().usage().used_blocks, 0);
}

TEST(Runtime, AnEngineThatCanNeverScheduleIsReported) {
  TwoEngines t({}, 2);  // 2 blocks of 4 tokens
  Script w;
  w.on_start = [](Runtime& rt) { rt.submit(0, gen(1, 20, 1)); };
  try {
    t.rt.run(w);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("engine 'llm' is stuck"), std::string::npos) << e.what();
  }
}

TEST(Runtime, StepRecordsCarryKvAndCounterDeltas) {
  TwoEngines t;
  Script w;
  w.on_start = [](Runtime& rt) {
    rt.submit(0, gen(1, 9, 2));
    Sequence same = gen(2, 9, 2);
    same.tokens.assign(9, 1);  // seq 1's prompt: its two full blocks hit
    rt.submit_at(5.0, 0, std::move(same));
  };
  t.rt.run(w);
  const auto& steps = t.rt.records()[0].steps;
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[0].prefill_tokens, 9);
  EXPECT_EQ(steps[0].prefix_query_tokens, 9);
  EXPECT_EQ(steps[0].prefix_hit_tokens, 0);
  EXPECT_EQ(steps[0].kv_blocks_used, 3);
  EXPECT_EQ(steps[1].decode_tokens, 1);
  EXPECT_EQ(steps[1].decode_seqs, 1);
  EXPECT_EQ(steps[1].decode_context_tokens, 9);
  EXPECT_EQ(steps[2].prefix_hit_tokens, 8);
  // The prompt's one token left after the hit runs as a decode over the cached 8.
  EXPECT_EQ(steps[2].prefill_tokens, 0);
  EXPECT_EQ(steps[2].decode_tokens, 1);
  EXPECT_EQ(steps[2].decode_context_tokens, 8);
  EXPECT_EQ(t.rt.records()[0].requests[1].cached_tokens, 8);
  const RunSummary s = t.rt.summary();
  EXPECT_NEAR(s.engines[0].prefix_hit_rate, 8.0 / 18.0, 1e-12);
  EXPECT_EQ(s.engines[0].generated_tokens, 4);
}

// Collects what a sink receives.
struct Collect : RecordSink {
  std::vector<EngineRecords> got{2};
  void add_step(int e, const StepRecord& s) override { got[std::size_t(e)].steps.push_back(s); }
  void add_request(int e, const RequestRecord& r) override { got[std::size_t(e)].requests.push_back(r); }
};

void two_engine_load(Runtime& rt) {
  Script w;
  w.on_start = [](Runtime& r) {
    for (SeqId id = 1; id <= 40; ++id)
      r.submit_at(0.1 * double(id), int(id % 2), gen(id, 3 + int(id % 7), 1 + int(id % 5)));
  };
  rt.run(w);
}

// The summary is built as records arrive: the same whatever the run keeps, and equal to summarize()
// over the full records; a sink gets exactly the records the level keeps.
TEST(Runtime, RecordingLevelsKeepTheSameSummary) {
  TwoEngines full;
  two_engine_load(full.rt);
  const RunSummary want = full.rt.summary();
  for (int e = 0; e < 2; ++e) {
    const EngineSummary s = summarize(full.rt.records()[std::size_t(e)], want.makespan_s);
    EXPECT_EQ(s.steps, want.engines[std::size_t(e)].steps);
    EXPECT_EQ(s.busy_s, want.engines[std::size_t(e)].busy_s);
    EXPECT_EQ(s.e2e_s.p90, want.engines[std::size_t(e)].e2e_s.p90);
    EXPECT_EQ(s.mean_kv_utilisation, want.engines[std::size_t(e)].mean_kv_utilisation);
  }
  for (const RecordLevel level : {RecordLevel::Steps, RecordLevel::Requests, RecordLevel::Summary}) {
    SCOPED_TRACE(record_level_name(level));
    TwoEngines t;
    Collect sink;
    t.rt.set_recording(level, false, &sink);
    two_engine_load(t.rt);
    const RunSummary got = t.rt.summary();
    ASSERT_EQ(got.engines.size(), 2u);
    for (std::size_t e = 0; e < 2; ++e) {
      EXPECT_TRUE(t.rt.records()[e].steps.empty() && t.rt.records()[e].requests.empty()) << "nothing kept";
      EXPECT_EQ(got.engines[e].steps, want.engines[e].steps);
      EXPECT_EQ(got.engines[e].requests, want.engines[e].requests);
      EXPECT_EQ(got.engines[e].ttft_s.p99, want.engines[e].ttft_s.p99);
      EXPECT_EQ(got.engines[e].busy_s, want.engines[e].busy_s);
      EXPECT_EQ(t.rt.tally(int(e)).computed_prefill_tokens(),
                full.rt.tally(int(e)).computed_prefill_tokens());
      const std::size_t steps = level == RecordLevel::Steps ? full.rt.records()[e].steps.size() : 0;
      const std::size_t requests = level != RecordLevel::Summary ? full.rt.records()[e].requests.size() : 0;
      EXPECT_EQ(sink.got[e].steps.size(), steps);
      EXPECT_EQ(sink.got[e].requests.size(), requests);
      if (steps) {
        EXPECT_EQ(sink.got[e].steps.back().start_s, full.rt.records()[e].steps.back().start_s);
      }
    }
  }
  EXPECT_THROW(record_level_from_name("timeline"), Error);
}

}  // namespace
}  // namespace duet

namespace duet {
namespace {

// Two engines on one shared pool of 40 pages. First the LLM's demand is high (long sequences),
// then the PRM's: pages move from one model to the other, more than half the pool each time,
// which no static split of the same 40 pages gives both. A memory policy then caps the PRM.
struct SharedTwoEngines {
  SharedTwoEngines()
      : pool(std::make_shared<BlockPool>(40, std::vector<PoolTenant>{{"llm", 0, 4}, {"prm", 1, 4}})),
        llm_exec(1.0),
        prm_exec(0.25),
        llm("llm", {.max_num_seqs = 8, .max_num_batched_tokens = 256},
            std::make_unique<KvCacheManager>(pool, 0, true), llm_exec),
        prm("prm", {.max_num_seqs = 8, .max_num_batched_tokens = 256},
            std::make_unique<KvCacheManager>(pool, 1, true), prm_exec),
        rt(clock) {
    llm.scheduler().set_pool_peers({&prm.scheduler()});
    prm.scheduler().set_pool_peers({&llm.scheduler()});
    rt.add_engine(llm, "llm-model");
    rt.add_engine(prm, "prm-model");
  }
  std::shared_ptr<BlockPool> pool;
  FixedTimeExecutor llm_exec, prm_exec;
  Engine llm, prm;
  VirtualClock clock;
  Runtime rt;
};

std::int32_t peak_used(const EngineRecords& r) {
  std::int32_t peak = 0;
  for (const StepRecord& s : r.steps) peak = std::max(peak, s.kv_blocks_used);
  return peak;
}

void shifting_demand(Runtime& rt) {
  Script w;
  // Phase 1: the LLM generates 3 sequences of 48 tokens (12 pages each); when they are done,
  // phase 2: the PRM scores 3 prompts of 48 tokens.
  int done = 0;
  w.on_start = [](Runtime& r) {
    for (SeqId i = 1; i <= 3; ++i) r.submit(0, gen(i, 8, 40));
  };
  w.finished = [&](Runtime& r, int e, Sequence&) {
    if (e == 0 && ++done == 3)
      for (SeqId i = 11; i <= 13; ++i) {
        Sequence s = gen(i, 48, 1);
        s.kind = SeqKind::Score;
        r.submit(1, std::move(s));
      }
  };
  rt.run(w);
}

TEST(Runtime, OnASharedPoolADemandShiftMovesPagesBetweenModels) {
  SharedTwoEngines t;
  shifting_demand(t.rt);
  const auto& rec = t.rt.records();
  EXPECT_GE(peak_used(rec[0]), 30);  // 3 x 12 pages (less what finished early)
  EXPECT_GE(peak_used(rec[1]), 36);
  for (const EngineRecords& r : rec)
    for (const StepRecord& s : r.steps) EXPECT_LE(s.kv_blocks_used + s.kv_blocks_free, 40);
  t.pool->check_consistency();
}

TEST(Runtime, AMemoryPolicyMovesCeilingsDuringARun) {
  SharedTwoEngines t;
  int calls = 0;
  // Caps the PRM at 20 pages: its 3 prompts of 12 pages can then run only one at a time.
  t.rt.set_memory_policy([&](const std::vector<EngineStatus>& s) {
    ++calls;
    EXPECT_EQ(s.size(), 2u);
    return std::vector<std::optional<KvLimits>>{std::nullopt, KvLimits{0, 20}};
  });
  shifting_demand(t.rt);
  EXPECT_GT(calls, 0);
  EXPECT_LE(peak_used(t.rt.records()[1]), 20);
  EXPECT_EQ(t.pool->limits(1), (KvLimits{0, 20}));
}

// The PRM, capped at 20 pages, grows two sequences to 12 pages each while the LLM keeps 4 idle
// pages on the 40-page pool: the PRM's ceiling, not the pool, is what it is short of, so it
// preempts one of its own and the LLM keeps its KV (releasing it would free pages the PRM may not
// take, and cost the LLM a recompute).
TEST(Runtime, APeerKeepsItsIdleKvWhenTheCeilingIsWhatRunsShort) {
  SharedTwoEngines t;
  t.pool->set_limits(1, KvLimits{0, 20});
  Script w;
  w.on_start = [](Runtime& r) {
    Sequence s = gen(1, 14, 2);  // 16 tokens: 4 pages, kept
    s.keep_kv = true;
    r.submit(0, std::move(s));
  };
  int prm_done = 0;
  w.finished = [&](Runtime& r, int e, Sequence&) {
    if (e == 0)
      for (SeqId i = 11; i <= 12; ++i) r.submit(1, gen(i, 36, 12));  // 9 pages, growing to 12
    else if (++prm_done == 2) r.release(0, 1);
  };
  t.rt.run(w);
  EXPECT_EQ(prm_done, 2);
  EXPECT_GT(t.prm.scheduler().num_preemptions(), 0) << "the ceiling did not bind";
  EXPECT_EQ(t.llm.scheduler().num_idle_releases(), 0);
  EXPECT_EQ(t.prm.scheduler().num_idle_releases(), 0);
  t.pool->check_consistency();
}

}  // namespace
}  // namespace duet
