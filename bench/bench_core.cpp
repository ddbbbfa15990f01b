// Costs of the shared core's hot operations. A simulated step must cost microseconds, so the
// targets on a 2-core CI machine are: allocate+free < 50 ns, a 256-sequence scheduler step < 20 us.
#include <benchmark/benchmark.h>

#include <deque>
#include <memory>
#include <numeric>

#include "core/kv_cache_manager.hpp"
#include "core/scheduler.hpp"

namespace duet {
namespace {

Sequence make_seq(SeqId id, int n, TokenId first = 0) {
  Sequence s;
  s.id = id;
  s.tokens.resize(std::size_t(n));
  std::iota(s.tokens.begin(), s.tokens.end(), first);
  s.num_prompt_tokens = n;
  s.sampling.max_tokens = 1 << 20;
  return s;
}

void BM_BlockAllocateFree(benchmark::State& state) {
  BlockPool pool(1 << 20, 16);
  for (auto _ : state) {
    const BlockId b = pool.allocate();
    benchmark::DoNotOptimize(b);
    pool.free(b);
  }
}
BENCHMARK(BM_BlockAllocateFree);

// Allocation that evicts: every block taken holds cached content that must leave the hash map.
void BM_BlockAllocateEvictFree(benchmark::State& state) {
  const int n = 1 << 16;
  BlockPool pool(n, 1);
  for (TokenId t = 0; t < n; ++t) {
    const BlockId b = pool.allocate();
    const TokenId tok[1] = {t};
    pool.cache(b, pool.hash(kRootHash, tok), {}, tok);
  }
  for (BlockId b = 0; b < n; ++b) pool.free(b);
  TokenId next = n;
  for (auto _ : state) {
    const BlockId b = pool.allocate();
    const TokenId tok[1] = {next++};
    pool.cache(b, pool.hash(kRootHash, tok), {}, tok);
    pool.free(b);
  }
}
BENCHMARK(BM_BlockAllocateEvictFree);

// Longest-prefix lookup of a 2,000-token prompt whose 124 full blocks are all cached, hashing
// included (the memo is cleared each time, as for a new request).
void BM_PrefixLookup2000(benchmark::State& state) {
  KvCacheManager kv(KvCacheConfig{4096, 16, true});
  Sequence first = make_seq(1, 2000);
  kv.allocate_slots(first, 2000);
  Sequence probe = make_seq(2, 2000);
  int hit = 0;
  for (auto _ : state) {
    probe.kv.hashes.clear();
    hit = kv.lookup_prefix(probe);
    benchmark::DoNotOptimize(hit);
  }
  state.counters["hit_tokens"] = hit;
}
BENCHMARK(BM_PrefixLookup2000);

// fork of a 64-block sequence (a partial last block, so the next write would copy), then free.
void BM_Fork64Blocks(benchmark::State& state) {
  KvCacheManager kv(KvCacheConfig{1024, 16, true});
  Sequence src = make_seq(1, 64 * 16 - 5);
  kv.allocate_slots(src, src.num_tokens());
  src.num_computed_tokens = src.num_tokens();
  Sequence dst = make_seq(2, 0);
  for (auto _ : state) {
    kv.fork(src, dst);
    kv.free(dst);
  }
}
BENCHMARK(BM_Fork64Blocks);

// One scheduler step with 256 running decodes and 1,000 waiting requests (max_num_seqs = 256, so
// none is admitted), followed by the engine's token append: the per-step cost of the simulator.
void BM_SchedulerStep256Decodes(benchmark::State& state) {
  const int blocks = 256 * 160;
  std::deque<Sequence> seqs;  // before the scheduler that links them
  auto kv = std::make_unique<KvCacheManager>(KvCacheConfig{blocks, 16, true});
  auto sched = std::make_unique<Scheduler>(
      SchedulerConfig{.max_num_seqs = 256, .max_num_batched_tokens = 8192, .max_model_len = 1 << 30}, *kv);
  auto rebuild = [&] {
    sched.reset();  // its running list links the sequences: it goes first
    seqs.clear();
    kv = std::make_unique<KvCacheManager>(KvCacheConfig{blocks, 16, true});
    sched = std::make_unique<Scheduler>(
        SchedulerConfig{.max_num_seqs = 256, .max_num_batched_tokens = 8192, .max_model_len = 1 << 30}, *kv);
    for (int i = 0; i < 256; ++i) sched->add(seqs.emplace_back(make_seq(i + 1, 500, i * 1000)));
    while (sched->num_waiting() > 0) {
      for (const BatchItem& it : sched->schedule().items) it.seq->num_computed_tokens += it.num_new_tokens;
    }
    for (auto& s : seqs) s.tokens.push_back(1);
    for (int i = 0; i < 1000; ++i) sched->add(seqs.emplace_back(make_seq(1000 + i, 500, 7)));
  };
  rebuild();
  std::int64_t steps = 0;
  for (auto _ : state) {
    Batch b = sched->schedule();
    for (const BatchItem& it : b.items) {
      it.seq->num_computed_tokens += it.num_new_tokens;
      it.seq->tokens.push_back(TokenId(steps));
    }
    benchmark::DoNotOptimize(b.items.data());
    if (++steps % 2048 == 0) {  // keep the context bounded: ~500-2,500 tokens per sequence
      state.PauseTiming();
      rebuild();
      state.ResumeTiming();
    }
  }
  state.counters["batch"] = 256;
}
BENCHMARK(BM_SchedulerStep256Decodes)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace duet

BENCHMARK_MAIN();
