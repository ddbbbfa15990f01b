#include "exec/backend.hpp"

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/runtime.hpp"
#include "tests/support/test_support.hpp"

namespace duet {
namespace {

std::unique_ptr<BuiltEngine> sim(const GpuSpec& gpu, const EngineConfig& c, const EngineMemory& m,
                                 std::uint32_t id) {
  BackendOptions b;
  b.cost_model = "roofline";
  return make_engine(b, gpu, c, m, id);
}

EngineConfig config(const std::string& name, const std::string& model, double util) {
  EngineConfig c;
  c.name = name;
  c.model = model_by_name(model);
  c.gpu_memory_utilization = util;
  return c;
}

TEST(Backend, BlockCountsComeFromTheMemoryPlan) {
  const GpuSpec gpu = gpu_by_name("h100");
  const EngineConfig llm = config("llm", "llama-3.2-1b", 0.3);
  const EngineConfig prm = config("prm", "llama-3.1-8b", 0.6);
  const MemoryPlan plan = plan_memory(gpu, {memory_request(llm), memory_request(prm)});
  auto a = sim(gpu, llm, plan.engine("llm"), 0);
  auto b = sim(gpu, prm, plan.engine("prm"), 1);
  EXPECT_EQ(a->engine().kv().usage().total_blocks, plan.engine("llm").num_blocks);
  EXPECT_EQ(b->engine().kv().usage().total_blocks, plan.engine("prm").num_blocks);
  EXPECT_GT(a->engine().kv().usage().total_blocks, b->engine().kv().usage().total_blocks);
}

// A generator and a PRM on one simulated H100: every generated answer is scored.
struct GenerateThenScore : Workload {
  int n;
  int scored = 0;
  explicit GenerateThenScore(int problems) : n(problems) {}
  void start(Runtime& rt) override {
    for (int i = 0; i < n; ++i) {
      Sequence s;
      s.id = rt.next_seq_id();
      s.tokens.assign(300, TokenId(i % 5));  // five distinct prompts: prefix sharing
      s.tokens.push_back(TokenId(1000 + i));
      s.num_prompt_tokens = s.num_tokens();
      s.sampling.max_tokens = 64;
      s.sampling.ignore_eos = true;
      s.script.seed = std::uint64_t(i);
      rt.submit(0, std::move(s));
    }
  }
  void on_finished(Runtime& rt, int engine, Sequence& s) override {
    if (engine == 1) return void(++scored);
    Sequence q;
    q.id = rt.next_seq_id();
    q.kind = SeqKind::Score;
    q.tokens = s.tokens;
    q.num_prompt_tokens = q.num_tokens();
    rt.submit(1, std::move(q));
  }
};

TEST(Backend, TwoModelsShareOneSimulatedGpu) {
  const GpuSpec gpu = gpu_by_name("h100");
  const EngineConfig llm = config("llm", "llama-3.2-1b", 0.3);
  const EngineConfig prm = config("prm", "llama-3.1-8b", 0.6);
  const MemoryPlan plan = plan_memory(gpu, {memory_request(llm), memory_request(prm)});
  auto a = sim(gpu, llm, plan.engine("llm"), 0);
  auto b = sim(gpu, prm, plan.engine("prm"), 1);
  VirtualClock clock;
  Runtime rt(clock);
  rt.add_engine(a->engine(), llm.model.name);
  rt.add_engine(b->engine(), prm.model.name);
  GenerateThenScore w(40);
  rt.run(w);
  EXPECT_EQ(w.scored, 40);
  const RunSummary s = rt.summary();
  ASSERT_EQ(s.engines.size(), 2u);
  EXPECT_EQ(s.engines[0].generated_tokens, 40 * 64);
  EXPECT_GT(s.engines[0].generated_tokens_per_s, 0);
  EXPECT_GT(s.engines[0].prefix_hit_rate, 0.5) << "40 prompts over 5 distinct prefixes";
  EXPECT_GT(s.engines[1].prefix_hit_rate, 0.5);
  // One device: the two engines' busy time cannot exceed the makespan.
  EXPECT_LE(s.engines[0].busy_s + s.engines[1].busy_s, s.makespan_s + 1e-9);
}

TEST(Backend, AModelThatDoesNotFitItsBudgetIsAClearError) {
  const GpuSpec gpu = gpu_by_name("h100");
  EXPECT_THROW(plan_memory(gpu, {memory_request(config("prm", "llama-3.1-8b", 0.15))}), Error);
}

TEST(Backend, NaiveAllocatorEngineRunsTheSameWorkload) {
  const GpuSpec gpu = gpu_by_name("h100");
  EngineConfig c = config("llm", "llama-3.2-1b", 0.1);
  c.allocator = AllocatorKind::Naive;
  c.max_model_len = 2048;
  const MemoryPlan plan = plan_memory(gpu, {memory_request(c)});
  auto e = sim(gpu, c, plan.engine("llm"), 0);
  VirtualClock clock;
  Runtime rt(clock);
  rt.add_engine(e->engine(), c.model.name);
  struct Burst : Workload {
    void start(Runtime& rt) override {
      for (int i = 0; i < 20; ++i) {
        Sequence s;
        s.id = rt.next_seq_id();
        s.tokens.assign(200, TokenId(i));
        s.num_prompt_tokens = 200;
        s.sampling.max_tokens = 10;
        s.sampling.ignore_eos = true;
        rt.submit(0, std::move(s));
      }
    }
    void on_finished(Runtime&, int, Sequence&) override {}
  } w;
  rt.run(w);
  EXPECT_EQ(rt.summary().engines[0].requests, 20);
  EXPECT_EQ(rt.summary().engines[0].prefix_hit_rate, 0.0);
}

TEST(Backend, TheBackendListLivesInOnePlaceAndNamesWhatIsBuilt) {
  using test_support::contains;
  using test_support::error_of;
  EXPECT_EQ(all_backends(), (std::vector<std::string>{"sim", "cpu", "cuda"}));
  EXPECT_NO_THROW(check_backend("sim"));
  EXPECT_NO_THROW(check_backend("cpu"));
  EXPECT_TRUE(contains(error_of([] { check_backend("gpu"); }), "unknown backend 'gpu' (valid: sim, cpu"));
  EXPECT_FALSE(is_real_backend("sim"));
  EXPECT_TRUE(is_real_backend("cpu"));
  EXPECT_EQ(device_key("sim", gpu_by_name("h100")), "h100-sxm");
  EXPECT_EQ(device_key("cpu", gpu_by_name("h100")).rfind("cpu-", 0), 0u);
}

TEST(Backend, EachEngineHasItsModelsVocabulary) {
  const GpuSpec gpu = gpu_by_name("h100");
  EngineConfig c = config("llm", "llama-3.2-1b", 0.3);
  const MemoryPlan plan = plan_memory(gpu, {memory_request(c)});
  auto llama = sim(gpu, c, plan.engine("llm"), 0);
  EXPECT_EQ(llama->vocabulary().step_id, 271);
  EXPECT_EQ(llama->vocabulary().eos_id, 128009);
  EXPECT_EQ(llama->vocabulary().prm_plus_id, 10);
  EngineConfig tiny = c;
  tiny.model = resolve_model(std::string(DUET_SOURCE_DIR) + "/models/tiny-llama/config.json");
  tiny.num_gpu_blocks_override = 64;
  const MemoryPlan small = plan_memory(gpu, {memory_request(tiny)});
  BackendOptions b;
  b.name = "cpu";
  b.source_dir = DUET_SOURCE_DIR;
  auto cpu = make_engine(b, gpu, tiny, small.engine("llm"), 0);
  EXPECT_EQ(cpu->vocabulary().name, "duet-math");
  EXPECT_EQ(cpu->vocabulary().step_id, 4) << "workloads/data/tokenizer/README.md: id 4 is \"\\n\\n\"";
  EXPECT_EQ(cpu->vocabulary().eos_id, 2);
  EXPECT_EQ(cpu->engine().kv().usage().total_blocks, 64);
}

}  // namespace
}  // namespace duet
