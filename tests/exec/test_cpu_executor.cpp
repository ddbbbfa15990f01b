// CpuExecutor driven by the real core Engine (Scheduler + KvCacheManager), so that its batches are
// the ones that serving produces: chunked prefills mixed with decodes, prefix-cache hits,
// copy-on-write forks and preemption by recompute. Every logits row it computes is compared with
// a plain full recompute of the sequence (no KV cache, no blocks, double precision).
//
// Tolerance: |logit - reference| <= 1e-4 * max(1, max |reference logit| of the row). The float32
// executor differs from the double reference by rounding only (observed ~1e-6 on this model).
#include "exec/cpu_executor.hpp"
#include "tests/support/test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "core/engine.hpp"
#include "core/error.hpp"
#include "core/kv_cache_manager.hpp"
#include "core/kv_layout.hpp"
#include "core/output_script.hpp"

namespace duet {
namespace {

constexpr double kRelTol = 1e-4;

ModelSpec tiny_spec(bool llama3_scaling = false) {
  ModelSpec m;
  m.name = "tiny";
  m.num_layers = 2;
  m.hidden_size = 64;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.head_dim = 16;
  m.intermediate_size = 128;
  m.vocab_size = 256;
  m.max_position_embeddings = 512;
  m.rope_theta = 10000.0;
  m.dtype = DType::F32;
  // original 64: with head_dim 16 the wavelengths (6 ... 19869) fall in all three bands.
  if (llama3_scaling) m.rope_scaling = RopeScaling{8.0, 1.0, 4.0, 64};
  return m;
}

// --- Random weights ---------------------------------------------------------------------------

class Uniform {
 public:
  explicit Uniform(std::uint64_t seed) : rng_(seed) {}
  float operator()(double lo, double hi) { return float(lo + (hi - lo) * double(rng_() >> 11) * 0x1.0p-53); }

 private:
  std::mt19937_64 rng_;  // its output is fixed by the standard: the same weights everywhere
};

HostTensor random_tensor(std::vector<std::int64_t> shape, double lo, double hi, Uniform& u) {
  HostTensor t{std::move(shape), {}};
  t.data.resize(std::size_t(t.rows() * t.cols()));
  for (float& v : t.data) v = u(lo, hi);
  return t;
}

// Projections ~ U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's nn.Linear init), norm weights ~ 1.
HostTensor linear(std::int64_t out, std::int64_t in, Uniform& u) {
  const double b = 1.0 / std::sqrt(double(in));
  return random_tensor({out, in}, -b, b, u);
}
HostTensor norm_weight(std::int64_t n, Uniform& u) { return random_tensor({n}, 0.9, 1.1, u); }

LlamaWeights random_weights(const ModelSpec& m, std::uint64_t seed = 7) {
  Uniform u(seed);
  const std::int64_t h = m.hidden_size, q = m.num_heads * m.head_dim, kv = m.num_kv_heads * m.head_dim;
  LlamaWeights w;
  w.spec = m;
  w.embed_tokens = random_tensor({m.vocab_size, h}, -1.0, 1.0, u);
  for (int l = 0; l < m.num_layers; ++l) {
    LlamaLayerWeights& L = w.layers.emplace_back();
    L.input_norm = norm_weight(h, u);
    L.q_proj = linear(q, h, u);
    L.k_proj = linear(kv, h, u);
    L.v_proj = linear(kv, h, u);
    L.o_proj = linear(h, q, u);
    L.post_norm = norm_weight(h, u);
    L.gate_proj = linear(m.intermediate_size, h, u);
    L.up_proj = linear(m.intermediate_size, h, u);
    L.down_proj = linear(h, m.intermediate_size, u);
    if (m.qk_norm) {  // far from 1, so that a weight left out, or applied after RoPE, fails the reference
      L.q_norm = random_tensor({m.head_dim}, 0.2, 2.0, u);
      L.k_norm = random_tensor({m.head_dim}, 0.2, 2.0, u);
    }
    if (!m.qkv_bias) continue;
    // Large enough to move every logit: a bias left out, or added after RoPE, fails the reference.
    L.q_bias = random_tensor({q}, -1.0, 1.0, u);
    L.k_bias = random_tensor({kv}, -1.0, 1.0, u);
    L.v_bias = random_tensor({kv}, -1.0, 1.0, u);
  }
  w.final_norm = norm_weight(h, u);
  if (m.can_generate()) {
    w.lm_head = linear(m.vocab_size, h, u);
    return w;
  }
  // Biases large enough to move every label: one left out, or the ReLU, fails the reference.
  if (m.score_head == ScoreHead::Classifier) {
    w.score_hidden = linear(h, h, u);
    w.score_hidden_bias = random_tensor({h}, -1.0, 1.0, u);
  }
  w.score_out = linear(m.score_labels(), h, u);
  w.score_out_bias = random_tensor({m.score_labels()}, -1.0, 1.0, u);
  return w;
}

// --- The full-recompute reference -------------------------------------------------------------

Eigen::MatrixXd as_double(const HostTensor& t) {
  return Eigen::Map<const MatrixRM>(t.data.data(), t.rows(), t.cols()).cast<double>();
}

Eigen::MatrixXd ref_rms_norm(const Eigen::MatrixXd& x, const HostTensor& w, double eps) {
  Eigen::MatrixXd out = x;
  const Eigen::RowVectorXd weight = as_double(w).transpose();
  for (Eigen::Index r = 0; r < x.rows(); ++r)
    out.row(r) = x.row(r).cwiseProduct(weight) / std::sqrt(x.row(r).squaredNorm() / double(x.cols()) + eps);
  return out;
}

// Qwen3's q_norm / k_norm: each head_dim-wide segment of a row is RMS-normalised on its own.
void ref_head_norm(Eigen::MatrixXd& a, const HostTensor& w, int d, double eps) {
  for (Eigen::Index c = 0; c + d <= a.cols(); c += d)
    a.middleCols(c, d) = ref_rms_norm(a.middleCols(c, d), w, eps);
}

void ref_rope(Eigen::MatrixXd& a, int heads, int d, const std::vector<double>& inv_freq) {
  for (Eigen::Index t = 0; t < a.rows(); ++t)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < d / 2; ++i) {
        const double angle = double(t) * inv_freq[std::size_t(i)];
        const double x1 = a(t, h * d + i), x2 = a(t, h * d + i + d / 2);
        a(t, h * d + i) = x1 * std::cos(angle) - x2 * std::sin(angle);
        a(t, h * d + i + d / 2) = x2 * std::cos(angle) + x1 * std::sin(angle);
      }
}

// Causal attention over all tokens, query head h reading KV head h / (heads / kv_heads).
Eigen::MatrixXd ref_attention(const Eigen::MatrixXd& q, const Eigen::MatrixXd& k, const Eigen::MatrixXd& v,
                              const ModelSpec& m) {
  const int d = m.head_dim, group = m.num_heads / m.num_kv_heads;
  Eigen::MatrixXd out = Eigen::MatrixXd::Zero(q.rows(), q.cols());
  for (Eigen::Index t = 0; t < q.rows(); ++t)
    for (int h = 0; h < m.num_heads; ++h) {
      const int c = (h / group) * d;
      Eigen::VectorXd s(t + 1);
      for (Eigen::Index j = 0; j <= t; ++j)
        s(j) = q.row(t).segment(h * d, d).dot(k.row(j).segment(c, d)) / std::sqrt(double(d));
      s = (s.array() - s.maxCoeff()).exp();
      s /= s.sum();
      for (Eigen::Index j = 0; j <= t; ++j) out.row(t).segment(h * d, d) += s(j) * v.row(j).segment(c, d);
    }
  return out;
}

// All logits [tokens x vocab] of a token list: the plain unpaged causal forward, in double.
Eigen::MatrixXd reference_logits(const LlamaWeights& w, const std::vector<TokenId>& tokens) {
  const ModelSpec& m = w.spec;
  const auto inv_freq = rope_inv_freq(m);
  const Eigen::MatrixXd embed = as_double(w.embed_tokens);
  Eigen::MatrixXd x(Eigen::Index(tokens.size()), m.hidden_size);
  for (std::size_t t = 0; t < tokens.size(); ++t) x.row(Eigen::Index(t)) = embed.row(tokens[t]);
  for (const LlamaLayerWeights& l : w.layers) {
    Eigen::MatrixXd h = ref_rms_norm(x, l.input_norm, m.rms_norm_eps);
    Eigen::MatrixXd q = h * as_double(l.q_proj).transpose(), k = h * as_double(l.k_proj).transpose();
    Eigen::MatrixXd v = h * as_double(l.v_proj).transpose();
    if (m.qkv_bias) {
      q.rowwise() += as_double(l.q_bias).transpose().row(0);
      k.rowwise() += as_double(l.k_bias).transpose().row(0);
      v.rowwise() += as_double(l.v_bias).transpose().row(0);
    }
    if (m.qk_norm) {
      ref_head_norm(q, l.q_norm, m.head_dim, m.rms_norm_eps);
      ref_head_norm(k, l.k_norm, m.head_dim, m.rms_norm_eps);
    }
    ref_rope(q, m.num_heads, m.head_dim, inv_freq);
    ref_rope(k, m.num_kv_heads, m.head_dim, inv_freq);
    x += ref_attention(q, k, v, m) * as_double(l.o_proj).transpose();
    h = ref_rms_norm(x, l.post_norm, m.rms_norm_eps);
    const Eigen::ArrayXXd g = (h * as_double(l.gate_proj).transpose()).array();
    const Eigen::ArrayXXd up = (h * as_double(l.up_proj).transpose()).array();
    x += (g / (1.0 + (-g).exp()) * up).matrix() * as_double(l.down_proj).transpose();
  }
  const Eigen::MatrixXd hn = ref_rms_norm(x, w.final_norm, m.rms_norm_eps);
  if (m.can_generate()) return hn * as_double(w.lm_head).transpose();
  Eigen::MatrixXd in = hn;
  if (m.score_head == ScoreHead::Classifier) {
    in = hn * as_double(w.score_hidden).transpose();
    in.rowwise() += as_double(w.score_hidden_bias).transpose().row(0);
    in = in.cwiseMax(0.0);
  }
  Eigen::MatrixXd labels = Eigen::MatrixXd::Zero(hn.rows(), 2);  // a value head's: the value, then 0
  labels.leftCols(m.score_labels()) = in * as_double(w.score_out).transpose();
  labels.leftCols(m.score_labels()).rowwise() += as_double(w.score_out_bias).transpose().row(0);
  return labels;
}

// --- A real engine around the executor --------------------------------------------------------

// The tiny test model's vocabulary.
std::vector<TokenId> random_tokens(int n, std::uint64_t seed, int vocab = 256) {
  return test_support::random_tokens(n, seed, vocab);
}
using test_support::concat;
using test_support::sampling;

struct Row {
  SeqId id = 0;
  int position = 0;
  std::vector<float> logits;
};

struct Rig {
  // The model alone, on its own pool of num_blocks blocks of 4 tokens.
  Rig(const ModelSpec& spec, int num_blocks, int max_batched_tokens, CpuExecutorOptions options = {})
      : Rig(spec, std::make_unique<KvCacheManager>(KvCacheConfig{num_blocks, 4, true}), num_blocks, 4,
            max_batched_tokens, options, {}) {}
  // One tenant of a shared pool: its pages are the pool's, its KV lives in `arena`.
  Rig(const ModelSpec& spec, const std::shared_ptr<BlockPool>& pool, int tenant, std::span<float> arena,
      int max_batched_tokens, std::uint64_t weight_seed)
      : Rig(spec, std::make_unique<KvCacheManager>(pool, tenant, true), pool->num_blocks(),
            pool->block_size(tenant), max_batched_tokens, {}, arena, weight_seed) {}

  Rig(const ModelSpec& spec, std::unique_ptr<KvCacheManager> kv, int num_blocks, int block_size,
      int max_batched_tokens, CpuExecutorOptions options, std::span<float> arena,
      std::uint64_t weight_seed = 7)
      : block_size(block_size),
        weights(random_weights(spec, weight_seed)),
        exec(weights, num_blocks, block_size, options, arena),
        engine(spec.name,
               {.max_num_seqs = std::min(8, max_batched_tokens),  // vLLM's rule: a budget holds every decode
                .max_num_batched_tokens = max_batched_tokens,
                .max_model_len = 256},
               std::move(kv), exec) {}

  // Steps until idle, keeping every logits row the executor computed.
  void run() {
    while (engine.has_work())
      if (!step()) return ADD_FAILURE() << "stuck: work that cannot be scheduled", void();
  }

  // One engine step; false when nothing could be scheduled.
  bool step() {
    const StepOutcome o = engine.step(0.0);
    if (o.batch.empty()) return false;
    ++steps;
    bool decode = false, prefill = false;
    for (std::size_t i = 0; i < o.batch.items.size(); ++i) {
      (o.batch.items[i].is_decode ? decode : prefill) = true;
      const ItemLogits& l = exec.last_logits().at(i);
      for (std::size_t k = 0; k < l.positions.size(); ++k) {
        const auto row = l.logits.row(Eigen::Index(k));
        rows.push_back(
            {o.batch.items[i].seq->id, l.positions[k], std::vector<float>(row.begin(), row.end())});
      }
    }
    mixed_steps += decode && prefill;
    same_step_hits += count_same_step_hits(o.batch);
    peak_blocks_used = std::max(peak_blocks_used, engine.kv().usage().used_blocks);
    EXPECT_EQ(o.result.tokens.size(), o.batch.items.size());
    EXPECT_GT(o.result.duration_s, 0.0);
    return true;
  }

  // Items whose cached context includes a block that another item of the same batch writes: a
  // prefix hit on KV that is computed in the very step that reads it.
  int count_same_step_hits(const Batch& batch) const {
    std::set<BlockId> written;
    for (const BatchItem& it : batch.items)
      for (int p = it.context_len; p < it.context_len + it.num_new_tokens; p += block_size)
        if (std::size_t(p / block_size) < it.seq->kv.blocks.size())
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

  // A PRM request: the whole of `tokens` known, scored at `positions`.
  Sequence& score(SeqId id, std::vector<TokenId> tokens, std::vector<int> positions) {
    return engine.add(test_support::score_request(id, std::move(tokens), std::move(positions)), 0.0);
  }

  // Forks `parent` into `count` children, ids 10 up, and releases it: each child adds 2 tokens of
  // its own and generates 4, greedily except the last, which samples at temperature 1.
  void fork_children(SeqId parent, int count, std::uint64_t seed = 0) {
    const SeqId last = 10 + SeqId(count) - 1;
    for (SeqId id = 10; id <= last; ++id) {
      Sequence child;
      child.id = id;
      child.tokens = random_tokens(2, seed + id);
      child.sampling = sampling(id == last ? 1.0f : 0.0f, seed + id);
      child.sampling.max_tokens = 4;
      engine.fork(parent, std::move(child), 0.0);
    }
    engine.release(parent);
  }

  int block_size;
  LlamaWeights weights;
  CpuExecutor exec;
  Engine engine;
  std::vector<Row> rows;
  int steps = 0;
  int mixed_steps = 0;
  int same_step_hits = 0;
  std::int32_t peak_blocks_used = 0;
};

std::vector<TokenId> outputs(const Sequence& s) {
  return {s.tokens.begin() + s.num_prompt_tokens, s.tokens.end()};
}

// Every recorded row equals the full recompute of its sequence (its final tokens: a causal model's
// logits at position p depend on tokens 0..p only). Returns the reference per sequence.
std::map<SeqId, Eigen::MatrixXd> expect_rows_match_reference(Rig& rig) {
  std::map<SeqId, Eigen::MatrixXd> ref;
  double worst = 0;
  for (const Row& r : rig.rows) {
    if (!ref.count(r.id)) {
      const Sequence* s = rig.engine.find(r.id);
      if (!s) ADD_FAILURE() << "sequence " << r.id << " was released";
      if (!s) return ref;
      ref[r.id] = reference_logits(rig.weights, s->tokens);
    }
    const Eigen::RowVectorXd want = ref[r.id].row(r.position);
    const double scale = std::max(1.0, want.cwiseAbs().maxCoeff());
    const double err =
        (Eigen::Map<const Eigen::RowVectorXf>(r.logits.data(), Eigen::Index(r.logits.size())).cast<double>() -
         want)
            .cwiseAbs()
            .maxCoeff();
    worst = std::max(worst, err / scale);
    EXPECT_LE(err, kRelTol * scale) << "sequence " << r.id << " position " << r.position;
  }
  EXPECT_FALSE(rig.rows.empty());
  std::printf("  [%zu logits rows, worst relative error %.2e]\n", rig.rows.size(), worst);
  return ref;
}

// Greedy sequences: each output token is the argmax of the reference at the position before it.
void expect_greedy(const Sequence& s, const Eigen::MatrixXd& ref) {
  for (int p = s.num_prompt_tokens; p < s.num_tokens(); ++p) {
    Eigen::Index best;
    ref.row(p - 1).maxCoeff(&best);
    EXPECT_EQ(s.tokens[std::size_t(p)], TokenId(best)) << "sequence " << s.id << " position " << p;
  }
}

// --- Tests ------------------------------------------------------------------------------------

// Three prompts share a prefix; the budget of 7 tokens chunks every prefill and mixes chunks with
// decodes; blocks of 4 make the later prompts hit the first one's cached blocks. In step 2, `a`
// computes positions 7..9 and `b` is admitted with a hit on blocks 0 and 1, so b's attention reads
// position 7's K/V from the same forward pass that writes it.
void check_shared_prefix_generation(const ModelSpec& spec) {
  Rig rig(spec, 64, 7);
  const std::vector<TokenId> prefix = random_tokens(9, 1);
  Sequence& a = rig.add(1, concat(prefix, random_tokens(1, 2)), 6);
  Sequence& b = rig.add(2, concat(prefix, random_tokens(4, 3)), 6, sampling(0.8f, 42, 0.9f));
  Sequence& c = rig.add(3, a.tokens, 6);
  rig.run();
  for (const Sequence* s : {&a, &b, &c}) EXPECT_EQ(s->finish_reason, FinishReason::Length);
  EXPECT_GT(rig.engine.kv().counters().hit_tokens, 0);
  EXPECT_GT(b.num_cached_prompt_tokens, 0);
  EXPECT_GT(c.num_cached_prompt_tokens, 0);
  EXPECT_GT(rig.mixed_steps, 0) << "some steps mix prefill chunks and decodes";
  EXPECT_GT(rig.same_step_hits, 0) << "a prefix hit on blocks written in the same step";
  auto ref = expect_rows_match_reference(rig);
  expect_greedy(a, ref[1]);
  expect_greedy(c, ref[3]);
  EXPECT_EQ(outputs(a), outputs(c));

  // The sampled sequence does not depend on its batch: alone, it draws the same tokens.
  Rig alone(spec, 64, 64);
  Sequence& b2 = alone.add(2, std::vector<TokenId>(b.tokens.begin(), b.tokens.begin() + b.num_prompt_tokens),
                           6, b.sampling);
  alone.run();
  EXPECT_EQ(outputs(b2), outputs(b));
}

TEST(CpuExecutor, ChunkedPrefixCachedGenerationMatchesFullRecompute) {
  check_shared_prefix_generation(tiny_spec());
}

TEST(CpuExecutor, Llama3RopeScalingMatchesFullRecompute) { check_shared_prefix_generation(tiny_spec(true)); }

// Qwen2: biases on q, k and v, added before RoPE.
TEST(CpuExecutor, QkvBiasesMatchFullRecompute) {
  ModelSpec m = tiny_spec();
  m.qkv_bias = true;
  check_shared_prefix_generation(m);
}

// Qwen3: each head of q and k RMS-normalised, before RoPE; with twice the heads, q is wider than the
// hidden state, as in Qwen3-0.6B (16 x 128 over 1,024).
TEST(CpuExecutor, QkHeadNormsMatchFullRecompute) {
  ModelSpec m = tiny_spec();
  m.qk_norm = true;
  m.num_heads *= 2;
  ASSERT_GT(m.num_heads * m.head_dim, m.hidden_size);
  check_shared_prefix_generation(m);
}

TEST(CpuExecutor, ForkedBeamsMatchIndependentSequences) {
  Rig rig(tiny_spec(), 64, 7);
  Sequence& parent = rig.add(1, random_tokens(6, 4), 1);  // 6 prompt + 1 output: 6 slots computed
  parent.keep_kv = true;
  rig.run();
  ASSERT_TRUE(parent.finished());
  expect_rows_match_reference(rig);
  rig.rows.clear();  // the parent is released below
  rig.fork_children(1, 3);
  rig.run();
  EXPECT_GT(rig.engine.kv().counters().cow_copies, 0) << "the shared partial block was copied";
  auto ref = expect_rows_match_reference(rig);
  for (SeqId id = 10; id < 13; ++id) {
    const Sequence& beam = *rig.engine.find(id);
    ASSERT_EQ(beam.num_output_tokens(), 4);
    if (beam.sampling.temperature == 0.0f) expect_greedy(beam, ref[id]);
    // The same tokens as the beam's whole prompt served on its own, from an empty cache.
    Rig alone(tiny_spec(), 64, 64);
    const Sequence& s =
        alone.add(id, std::vector<TokenId>(beam.tokens.begin(), beam.tokens.begin() + beam.num_prompt_tokens),
                  4, beam.sampling);
    alone.run();
    EXPECT_EQ(outputs(s), outputs(beam)) << "beam " << id;
  }
}

// A kept parent whose KV a short pool took back (a second request needs its blocks): its forks
// find what is left of it in the prefix cache, recompute the rest, and compute exactly what forks
// sharing the parent's KV compute on a roomy pool.
TEST(CpuExecutor, ForksOfKeptKvThatAShortPoolTookBackMatchFullRecompute) {
  auto serve = [](int num_blocks) {
    auto rig = std::make_unique<Rig>(tiny_spec(), num_blocks, 16);
    Sequence& parent = rig->add(1, random_tokens(13, 5), 3);  // 16 tokens, 15 computed: 4 blocks of 4
    parent.keep_kv = true;
    rig->run();
    rig->add(2, random_tokens(20, 6), 3);  // 5 blocks, then 6: more than 8 blocks leave the parent
    rig->run();
    expect_rows_match_reference(*rig);
    rig->rows.clear();  // the parent is released below
    rig->fork_children(1, 2);
    rig->run();
    return rig;
  };
  const auto tight = serve(8);
  const auto roomy = serve(64);
  EXPECT_EQ(tight->engine.scheduler().num_idle_releases(), 1);
  EXPECT_EQ(roomy->engine.scheduler().num_idle_releases(), 0);
  EXPECT_GT(tight->engine.kv().counters().evictions, 0);
  EXPECT_GT(tight->engine.kv().counters().hit_tokens, 0) << "the forks hit what is left of the parent";
  auto ref = expect_rows_match_reference(*tight);
  for (SeqId id = 10; id < 12; ++id) {
    const Sequence& beam = *tight->engine.find(id);
    ASSERT_EQ(beam.num_output_tokens(), 4);
    EXPECT_EQ(outputs(beam), outputs(*roomy->engine.find(id))) << "beam " << id;
    if (beam.sampling.temperature == 0.0f) expect_greedy(beam, ref[id]);
  }
}

// 3 requests of 8 + 12 tokens need 15 blocks of 4 in all; 8 blocks force preemption by recompute.
TEST(CpuExecutor, PreemptedRequestsContinueAsIfNeverPreempted) {
  auto serve = [](int num_blocks) {
    auto rig = std::make_unique<Rig>(tiny_spec(), num_blocks, 16);
    for (SeqId id = 1; id <= 3; ++id)
      rig->add(id, random_tokens(8, 20 + id), 12, sampling(id == 2 ? 0.9f : 0.0f, id));
    rig->run();
    return rig;
  };
  const auto tight = serve(8);
  const auto roomy = serve(64);
  EXPECT_GT(tight->engine.scheduler().num_preemptions(), 0);
  EXPECT_EQ(roomy->engine.scheduler().num_preemptions(), 0);
  for (SeqId id = 1; id <= 3; ++id)
    EXPECT_EQ(outputs(*tight->engine.find(id)), outputs(*roomy->engine.find(id))) << "sequence " << id;
  expect_rows_match_reference(*tight);
}

// --- Two models on one shared pool -------------------------------------------------------------

// A model with twice the tiny model's layers and half its block: its pages have the same bytes
// (2 x 4 layers x 2 heads x 2 slots x 16 = 2 x 2 x 2 x 4 x 16 floats), so both share one arena.
ModelSpec deep_spec() {
  ModelSpec m = tiny_spec();
  m.name = "deep";
  m.num_layers = 4;
  return m;
}

// Each model's work, the same on a shared pool and alone: three requests (one sampled) that
// outgrow a tight pool, and a kept parent sharing the first one's prompt, forked three ways.
void submit_requests(Rig& rig, std::uint64_t seed) {
  const std::vector<TokenId> prompt = random_tokens(8, seed);
  for (SeqId id = 1; id <= 3; ++id)
    rig.add(id, id == 1 ? prompt : random_tokens(8, seed + id), 12,
            sampling(id == 2 ? 0.9f : 0.0f, seed + id));
  rig.add(4, concat(prompt, random_tokens(3, seed + 4)), 1).keep_kv = true;
}

// Steps the two engines in turn until both are idle.
void run_together(Rig& a, Rig& b) {
  while (a.engine.has_work() || b.engine.has_work()) {
    const bool stepped_a = a.engine.has_work() && a.step();
    const bool stepped_b = b.engine.has_work() && b.step();
    if (!stepped_a && !stepped_b) return ADD_FAILURE() << "stuck: neither engine can schedule", void();
  }
}

// The shared pool's correctness checks, for both models on one host arena: every logits row
// equals the full recompute of its sequence (paged = unpaged), and every sequence draws the same
// tokens as on a roomy private pool, through prefix hits, copy-on-write forks and preemption,
// while pages pass from one model to the other.
TEST(CpuExecutor, TwoModelsOnOneSharedArenaMatchFullRecompute) {
  constexpr std::int32_t kPages = 24;  // the tiny model alone needs 15 + forks, the deep one 30
  auto pool = std::make_shared<BlockPool>(kPages, std::vector<PoolTenant>{{"tiny", 0, 4}, {"deep", 1, 2}});
  ASSERT_EQ(KvLayout::of(tiny_spec(), kPages, 4).page_elems(),
            KvLayout::of(deep_spec(), kPages, 2).page_elems());
  std::vector<float> arena(std::size_t(KvLayout::of(tiny_spec(), kPages, 4).total_elems()), 0.0f);
  Rig tiny(tiny_spec(), pool, 0, arena, 16, 7);
  Rig deep(deep_spec(), pool, 1, arena, 16, 8);
  tiny.engine.scheduler().set_pool_peers({&deep.engine.scheduler()});
  deep.engine.scheduler().set_pool_peers({&tiny.engine.scheduler()});
  submit_requests(tiny, 100);
  submit_requests(deep, 200);
  run_together(tiny, deep);
  // The parents are released below: their rows are checked now.
  std::map<SeqId, Eigen::MatrixXd> ref[2] = {expect_rows_match_reference(tiny),
                                             expect_rows_match_reference(deep)};
  tiny.rows.clear();
  deep.rows.clear();
  tiny.fork_children(4, 3, 100);
  deep.fork_children(4, 3, 200);
  run_together(tiny, deep);
  ref[0].merge(expect_rows_match_reference(tiny));
  ref[1].merge(expect_rows_match_reference(deep));
  pool->check_consistency();

  EXPECT_GT(tiny.engine.scheduler().num_preemptions() + deep.engine.scheduler().num_preemptions(), 0);
  EXPECT_GT(tiny.peak_blocks_used + deep.peak_blocks_used, kPages) << "pages passed between the models";
  EXPECT_GT(tiny.engine.kv().counters().cow_copies + deep.engine.kv().counters().cow_copies, 0);
  EXPECT_GT(tiny.engine.kv().counters().hit_tokens + deep.engine.kv().counters().hit_tokens, 0);
  for (int m = 0; m < 2; ++m) {
    Rig* rig = m == 0 ? &tiny : &deep;
    const std::uint64_t seed = m == 0 ? 100 : 200;
    SCOPED_TRACE(rig->engine.name());
    const int block = rig->block_size;
    Rig alone(rig->weights.spec, std::make_unique<KvCacheManager>(KvCacheConfig{256, block, true}), 256,
              block, 16, {}, {}, m == 0 ? 7 : 8);
    submit_requests(alone, seed);
    alone.run();
    alone.fork_children(4, 3, seed);
    alone.run();
    for (SeqId id : {1, 2, 3, 10, 11, 12}) {
      const Sequence& s = *rig->engine.find(id);
      EXPECT_EQ(outputs(s), outputs(*alone.engine.find(id))) << "sequence " << id;
      if (s.sampling.temperature == 0.0f) expect_greedy(s, ref[m][id]);
    }
  }
}

TEST(CpuExecutor, PrmScoresAreTheTwoWaySoftmaxOfTheFullLogits) {
  const CpuExecutorOptions options{.prm_plus_id = 10, .prm_minus_id = 20};
  Rig rig(tiny_spec(), 64, 7, options);
  const std::vector<TokenId> solution = random_tokens(20, 5);
  Sequence& a = rig.score(1, solution, {5, 11, 19});
  // Shares the first 14 tokens: a prefix hit up to its first score position.
  Sequence& b =
      rig.score(2, concat({solution.begin(), solution.begin() + 14}, random_tokens(6, 6)), {13, 17, 19});
  rig.run();
  EXPECT_GT(b.num_cached_prompt_tokens, 0);
  auto ref = expect_rows_match_reference(rig);
  for (const Sequence* s : {&a, &b}) {
    EXPECT_EQ(s->finish_reason, FinishReason::Scored);
    ASSERT_EQ(s->scores.size(), s->score_positions.size());
    for (std::size_t k = 0; k < s->scores.size(); ++k) {
      const auto l = ref[s->id].row(s->score_positions[k]);
      // Logit errors of <= 1e-4 move p(+) by <= 2.5e-5.
      EXPECT_NEAR(s->scores[k], 1.0 / (1.0 + std::exp(l(20) - l(10))), 3e-5) << s->id << " score " << k;
    }
  }
}

// A PRM with a score head of `kind`: three scored positions, whose logits rows (two columns) match
// the double-precision reference; returns the rig and the reference rows of sequence 1.
struct ScoredRows {
  std::unique_ptr<Rig> rig;
  Eigen::MatrixXd ref;
  std::vector<float> scores;
  std::vector<int> positions;
};

ScoredRows score_with_head(ScoreHead kind, CpuExecutorOptions options) {
  ModelSpec m = tiny_spec();
  m.qkv_bias = true;
  m.tie_word_embeddings = false;
  m.score_head = kind;
  ScoredRows out{std::make_unique<Rig>(m, 64, 7, options), {}, {}, {}};
  const Sequence& a = out.rig->score(1, random_tokens(20, 5), {5, 11, 19});
  out.rig->run();
  out.ref = expect_rows_match_reference(*out.rig)[1];
  out.scores = a.scores;
  out.positions = a.score_positions;
  EXPECT_EQ(out.ref.cols(), 2);
  EXPECT_EQ(out.scores.size(), 3u);
  return out;
}

// Qwen2.5-Math-PRM's head: Linear + bias, ReLU, Linear + bias to two labels, whose softmax's
// second entry is the score.
TEST(CpuExecutor, ScoreHeadScoresAreTheSoftmaxOfItsLabels) {
  const ScoredRows r = score_with_head(ScoreHead::Classifier, {.prm_plus_id = 1, .prm_minus_id = 0});
  for (std::size_t k = 0; k < r.scores.size(); ++k) {
    const auto l = r.ref.row(r.positions[k]);
    EXPECT_NEAR(r.scores[k], 1.0 / (1.0 + std::exp(l(0) - l(1))), 3e-5) << "score " << k;
  }
  // It has no LM head to sample from: a sampling item is a scheduler bug.
  Sequence g;
  g.id = 2;
  g.tokens = random_tokens(4, 6);
  g.num_prompt_tokens = 4;
  g.kv.blocks = {0};
  Batch b;
  b.block_size = 4;
  add_item(b, g, 0, 4, Want::Sample);
  try {
    r.rig->exec.execute(b);
    ADD_FAILURE() << "a score head sampled";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("samples, but model tiny has a score head and no LM head"),
              std::string::npos)
        << e.what();
  }
  // Label ids beyond its two labels are refused.
  EXPECT_THROW(CpuExecutor(r.rig->weights, 8, 4, {.prm_plus_id = 2, .prm_minus_id = 0}), Error);
}

// Skywork-o1-Open-PRM's value head: one Linear + bias to a value whose sigmoid is the score; its
// logits rows are the value and a constant 0.
TEST(CpuExecutor, ValueHeadScoresAreTheSigmoidOfItsValue) {
  const ScoredRows r = score_with_head(ScoreHead::Value, {.prm_plus_id = 0, .prm_minus_id = 1});
  for (std::size_t k = 0; k < r.scores.size(); ++k) {
    const auto l = r.ref.row(r.positions[k]);
    EXPECT_NEAR(r.scores[k], 1.0 / (1.0 + std::exp(-l(0))), 3e-5) << "score " << k;
  }
  // The engine's own rows: the value, then exactly 0.
  ASSERT_EQ(r.rig->rows.size(), 3u);
  for (const Row& row : r.rig->rows) EXPECT_EQ(row.logits.at(1), 0.0f) << "position " << row.position;
}

TEST(CpuExecutor, ForcedScriptsReplaceSamplesAndScores) {
  Rig rig(tiny_spec(), 64, 7);
  Sequence gen;
  gen.id = 1;
  gen.tokens = random_tokens(9, 7);
  gen.num_prompt_tokens = 9;
  gen.sampling.max_tokens = 5;
  gen.script.seed = 1234;
  gen.script.force = true;
  Sequence score;
  score.id = 2;
  score.kind = SeqKind::Score;
  score.tokens = random_tokens(12, 8);
  score.num_prompt_tokens = 12;
  score.score_positions = {3, 7, 11};
  score.script.seed = 77;
  score.script.force = true;
  score.script.scores = {0.25f, 0.75f};
  const Sequence& g = rig.engine.add(gen, 0.0);
  const Sequence& s = rig.engine.add(score, 0.0);
  rig.run();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(g.tokens[std::size_t(9 + i)], scripted_token(g, i, 256)) << i;
  EXPECT_EQ(s.scores, (std::vector<float>{0.25f, 0.75f, scripted_score(s, 2, 11)}));
  expect_rows_match_reference(rig);  // the forward pass still ran on the scripted tokens

  // With scripts not honoured the same requests are served from the model.
  Rig real(tiny_spec(), 64, 7, {.honour_scripts = false});
  const Sequence& g2 = real.engine.add(gen, 0.0);
  real.run();
  auto ref = expect_rows_match_reference(real);
  expect_greedy(g2, ref[1]);
}

TEST(CpuExecutor, GreedyDecodeIsTheArgmaxOfTheReference) {
  Rig rig(tiny_spec(), 64, 64);
  const Sequence& s = rig.add(1, random_tokens(5, 9), 12);
  rig.run();
  EXPECT_EQ(rig.steps, 12) << "one prefill, then 11 decodes";
  expect_greedy(s, expect_rows_match_reference(rig)[1]);
}

TEST(CpuExecutor, CopiesRunBeforeTheForwardPassInEveryLayer) {
  const LlamaWeights w = random_weights(tiny_spec());
  CpuExecutor exec(w, 8, 4);
  const KvLayout& L = exec.layout();
  auto pool = exec.kv_pool();
  for (std::size_t i = 0; i < pool.size(); ++i) pool[i] = float(i % 1000);
  Batch batch;
  batch.copies = {{2, 5}};
  const StepResult r = exec.execute(batch);
  EXPECT_TRUE(r.tokens.empty());
  for (int layer = 0; layer < L.num_layers; ++layer)
    for (int kv = 0; kv < 2; ++kv)
      for (std::int64_t e = 0; e < L.block_elems(); ++e)
        ASSERT_EQ(pool[std::size_t(L.offset(layer, kv, 5, 0, 0) + e)],
                  pool[std::size_t(L.offset(layer, kv, 2, 0, 0) + e)]);
}

TEST(CpuExecutor, RejectsBadWeightsAndOptions) {
  LlamaWeights w = random_weights(tiny_spec());
  // PRM label ids are columns of the logits rows: the vocabulary's, or a score head's two.
  const auto expect_error = [](const auto& make, const std::string& message) {
    try {
      make();
      ADD_FAILURE() << "no error; expected: " << message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  expect_error([&] { CpuExecutor(w, 8, 4, {.prm_plus_id = 256}); },
               "CpuExecutor: PRM label id 256 is outside the vocabulary of 256");
  ModelSpec prm = tiny_spec();
  prm.score_head = ScoreHead::Classifier;
  const LlamaWeights p = random_weights(prm);
  expect_error([&] { CpuExecutor(p, 8, 4, {.prm_plus_id = 2, .prm_minus_id = 0}); },
               "CpuExecutor: PRM label id 2 is outside the score head's labels of 2");
  EXPECT_THROW(CpuExecutor(w, 0, 4), Error);
  w.layers[1].k_proj.shape = {16, 64};
  EXPECT_THROW(CpuExecutor(w, 8, 4), Error);
  // A model with q, k and v biases needs them.
  ModelSpec qwen = tiny_spec();
  qwen.qkv_bias = true;
  LlamaWeights b = random_weights(qwen);
  b.layers[0].v_bias = {};
  EXPECT_THROW(CpuExecutor(b, 8, 4), Error);
  // So does a Qwen3 its head norms.
  ModelSpec qwen3 = tiny_spec();
  qwen3.qk_norm = true;
  LlamaWeights n = random_weights(qwen3);
  n.layers[1].k_norm = {};
  expect_error([&] { CpuExecutor(n, 8, 4); }, "model.layers.1.self_attn.k_norm.weight has the wrong shape");
}

}  // namespace
}  // namespace duet
