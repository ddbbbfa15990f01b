// Costs of the CPU engine's per-row operations that do not scale with the model: sampling a
// token from a row of logits, against the argmax that greedy decoding takes. The vocabularies are
// the repository's tokenizer (8,000), Llama 2's (32,000) and Llama 3's (128,256).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "exec/cpu_ops.hpp"
#include "kernels/philox.hpp"

namespace duet {
namespace {

// Logits with a language model's shape: a normal body, and a few tokens well above it.
std::vector<float> model_like_logits(std::size_t vocab) {
  std::mt19937_64 gen(7);
  std::normal_distribution<float> body(0.0f, 2.0f);
  std::vector<float> l(vocab);
  for (float& x : l) x = body(gen);
  for (std::size_t j = 0; j < 8; ++j) l[(j * 7919) % vocab] += 10.0f - float(j);
  return l;
}

// Temperature 0.8 with top_p 1 (search-and-learn's beam search) and 0.9.
void BM_SampleTopP(benchmark::State& state) {
  const auto l = model_like_logits(std::size_t(state.range(0)));
  const float top_p = float(state.range(1)) / 100.0f;
  std::uint64_t counter = 0;
  for (auto _ : state)
    benchmark::DoNotOptimize(sample_top_p(l, 0.8f, top_p, kernels::philox_uniform(1, counter++)));
}
BENCHMARK(BM_SampleTopP)
    ->ArgsProduct({{8000, 32000, 128256}, {100, 90}})
    ->ArgNames({"vocab", "top_p%"})
    ->Unit(benchmark::kMicrosecond);

void BM_Argmax(benchmark::State& state) {
  const auto l = model_like_logits(std::size_t(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(argmax(l));
}
BENCHMARK(BM_Argmax)->Arg(8000)->Arg(32000)->Arg(128256)->ArgName("vocab")->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace duet

BENCHMARK_MAIN();
