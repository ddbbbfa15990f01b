// plan_memory: budgets, the thesis formula for KV bytes and block counts, and the errors for
// impossible budgets. The exact figures are worked out by hand in the comments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/gpu_spec.hpp"
#include "core/memory_plan.hpp"
#include "core/model_spec.hpp"
#include "tests/support/test_support.hpp"

namespace duet {
namespace {

using test_support::contains;
using test_support::error_of;

constexpr std::int64_t kMiB = 1024LL * 1024;
constexpr std::int64_t kGiB = 1024 * kMiB;

EngineMemoryRequest by_utilisation(const std::string& label, const std::string& model, double u) {
  EngineMemoryRequest r;
  r.label = label;
  r.model = model_by_name(model);
  r.gpu_memory_utilization = u;
  return r;
}

EngineMemoryRequest by_budget(const std::string& label, const std::string& model, std::int64_t bytes) {
  EngineMemoryRequest r;
  r.label = label;
  r.model = model_by_name(model);
  r.budget_bytes = bytes;
  return r;
}

// Checks the relations every planned engine must satisfy, whatever its inputs.
void expect_formula_holds(const EngineMemory& e, const ModelSpec& m) {
  EXPECT_EQ(e.kv_bytes, e.budget_bytes - e.weight_bytes - e.activation_bytes - e.overhead_bytes) << e.label;
  EXPECT_EQ(e.block_bytes, std::int64_t(e.block_size) * m.kv_bytes_per_token()) << e.label;
  EXPECT_EQ(e.num_blocks, e.kv_bytes / e.block_bytes) << e.label;
  EXPECT_LE(std::int64_t(e.num_blocks) * e.block_bytes, e.kv_bytes) << e.label;
  EXPECT_GT(std::int64_t(e.num_blocks + 1) * e.block_bytes, e.kv_bytes) << e.label;
}

class MemoryPlanH100 : public ::testing::Test {
 protected:
  void SetUp() override {
    // The hand-worked figures below assume nvidia-smi's 81,559 MiB = 85,520,809,984 bytes.
    ASSERT_EQ(h100.hbm_bytes, 81559 * kMiB);
    ASSERT_EQ(h100.hbm_bytes, 85'520'809'984);
  }
  const GpuSpec h100 = gpu_by_name("h100");
};

TEST_F(MemoryPlanH100, ActivationBytesOfTheBuiltInsAtDefaults) {
  // Per token at bf16: residual + normed input (2*hidden) plus the wider of QKV
  // ((heads + 2*kv_heads)*head_dim) and the MLP (3*intermediate + heads*head_dim); plus fp32
  // logits for max_num_seqs rows.
  //   1B: 2*2048 + max(48*64, 3*8192 + 2048) = 4096 + 26624 = 30720 elements per token;
  //       8192*30720*2 + 256*128256*4 = 503,316,480 + 131,334,144 = 634,650,624
  //   8B: 2*4096 + max(48*128, 3*14336 + 4096) = 8192 + 47104 = 55296;
  //       8192*55296*2 + 131,334,144 = 905,969,664 + 131,334,144 = 1,037,303,808
  EXPECT_EQ(activation_bytes(model_by_name("llama-3.2-1b"), 8192, 256), 634'650'624);
  EXPECT_EQ(activation_bytes(model_by_name("llama-3.1-8b"), 8192, 256), 1'037'303'808);
}

TEST_F(MemoryPlanH100, SingleEngineByUtilisation) {
  const MemoryPlan plan = plan_memory(h100, {by_utilisation("llm", "llama-3.2-1b", 0.3)});
  ASSERT_EQ(plan.engines.size(), 1u);
  const EngineMemory& e = plan.engines[0];
  const ModelSpec m = model_by_name("llama-3.2-1b");
  EXPECT_EQ(e.label, "llm");
  EXPECT_EQ(e.budget_bytes, std::int64_t(std::floor(double(h100.hbm_bytes) * 0.3)));
  // By hand: floor(85,520,809,984 * 0.3)                               = 25,656,242,995
  //   kv = 25,656,242,995 - 2,471,628,800 (weights) - 634,650,624 (activations)
  //        - 536,870,912 (512 MiB overhead)                              = 22,013,092,659
  //   blocks = floor(22,013,092,659 / (16 * 32768 = 524,288))           = 41,986
  EXPECT_EQ(e.budget_bytes, 25'656'242'995);
  EXPECT_EQ(e.weight_bytes, m.weight_bytes());
  EXPECT_EQ(e.weight_bytes, 2'471'628'800);
  EXPECT_EQ(e.activation_bytes, 634'650'624);
  EXPECT_EQ(e.overhead_bytes, kDefaultRuntimeOverheadBytes);
  EXPECT_EQ(e.overhead_bytes, 512 * kMiB);
  EXPECT_EQ(e.kv_bytes, 22'013'092'659);
  EXPECT_EQ(e.block_size, 16);
  EXPECT_EQ(e.block_bytes, 524'288);
  EXPECT_EQ(e.num_blocks, 41'986);
  expect_formula_holds(e, m);
  EXPECT_EQ(plan.unassigned_bytes, h100.hbm_bytes - e.budget_bytes);
  EXPECT_EQ(plan.gpu.name, h100.name);
}

TEST_F(MemoryPlanH100, TwoEnginesShareTheGpu) {
  const MemoryPlan plan = plan_memory(
      h100, {by_utilisation("llm", "llama-3.2-1b", 0.3), by_utilisation("prm", "llama-3.1-8b", 0.6)});
  ASSERT_EQ(plan.engines.size(), 2u);
  const EngineMemory& llm = plan.engine("llm");
  const EngineMemory& prm = plan.engine("prm");
  EXPECT_EQ(llm.num_blocks, 41'986);  // as alone: the engines do not affect each other
  // By hand for the 8B: floor(85,520,809,984 * 0.6)                    = 51,312,485,990
  //   kv = 51,312,485,990 - 16,060,522,496 - 1,037,303,808 - 536,870,912 = 33,677,788,774
  //   blocks = floor(33,677,788,774 / (16 * 131072 = 2,097,152))        = 16,058
  EXPECT_EQ(prm.budget_bytes, 51'312'485'990);
  EXPECT_EQ(prm.weight_bytes, 16'060'522'496);
  EXPECT_EQ(prm.kv_bytes, 33'677'788'774);
  EXPECT_EQ(prm.block_bytes, 2'097'152);
  EXPECT_EQ(prm.num_blocks, 16'058);
  expect_formula_holds(llm, model_by_name("llama-3.2-1b"));
  expect_formula_holds(prm, model_by_name("llama-3.1-8b"));
  // 85,520,809,984 - 25,656,242,995 - 51,312,485,990 = 8,552,080,999 bytes in neither budget.
  EXPECT_EQ(plan.unassigned_bytes, 8'552'080'999);
  EXPECT_EQ(plan.unassigned_bytes, h100.hbm_bytes - llm.budget_bytes - prm.budget_bytes);
}

TEST_F(MemoryPlanH100, ExplicitBudgetBytes) {
  EngineMemoryRequest r = by_budget("prm", "llama-3.1-8b", 20 * kGiB);
  r.block_size = 32;
  r.max_num_batched_tokens = 2048;
  r.max_num_seqs = 64;
  r.runtime_overhead_bytes = 256 * kMiB;
  const MemoryPlan plan = plan_memory(h100, {r});
  const EngineMemory& e = plan.engine("prm");
  // activations: 2048*55296*2 + 64*128256*4 = 226,492,416 + 32,833,536 = 259,325,952
  // kv = 21,474,836,480 - 16,060,522,496 - 259,325,952 - 268,435,456 = 4,886,552,576
  // blocks = floor(4,886,552,576 / (32 * 131072 = 4,194,304)) = 1165
  EXPECT_EQ(e.budget_bytes, 21'474'836'480);
  EXPECT_EQ(e.activation_bytes, 259'325'952);
  EXPECT_EQ(e.overhead_bytes, 268'435'456);
  EXPECT_EQ(e.kv_bytes, 4'886'552'576);
  EXPECT_EQ(e.block_size, 32);
  EXPECT_EQ(e.num_blocks, 1165);
  expect_formula_holds(e, r.model);
  EXPECT_EQ(plan.unassigned_bytes, h100.hbm_bytes - 20 * kGiB);
}

TEST_F(MemoryPlanH100, WholeGpuLeavesNothingUnassigned) {
  const MemoryPlan plan = plan_memory(h100, {by_utilisation("llm", "llama-3.1-8b", 1.0)});
  EXPECT_EQ(plan.engine("llm").budget_bytes, h100.hbm_bytes);
  EXPECT_EQ(plan.unassigned_bytes, 0);
}

TEST_F(MemoryPlanH100, BothOrNeitherOfUtilisationAndBudgetIsAnError) {
  EngineMemoryRequest both = by_utilisation("llm", "llama-3.2-1b", 0.3);
  both.budget_bytes = 10 * kGiB;
  std::string msg = error_of([&] { plan_memory(h100, {both}); });
  EXPECT_TRUE(contains(msg, "'llm'")) << msg;
  EXPECT_TRUE(contains(msg, "exactly one")) << msg;

  EngineMemoryRequest neither = by_utilisation("prm", "llama-3.2-1b", 0.3);
  neither.gpu_memory_utilization.reset();
  msg = error_of([&] { plan_memory(h100, {neither}); });
  EXPECT_TRUE(contains(msg, "'prm'")) << msg;
  EXPECT_TRUE(contains(msg, "exactly one")) << msg;
}

TEST_F(MemoryPlanH100, UtilisationOutsideZeroToOneIsAnError) {
  for (double u : {0.0, 1.5, -0.2}) {
    SCOPED_TRACE(u);
    const std::string msg = error_of([&] { plan_memory(h100, {by_utilisation("llm", "llama-3.2-1b", u)}); });
    EXPECT_TRUE(contains(msg, "'llm'")) << msg;
    EXPECT_TRUE(contains(msg, "gpu_memory_utilization")) << msg;
  }
}

TEST_F(MemoryPlanH100, NonPositiveBudgetBytesIsAnError) {
  for (std::int64_t b : {std::int64_t(-1), -4 * kGiB, std::int64_t(0)}) {
    SCOPED_TRACE(b);
    const std::string msg = error_of([&] { plan_memory(h100, {by_budget("llm", "llama-3.2-1b", b)}); });
    EXPECT_TRUE(contains(msg, "'llm'")) << msg;
    EXPECT_TRUE(contains(msg, "budget_bytes")) << msg;
  }
}

TEST_F(MemoryPlanH100, WeightsThatDoNotFitAreAnError) {
  // 10% of 80 GB is about 8 GB; the 8B's bf16 weights alone are 16 GB.
  const std::string msg = error_of([&] { plan_memory(h100, {by_utilisation("prm", "llama-3.1-8b", 0.1)}); });
  EXPECT_TRUE(contains(msg, "'prm'")) << msg;
  EXPECT_TRUE(contains(msg, "weights")) << msg;
}

TEST_F(MemoryPlanH100, RoomForLessThanOneBlockIsAnError) {
  // A budget one byte short of weights + activations + overhead + one block.
  EngineMemoryRequest r = by_budget("llm", "llama-3.2-1b", 0);
  const std::int64_t fixed = r.model.weight_bytes() +
                             activation_bytes(r.model, r.max_num_batched_tokens, r.max_num_seqs) +
                             r.runtime_overhead_bytes;
  const std::int64_t one_block = 16 * r.model.kv_bytes_per_token();
  r.budget_bytes = fixed + one_block - 1;
  const std::string short_one = error_of([&] { plan_memory(h100, {r}); });
  EXPECT_TRUE(contains(short_one, "'llm'")) << short_one;
  // 16 tokens of 32 KiB; one byte short of them.
  EXPECT_TRUE(
      contains(short_one, "one KV block of block_size 16 tokens takes 0.50 MiB, more than the 0.50 MiB"))
      << short_one;
  EXPECT_TRUE(contains(short_one, "raise gpu_memory_utilization")) << short_one;
  // No room for KV at all is the other message, about the batch.
  r.budget_bytes = fixed - 1;
  const std::string none = error_of([&] { plan_memory(h100, {r}); });
  EXPECT_TRUE(contains(none, "leave no room for KV in its budget")) << none;
  EXPECT_TRUE(contains(none, "lower max_num_batched_tokens / max_num_seqs")) << none;
  // With room for KV, an outsized block is named as the cause (the hint was about the batch).
  r.budget_bytes = fixed + kGiB;
  r.block_size = 1'000'000;
  const std::string outsized = error_of([&] { plan_memory(h100, {r}); });
  EXPECT_TRUE(
      contains(outsized, "one KV block of block_size 1000000 tokens takes 30.52 GiB, more than the 1.00 GiB"))
      << outsized;
  EXPECT_TRUE(contains(outsized, "lower block_size")) << outsized;
  r.block_size = 16;
  // Exactly one block's worth is enough.
  r.budget_bytes = fixed + one_block;
  EXPECT_EQ(plan_memory(h100, {r}).engine("llm").num_blocks, 1);
}

TEST_F(MemoryPlanH100, BudgetsAboveTheGpuAreAnError) {
  // 0.5 + 0.6 of the GPU: each fits alone, together they do not.
  const std::string msg = error_of([&] {
    plan_memory(h100,
                {by_utilisation("llm", "llama-3.2-1b", 0.5), by_utilisation("prm", "llama-3.1-8b", 0.6)});
  });
  EXPECT_TRUE(contains(msg, "llm")) << msg;
  EXPECT_TRUE(contains(msg, "prm")) << msg;
  EXPECT_TRUE(contains(msg, "exceed")) << msg;

  // The same with explicit bytes: a single budget larger than the GPU.
  const std::string msg2 =
      error_of([&] { plan_memory(h100, {by_budget("llm", "llama-3.2-1b", 100 * kGiB)}); });
  EXPECT_TRUE(contains(msg2, "exceed")) << msg2;
}

TEST_F(MemoryPlanH100, BadRequestFieldsAreErrors) {
  EngineMemoryRequest r = by_utilisation("llm", "llama-3.2-1b", 0.3);
  r.block_size = 0;
  std::string msg = error_of([&] { plan_memory(h100, {r}); });
  EXPECT_TRUE(contains(msg, "'llm'")) << msg;
  EXPECT_TRUE(contains(msg, "block_size")) << msg;

  r = by_utilisation("prm", "llama-3.2-1b", 0.3);
  r.max_num_seqs = -1;
  msg = error_of([&] { plan_memory(h100, {r}); });
  EXPECT_TRUE(contains(msg, "'prm'")) << msg;
  EXPECT_TRUE(contains(msg, "max_num_seqs")) << msg;

  r = by_utilisation("prm", "llama-3.2-1b", 0.3);
  r.max_num_batched_tokens = 0;
  msg = error_of([&] { plan_memory(h100, {r}); });
  EXPECT_TRUE(contains(msg, "'prm'")) << msg;
  EXPECT_TRUE(contains(msg, "max_num_batched_tokens")) << msg;

  r = by_utilisation("prm", "llama-3.2-1b", 0.3);
  r.runtime_overhead_bytes = -1;
  msg = error_of([&] { plan_memory(h100, {r}); });
  EXPECT_TRUE(contains(msg, "'prm'")) << msg;
  EXPECT_TRUE(contains(msg, "overhead")) << msg;
}

TEST_F(MemoryPlanH100, UnknownEngineLabelThrows) {
  const MemoryPlan plan = plan_memory(h100, {by_utilisation("llm", "llama-3.2-1b", 0.3)});
  const std::string msg = error_of([&] { plan.engine("x"); });
  EXPECT_TRUE(contains(msg, "'x'")) << msg;
}

TEST_F(MemoryPlanH100, ActivationBytesGrowWithBatchedTokens) {
  const ModelSpec m = model_by_name("llama-3.1-8b");
  const std::int64_t a1 = activation_bytes(m, 1024, 256);
  const std::int64_t a2 = activation_bytes(m, 2048, 256);
  const std::int64_t a3 = activation_bytes(m, 3072, 256);
  EXPECT_LT(a1, a2);
  EXPECT_LT(a2, a3);
  // Linear in the token count: each extra 1024 tokens cost the same (55296 elements * 2 bytes each).
  EXPECT_EQ(a2 - a1, a3 - a2);
  EXPECT_EQ(a2 - a1, 1024LL * 55296 * 2);
  // More logit rows cost 4 bytes per vocabulary entry each.
  EXPECT_EQ(activation_bytes(m, 1024, 257) - a1, 128256LL * 4);

  // In the plan, a larger max_num_batched_tokens leaves fewer KV blocks.
  EngineMemoryRequest small = by_utilisation("llm", "llama-3.1-8b", 0.5);
  small.max_num_batched_tokens = 2048;
  EngineMemoryRequest large = small;
  large.max_num_batched_tokens = 16384;
  const EngineMemory es = plan_memory(h100, {small}).engine("llm");
  const EngineMemory el = plan_memory(h100, {large}).engine("llm");
  EXPECT_GT(el.activation_bytes, es.activation_bytes);
  EXPECT_LT(el.num_blocks, es.num_blocks);
}

// --- A shared pool (kv_pool = "shared") ---------------------------------------------------------

KvPoolRequest shared_pool(std::optional<std::int32_t> pages = std::nullopt) {
  KvPoolRequest r;
  r.kind = KvPoolKind::Shared;
  r.num_pages_override = pages;
  return r;
}

TEST_F(MemoryPlanH100, ASharedPoolHoldsTheKvBytesOfEveryBudget) {
  EngineMemoryRequest llm = by_utilisation("llm", "llama-3.2-1b", 0.3),
                      prm = by_utilisation("prm", "llama-3.1-8b", 0.6);
  llm.block_size = 64;  // 64 x 32 KiB = 16 x 128 KiB = 2 MiB
  const MemoryPlan plan = plan_memory(h100, {llm, prm}, shared_pool());
  ASSERT_TRUE(plan.shared.has_value());
  // The KV bytes of the static plan above, together: 22,013,092,659 + 33,677,788,774 bytes,
  // in pages of 2,097,152 bytes: floor(55,690,881,433 / 2,097,152) = 26,555.
  EXPECT_EQ(plan.shared->kv_bytes, 22'013'092'659 + 33'677'788'774);
  EXPECT_EQ(plan.shared->page_bytes, 2'097'152);
  EXPECT_EQ(plan.shared->num_pages, 26'555);
  for (const EngineMemory& e : plan.engines) EXPECT_EQ(e.num_blocks, 26'555) << e.label;
  EXPECT_EQ(plan_memory(h100, {llm, prm}, shared_pool(100)).shared->num_pages, 100);
}

TEST_F(MemoryPlanH100, UnequalBlockBytesOnASharedPoolAreAnError) {
  // Both at block 16: 512 KiB against 2 MiB.
  const std::string msg = error_of([&] {
    plan_memory(h100,
                {by_utilisation("llm", "llama-3.2-1b", 0.3), by_utilisation("prm", "llama-3.1-8b", 0.6)},
                shared_pool());
  });
  EXPECT_TRUE(contains(msg, "engine 'prm' has blocks of 2097152 bytes")) << msg;
  EXPECT_TRUE(contains(msg, "engine 'llm' of 524288")) << msg;
  EXPECT_TRUE(contains(msg, "equal bytes")) << msg;
}

TEST(SharedPoolBlockSizes, TheDefaultPairingHasEqualBytes) {
  const ModelSpec small = model_by_name("llama-3.2-1b"), large = model_by_name("llama-3.1-8b");
  EXPECT_EQ(equal_byte_block_sizes({small, large}, kSharedPoolBlockSize), (std::vector<int>{16, 4}));
  EXPECT_EQ(equal_byte_block_sizes({large, small}, kSharedPoolBlockSize), (std::vector<int>{4, 16}));
  EXPECT_EQ(equal_byte_block_sizes({small, large}, 64), (std::vector<int>{64, 16}));
  EXPECT_EQ(equal_byte_block_sizes({small, small}, 16), (std::vector<int>{16, 16}));
}

TEST(SharedPoolBlockSizes, BytesThatDoNotDivideGetTheFewestWholeTokensAboveTheSizeAsked) {
  const ModelSpec small = model_by_name("llama-3.2-1b");  // 32 KiB a token
  // Qwen2.5-Math-PRM-7B: 56 KiB a token; 7 tokens of the 1B hold 4 of it, and 21 is the first
  // multiple of 7 from 16 (it was an error: 16 x 32 KiB is no whole number of its tokens).
  EXPECT_EQ(equal_byte_block_sizes({small, model_by_name("qwen2.5-math-prm-7b")}, 16),
            (std::vector<int>{21, 12}));
  ModelSpec odd = small;  // 12 KV heads: 48 KiB per token; 3 tokens of the 1B hold 2
  odd.name = "odd";
  odd.num_kv_heads = 12;
  odd.num_heads = 24;
  EXPECT_EQ(equal_byte_block_sizes({small, odd}, 16), (std::vector<int>{18, 12}));
  ModelSpec wide = small;  // 32x the bytes per token: one token a block, 32 of the 1B
  wide.name = "wide";
  wide.num_layers = small.num_layers * 32;
  EXPECT_EQ(equal_byte_block_sizes({wide, small}, 16), (std::vector<int>{1, 32}));
  for (const auto& [a, b] : {std::pair{small, odd}, {small, wide}})
    for (int asked : {1, 16, 100}) {
      const std::vector<int> sizes = equal_byte_block_sizes({a, b}, asked);
      EXPECT_EQ(sizes[0] * a.kv_bytes_per_token(), sizes[1] * b.kv_bytes_per_token());
      EXPECT_GE(std::max(sizes[0], sizes[1]), asked);  // the narrowest model's, at least the size asked
    }
}

TEST(SharedPoolBlockSizes, NoBlockOfAtMost1024TokensIsAnError) {
  const ModelSpec small = model_by_name("llama-3.2-1b");
  ModelSpec prime = small;  // 1031 x 256 bytes a token against 2^15: blocks of 1031 x k tokens of the 1B
  prime.name = "prime";
  prime.num_layers = 1031;
  prime.num_kv_heads = 1;
  const std::string msg = error_of([&] { equal_byte_block_sizes({small, prime}, 16); });
  EXPECT_TRUE(contains(msg, "no block of at most 1024 tokens holds a whole number of each model's tokens"))
      << msg;
  EXPECT_TRUE(contains(msg, "llama-3.2-1b 32768, prime " + std::to_string(prime.kv_bytes_per_token())))
      << msg;
  EXPECT_TRUE(contains(msg, "block_size")) << msg;
  EXPECT_TRUE(contains(error_of([&] { equal_byte_block_sizes({small}, 0); }), "block_size must be positive"));
}

}  // namespace
}  // namespace duet
