#include "exec/gpu_bench.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/gpu_spec.hpp"
#include "core/json_fields.hpp"
#include "core/kv_cache_manager.hpp"
#include "core/metrics.hpp"
#include "core/model_spec.hpp"
#include "core/runtime.hpp"
#include "exec/build_revision.hpp"
#include "exec/cuda_executor.hpp"
#include "exec/vocabulary.hpp"
#include "exec/wall_clock.hpp"
#include "kernels/attention.hpp"
#include "kernels/device.hpp"

namespace duet::gpu_bench {

namespace {

// The peer's decode tokens/s by (batch, context), from scripts/peer_hf.py's JSON, which must have
// measured `model` (its "model" field starts with the name).
std::map<std::pair<int, int>, double> load_peer(const std::string& path, const std::string& model) {
  std::map<std::pair<int, int>, double> out;
  if (path.empty()) return out;
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open the peer's results");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  try {
    const nlohmann::json j = json_fields::parse_unique_keys(text);
    const std::string measured = j.at("model").get<std::string>();
    if (!measured.starts_with(model))
      throw Error(path + ": the peer measured '" + measured + "', not '" + model +
                  "' (scripts/peer_hf.py runs Llama-3.2-1B: bench decode --model llama-3.2-1b)");
    for (const auto& r : j.at("rows"))
      out[{r.at("batch").get<int>(), r.at("context").get<int>()}] = r.at("tokens_per_s").get<double>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not a peer_hf.py result (" + e.what() + ")");
  } catch (const Error& e) {  // a key given twice
    throw Error(path + ": " + e.what());
  }
  return out;
}

void write_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  std::ofstream f(path);
  if (!f) throw Error("cannot write " + path);
  f << j.dump(2) << "\n";
  if (!f) throw Error("cannot write " + path);
  std::printf("  results written to %s\n", path.c_str());
}

// The built-in spec of the GPU we run on, by its device name (or the one --gpu names).
struct DetectedGpu {
  GpuSpec spec;
  std::string device;  // the driver's name for it
  std::string note;    // when the spec is an approximation
};

DetectedGpu detect_gpu(const std::string& override_name) {
  std::string why;
  if (!kernels::device_available(&why)) throw Error("no CUDA device: " + why);
  DetectedGpu d;
  d.device = kernels::device_info().name;
  if (!override_name.empty()) {
    d.spec = gpu_by_name(override_name);
    d.note = "spec named by --gpu";
    return d;
  }
  try {
    d.spec = gpu_by_device_name(d.device);
  } catch (const Error&) {
    throw Error("no built-in GPU spec for device '" + d.device + "': pass --gpu h100|h200|a100");
  }
  // The built-ins are the H100 SXM and the A100 80GB: the parts with lower figures get their
  // ratios against those, and say so.
  std::string n = d.device;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::toupper(c); });
  const auto says = [&](const char* part) { return n.find(part) != std::string::npos; };
  if (d.spec.name == gpu_by_name("h100").name && (says("PCIE") || says("NVL")))
    d.note = "the H100 SXM's figures: this part's bandwidth and FLOP/s are lower, ratios are pessimistic";
  else if (d.spec.name == gpu_by_name("a100").name && says("40GB"))
    d.note = "the A100 80GB's figures (1.56 TB/s on the 40GB part)";
  return d;
}

nlohmann::json gpu_json(const DetectedGpu& g) {
  return {{"device", g.device},
          {"spec", g.spec.name},
          {"hbm_bandwidth_Bps", g.spec.hbm_bandwidth},
          {"bf16_flops", g.spec.bf16_flops},
          {"note", g.note}};
}

void print_gpu(const char* bench, const DetectedGpu& g) {
  std::printf("bench %s: %s, against %s (%.2f TB/s HBM, %.0f TFLOP/s dense bf16)%s%s\n", bench,
              g.device.c_str(), g.spec.name.c_str(), g.spec.hbm_bandwidth / 1e12, g.spec.bf16_flops / 1e12,
              g.note.empty() ? "" : "; ", g.note.c_str());
}

// Sequences with block tables over disjoint runs of the pool, and a batch over them: the
// executor reads the batch and the sequences only.
struct SyntheticBatch {
  std::vector<Sequence> seqs;
  Batch batch;
};

SyntheticBatch synthetic_batch(int num_seqs, int context, int new_tokens, int block_size, int vocab,
                               Want want, const std::vector<int>& score_positions = {}) {
  SyntheticBatch s;
  s.seqs.resize(std::size_t(num_seqs));
  const int end = context + new_tokens;
  const int blocks = (end + block_size - 1) / block_size;
  for (int i = 0; i < num_seqs; ++i) {
    Sequence& q = s.seqs[std::size_t(i)];
    q.id = SeqId(i + 1);
    q.kind = want == Want::Score ? SeqKind::Score : SeqKind::Generate;
    for (int t = 0; t < end; ++t)
      q.tokens.push_back(TokenId((std::int64_t(i) * 7919 + std::int64_t(t) * 31 + 17) % vocab));
    q.num_prompt_tokens = want == Want::Score ? end : context;
    q.score_positions = score_positions;
    for (int b = 0; b < blocks; ++b) q.kv.blocks.push_back(BlockId(i * blocks + b));
    q.kv.num_slots = blocks * block_size;
  }
  s.batch.block_size = block_size;
  for (Sequence& q : s.seqs) add_item(s.batch, q, context, new_tokens, want);
  s.batch.shape = shape_of(s.batch);
  return s;
}

struct StepTimes {
  double device_s = 0, cpu_s = 0;
  bool graph = false;
};

StepTimes time_steps(CudaExecutor& exec, const Batch& batch, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) exec.execute(batch);
  std::vector<double> device, cpu;
  bool graph = true;
  for (int i = 0; i < iters; ++i) {
    device.push_back(exec.execute(batch).duration_s);
    cpu.push_back(exec.last_cpu_s());
    graph = graph && exec.last_used_graph();
  }
  return {median(device), median(cpu), graph};
}

// Decode steps are a generator's: a PRM with a score head has no LM head to sample from.
ModelSpec generator(ModelSpec m, const char* bench) {
  check_can_generate(m, bench);
  return m;
}

std::int64_t bytes_per_weight_read(const ModelSpec& m) {
  // A decode step reads every layer, the final norm and the output head once; of the embedding
  // table only the batch's rows (when it is not the LM head too).
  return 2 * (std::int64_t(m.num_layers) * m.layer_parameters() + m.hidden_size + m.head_weights());
}

}  // namespace

// Decode steps of Llama-3.2-1B (dummy weights) against the HBM roofline: every weight byte and
// every KV byte read once, at peak bandwidth. Target: within 1.3x at batch 64-256.
int bench_decode(const GpuBenchOptions& o) {
  const DetectedGpu gpu = detect_gpu(o.gpu);
  ModelSpec spec = generator(resolve_model(o.model.empty() ? "llama-3.2-1b" : o.model), "bench decode");
  const std::vector<int> batches = {1, 8, 32, 64, 128, 256};
  const std::vector<int> contexts = {512, 1024, 2048, 4096};
  const int block_size = o.block_size;
  const int max_b = batches.back(), max_c = contexts.back();
  const int blocks = max_b * ((max_c + 1 + block_size - 1) / block_size);
  constexpr double kTarget = 1.3;
  print_gpu("decode", gpu);
  std::printf("  %s (%d layers, hidden %d, %d/%d heads), dummy weights, bf16 KV, block %d; CUDA graphs\n",
              spec.name.c_str(), spec.num_layers, spec.hidden_size, spec.num_heads, spec.num_kv_heads,
              block_size);
  CudaExecutorOptions opt;
  opt.max_num_batched_tokens = max_b;
  opt.max_num_seqs = max_b;
  opt.max_model_len = max_c + block_size;
  CudaExecutor exec(spec, CudaExecutor::DummyWeights{0}, blocks, block_size, opt);
  const std::int64_t weight_bytes = bytes_per_weight_read(spec);
  const std::int64_t kv_token = 2LL * spec.num_layers * spec.num_kv_heads * spec.head_dim * 2;  // bf16
  const auto peer = load_peer(o.peer, spec.name);
  std::printf("  %5s %7s %10s %10s %7s %9s %10s %8s %7s %s\n", "batch", "context", "step ms", "roofline",
              "ratio", "GB/s", "tokens/s", "cpu ms", "x HF", "");
  nlohmann::json rows = nlohmann::json::array();
  bool met = true;
  double worst = 0;
  double worst_vs_peer = 0;  // at batch 64: duet tokens/s over HF transformers' (target >= 1.5)
  for (int b : batches)
    for (int c : contexts) {
      const SyntheticBatch sb = synthetic_batch(b, c, 1, block_size, spec.vocab_size, Want::Sample);
      const StepTimes t = time_steps(exec, sb.batch, 3, o.iters);
      const double bytes = double(weight_bytes) + double(b) * double(c + 1) * double(kv_token);
      const double roofline = bytes / gpu.spec.hbm_bandwidth;
      const double ratio = t.device_s / roofline;
      const bool in_target = b >= 64;
      if (in_target) {
        met = met && ratio <= kTarget;
        worst = std::max(worst, ratio);
      }
      const auto p = peer.find({b, c});
      const double vs_peer = p == peer.end() ? 0.0 : (b / t.device_s) / p->second;
      if (b == 64 && vs_peer > 0)
        worst_vs_peer = worst_vs_peer == 0 ? vs_peer : std::min(worst_vs_peer, vs_peer);
      std::printf("  %5d %7d %10.3f %10.3f %6.2fx %9.0f %10.0f %8.3f %6.2fx %s\n", b, c, 1e3 * t.device_s,
                  1e3 * roofline, ratio, bytes / t.device_s / 1e9, b / t.device_s, 1e3 * t.cpu_s, vs_peer,
                  in_target ? (ratio <= kTarget ? "ok" : "MISSED") : "");
      rows.push_back({{"batch", b},
                      {"context", c},
                      {"step_s", t.device_s},
                      {"roofline_s", roofline},
                      {"ratio", ratio},
                      {"bytes", bytes},
                      {"achieved_Bps", bytes / t.device_s},
                      {"tokens_per_s", b / t.device_s},
                      {"cpu_s", t.cpu_s},
                      {"graph", t.graph},
                      {"vs_hf_transformers", vs_peer}});
    }
  if (!peer.empty())
    std::printf(
        "  peer                 decode tokens/s >= 1.5x HF transformers at batch 64: %s (worst %.2fx)\n",
        worst_vs_peer >= 1.5 ? "met" : "MISSED", worst_vs_peer);
  std::printf(
      "  target               step time <= %.1fx the roofline at batch 64-256: %s (worst %.2fx, ratio to "
      "target %.2f)\n",
      kTarget, met ? "met" : "MISSED", worst, worst / kTarget);
  write_json(o.json, {{"benchmark", "decode"},
                      {"revision", build_revision()},
                      {"gpu", gpu_json(gpu)},
                      {"model", spec.name},
                      {"block_size", block_size},
                      {"weights", "dummy, bf16"},
                      {"target", {{"max_ratio_to_roofline", kTarget}, {"batches", "64-256"}}},
                      {"worst_ratio", worst},
                      {"met", met},
                      {"rows", rows}});
  return 0;
}

// Paged decode attention alone (one layer, Llama-3.2-1B's heads unless --gpu-model names
// another), blocks of each sequence scattered over the pool. Bytes: K and V of every context
// token, plus queries and outputs. Target: >= 70% of peak HBM bandwidth, at the engine's split
// count; each point also times the other split counts and reports the fastest.
int bench_attention(const GpuBenchOptions& o) {
  namespace k = kernels;
  const DetectedGpu gpu = detect_gpu(o.gpu);
  const ModelSpec spec = resolve_model(o.model.empty() ? "llama-3.2-1b" : o.model);
  const std::vector<int> batches = {32, 64, 128};
  const std::vector<int> contexts = {2048, 4096, 8192};
  const int block_size = o.block_size;
  constexpr double kTarget = 0.70;
  print_gpu("attention", gpu);
  std::printf(
      "  paged decode attention, %d query heads, %d KV heads, head_dim %d, bf16, block %d, one layer\n",
      spec.num_heads, spec.num_kv_heads, spec.head_dim, block_size);
  const int max_blocks_per_seq = contexts.back() / block_size;
  const int num_blocks = batches.back() * max_blocks_per_seq;
  const KvLayout shape{1, num_blocks, spec.num_kv_heads, block_size, spec.head_dim};
  const std::size_t pool_elems =
      2ull * std::size_t(num_blocks) * std::size_t(spec.num_kv_heads) * block_size * spec.head_dim;
  k::StreamHandle stream;
  k::DeviceBuffer pool(pool_elems * 2);
  {
    // Small non-zero values, a 16 MiB pattern repeated.
    std::vector<k::bf16> pattern(std::size_t(8) << 20);
    for (std::size_t i = 0; i < pattern.size(); ++i)
      pattern[i] = k::to_bf16(float(int((i * 2654435761u) % 2001) - 1000) * 1e-3f);
    for (std::size_t off = 0; off < pool_elems; off += pattern.size())
      k::copy_to_device(pool.as<k::bf16>() + off, pattern.data(),
                        std::min(pattern.size(), pool_elems - off) * 2, stream.get());
    stream.synchronize();
  }
  const int q_width = spec.num_heads * spec.head_dim;
  const int max_b = batches.back();
  k::DeviceBuffer q(std::size_t(max_b) * q_width * 2), out(std::size_t(max_b) * q_width * 2);
  {
    std::vector<k::bf16> hq(std::size_t(max_b) * q_width);
    for (std::size_t i = 0; i < hq.size(); ++i)
      hq[i] = k::to_bf16(float(int((i * 40503u) % 201) - 100) * 1e-2f);
    k::copy_to_device(q.get(), hq.data(), hq.size() * 2, stream.get());
  }
  // A random permutation of the blocks, dealt out to the sequences.
  std::vector<std::int32_t> perm(static_cast<std::size_t>(num_blocks));
  for (int i = 0; i < num_blocks; ++i) perm[std::size_t(i)] = i;
  std::mt19937_64 rng(1);
  std::shuffle(perm.begin(), perm.end(), rng);
  k::DeviceBuffer tables(std::size_t(max_b) * max_blocks_per_seq * 4), qstart(std::size_t(max_b + 1) * 4),
      ctx(std::size_t(max_b) * 4);
  k::copy_to_device(tables.get(), perm.data(), tables.bytes(), stream.get());
  std::vector<std::int32_t> hstart(static_cast<std::size_t>(max_b + 1));
  for (int i = 0; i <= max_b; ++i) hstart[std::size_t(i)] = i;
  k::copy_to_device(qstart.get(), hstart.data(), qstart.bytes(), stream.get());
  const int sm = k::device_info().sm_count;
  std::printf("  %5s %7s %7s %10s %9s %8s %4s %11s %8s\n", "batch", "context", "splits", "time us", "GB/s",
              "of peak", "", "best splits", "of peak");
  nlohmann::json rows = nlohmann::json::array();
  bool met = true;
  double worst = 1e9;
  // Besides the split count the engine chooses (choose_decode_splits), every power of two up to
  // 32 is timed, so that one run shows whether the heuristic leaves bandwidth behind.
  const std::vector<int> sweep = {1, 2, 4, 8, 16, 32};
  const std::size_t max_ws =
      k::decode_workspace_bytes(max_b, spec.num_heads, spec.head_dim, k::kMaxDecodeSplits);
  k::DeviceBuffer ws(std::max<std::size_t>(16, max_ws));
  for (int b : batches)
    for (int c : contexts) {
      const std::vector<std::int32_t> hctx(std::size_t(b), c);
      k::copy_to_device(ctx.get(), hctx.data(), hctx.size() * 4, stream.get());
      k::AttentionBatch ab;
      ab.q = q.as<const k::bf16>();
      ab.q_stride = q_width;
      ab.out = out.as<k::bf16>();
      ab.out_stride = q_width;
      ab.query_start = qstart.as<const std::int32_t>();
      ab.context_len = ctx.as<const std::int32_t>();
      ab.block_tables = tables.as<const std::int32_t>();
      ab.max_blocks = max_blocks_per_seq;
      ab.num_seqs = b;
      ab.num_heads = spec.num_heads;
      ab.scale = float(1.0 / std::sqrt(double(spec.head_dim)));
      auto time_with = [&](int splits) {
        for (int i = 0; i < 3; ++i)
          k::paged_decode_attention(pool.as<const k::bf16>(), shape, 0, ab, splits, ws.get(), stream.get());
        const int iters = std::max(10, o.iters * 5);
        k::Event start, end;
        start.record(stream.get());
        for (int i = 0; i < iters; ++i)
          k::paged_decode_attention(pool.as<const k::bf16>(), shape, 0, ab, splits, ws.get(), stream.get());
        end.record(stream.get());
        end.synchronize();
        return double(k::Event::elapsed_ms(start, end)) * 1e-3 / iters;
      };
      const int splits =
          std::clamp(k::choose_decode_splits(b, spec.num_kv_heads, c, sm), 1, k::kMaxDecodeSplits);
      const double t = time_with(splits);
      const int table_entries = (c + block_size - 1) / block_size;  // one int32 per block of the context
      const double bytes = double(b) * c * spec.num_kv_heads * spec.head_dim * 2.0 * 2.0 +  // K and V
                           double(b) * q_width * 2.0 * 2.0 + double(b) * table_entries * 4.0;
      const double frac = bytes / t / gpu.spec.hbm_bandwidth;
      met = met && frac >= kTarget;
      worst = std::min(worst, frac);
      nlohmann::json swept = nlohmann::json::array();
      int best_splits = splits;
      double best_t = t;
      for (int n : sweep) {
        const double tn = n == splits ? t : time_with(n);
        swept.push_back({{"splits", n}, {"time_s", tn}});
        if (tn < best_t) best_t = tn, best_splits = n;
      }
      std::printf("  %5d %7d %7d %10.2f %9.0f %7.1f%% %4s %11d %7.1f%%\n", b, c, splits, 1e6 * t,
                  bytes / t / 1e9, 100 * frac, frac >= kTarget ? "ok" : "MISS", best_splits,
                  100 * bytes / best_t / gpu.spec.hbm_bandwidth);
      rows.push_back({{"batch", b},
                      {"context", c},
                      {"splits", splits},
                      {"time_s", t},
                      {"bytes", bytes},
                      {"achieved_Bps", bytes / t},
                      {"fraction_of_peak", frac},
                      {"best_splits", best_splits},
                      {"best_fraction_of_peak", bytes / best_t / gpu.spec.hbm_bandwidth},
                      {"swept", swept}});
    }
  std::printf("  target               >= %.0f%% of peak bandwidth: %s (worst %.1f%%, ratio to target %.2f)\n",
              100 * kTarget, met ? "met" : "MISSED", 100 * worst, worst / kTarget);
  write_json(o.json, {{"benchmark", "attention"},
                      {"revision", build_revision()},
                      {"gpu", gpu_json(gpu)},
                      {"shape",
                       {{"num_heads", spec.num_heads},
                        {"num_kv_heads", spec.num_kv_heads},
                        {"head_dim", spec.head_dim},
                        {"block_size", block_size}}},
                      {"target", {{"min_fraction_of_peak", kTarget}}},
                      {"worst_fraction", worst},
                      {"met", met},
                      {"rows", rows}});
  return 0;
}

// Prefill of PRM requests on Llama-3.1-8B's shapes: sequences of --prefill-seq tokens (fresh, no
// cached context), 8 score positions each, 1024-16384 tokens per step. The model runs with
// --layers of its decoder layers (dummy weights): every layer does identical work, so the FLOPs
// counted are those of the layers run plus the LM head rows, and TFLOP/s is the full model's up
// to the share of the embedding and LM head. Target: >= 50% of dense bf16 peak.
int bench_prefill(const GpuBenchOptions& o) {
  const DetectedGpu gpu = detect_gpu(o.gpu);
  ModelSpec spec = resolve_model(o.model.empty() ? "llama-3.1-8b" : o.model);
  const int full_layers = spec.num_layers;
  if (o.layers > 0 && o.layers < spec.num_layers) spec.num_layers = o.layers;
  const std::vector<int> steps = {1024, 2048, 4096, 8192, 16384};
  const int block_size = o.block_size;
  const int max_tokens = steps.back();
  constexpr double kTarget = 0.50;
  constexpr int kScores = 8;
  print_gpu("prefill", gpu);
  std::printf(
      "  %s shapes with %d of its %d layers (FLOPs counted for the layers run), hidden %d, dummy weights;\n"
      "  sequences of %s tokens, %d score positions each\n",
      spec.name.c_str(), spec.num_layers, full_layers, spec.hidden_size,
      o.prefill_seq > 0 ? std::to_string(o.prefill_seq).c_str() : "all the step's", kScores);
  CudaExecutorOptions opt;
  opt.max_num_batched_tokens = max_tokens;
  opt.max_num_seqs = o.prefill_seq > 0 ? std::max(1, max_tokens / o.prefill_seq) : 1;
  opt.max_model_len = o.prefill_seq > 0 ? o.prefill_seq : max_tokens;
  opt.use_cuda_graphs = false;
  if (!spec.can_generate()) {
    const ScoreColumns c = score_columns(spec.score_head);
    opt.prm_plus_id = c.plus;
    opt.prm_minus_id = c.minus;
  }
  // Every sequence rounds up to whole blocks: max_num_seqs of them at max_model_len each.
  const int blocks = opt.max_num_seqs * ((opt.max_model_len + block_size - 1) / block_size) + 64;
  CudaExecutor exec(spec, CudaExecutor::DummyWeights{0}, blocks, block_size, opt);
  const double h = spec.hidden_size, q = double(spec.num_heads) * spec.head_dim,
               kv = double(spec.num_kv_heads) * spec.head_dim, f = spec.intermediate_size;
  const double linear_per_token = 2.0 * spec.num_layers * (h * (q + 2 * kv) + q * h + 3.0 * f * h);
  std::printf("  %8s %6s %10s %10s %10s %8s %s\n", "tokens", "seqs", "step ms", "TFLOP", "TFLOP/s", "of peak",
              "");
  nlohmann::json rows = nlohmann::json::array();
  bool met = true;
  double worst = 1e9;
  for (int n : steps) {
    const int len = o.prefill_seq > 0 ? std::min(o.prefill_seq, n) : n;
    const int seqs = n / len;
    std::vector<int> positions;
    for (int s = 1; s <= kScores; ++s) positions.push_back(s * len / kScores - 1);
    const SyntheticBatch sb =
        synthetic_batch(seqs, 0, len, block_size, spec.vocab_size, Want::Score, positions);
    const StepTimes t = time_steps(exec, sb.batch, 2, std::max(3, o.iters / 4));
    const double keys = double(seqs) * (double(len) * (len + 1.0) / 2.0);
    const double flops = linear_per_token * double(seqs) * len +
                         4.0 * spec.num_layers * spec.num_heads * spec.head_dim * keys +
                         spec.head_flops_per_token() * double(seqs) * kScores;
    const double tflops = flops / t.device_s / 1e12;
    const double frac = flops / t.device_s / gpu.spec.bf16_flops;
    met = met && frac >= kTarget;
    worst = std::min(worst, frac);
    std::printf("  %8d %6d %10.3f %10.2f %10.1f %7.1f%% %s\n", seqs * len, seqs, 1e3 * t.device_s,
                flops / 1e12, tflops, 100 * frac, frac >= kTarget ? "ok" : "MISSED");
    rows.push_back({{"tokens", seqs * len},
                    {"seqs", seqs},
                    {"step_s", t.device_s},
                    {"flops", flops},
                    {"tflops_per_s", tflops},
                    {"fraction_of_peak", frac},
                    {"cpu_s", t.cpu_s}});
  }
  std::printf(
      "  target               >= %.0f%% of dense bf16 peak: %s (worst %.1f%%, ratio to target %.2f)\n",
      100 * kTarget, met ? "met" : "MISSED", 100 * worst, worst / kTarget);
  write_json(o.json, {{"benchmark", "prefill"},
                      {"revision", build_revision()},
                      {"gpu", gpu_json(gpu)},
                      {"model", spec.name},
                      {"layers_run", spec.num_layers},
                      {"layers_full", full_layers},
                      {"sequence_tokens", o.prefill_seq},
                      {"score_positions_per_seq", kScores},
                      {"flops_counted",
                       "linear layers of the layers run + causal attention (4*heads*head_dim per "
                       "key per layer) + LM head on the score rows"},
                      {"target", {{"min_fraction_of_peak", kTarget}}},
                      {"worst_fraction", worst},
                      {"met", met},
                      {"rows", rows}});
  return 0;
}

// Host time per engine step on a real Engine (Scheduler + KvCacheManager with prefix caching)
// over the CUDA executor: scheduling and postprocessing (Engine::step outside execute()), batch
// preparation (the executor's host arrays) and the rest of the executor's host work (upload,
// launches, outputs). Decode steps at several batch sizes, prompts of 128 tokens sharing 64.
// Target: scheduling + preparation <= 10% of the device step.
int bench_cpu_overhead(const GpuBenchOptions& o) {
  const DetectedGpu gpu = detect_gpu(o.gpu);
  const ModelSpec spec =
      generator(resolve_model(o.model.empty() ? "llama-3.2-1b" : o.model), "bench cpu-overhead");
  const std::vector<int> batches = {16, 64, 256};
  const int prompt = 128, shared = 64, decode = 64, block_size = 16;
  constexpr double kTarget = 0.10;
  const int max_b = batches.back();
  const int blocks = max_b * ((prompt + decode) / block_size + 2);
  print_gpu("cpu-overhead", gpu);
  std::printf(
      "  %s, dummy weights; %d-token prompts (%d shared), %d decode steps, prefix caching, CUDA graphs\n",
      spec.name.c_str(), prompt, shared, decode);
  CudaExecutorOptions opt;
  opt.max_num_batched_tokens = 8192;
  opt.max_num_seqs = max_b;
  opt.max_model_len = prompt + decode + 1;
  CudaExecutor exec(spec, CudaExecutor::DummyWeights{0}, blocks, block_size, opt);
  std::printf("  %5s %6s %10s %10s %10s %10s %10s %8s %s\n", "batch", "steps", "sched us", "prep us",
              "exec us", "host us", "device us", "ratio", "");
  nlohmann::json rows = nlohmann::json::array();
  bool met = true;
  double worst = 0;
  for (int b : batches) {
    Engine engine("llm", {b, 8192, true, prompt + decode + 1},
                  std::make_unique<KvCacheManager>(KvCacheConfig{blocks, block_size, true}), exec);
    for (int i = 0; i < b; ++i) {
      Sequence s;
      s.id = SeqId(i + 1);
      for (int t = 0; t < prompt; ++t)
        s.tokens.push_back(TokenId(((t < shared ? 0 : i + 1) * 7919 + t * 31) % spec.vocab_size));
      s.num_prompt_tokens = prompt;
      s.sampling.max_tokens = decode;
      s.sampling.ignore_eos = true;
      engine.add(std::move(s), 0);
    }
    std::vector<double> sched, prep, exec_cpu, device;
    int step = 0;
    while (engine.has_work()) {
      const auto t0 = std::chrono::steady_clock::now();
      const StepOutcome out = engine.step(0);
      const double wall = seconds_since(t0);
      const BatchShape& shape = out.batch.shape;
      // Decode steps after the first few (graph capture, warm-up).
      if (shape.prefill_tokens == 0 && shape.decode_seqs == b && ++step > 3) {
        sched.push_back(wall - exec.last_wall_s());
        prep.push_back(exec.last_prep_s());
        exec_cpu.push_back(exec.last_cpu_s());
        device.push_back(out.result.duration_s);
      }
    }
    const double s_sched = median(sched), s_prep = median(prep), s_exec = median(exec_cpu),
                 s_dev = median(device);
    const double ratio = s_dev > 0 ? (s_sched + s_prep) / s_dev : 0;
    met = met && ratio <= kTarget;
    worst = std::max(worst, ratio);
    std::printf("  %5d %6zu %10.1f %10.1f %10.1f %10.1f %10.1f %7.3f %s\n", b, sched.size(), 1e6 * s_sched,
                1e6 * s_prep, 1e6 * s_exec, 1e6 * (s_sched + s_exec), 1e6 * s_dev, ratio,
                ratio <= kTarget ? "ok" : "MISSED");
    rows.push_back({{"batch", b},
                    {"decode_steps", sched.size()},
                    {"schedule_s", s_sched},
                    {"prepare_s", s_prep},
                    {"executor_host_s", s_exec},
                    {"host_total_s", s_sched + s_exec},
                    {"device_s", s_dev},
                    {"ratio", ratio}});
  }
  std::printf(
      "  (sched: Engine::step outside execute(); prep: the executor's host arrays; exec: all the executor's\n"
      "   host work incl. prep, upload, launches, outputs; host = sched + exec; medians over decode "
      "steps)\n");
  std::printf(
      "  target               scheduling + preparation <= %.0f%% of the device step: %s (worst %.3f, ratio "
      "to target %.2f)\n",
      100 * kTarget, met ? "met" : "MISSED", worst, worst / kTarget);
  write_json(o.json, {{"benchmark", "cpu-overhead"},
                      {"revision", build_revision()},
                      {"gpu", gpu_json(gpu)},
                      {"model", spec.name},
                      {"target", {{"max_ratio_schedule_prepare_to_device", kTarget}}},
                      {"worst_ratio", worst},
                      {"met", met},
                      {"rows", rows}});
  return 0;
}

}  // namespace duet::gpu_bench
