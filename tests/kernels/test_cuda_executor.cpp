// CudaExecutor against CpuExecutor, both driven by real core Engines (Scheduler + KvCacheManager)
// so that the batches are the ones serving produces: chunked prefills mixed with decodes,
// prefix-cache hits (some on blocks written in the same step), copy-on-write forks, decode-only
// batches replayed from CUDA graphs, PRM scoring and forced scripts, and two models' engines on
// one shared KV arena (kv_pool = "shared"). Without a CUDA device every test skips with the reason.
//
// Models: the tiny model (models/tiny-llama/config.json), the same 4 layers deep (for the shared
// pool), and a 2-layer slice of Llama-3.2-1B's shapes (hidden 2048, 32/8 heads of 64, intermediate
// 8192, vocabulary 128256, tied, llama3 RoPE scaling), all with dummy weights (vLLM's
// load_format = "dummy").
//
// What differs between the two executors, and the tolerances that follow:
//  - Weights: the GPU runs bf16 weights, the CPU float32. The CPU reference here runs the weights
//    rounded through bf16 first (round to nearest even), so the weights are identical and only
//    activation rounding differs: the GPU stores every activation (residual stream, normed
//    input, q/k/v, attention output, MLP) and the KV cache in bf16 (8 significant bits, 2^-8
//    relative per rounding) and accumulates in float32 in another order.
//  - Logits (float32 on both): per row, max |gpu - cpu| <= 3% and RMS(gpu - cpu) <= 1% of the
//    row's scale max(1, max |cpu logit|). The dummy models' logits have a spread of ~1 (tiny) to
//    ~2.6 (1B) and maxima of ~4-12; a dozen bf16 roundings on the path each add ~0.2-0.4%
//    relative to the hidden state, i.e. ~0.3% of the scale. A wrong position, a missing or stale
//    K/V, a wrong block or a wrong row moves logits by the spread (20% or more of the scale).
//  - Greedy tokens: the GPU's token is exactly the argmax of the GPU's own logits row (lowest id
//    on ties), and the CPU's argmax unless the two are a near-tie under the CPU logits (within 6%
//    of the scale, twice the logits tolerance); such near-ties are counted and printed.
//  - PRM scores: exactly (1e-5) the two-way softmax of the GPU's own row; within 0.03 of the CPU's.
//  - KV pool, forced-script lockstep (identical token streams and block tables on both):
//    max |gpu - cpu| <= 5% and RMS <= 1% of max(1, max |cpu value|).
#include "exec/cuda_executor.hpp"
#include "exec/vocabulary.hpp"
#include "tests/support/test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/block_pool.hpp"
#include "core/engine.hpp"
#include "core/error.hpp"
#include "core/kv_cache_manager.hpp"
#include "core/kv_layout.hpp"
#include "core/output_script.hpp"
#include "exec/cpu_executor.hpp"
#include "exec/cpu_ops.hpp"
#include "exec/weights.hpp"
#include "kernels/device.hpp"
#include "tests/kernels/require_gpu.hpp"

#ifndef DUET_SOURCE_DIR
#define DUET_SOURCE_DIR "."
#endif

namespace duet {
namespace {

constexpr double kLogitMaxTol = 0.03;
constexpr double kLogitRmsTol = 0.01;
constexpr double kTieTol = 0.06;
constexpr double kScoreTol = 0.03;
constexpr double kKvMaxTol = 0.05;
constexpr double kKvRmsTol = 0.01;
constexpr int kBlockSize = 16;

// --- Models and weights ------------------------------------------------------------------------

// The repository's data: DUET_HOME where set (a GPU bundle, see scripts/gpu-bundle.sh), else the
// source tree this binary was built from.
std::string source_dir() {
  const char* home = std::getenv("DUET_HOME");
  return home && *home ? home : DUET_SOURCE_DIR;
}

ModelSpec tiny_model() { return resolve_model(source_dir() + "/models/tiny-llama/config.json"); }

ModelSpec llama_1b_slice() {
  ModelSpec m = model_by_name("llama-3.2-1b");
  m.num_layers = 2;
  m.name += "-2-layers";
  return m;
}

float round_bf16(float x) { return kernels::from_bf16(kernels::to_bf16(x)); }

void round_tensor(HostTensor& t) {
  for (float& v : t.data) v = round_bf16(v);
}

// Dummy weights rounded through bf16: what the GPU holds, in float32 for the CPU reference.
// Generated once per model (the 1B slice's embedding alone is 262M values).
const LlamaWeights& rounded_weights(const ModelSpec& spec) {
  static std::map<std::string, std::unique_ptr<LlamaWeights>> cache;
  auto& slot = cache[spec.name];
  if (!slot) {
    slot = std::make_unique<LlamaWeights>(dummy_llama_weights(spec, 11));
    LlamaWeights& w = *slot;
    round_tensor(w.embed_tokens);
    for (LlamaLayerWeights& l : w.layers) {
      // Qwen3's head norms spread 10x around 1 (the dummy 1 +- 0.05 would let a weight left out,
      // or q's used for k, pass within the tolerance), then rounded as the GPU holds them.
      for (HostTensor* t : {&l.q_norm, &l.k_norm})
        for (float& v : t->data) v = 1.0f + 10.0f * (v - 1.0f);
      for (HostTensor* t :
           {&l.input_norm, &l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.post_norm, &l.gate_proj, &l.up_proj,
            &l.down_proj, &l.q_bias, &l.k_bias, &l.v_bias, &l.q_norm, &l.k_norm})
        round_tensor(*t);
    }
    // A score head's biases at 10x the dummy scale: a bias left out moves its labels by far more
    // than the 3% tolerance (at the dummy scale, score.0's moved them by about that much).
    for (HostTensor* t : {&w.score_hidden_bias, &w.score_out_bias})
      for (float& v : t->data) v *= 10.0f;
    for (HostTensor* t :
         {&w.final_norm, &w.lm_head, &w.score_hidden, &w.score_hidden_bias, &w.score_out, &w.score_out_bias})
      round_tensor(*t);
  }
  return *slot;
}

// --- Engines around either executor --------------------------------------------------------------

struct RigConfig {
  int num_blocks = 256;  // a shared pool's pages
  int block_size = kBlockSize;
  int max_num_seqs = 8;
  int max_num_batched_tokens = 24;
  int max_model_len = 512;
  bool prefix_caching = true;
  bool cuda_graphs = true;
  bool honour_scripts = true;
  bool keep_logits = true;             // off: the Rig keeps no logits rows
  std::vector<int> graph_batch_sizes;  // empty: the executor's default buckets
  TokenId prm_plus_id = kDefaultPrmPlusId;
  TokenId prm_minus_id = kDefaultPrmMinusId;
};

struct Row {
  SeqId id = 0;
  int position = 0;
  std::vector<float> logits;
};

// What a sequence looked like the last time a step touched it (finished ones may be released).
struct Snapshot {
  std::vector<TokenId> tokens;
  int num_prompt_tokens = 0;
  float temperature = 0;
  std::vector<int> score_positions;
  std::vector<float> scores;
};

// On a KV pool of its own, or on a shared pool's arena.
std::unique_ptr<CudaExecutor> make_gpu(const LlamaWeights& w, const RigConfig& c,
                                       std::shared_ptr<CudaKvArena> arena = nullptr) {
  CudaExecutorOptions o;
  o.prm_plus_id = c.prm_plus_id;
  o.prm_minus_id = c.prm_minus_id;
  o.honour_scripts = c.honour_scripts;
  o.use_cuda_graphs = c.cuda_graphs;
  if (!c.graph_batch_sizes.empty()) o.graph_batch_sizes = c.graph_batch_sizes;
  o.max_num_batched_tokens = c.max_num_batched_tokens;
  o.max_num_seqs = c.max_num_seqs;
  o.max_model_len = c.max_model_len;
  o.keep_logits = c.keep_logits;
  o.kv_arena = std::move(arena);
  return std::make_unique<CudaExecutor>(w, c.num_blocks, c.block_size, o);
}

std::unique_ptr<CpuExecutor> make_cpu(const LlamaWeights& w, const RigConfig& c,
                                      std::span<float> arena = {}) {
  return std::make_unique<CpuExecutor>(
      w, c.num_blocks, c.block_size,
      CpuExecutorOptions{
          .prm_plus_id = c.prm_plus_id, .prm_minus_id = c.prm_minus_id, .honour_scripts = c.honour_scripts},
      arena);
}

template <typename Exec>
struct Rig {
  // On a KV pool of its own, or as a tenant of a shared pool (`kv`).
  Rig(const LlamaWeights& w, const RigConfig& c, std::unique_ptr<Exec> e,
      std::unique_ptr<KvCacheManager> kv = nullptr)
      : weights(w),
        block_size(c.block_size),
        exec(std::move(e)),
        engine("llm",
               {.max_num_seqs = c.max_num_seqs,
                .max_num_batched_tokens = c.max_num_batched_tokens,
                .enable_chunked_prefill = true,
                .max_model_len = c.max_model_len},
               kv ? std::move(kv)
                  : std::make_unique<KvCacheManager>(
                        KvCacheConfig{c.num_blocks, c.block_size, c.prefix_caching}),
               *exec) {}

  // Steps until idle, keeping every logits row the executor computed.
  void run() {
    while (engine.has_work()) step();
  }

  void step() {
    const StepOutcome o = engine.step(0.0);
    ++steps;
    if (o.batch.empty()) return;  // on a shared pool: waiting for pages another model holds
    bool decode = false, prefill = false;
    EXPECT_TRUE(exec->last_logits().empty() || exec->last_logits().size() == o.batch.items.size());
    for (std::size_t i = 0; i < o.batch.items.size(); ++i) {
      const BatchItem& it = o.batch.items[i];
      (it.is_decode ? decode : prefill) = true;
      const std::vector<ItemLogits>& kept = exec->last_logits();  // empty without keep_logits
      if (i < kept.size())
        for (std::size_t k = 0; k < kept[i].positions.size(); ++k) {
          const auto row = kept[i].logits.row(Eigen::Index(k));
          rows.push_back({it.seq->id, kept[i].positions[k], std::vector<float>(row.begin(), row.end())});
        }
      const Sequence& s = *it.seq;
      seen[s.id] = {s.tokens, s.num_prompt_tokens, s.sampling.temperature, s.score_positions, s.scores};
      pages.insert(s.kv.blocks.begin(), s.kv.blocks.end());
    }
    mixed_steps += decode && prefill;
    decode_only_steps += decode && !prefill;
    copies += int(o.batch.copies.size());
    same_step_hits += count_same_step_hits(o.batch);
    if constexpr (std::is_same_v<Exec, CudaExecutor>) {
      graph_steps += exec->last_used_graph();
      if (decode && !prefill)
        (exec->last_used_graph() ? graph_decode_sizes : eager_decode_sizes).insert(int(o.batch.items.size()));
    }
    EXPECT_EQ(o.result.tokens.size(), o.batch.items.size());
    EXPECT_GT(o.result.duration_s, 0.0);
  }

  // Items whose cached context includes a block that another item of the same batch writes.
  int count_same_step_hits(const Batch& batch) const {
    std::set<BlockId> written;
    for (const BatchItem& it : batch.items)
      for (int p = it.context_len; p < it.context_len + it.num_new_tokens; ++p)
        written.insert(it.seq->kv.blocks[std::size_t(p / block_size)]);
    int hits = 0;
    for (const BatchItem& it : batch.items)
      for (int b = 0; b < it.context_len / block_size; ++b)
        hits += written.count(it.seq->kv.blocks[std::size_t(b)]) > 0;
    return hits;
  }

  Sequence& add(SeqId id, std::vector<TokenId> prompt, int max_tokens, SamplingParams sampling = {}) {
    Sequence s;
    s.id = id;
    s.num_prompt_tokens = int(prompt.size());
    s.tokens = std::move(prompt);
    s.sampling = std::move(sampling);
    s.sampling.max_tokens = max_tokens;
    return engine.add(std::move(s), 0.0);
  }

  const LlamaWeights& weights;
  int block_size;
  std::unique_ptr<Exec> exec;
  Engine engine;
  std::vector<Row> rows;
  std::map<SeqId, Snapshot> seen;
  std::set<BlockId> pages;  // every block the batches used
  int steps = 0, mixed_steps = 0, decode_only_steps = 0, graph_steps = 0, copies = 0, same_step_hits = 0;
  std::set<int> graph_decode_sizes, eager_decode_sizes;  // decode-only batch sizes by path
};

using GpuRig = Rig<CudaExecutor>;
using CpuRig = Rig<CpuExecutor>;

// Steps each rig in turn until all are idle: on a shared pool, their steps interleave.
template <typename Exec>
void run_together(std::initializer_list<Rig<Exec>*> rigs) {
  auto busy = [&] {
    return std::any_of(rigs.begin(), rigs.end(), [](auto* r) { return r->engine.has_work(); });
  };
  for (int round = 0; busy(); ++round) {
    ASSERT_LT(round, 100000) << "the engines stopped making progress";
    for (Rig<Exec>* rig : rigs)
      if (rig->engine.has_work()) rig->step();
  }
}

using test_support::concat;
using test_support::random_tokens;
using test_support::sampling;

// --- The CPU reference on the same tokens ----------------------------------------------------

using RowsByPosition = std::map<int, std::vector<float>>;

// The CPU reference's logits of `tokens` at `positions`: one Score request through an Engine
// over a CpuExecutor, without prefix caching, in one step.
RowsByPosition cpu_rows(const LlamaWeights& w, const std::vector<TokenId>& tokens,
                        const std::set<int>& positions) {
  const int n = int(tokens.size());
  const int blocks = n / kBlockSize + 2;
  // Only the logits rows are read: any label ids inside a score head's two columns will do.
  CpuExecutorOptions options;
  if (!w.spec.can_generate()) options = {.prm_plus_id = 0, .prm_minus_id = 1};
  CpuExecutor exec(w, blocks, kBlockSize, options);
  Engine engine("ref",
                {.max_num_seqs = 1,
                 .max_num_batched_tokens = n,
                 .enable_chunked_prefill = true,
                 .max_model_len = n + 1},
                std::make_unique<KvCacheManager>(KvCacheConfig{blocks, kBlockSize, false}), exec);
  engine.add(test_support::score_request(1, tokens, {positions.begin(), positions.end()}), 0.0);
  RowsByPosition out;
  while (engine.has_work()) {
    engine.step(0.0);
    for (const ItemLogits& l : exec.last_logits())
      for (std::size_t k = 0; k < l.positions.size(); ++k) {
        const auto row = l.logits.row(Eigen::Index(k));
        out[l.positions[k]] = std::vector<float>(row.begin(), row.end());
      }
  }
  return out;
}

double row_scale(const std::vector<float>& ref) {
  double m = 1.0;
  for (float v : ref) m = std::max(m, double(std::fabs(v)));
  return m;
}

TokenId argmax_of(const std::vector<float>& row) { return argmax(std::span<const float>(row)); }

struct Reference {
  std::map<SeqId, RowsByPosition> cpu;  // per sequence: the CPU rows at the positions the GPU computed
  std::map<SeqId, RowsByPosition> gpu;
};

// Every logits row the GPU computed against the CPU reference on the sequence's tokens.
Reference expect_rows_match_cpu(const GpuRig& rig, const char* what) {
  Reference ref;
  std::map<SeqId, std::set<int>> wanted;
  for (const Row& r : rig.rows) {
    wanted[r.id].insert(r.position);
    ref.gpu[r.id][r.position] = r.logits;
  }
  for (const auto& [id, positions] : wanted)
    ref.cpu[id] = cpu_rows(rig.weights, rig.seen.at(id).tokens, positions);
  double worst_max = 0, worst_rms = 0;
  for (const Row& r : rig.rows) {
    const std::vector<float>& want = ref.cpu.at(r.id).at(r.position);
    const double scale = row_scale(want);
    double max_err = 0, sq = 0;
    for (std::size_t v = 0; v < want.size(); ++v) {
      const double e = std::fabs(double(r.logits[v]) - double(want[v]));
      max_err = std::max(max_err, e);
      sq += e * e;
    }
    const double rms = std::sqrt(sq / double(want.size()));
    worst_max = std::max(worst_max, max_err / scale);
    worst_rms = std::max(worst_rms, rms / scale);
    EXPECT_LE(max_err, kLogitMaxTol * scale) << what << ": sequence " << r.id << " position " << r.position;
    EXPECT_LE(rms, kLogitRmsTol * scale) << what << ": sequence " << r.id << " position " << r.position;
  }
  EXPECT_FALSE(rig.rows.empty());
  std::printf("  [%s: %zu logits rows; worst max error %.2e, worst RMS error %.2e of the row scale]\n", what,
              rig.rows.size(), worst_max, worst_rms);
  return ref;
}

// A greedy sequence's outputs: each the GPU's argmax exactly, and the CPU's up to near-ties.
int expect_greedy(const Snapshot& s, SeqId id, const Reference& ref) {
  int near_ties = 0;
  for (int p = s.num_prompt_tokens; p < int(s.tokens.size()); ++p) {
    const TokenId token = s.tokens[std::size_t(p)];
    const auto g = ref.gpu.find(id);
    if (g != ref.gpu.end() && g->second.count(p - 1)) {
      EXPECT_EQ(token, argmax_of(g->second.at(p - 1)))
          << "sequence " << id << " position " << p << ": not the GPU's argmax";
    }
    const auto c = ref.cpu.find(id);
    if (c == ref.cpu.end() || !c->second.count(p - 1)) continue;
    const std::vector<float>& row = c->second.at(p - 1);
    const TokenId best = argmax_of(row);
    if (best == token) continue;
    ++near_ties;
    EXPECT_GE(row[std::size_t(token)], row[std::size_t(best)] - kTieTol * row_scale(row))
        << "sequence " << id << " position " << p << ": token " << token << " vs the CPU's " << best;
  }
  return near_ties;
}

int expect_all_greedy(const GpuRig& rig, const Reference& ref) {
  int near_ties = 0, checked = 0;
  for (const auto& [id, s] : rig.seen)
    if (s.temperature == 0.0f && s.score_positions.empty()) {
      near_ties += expect_greedy(s, id, ref);
      checked += int(s.tokens.size()) - s.num_prompt_tokens;
    }
  std::printf("  [%d greedy tokens checked, %d near-ties where the CPU's argmax differs]\n", checked,
              near_ties);
  return near_ties;
}

// The GPU's logits row of a sequence at a position, if it computed one.
const std::vector<float>* gpu_row(const GpuRig& rig, SeqId id, int position) {
  for (const Row& r : rig.rows)
    if (r.id == id && r.position == position) return &r.logits;
  return nullptr;
}

// Two greedy runs of the same prompt (sequence a of rig ra, b of rb) give the same tokens, or
// part at a near-tie of a's logits where they part (the rest is then not compared). A bf16
// engine's logits depend slightly on the batch a row was computed in (GEMM shapes), so an exact
// tie-break cannot be promised. Returns 1 for a near-tie, else 0.
int expect_same_or_near_tie(const GpuRig& ra, const GpuRig& rb, SeqId a, SeqId b, const std::string& what) {
  const std::vector<TokenId>& ta = ra.seen.at(a).tokens;
  const std::vector<TokenId>& tb = rb.seen.at(b).tokens;
  EXPECT_EQ(ta.size(), tb.size()) << what;
  for (std::size_t p = 0; p < std::min(ta.size(), tb.size()); ++p) {
    if (ta[p] == tb[p]) continue;
    const std::vector<float>* row = p > 0 ? gpu_row(ra, a, int(p) - 1) : nullptr;
    if (!row) {
      ADD_FAILURE() << what << ": tokens differ at position " << p << " (no logits row to explain it)";
      return 0;
    }
    const double gap = std::fabs(double((*row)[std::size_t(ta[p])]) - double((*row)[std::size_t(tb[p])]));
    EXPECT_LE(gap, kTieTol * row_scale(*row))
        << what << ": tokens differ at position " << p << " without a near-tie";
    std::printf("  [%s: part at position %zu, a near-tie of %.2e]\n", what.c_str(), p, gap);
    return 1;
  }
  return 0;
}

// --- Scenarios -----------------------------------------------------------------------------------

// Four requests: three share a 40-token prefix (blocks of 16: two full shared blocks), one is
// short. A budget of 24 tokens chunks every long prefill and mixes chunks with decodes; the later
// requests hit the first one's cached blocks, some while it is still writing them. Then a parent
// is forked three ways (copy-on-write of its shared partial block) and the children decode
// together: decode-only batches of 3, replayed from the bucket-4 graph. Each rig serves the same
// requests, the rigs' steps interleaved.
template <typename Exec>
void shared_prefix_then_forks(std::initializer_list<Rig<Exec>*> rigs) {
  for (Rig<Exec>* rig : rigs) {
    const int vocab = rig->weights.spec.vocab_size;
    const std::vector<TokenId> prefix = random_tokens(40, 1, vocab);
    rig->add(1, concat(prefix, random_tokens(1, 2, vocab)), 8);
    rig->add(2, concat(prefix, random_tokens(5, 3, vocab)), 8, sampling(0.8f, 42, 0.9f));
    rig->add(3, concat(prefix, random_tokens(1, 2, vocab)), 8);  // request 1's prompt again
    rig->add(4, random_tokens(5, 4, vocab), 12);
  }
  run_together(rigs);

  for (Rig<Exec>* rig : rigs) {
    // 21 + 1 tokens: a partial second block
    Sequence& parent = rig->add(5, random_tokens(21, 5, rig->weights.spec.vocab_size), 1);
    parent.keep_kv = true;
  }
  run_together(rigs);
  for (Rig<Exec>* rig : rigs) {
    for (SeqId id = 10; id < 13; ++id) {
      Sequence child;
      child.id = id;
      child.tokens = random_tokens(2, id, rig->weights.spec.vocab_size);
      child.sampling = sampling(id == 12 ? 1.0f : 0.0f, id);
      child.sampling.max_tokens = 10;
      rig->engine.fork(5, std::move(child), 0.0);
    }
    rig->engine.release(5);
  }
  run_together(rigs);
}

void check_generation(const ModelSpec& spec) {
  const LlamaWeights& w = rounded_weights(spec);
  RigConfig c;
  GpuRig rig(w, c, make_gpu(w, c));
  shared_prefix_then_forks({&rig});
  EXPECT_GT(rig.engine.kv().counters().hit_tokens, 0) << "prefix-cache hits";
  EXPECT_GT(rig.mixed_steps, 0) << "steps that mix prefill chunks and decodes";
  EXPECT_GT(rig.same_step_hits, 0) << "a prefix hit on a block written in the same step";
  EXPECT_GT(rig.copies, 0) << "a copy-on-write block copy";
  EXPECT_GT(rig.decode_only_steps, 0);
  EXPECT_GT(rig.graph_steps, 0) << "decode steps replayed from a CUDA graph";
  EXPECT_GT(rig.exec->stats().graphs_captured, 0);
  EXPECT_EQ(rig.exec->stats().capture_failures, 0);
  const Reference ref = expect_rows_match_cpu(rig, spec.name.c_str());
  expect_all_greedy(rig, ref);
  // Requests 1 and 3 have the same prompt: the same greedy outputs, one of them from the cache.
  expect_same_or_near_tie(rig, rig, 1, 3, "requests 1 and 3");
  const CudaExecutorStats st = rig.exec->stats();
  std::printf(
      "  [%d steps: %d mixed, %d decode-only, %lld graph replays, %lld graphs captured, %d block copies]\n",
      rig.steps, rig.mixed_steps, rig.decode_only_steps, (long long)st.graph_steps,
      (long long)st.graphs_captured, rig.copies);
}

TEST(CudaExecutor, TinyModelMatchesCpuReference) {
  DUET_REQUIRE_GPU();
  check_generation(tiny_model());
}

TEST(CudaExecutor, Llama1bSliceMatchesCpuReference) {
  DUET_REQUIRE_GPU();
  check_generation(llama_1b_slice());
}

// Qwen2's q, k and v biases, added by the QKV GEMM's cuBLASLt epilogue.
TEST(CudaExecutor, QkvBiasModelMatchesCpuReference) {
  DUET_REQUIRE_GPU();
  ModelSpec m = tiny_model();
  m.qkv_bias = true;
  m.name += "-qkv-bias";
  check_generation(m);
}

// Qwen3's q and k head norms, fused into the RoPE kernel; with twice the heads, so that q is wider
// than the hidden state (as in Qwen3-0.6B and -4B: 16 x 128 over 1,024, 32 x 128 over 2,560).
TEST(CudaExecutor, QkHeadNormModelMatchesCpuReference) {
  DUET_REQUIRE_GPU();
  ModelSpec m = tiny_model();
  m.qk_norm = true;
  m.num_heads *= 2;
  m.name += "-qk-norm-wide";
  ASSERT_GT(m.num_heads * m.head_dim, m.hidden_size);
  check_generation(m);
}

// The same requests with CUDA graphs on and off: the eager decode path agrees with the CPU too,
// and the greedy outputs agree between the two (up to near-ties).
TEST(CudaExecutor, EagerDecodeMatchesGraphDecode) {
  DUET_REQUIRE_GPU();
  const ModelSpec spec = tiny_model();
  const LlamaWeights& w = rounded_weights(spec);
  RigConfig c;
  GpuRig graphs(w, c, make_gpu(w, c));
  shared_prefix_then_forks({&graphs});
  c.cuda_graphs = false;
  GpuRig eager(w, c, make_gpu(w, c));
  shared_prefix_then_forks({&eager});
  EXPECT_GT(graphs.graph_steps, 0);
  EXPECT_EQ(eager.graph_steps, 0);
  EXPECT_EQ(eager.exec->stats().graphs_captured, 0);
  const Reference ref = expect_rows_match_cpu(eager, "eager");
  expect_all_greedy(eager, ref);
  int differ = 0;
  for (const auto& [id, s] : graphs.seen)
    if (s.temperature == 0.0f) differ += s.tokens != eager.seen.at(id).tokens;
  std::printf("  [%d greedy sequences differ between graph and eager runs]\n", differ);
  EXPECT_LE(differ, 1) << "graph and eager decodes should agree except for a rare near-tie";
}

// Decode batches larger than the largest graph bucket run eagerly; batches of every size up to
// it pad to their bucket (padding rows write no KV).
TEST(CudaExecutor, BucketsPadAndLargeBatchesRunEagerly) {
  DUET_REQUIRE_GPU();
  const ModelSpec spec = tiny_model();
  const LlamaWeights& w = rounded_weights(spec);
  RigConfig c;
  c.max_num_seqs = 12;
  c.max_num_batched_tokens = 256;
  c.graph_batch_sizes = {1, 2, 4, 8};
  GpuRig rig(w, c, make_gpu(w, c));
  // 12 requests of different lengths finish at different times: decode batches of 12 (eager),
  // then 11, 10, ... down to 1 (padded to 8, 4, 2, 1).
  for (int i = 0; i < 12; ++i)
    rig.add(SeqId(i + 1), random_tokens(3 + 2 * i, 100 + i, spec.vocab_size), 2 + i);
  rig.run();
  EXPECT_TRUE(rig.eager_decode_sizes.count(12)) << "12 > the largest bucket (8): eager";
  // A graph key's first step runs eagerly and captures, and the key holds the block-table width,
  // which grows with the context: by a trace of this schedule, sizes 7, 6 and 3 replay. Two of
  // them leave room for a scheduling difference.
  EXPECT_GE(rig.graph_decode_sizes.size(), 2u) << "several bucket sizes replayed";
  const Reference ref = expect_rows_match_cpu(rig, "buckets");
  expect_all_greedy(rig, ref);
}

// Contexts from 1,024 tokens decode attention in several splits (choose_decode_splits), and the
// split count is part of a graph's key: two prompts past that length decode from graphs that
// captured the split kernel, its combine kernel and the workspace, and agree with the CPU
// reference and with the same requests decoded eagerly (up to near-ties).
TEST(CudaExecutor, SplitKvDecodeReplaysFromGraphs) {
  DUET_REQUIRE_GPU();
  const ModelSpec spec = tiny_model();
  const LlamaWeights& w = rounded_weights(spec);
  RigConfig c;
  c.max_num_seqs = 2;
  c.max_num_batched_tokens = 512;
  c.max_model_len = 2048;
  auto serve = [&](GpuRig& rig) {
    rig.add(1, random_tokens(1100, 21, spec.vocab_size), 24);
    rig.add(2, random_tokens(1030, 22, spec.vocab_size), 24);
    rig.run();
  };
  GpuRig graphs(w, c, make_gpu(w, c));
  serve(graphs);
  const CudaExecutorStats st = graphs.exec->stats();
  EXPECT_GT(st.split_graph_steps, 0) << "decode steps replayed with split-KV attention";
  EXPECT_EQ(st.capture_failures, 0);
  const Reference ref = expect_rows_match_cpu(graphs, "split-KV graphs");
  expect_all_greedy(graphs, ref);
  c.cuda_graphs = false;
  GpuRig eager(w, c, make_gpu(w, c));
  serve(eager);
  EXPECT_EQ(eager.graph_steps, 0);
  expect_same_or_near_tie(graphs, eager, 1, 1, "sequence 1, graphs against eager");
  expect_same_or_near_tie(graphs, eager, 2, 2, "sequence 2, graphs against eager");
  std::printf("  [%lld graph replays, %lld of them split-KV]\n", (long long)st.graph_steps,
              (long long)st.split_graph_steps);
}

// PRM scoring: Score requests whose chunks end anywhere, with a prefix hit up to the second's
// first score position; the scores are the two-way softmax of logits plus_id and minus_id.
void check_prm_scores(const ModelSpec& spec, TokenId plus_id, TokenId minus_id) {
  const LlamaWeights& w = rounded_weights(spec);
  RigConfig c;
  c.prm_plus_id = plus_id;
  c.prm_minus_id = minus_id;
  GpuRig rig(w, c, make_gpu(w, c));
  auto score_request = [&](SeqId id, std::vector<TokenId> tokens, std::vector<int> positions) -> Sequence& {
    return rig.engine.add(test_support::score_request(id, std::move(tokens), std::move(positions)), 0.0);
  };
  const std::vector<TokenId> solution = random_tokens(60, 5, spec.vocab_size);
  score_request(1, solution, {5, 23, 24, 47, 59});
  score_request(2, concat({solution.begin(), solution.begin() + 40}, random_tokens(15, 6, spec.vocab_size)),
                {39, 45, 54});
  rig.run();
  const Reference ref = expect_rows_match_cpu(rig, "prm");
  for (SeqId id : {SeqId(1), SeqId(2)}) {
    const Sequence& s = *rig.engine.find(id);
    EXPECT_EQ(s.finish_reason, FinishReason::Scored);
    ASSERT_EQ(s.scores.size(), s.score_positions.size());
    for (std::size_t k = 0; k < s.scores.size(); ++k) {
      const int p = s.score_positions[k];
      const float own = prm_score(ref.gpu.at(id).at(p), plus_id, minus_id);
      const float cpu = prm_score(ref.cpu.at(id).at(p), plus_id, minus_id);
      EXPECT_NEAR(s.scores[k], own, 1e-5) << id << " score " << k;
      EXPECT_NEAR(s.scores[k], cpu, kScoreTol) << id << " score " << k;
    }
  }
  EXPECT_GT(rig.engine.find(2)->num_cached_prompt_tokens, 0);
}

TEST(CudaExecutor, PrmScoresMatchCpuReference) {
  DUET_REQUIRE_GPU();
  check_prm_scores(tiny_model(), 10, 20);
}

// Qwen2.5-Math-PRM's score head in place of the LM head: a GEMM with cuBLASLt's bias and ReLU
// epilogue, then the two labels' Linear (small_linear_f32); its logits rows are the labels'.
TEST(CudaExecutor, ScoreHeadPrmMatchesCpuReference) {
  DUET_REQUIRE_GPU();
  const ModelSpec spec = resolve_model(source_dir() + "/models/tiny-qwen2-prm/config.json");
  ASSERT_EQ(spec.score_head, ScoreHead::Classifier);
  check_prm_scores(spec, score_columns(spec.score_head).plus, score_columns(spec.score_head).minus);
}

// Skywork-o1-Open-PRM's value head: one small_linear_f32 over a zero-padded second row, whose
// constant 0 makes the two-way softmax the value's sigmoid.
TEST(CudaExecutor, ValueHeadPrmMatchesCpuReference) {
  DUET_REQUIRE_GPU();
  const ModelSpec spec = resolve_model(source_dir() + "/models/tiny-qwen2-value-prm/config.json");
  ASSERT_EQ(spec.score_head, ScoreHead::Value);
  check_prm_scores(spec, score_columns(spec.score_head).plus, score_columns(spec.score_head).minus);
}

// A step that scores more positions than the logits buffer's rows (max_num_seqs and the largest
// graph bucket, at least 256 or max_num_batched_tokens) runs the LM head in chunks, a chunk
// holding both a sampled and a scored row:
// the same scores and tokens as an executor that keeps every row at once, within the CPU
// reference's tolerance, and no buffer grows (which would drop every captured graph).
TEST(CudaExecutor, ScoresMoreRowsThanMaxNumSeqsInChunks) {
  DUET_REQUIRE_GPU();
  const ModelSpec spec = tiny_model();
  const LlamaWeights& w = rounded_weights(spec);
  RigConfig c;
  c.max_num_seqs = 2;
  c.max_num_batched_tokens = 320;  // logits rows: max(2, min(320, 256)) = 256
  c.graph_batch_sizes = {1, 2};
  c.prm_plus_id = 10;
  c.prm_minus_id = 20;
  const std::vector<TokenId> solution = random_tokens(300, 7, spec.vocab_size);
  std::vector<int> positions(300);
  std::iota(positions.begin(), positions.end(), 0);  // and 1 sampled row: chunks of 256 and 45
  auto run = [&](bool keep_logits) {
    RigConfig rc = c;
    rc.keep_logits = keep_logits;
    auto rig = std::make_unique<GpuRig>(w, rc, make_gpu(w, rc));
    rig->add(2, random_tokens(10, 8, spec.vocab_size), 3);
    Sequence s;
    s.id = 1;
    s.kind = SeqKind::Score;
    s.num_prompt_tokens = int(solution.size());
    s.tokens = solution;
    s.score_positions = positions;
    rig->engine.add(std::move(s), 0.0);
    rig->run();
    return rig;
  };
  const auto chunked = run(false);
  const auto whole = run(true);
  EXPECT_EQ(chunked->exec->stats().buffer_growths, 0);
  EXPECT_GT(whole->exec->stats().buffer_growths, 0) << "keep_logits holds every row at once";
  const RowsByPosition cpu = cpu_rows(w, solution, {positions.begin(), positions.end()});
  const Sequence& scored = *chunked->engine.find(1);
  ASSERT_EQ(scored.scores.size(), positions.size());
  for (std::size_t k = 0; k < positions.size(); ++k) {
    // cuBLASLt may pick another algorithm for 2 rows than for 27: not bit-exact.
    EXPECT_NEAR(scored.scores[k], whole->engine.find(1)->scores[k], 1e-4) << "score " << k;
    EXPECT_NEAR(scored.scores[k], prm_score(cpu.at(positions[k]), 10, 20), kScoreTol) << "score " << k;
  }
  EXPECT_EQ(chunked->engine.find(2)->tokens, whole->engine.find(2)->tokens);
}

// Forced scripts: three requests on a 35-token prefix (the first kept), a Score request with two
// of its three scores scripted, then two forks of the first. Each rig serves the same requests,
// the rigs' steps interleaved.
template <typename Exec>
void forced_scripts_with_forks(std::initializer_list<Rig<Exec>*> rigs) {
  for (Rig<Exec>* rig : rigs) {
    const int vocab = rig->weights.spec.vocab_size;
    const std::vector<TokenId> prefix = random_tokens(35, 7, vocab);
    for (SeqId id = 1; id <= 3; ++id) {
      Sequence s;
      s.id = id;
      s.tokens = concat(prefix, random_tokens(int(id), 20 + id, vocab));
      s.num_prompt_tokens = s.num_tokens();
      s.sampling.max_tokens = 9;
      s.script.seed = 1000 + id;
      s.script.force = true;
      s.keep_kv = id == 1;
      rig->engine.add(std::move(s), 0.0);
    }
    Sequence score;
    score.id = 4;
    score.kind = SeqKind::Score;
    score.tokens = random_tokens(30, 8, vocab);
    score.num_prompt_tokens = 30;
    score.score_positions = {3, 17, 29};
    score.script.seed = 77;
    score.script.force = true;
    score.script.scores = {0.25f, 0.75f};
    rig->engine.add(std::move(score), 0.0);
  }
  run_together(rigs);
  for (Rig<Exec>* rig : rigs) {
    for (SeqId id = 10; id < 12; ++id) {
      Sequence child;
      child.id = id;
      child.tokens = random_tokens(1, id, rig->weights.spec.vocab_size);
      child.sampling.max_tokens = 6;
      child.script.seed = id;
      child.script.force = true;
      rig->engine.fork(1, std::move(child), 0.0);
    }
    rig->engine.release(1);
  }
  run_together(rigs);
}

// Identical token streams on both executors: the two engines schedule the same batches over the
// same block tables, so every token, score and logits row compares one to one.
void expect_lockstep(const GpuRig& gpu, const CpuRig& cpu, const std::string& what) {
  ASSERT_EQ(gpu.seen.size(), cpu.seen.size()) << what;
  for (const auto& [id, s] : cpu.seen) {
    EXPECT_EQ(gpu.seen.at(id).tokens, s.tokens) << what << ": sequence " << id;
    EXPECT_EQ(gpu.seen.at(id).scores, s.scores) << what << ": sequence " << id;
  }
  EXPECT_EQ(gpu.copies, cpu.copies) << what;
  EXPECT_EQ(gpu.steps, cpu.steps) << what;
  // Logits, row for row (the forward pass still ran on the scripted tokens).
  ASSERT_EQ(gpu.rows.size(), cpu.rows.size()) << what;
  double worst = 0;
  for (std::size_t r = 0; r < gpu.rows.size(); ++r) {
    ASSERT_EQ(gpu.rows[r].id, cpu.rows[r].id) << what;
    ASSERT_EQ(gpu.rows[r].position, cpu.rows[r].position) << what;
    const double scale = row_scale(cpu.rows[r].logits);
    double err = 0;
    for (std::size_t v = 0; v < cpu.rows[r].logits.size(); ++v)
      err = std::max(err, std::fabs(double(gpu.rows[r].logits[v]) - double(cpu.rows[r].logits[v])));
    worst = std::max(worst, err / scale);
    EXPECT_LE(err, kLogitMaxTol * scale) << what << ": row " << r;
  }
  std::printf("  [%s: %zu rows in lockstep, worst logits error %.2e of the row scale]\n", what.c_str(),
              gpu.rows.size(), worst);
}

// A KV pool the GPU filled (bf16, as float32) against the CPU's, block for block.
void expect_kv_close(const std::vector<float>& gpu, std::span<const float> cpu, const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  double scale = 1.0, max_err = 0, sq = 0;
  for (float v : cpu) scale = std::max(scale, double(std::fabs(v)));
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    const double e = std::fabs(double(gpu[i]) - double(cpu[i]));
    max_err = std::max(max_err, e);
    sq += e * e;
  }
  const double rms = std::sqrt(sq / double(gpu.size()));
  std::printf("  [%s: KV max error %.2e, RMS %.2e (scale %.2f)]\n", what.c_str(), max_err, rms, scale);
  EXPECT_LE(max_err, kKvMaxTol * scale) << what;
  EXPECT_LE(rms, kKvRmsTol * scale) << what;
}

TEST(CudaExecutor, ForcedScriptsLockstepWithCpuExecutor) {
  DUET_REQUIRE_GPU();
  const ModelSpec spec = tiny_model();
  const LlamaWeights& w = rounded_weights(spec);
  RigConfig c;
  c.num_blocks = 64;
  GpuRig gpu(w, c, make_gpu(w, c));
  CpuRig cpu(w, c, make_cpu(w, c));
  forced_scripts_with_forks({&gpu});
  forced_scripts_with_forks({&cpu});
  expect_lockstep(gpu, cpu, "lockstep");
  EXPECT_GT(gpu.copies, 0);
  // The scripted tokens and scores are the script's.
  EXPECT_EQ(gpu.seen.at(4).scores,
            (std::vector<float>{0.25f, 0.75f, scripted_score(*gpu.engine.find(4), 2, 29)}));
  expect_kv_close(gpu.exec->kv_pool_to_host(), cpu.exec->kv_pool(), "lockstep");
}

// --- Two models on one shared pool ----------------------------------------------------------------

// Models A and B of kv_pool = "shared": the tiny model (2 layers) with blocks of 16 tokens, and the
// tiny model 4 layers deep (its own dummy weights) with blocks of 8. Their pages have equal
// bytes, 2 (K, V) x layers x block x 2 KV heads x 64 = 8,192 values, so a page holds a block of
// either.
ModelSpec model_a() { return tiny_model(); }

ModelSpec model_b() {
  ModelSpec m = tiny_model();
  m.num_layers = 4;
  m.name += "-4-layers";
  return m;
}

RigConfig shared_config(int pages, int block_size) {
  RigConfig c;
  c.num_blocks = pages;
  c.block_size = block_size;
  return c;
}

std::int64_t page_elems(const ModelSpec& m, const RigConfig& c) {
  return KvLayout::of(m, c.num_blocks, c.block_size).page_elems();
}

// A's and B's engines on one pool of pages over one KV arena, each scheduler seeing the other's
// idle KV, as exec/backend.cpp assembles them. `make(weights, config)` builds an executor on the
// arena.
template <typename Exec>
struct SharedPair {
  template <typename MakeExecutor>
  SharedPair(const RigConfig& ca, const RigConfig& cb, MakeExecutor make)
      : pool(std::make_shared<BlockPool>(
            ca.num_blocks, std::vector<PoolTenant>{{"a", 0, ca.block_size}, {"b", 1, cb.block_size}})),
        a(rounded_weights(model_a()), ca, make(rounded_weights(model_a()), ca),
          std::make_unique<KvCacheManager>(pool, 0, ca.prefix_caching)),
        b(rounded_weights(model_b()), cb, make(rounded_weights(model_b()), cb),
          std::make_unique<KvCacheManager>(pool, 1, cb.prefix_caching)) {
    a.engine.scheduler().set_pool_peers({&b.engine.scheduler()});
    b.engine.scheduler().set_pool_peers({&a.engine.scheduler()});
  }

  // Pages both models' batches used, at one time or another.
  int pages_shared() const {
    return int(
        std::count_if(a.pages.begin(), a.pages.end(), [&](BlockId p) { return b.pages.count(p) > 0; }));
  }
  std::int64_t preemptions() const {
    return a.engine.scheduler().num_preemptions() + b.engine.scheduler().num_preemptions();
  }

  std::shared_ptr<BlockPool> pool;
  Rig<Exec> a, b;
};

// Pages few enough that the two models take them from each other, evict each other's cached
// blocks and preempt.
constexpr int kSharedPages = 14;

// Both models generate on one arena, their steps interleaved, with prefix hits, forks and
// pages changing hands: each model's logits rows and greedy tokens match the CPU reference on
// the sequence's tokens (a private pool), as TinyModelMatchesCpuReference checks for one model.
TEST(CudaExecutor, TwoModelsOnOneSharedArenaMatchCpuReference) {
  DUET_REQUIRE_GPU();
  const RigConfig ca = shared_config(kSharedPages, 16), cb = shared_config(kSharedPages, 8);
  ASSERT_EQ(page_elems(model_a(), ca), page_elems(model_b(), cb));
  auto arena = std::make_shared<CudaKvArena>(kSharedPages * page_elems(model_a(), ca) * 2);
  SharedPair<CudaExecutor> gpu(
      ca, cb, [&](const LlamaWeights& w, const RigConfig& c) { return make_gpu(w, c, arena); });
  shared_prefix_then_forks({&gpu.a, &gpu.b});
  EXPECT_GT(gpu.pages_shared(), 0) << "pages that held blocks of both models";
  EXPECT_GT(gpu.preemptions(), 0);
  for (GpuRig* rig : {&gpu.a, &gpu.b}) {
    EXPECT_GT(rig->engine.kv().counters().hit_tokens, 0) << "prefix-cache hits";
    EXPECT_GT(rig->copies, 0) << "a copy-on-write block copy";
    EXPECT_GT(rig->graph_steps, 0) << "decode steps replayed from a CUDA graph";
    const Reference ref = expect_rows_match_cpu(*rig, rig->weights.spec.name.c_str());
    expect_all_greedy(*rig, ref);
  }
  gpu.pool->check_consistency();
  std::printf("  [shared pool of %d pages: %d used by both models, %lld preemptions]\n", kSharedPages,
              gpu.pages_shared(), (long long)gpu.preemptions());
}

// Forced scripts on both models, on the GPU (one CudaKvArena) and on the CPU (one host arena):
// the same batches on both, so every token, score and logits row compares one to one, and so
// does the whole arena, page by page, whichever model wrote each page last.
TEST(CudaExecutor, TwoModelsOnOneSharedArenaLockstepWithCpuExecutors) {
  DUET_REQUIRE_GPU();
  const RigConfig ca = shared_config(kSharedPages, 16), cb = shared_config(kSharedPages, 8);
  const std::int64_t elems = kSharedPages * page_elems(model_a(), ca);
  auto device_arena = std::make_shared<CudaKvArena>(elems * 2);
  std::vector<float> host_arena(std::size_t(elems), 0.0f);
  SharedPair<CudaExecutor> gpu(
      ca, cb, [&](const LlamaWeights& w, const RigConfig& c) { return make_gpu(w, c, device_arena); });
  SharedPair<CpuExecutor> cpu(
      ca, cb, [&](const LlamaWeights& w, const RigConfig& c) { return make_cpu(w, c, host_arena); });
  forced_scripts_with_forks({&gpu.a, &gpu.b});
  forced_scripts_with_forks({&cpu.a, &cpu.b});
  expect_lockstep(gpu.a, cpu.a, "model A");
  expect_lockstep(gpu.b, cpu.b, "model B");
  EXPECT_GT(gpu.pages_shared(), 0) << "pages that held blocks of both models";
  EXPECT_EQ(gpu.preemptions(), cpu.preemptions());
  expect_kv_close(gpu.a.exec->kv_pool_to_host(), host_arena, "shared arena");
}

// A shared arena must be exactly the pool's bytes: one page more or less, or a stray byte, is
// refused with the figures.
TEST(CudaExecutor, RefusesAKvArenaOfTheWrongSize) {
  DUET_REQUIRE_GPU();
  const ModelSpec spec = tiny_model();
  const std::int64_t page_bytes = KvLayout::of(spec, 1, kBlockSize).page_elems() * 2;
  CudaExecutorOptions o;
  for (const std::int64_t bytes : {7 * page_bytes, 9 * page_bytes, 8 * page_bytes + 2}) {
    o.kv_arena = std::make_shared<CudaKvArena>(bytes);
    try {
      const CudaExecutor exec(rounded_weights(spec), 8, kBlockSize, o);
      ADD_FAILURE() << "an arena of " << bytes << " bytes was accepted for 8 pages of " << page_bytes;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("shared KV arena of " + std::to_string(bytes) + " bytes"),
                std::string::npos)
          << e.what();
    }
  }
  o.kv_arena = std::make_shared<CudaKvArena>(8 * page_bytes);
  const CudaExecutor fits(rounded_weights(spec), 8, kBlockSize, o);
  EXPECT_EQ(fits.memory().kv_pool, 8 * page_bytes);
}

// A beam search: beams generate greedy steps of 4 tokens; every beam is expanded with two
// candidate tokens by fork (sharing its KV, copy-on-write) and the two best children by a
// deterministic rank on their tokens continue. With prefix caching and forks, the final beams are
// the same tokens as the same search served without caching, each child a fresh request with its
// whole history as prompt.
std::vector<std::vector<TokenId>> beam_search(GpuRig& rig, bool fork, int vocab) {
  constexpr int kBeams = 2, kIterations = 3, kStep = 4;
  auto rank = [](const std::vector<TokenId>& t) {
    std::uint64_t h = 1469598103934665603ULL;
    for (TokenId x : t) h = (h ^ std::uint64_t(x)) * 1099511628211ULL;
    return h;
  };
  SeqId next = 1;
  {
    Sequence s;
    s.id = next++;
    s.tokens = random_tokens(37, 99, vocab);
    s.num_prompt_tokens = s.num_tokens();
    s.sampling.max_tokens = kStep;
    s.keep_kv = fork;
    rig.engine.add(std::move(s), 0.0);
  }
  rig.run();
  std::vector<SeqId> beams = {1};
  for (int iter = 0; iter < kIterations; ++iter) {
    std::vector<SeqId> children;
    for (SeqId b : beams) {
      const std::vector<TokenId> history = rig.seen.at(b).tokens;
      for (int j = 0; j < 2; ++j) {
        const TokenId cand = TokenId((rank(history) >> (8 * j)) % std::uint64_t(vocab));
        Sequence child;
        child.id = next++;
        child.sampling.max_tokens = kStep;
        child.keep_kv = fork;
        if (fork) {
          child.tokens = {cand};
          rig.engine.fork(b, std::move(child), 0.0);
        } else {
          child.tokens = concat(history, {cand});
          child.num_prompt_tokens = child.num_tokens();
          rig.engine.add(std::move(child), 0.0);
        }
        children.push_back(next - 1);
      }
      rig.engine.release(b);
    }
    rig.run();
    std::sort(children.begin(), children.end(),
              [&](SeqId a, SeqId b) { return rank(rig.seen.at(a).tokens) < rank(rig.seen.at(b).tokens); });
    for (std::size_t i = kBeams; i < children.size(); ++i) rig.engine.release(children[i]);
    children.resize(kBeams);
    beams = children;
  }
  std::vector<std::vector<TokenId>> out;
  for (SeqId b : beams) out.push_back(rig.seen.at(b).tokens);
  return out;
}

TEST(CudaExecutor, PrefixCachedForkedBeamSearchEqualsUncached) {
  DUET_REQUIRE_GPU();
  const ModelSpec spec = tiny_model();
  const LlamaWeights& w = rounded_weights(spec);
  RigConfig c;
  GpuRig cached(w, c, make_gpu(w, c));
  const auto with_cache = beam_search(cached, true, spec.vocab_size);
  c.prefix_caching = false;
  GpuRig fresh(w, c, make_gpu(w, c));
  const auto without = beam_search(fresh, false, spec.vocab_size);
  EXPECT_GT(cached.engine.kv().counters().cow_copies, 0) << "forks copied a shared partial block";
  EXPECT_GT(cached.engine.kv().counters().hit_tokens + cached.copies, 0);
  EXPECT_GT(cached.graph_steps, 0);
  EXPECT_EQ(fresh.engine.kv().counters().hit_tokens, 0);
  // Every prefix both searches computed: the same logits (up to bf16 batch effects) and the same
  // greedy next token, unless that choice is a near-tie. Without near-ties the final beams are
  // the same token lists.
  auto by_prefix = [](const GpuRig& rig) {
    std::map<std::vector<TokenId>, std::pair<const Row*, TokenId>> m;  // prefix -> row, generated next token
    for (const Row& r : rig.rows) {
      const Snapshot& s = rig.seen.at(r.id);
      const std::vector<TokenId> prefix(s.tokens.begin(), s.tokens.begin() + r.position + 1);
      const bool generated = r.position + 1 < int(s.tokens.size()) && r.position + 1 >= s.num_prompt_tokens;
      m[prefix] = {&r, generated ? s.tokens[std::size_t(r.position + 1)] : kNoToken};
    }
    return m;
  };
  const auto a = by_prefix(cached), b = by_prefix(fresh);
  int shared = 0, near_ties = 0;
  for (const auto& [prefix, ra] : a) {
    const auto it = b.find(prefix);
    if (it == b.end()) continue;
    ++shared;
    const std::vector<float>& la = ra.first->logits;
    const std::vector<float>& lb = it->second.first->logits;
    const double scale = row_scale(la);
    double err = 0;
    for (std::size_t v = 0; v < la.size(); ++v) err = std::max(err, std::fabs(double(la[v]) - double(lb[v])));
    EXPECT_LE(err, kLogitMaxTol * scale) << "prefix of " << prefix.size() << " tokens";
    const TokenId ta = ra.second, tb = it->second.second;
    if (ta == kNoToken || tb == kNoToken || ta == tb) continue;
    ++near_ties;
    EXPECT_LE(std::fabs(double(la[std::size_t(ta)]) - double(la[std::size_t(tb)])), kTieTol * scale)
        << "prefix of " << prefix.size() << " tokens: " << ta << " vs " << tb << " without a near-tie";
  }
  std::printf("  [beam search: %zu final beams, %d prefixes computed by both runs, %d near-ties]\n",
              with_cache.size(), shared, near_ties);
  EXPECT_GT(shared, 0);
  if (near_ties == 0) {
    EXPECT_EQ(with_cache, without);
  }
  // Both runs against the CPU reference.
  const Reference r1 = expect_rows_match_cpu(cached, "beam search, cached");
  expect_all_greedy(cached, r1);
  const Reference r2 = expect_rows_match_cpu(fresh, "beam search, uncached");
  expect_all_greedy(fresh, r2);
}

// Steps report device time and host time; empty batches run their copies only.
TEST(CudaExecutor, TimesAndCopyOnlySteps) {
  DUET_REQUIRE_GPU();
  const ModelSpec spec = tiny_model();
  const LlamaWeights& w = rounded_weights(spec);
  RigConfig c;
  c.num_blocks = 8;
  GpuRig rig(w, c, make_gpu(w, c));
  rig.add(1, random_tokens(20, 3, spec.vocab_size), 3);
  rig.run();
  EXPECT_GT(rig.exec->last_cpu_s(), 0.0);
  EXPECT_GE(rig.exec->last_cpu_s(), rig.exec->last_prep_s());
  EXPECT_GE(rig.exec->last_wall_s(), rig.exec->last_cpu_s());
  const std::vector<float> before = rig.exec->kv_pool_to_host();
  Batch copy;
  copy.copies = {{0, 5}};
  const StepResult r = rig.exec->execute(copy);
  EXPECT_TRUE(r.tokens.empty());
  const std::vector<float> after = rig.exec->kv_pool_to_host();
  const KvLayout& L = rig.exec->layout();
  for (int layer = 0; layer < L.num_layers; ++layer)
    for (int kv = 0; kv < 2; ++kv)
      for (std::int64_t e = 0; e < L.block_elems(); ++e)
        ASSERT_EQ(after[std::size_t(L.offset(layer, kv, 5, 0, 0) + e)],
                  before[std::size_t(L.offset(layer, kv, 0, 0, 0) + e)]);
}

TEST(CudaExecutor, RejectsBadOptionsAndWeights) {
  DUET_REQUIRE_GPU();
  const ModelSpec spec = tiny_model();
  LlamaWeights w = rounded_weights(spec);
  EXPECT_THROW(CudaExecutor(w, 8, 16, {.prm_plus_id = spec.vocab_size}), Error);
  EXPECT_THROW(CudaExecutor(w, 0, 16), Error);
  w.layers[1].k_proj.shape = {16, 64};
  EXPECT_THROW(CudaExecutor(w, 8, 16), Error);
  // It runs bf16 only: a float32 model would run as another than the simulator prices.
  ModelSpec fp32 = spec;
  fp32.dtype = DType::F32;
  try {
    CudaExecutor wide(fp32, CudaExecutor::DummyWeights{0}, 8, 16);
    ADD_FAILURE() << "a float32 model was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the CUDA engine runs bfloat16"), std::string::npos) << e.what();
  }
  // More memory than the device has, with the figures in the message.
  try {
    CudaExecutor huge(rounded_weights(spec), 1 << 30, 16);
    ADD_FAILURE() << "a pool larger than the device was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV pool"), std::string::npos) << e.what();
  }
}

// Dummy weights generated on the device are dummy_llama_weights exactly (the same bf16 weights:
// the same logits, bit for bit).
TEST(CudaExecutor, DeviceDummyWeightsEqualDummyLlamaWeights) {
  DUET_REQUIRE_GPU();
  const ModelSpec spec = tiny_model();
  const LlamaWeights w = dummy_llama_weights(spec, 5);
  CudaExecutorOptions o;
  o.keep_logits = true;
  CudaExecutor from_weights(w, 16, kBlockSize, o);
  CudaExecutor streamed(spec, CudaExecutor::DummyWeights{5}, 16, kBlockSize, o);
  for (CudaExecutor* e : {&from_weights, &streamed}) {
    Engine engine("llm",
                  {.max_num_seqs = 2,
                   .max_num_batched_tokens = 64,
                   .enable_chunked_prefill = true,
                   .max_model_len = 128},
                  std::make_unique<KvCacheManager>(KvCacheConfig{16, kBlockSize, true}), *e);
    Sequence s;
    s.id = 1;
    s.tokens = random_tokens(10, 1, spec.vocab_size);
    s.num_prompt_tokens = 10;
    s.sampling.max_tokens = 1;
    engine.add(std::move(s), 0.0);
    engine.step(0.0);
  }
  ASSERT_EQ(from_weights.last_logits().size(), 1u);
  EXPECT_EQ(from_weights.last_logits()[0].logits, streamed.last_logits()[0].logits);
}

}  // namespace
}  // namespace duet
