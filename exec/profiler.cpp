#include "exec/profiler.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/memory_plan.hpp"
#include "core/metrics.hpp"
#include "exec/build_revision.hpp"
#include "exec/wall_clock.hpp"
#include "io/timestamp.hpp"
#include "sim/profiles.hpp"

namespace duet {

namespace {

// 1, 2, 4, ... up to and including `max`.
std::vector<int> doubling(int from, int max) {
  std::vector<int> v;
  for (int x = from; x < max; x *= 2) v.push_back(x);
  v.push_back(max);
  return v;
}

// The values in order, each larger than the one before and at most `max`.
std::vector<int> increasing(std::initializer_list<int> values, int max) {
  std::vector<int> v;
  for (int x : values)
    if (x <= max && (v.empty() || x > v.back())) v.push_back(x);
  return v;
}

GridPoint single(const std::string& regime, int context, int tokens, Want want, int score_every = 0) {
  return {regime, {{context, tokens, want, score_every}}, 0};
}

}  // namespace

std::vector<GridPoint> profile_grid(const ProfileLimits& l) {
  if (l.max_num_seqs < 1 || l.max_num_batched_tokens < 1 || l.max_model_len < 2 || l.block_size < 1 ||
      l.repeats < 1)
    throw Error(
        "profile: max_num_seqs, max_num_batched_tokens, max_model_len, block_size and repeats must be "
        "positive");
  std::vector<GridPoint> grid;
  const int max_chunk = std::min(l.max_num_batched_tokens, l.max_model_len - 1);
  const std::vector<int> contexts = {0, l.max_model_len / 4, l.max_model_len / 2,
                                     l.max_model_len - max_chunk};
  // Prefill: chunk sizes at cached contexts; a sample at the chunk's end (the common case).
  for (int n : doubling(1, max_chunk))
    for (int c : contexts)
      if (c + n <= l.max_model_len && (c == 0 || n >= 4))
        grid.push_back(single("prefill", c, n, Want::Sample));
  // Chunks that want nothing (a long prompt's middle) and PRM chunks that score every 16th token:
  // they pull the LM head's rows apart from the chunk's tokens.
  for (int n : doubling(16, max_chunk)) {
    grid.push_back(single("prefill", 0, n, Want::Nothing));
    grid.push_back(single("prefill", 0, n, Want::Score, 16));
    grid.push_back(single("prefill", 0, n, Want::Score, 4));
  }
  // Several chunks in one batch: per-item costs.
  for (int k : {4, 16})
    for (int n : doubling(64, max_chunk)) {
      if (n / k < 1 || k > l.max_num_seqs) continue;
      GridPoint p{"prefill", {}, 0};
      for (int i = 0; i < k; ++i) p.items.push_back({l.max_model_len / 8, n / k, Want::Sample, 0});
      grid.push_back(p);
    }
  // Decode: batch sizes at contexts.
  for (int b : doubling(1, l.max_num_seqs))
    for (int c : doubling(16, l.max_model_len - 1)) {
      if (c < 16 || (c != 16 && c < 128 && c != l.max_model_len - 1)) continue;
      GridPoint p{"decode", {}, 0};
      for (int i = 0; i < b; ++i) p.items.push_back({c, 1, Want::Sample, 0});
      grid.push_back(p);
    }
  // Beams: groups of decodes that share a prefix's blocks and differ in their last tokens, as a
  // beam search's rows (a few problems' beams) or requests that hit one cached prompt. The distinct
  // KV is what the caches do not serve: it separates attention's memory from its compute.
  for (int b : increasing({8, 32, l.max_num_seqs}, l.max_num_seqs))
    for (int g : {4, 16})
      for (int c : increasing({256, 1024, l.max_model_len / 2}, l.max_model_len - 1))
        for (int own : {c / 2, c / 8}) {
          if (g > b) continue;
          GridPoint p{"decode", {}, 0, g, c - own};
          for (int i = 0; i < b; ++i) p.items.push_back({c, 1, Want::Sample, 0});
          grid.push_back(p);
        }
  // Mixed: one chunk with decodes.
  for (int n : {std::min(64, max_chunk), std::max(1, max_chunk / 4), max_chunk})
    for (int b : {std::min(4, l.max_num_seqs), std::max(1, l.max_num_seqs / 2)}) {
      GridPoint p{"mixed", {{0, std::max(1, n - b), Want::Sample, 0}}, 0};
      for (int i = 0; i < b; ++i) p.items.push_back({std::min(512, l.max_model_len - 1), 1, Want::Sample, 0});
      grid.push_back(p);
    }
  // Copy-on-write: a fork's partial last block is copied before the step.
  for (int copies : {1, 8, 32}) {
    GridPoint p{"copies", {}, copies};
    for (int i = 0; i < std::min(8, l.max_num_seqs); ++i)
      p.items.push_back({std::min(256, l.max_model_len - 1), 1, Want::Sample, 0});
    grid.push_back(p);
  }
  return grid;
}

namespace {

// The sequences and batch of one grid point, over blocks [first, first + needed) of the pool
// (wrapping around when the pool is smaller: the timing then shares some blocks).
struct DesignedBatch {
  std::vector<Sequence> seqs;
  Batch batch;
};

DesignedBatch design(const GridPoint& p, int block_size, int num_blocks, int vocab, std::uint64_t salt) {
  DesignedBatch d;
  d.seqs.resize(p.items.size());
  d.batch.block_size = block_size;
  const int shared_blocks = p.group > 1 ? p.shared_context / block_size : 0;
  BlockId next = 0;
  BlockId group_first = 0;  // the current group's shared blocks start here
  for (std::size_t i = 0; i < p.items.size(); ++i) {
    const GridItem& g = p.items[i];
    Sequence& s = d.seqs[i];
    s.id = SeqId(i + 1);
    s.kind = g.want == Want::Score ? SeqKind::Score : SeqKind::Generate;
    const int end = g.context + g.new_tokens;
    for (int t = 0; t < end; ++t)
      s.tokens.push_back(
          TokenId((std::uint64_t(t) * 2654435761u + i * 40503u + salt) % std::uint64_t(vocab)));
    s.num_prompt_tokens =
        g.want == Want::Score ? end : std::max(end - (g.new_tokens == 1 && g.context > 0), 1);
    if (g.want == Want::Score)
      for (int pos = g.context + g.score_every - 1; pos < end; pos += g.score_every)
        s.score_positions.push_back(pos);
    s.sampling.max_tokens = 1 << 20;
    s.sampling.ignore_eos = true;
    const int blocks = (end + block_size - 1) / block_size;
    const bool leads_group = shared_blocks == 0 || int(i) % p.group == 0;
    if (leads_group) group_first = next;
    for (int b = 0; b < blocks; ++b)
      s.kv.blocks.push_back(b < shared_blocks && !leads_group ? BlockId((group_first + b) % num_blocks)
                                                              : BlockId(next++ % num_blocks));
    s.kv.num_slots = blocks * block_size;
    add_item(d.batch, s, g.context, g.new_tokens, g.want);
  }
  for (int c = 0; c < p.copies; ++c)
    d.batch.copies.push_back(
        {BlockId((next + 2 * c) % num_blocks), BlockId((next + 2 * c + 1) % num_blocks)});
  d.batch.shape = shape_of(d.batch);
  return d;
}

// The blocks design() lays the point's batch out on: each item's, less those a beam group shares,
// and the copies' sources and destinations.
std::int64_t blocks_of(const GridPoint& p, int block_size) {
  const int shared = p.group > 1 ? p.shared_context / block_size : 0;
  std::int64_t n = 2LL * p.copies;
  for (std::size_t i = 0; i < p.items.size(); ++i) {
    const int blocks = (p.items[i].context + p.items[i].new_tokens + block_size - 1) / block_size;
    const bool leads = shared == 0 || int(i) % p.group == 0;
    n += leads ? blocks : blocks - std::min(blocks, shared);
  }
  return n;
}

// The pool the grid's batches are laid out on, `want` blocks where memory allows. The CPU engine
// holds float32 KV in host memory: at most 8192 blocks, larger batches wrapping around and sharing
// blocks. A GPU's pool is what its memory leaves this one engine at vLLM's default
// gpu_memory_utilization (0.9), as a run at that utilisation holds. (At 8192 blocks a GPU's large
// batches that such a run holds shared blocks too, and read part of their KV from L2.)
std::int32_t pool_blocks(const std::string& backend, const GpuSpec& gpu, const EngineConfig& c,
                         std::int64_t want) {
  if (backend != "cuda") return std::int32_t(std::min<std::int64_t>(want, 8192));
  EngineMemoryRequest r;
  r.label = "profile";
  r.model = c.model;
  r.gpu_memory_utilization = 0.9;
  r.block_size = c.block_size;
  r.max_num_batched_tokens = c.max_num_batched_tokens;
  r.max_num_seqs = c.max_num_seqs;
  return std::int32_t(std::min<std::int64_t>(want, plan_memory(gpu, {r}).engines[0].num_blocks));
}

// An executor that does nothing: the engine around it is what the host measurement times.
class NullExecutor final : public Executor {
 public:
  StepResult execute(const Batch& batch) override {
    StepResult r;
    for (const BatchItem& it : batch.items) {
      r.tokens.push_back(it.want == Want::Sample ? TokenId(7) : kNoToken);
      r.scores.resize(r.scores.size() + positions_to_score(it).size(), 0.5f);
    }
    return r;
  }
};

// A PRM with a score head samples nothing: the grid's sampled rows become scored ones, the same
// logits rows. A one-token Score item after its context is decode-shaped (core/batch.hpp), as a
// scorer's steps are when the prefix cache holds all but the last token, so the fit's decode terms
// stay measured.
void scored_instead_of_sampled(std::vector<GridPoint>& grid) {
  for (GridPoint& p : grid)
    for (GridItem& it : p.items)
      if (it.want == Want::Sample) {
        it.want = Want::Score;
        it.score_every = it.new_tokens;  // the last new token's row, the one a sample would use
      }
}

// Host time of the engine's step for the point's shape: core's Engine (scheduler, KV manager,
// postprocessing) over a NullExecutor, on sequences brought to the point's state first. Decode
// items are running sequences with their context computed; prefill items arrive in this step.
double host_time(const GridPoint& p, const EngineConfig& base, int vocab, std::uint64_t salt) {
  EngineConfig c = base;
  // The engine's bookkeeping around a NullExecutor, the same for a scorer's one-token steps as for
  // decodes: a PRM with a score head is timed as its decoder with an LM head.
  c.model.score_head = ScoreHead::None;
  c.max_num_seqs = int(p.items.size());
  // A budget that takes every prompt in one step: the untimed set-up is one step, and the timed
  // step schedules the point's items whole (a prefill item's prompt is hashed whole on admission,
  // as the prefix cache does in a run).
  int tokens = 0;
  for (const GridItem& g : p.items) tokens += g.context + g.new_tokens;
  c.max_num_batched_tokens = std::max(tokens, 1);
  c.max_model_len = 1 << 30;
  // Metadata only (the NullExecutor holds no KV): a pool that never preempts the point's batch.
  EngineMemory memory;
  memory.num_blocks = 16;
  for (const GridItem& g : p.items) memory.num_blocks += (g.context + g.new_tokens + 1) / c.block_size + 2;
  NullExecutor null;
  Engine engine = assemble_engine(c, memory, 0, null);
  // Running decodes first: their prompts are prefilled in untimed steps with a larger budget.
  std::vector<std::size_t> decodes, prefills;
  for (std::size_t i = 0; i < p.items.size(); ++i)
    (p.items[i].new_tokens == 1 && p.items[i].context > 0 ? decodes : prefills).push_back(i);
  SeqId id = 1;
  for (std::size_t i : decodes) {
    Sequence s;
    s.id = id++;
    for (int t = 0; t < p.items[i].context; ++t)
      s.tokens.push_back(TokenId((t * 7919 + i * 131 + salt) % std::uint64_t(vocab)));
    s.num_prompt_tokens = p.items[i].context;
    s.sampling.max_tokens = 1 << 20;
    s.sampling.ignore_eos = true;
    engine.add(std::move(s), 0);
  }
  // Chunked prefill of the decodes' prompts, untimed, until every one is decoding.
  for (int guard = 0; guard < 1 << 20; ++guard) {
    bool all_decoding = true;
    for (SeqId s = 1; s < id; ++s)
      all_decoding = all_decoding && engine.find(s)->num_computed_tokens >= engine.find(s)->num_prompt_tokens;
    if (all_decoding) break;
    engine.step(0);
  }
  for (std::size_t i : prefills) {
    const GridItem& g = p.items[i];
    Sequence s;
    s.id = id++;
    s.kind = g.want == Want::Score ? SeqKind::Score : SeqKind::Generate;
    for (int t = 0; t < g.context + g.new_tokens; ++t)
      s.tokens.push_back(TokenId((t * 104729 + i * 7 + salt) % std::uint64_t(vocab)));
    s.num_prompt_tokens = int(s.tokens.size());
    if (g.want == Want::Score)
      for (int pos = g.context + g.score_every - 1; pos < s.num_prompt_tokens; pos += g.score_every)
        s.score_positions.push_back(pos);
    s.sampling.max_tokens = 1 << 20;
    s.sampling.ignore_eos = true;
    engine.add(std::move(s), 0);
  }
  const auto t0 = std::chrono::steady_clock::now();
  engine.step(0);
  return seconds_since(t0);
}

nlohmann::json grid_json(const ProfileLimits& l, std::size_t points) {
  return {{"max_num_seqs", l.max_num_seqs},
          {"max_num_batched_tokens", l.max_num_batched_tokens},
          {"max_model_len", l.max_model_len},
          {"block_size", l.block_size},
          {"repeats", l.repeats},
          {"evict_bytes", l.evict_bytes},
          {"points", points}};
}

}  // namespace

ProfileResult run_profile(const BackendOptions& backend, const GpuSpec& gpu, const EngineConfig& config,
                          const ProfileLimits& limits,
                          const std::function<void(std::size_t, std::size_t)>& progress) {
  if (!is_real_backend(backend.name))
    throw Error("profile: backend '" + backend.name + "' is not a real engine (use cpu or cuda)");
  const auto wall0 = std::chrono::steady_clock::now();
  std::vector<GridPoint> grid = profile_grid(limits);
  if (!config.model.can_generate()) scored_instead_of_sampled(grid);
  // A pool for the largest decode batch at the longest context and every grid point's batch, as
  // memory allows (pool_blocks).
  std::int64_t want = std::int64_t(limits.max_num_seqs) *
                      ((limits.max_model_len + limits.block_size - 1) / limits.block_size + 1);
  if (backend.name == "cuda")  // (the CPU engine's pools, and so its profiles, stay as they were)
    for (const GridPoint& p : grid) want = std::max(want, blocks_of(p, limits.block_size));
  EngineConfig c = config;
  c.block_size = limits.block_size;
  c.max_num_seqs = limits.max_num_seqs;
  // The engine is built for its executor only: the grid's batches are made here, not scheduled,
  // so the scheduler's rule that a step's budget holds every running decode does not bind the
  // largest decode batch and the largest prefill chunk.
  c.max_num_batched_tokens = std::max(limits.max_num_batched_tokens, limits.max_num_seqs);
  c.max_model_len = limits.max_model_len;
  check_model_len(c);
  EngineMemory memory;
  memory.num_blocks = pool_blocks(backend.name, gpu, c, want);
  // On a GPU a batch beyond the pool is one a run at gpu_memory_utilization 0.9 cannot hold: it is
  // left out rather than timed on shared blocks, whose KV the caches would partly serve.
  std::size_t beyond_pool = 0;
  if (backend.name == "cuda")
    beyond_pool = std::size_t(std::erase_if(
        grid, [&](const GridPoint& p) { return blocks_of(p, c.block_size) > memory.num_blocks; }));
  std::unique_ptr<BuiltEngine> built = make_engine(backend, gpu, c, memory, 0);
  Executor& executor = built->executor();
  const int vocab = c.model.vocab_size;

  ProfileResult out;
  std::vector<MeasuredStep> rows;
  std::vector<MeasuredStep> alone_rows;
  std::vector<char> evict(static_cast<std::size_t>(std::max<std::int64_t>(limits.evict_bytes, 0)));
  std::uint64_t evict_sum = 0;
  auto evict_caches = [&] {
    if (evict.empty()) return;
    for (std::size_t i = 0; i < evict.size(); i += 64) evict[i] = char(evict[i] + 1);
    evict_sum += std::uint64_t(evict[evict.size() / 2]);
  };
  for (std::size_t k = 0; k < grid.size(); ++k) {
    MeasuredPoint m;
    m.point = grid[k];
    DesignedBatch d = design(grid[k], c.block_size, memory.num_blocks, vocab, k * 7);
    m.shape = d.batch.shape;
    executor.execute(d.batch);  // warm-up: caches, lazily sized buffers, CUDA graphs
    // Alone: back to back, as a run's consecutive steps find the weights and KV in the caches.
    if (!evict.empty())
      for (int r = 0; r < limits.repeats; ++r)
        m.alone_device_s.push_back(executor.execute(d.batch).duration_s);
    for (int r = 0; r < limits.repeats; ++r) {
      evict_caches();
      m.device_s.push_back(executor.execute(d.batch).duration_s);
      m.host_s.push_back(host_time(grid[k], c, vocab, k * 7 + std::uint64_t(r)));
    }
    m.device_median = median(m.device_s);
    m.device_min = *std::min_element(m.device_s.begin(), m.device_s.end());
    m.device_max = *std::max_element(m.device_s.begin(), m.device_s.end());
    m.host_median = median(m.host_s);
    // The fastest repeat is fitted: on a shared machine interference only ever slows a run down,
    // so the minimum is the least disturbed measurement (the median and spread are kept).
    rows.push_back({m.shape, m.device_min, m.host_median});
    if (!m.alone_device_s.empty()) {
      m.alone_device_median = median(m.alone_device_s);
      alone_rows.push_back(
          {m.shape, *std::min_element(m.alone_device_s.begin(), m.alone_device_s.end()), m.host_median});
    }
    out.points.push_back(std::move(m));
    if (progress) progress(k + 1, grid.size());
  }
  if (evict_sum == 1) std::fprintf(stderr, " ");  // keeps the eviction loop from being optimised away
  // The CUDA engine pads a decode-only step to its graph's size (the grid's decode batches are
  // graph sizes already; a run's are not).
  const bool cuda_graphs = backend.name == "cuda";
  out.profile = fit_profile(rows, cuda_graphs);
  if (!alone_rows.empty()) {
    const CalibrationProfile alone = fit_profile(alone_rows, cuda_graphs);
    out.profile.alone_coefficients = alone.device_coefficients;
    out.profile.alone_fit = alone.device_fit;
  }
  out.profile.model = c.model.name;
  out.profile.model_shape = model_shape(c.model);
  out.profile.device = device_key(backend.name, gpu);
  out.profile.device_name = device_name(backend.name);
  out.profile.backend = backend.name;
  out.profile.created_utc = utc_now();
  out.profile.git_revision = build_revision();
  out.profile.source = "duet profile --backend " + backend.name + " (" + std::to_string(grid.size()) +
                       " points x " + std::to_string(limits.repeats) + " repeats" +
                       (beyond_pool ? "; " + std::to_string(beyond_pool) + " beyond a " +
                                          std::to_string(memory.num_blocks) + "-block pool left out"
                                    : "") +
                       ")";
  out.profile.grid_json = grid_json(limits, grid.size()).dump();
  out.wall_s = seconds_since(wall0);
  return out;
}

}  // namespace duet
