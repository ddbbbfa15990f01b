#include "exec/cuda_executor.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/memory_plan.hpp"
#include "core/output_script.hpp"
#include "exec/batch_check.hpp"
#include "exec/cpu_ops.hpp"
#include "exec/safetensors.hpp"
#include "exec/wall_clock.hpp"
#include "kernels/attention.hpp"
#include "kernels/device.hpp"
#include "kernels/gemm.hpp"
#include "kernels/ops.hpp"

namespace duet {

namespace k = kernels;

namespace {

using Steady = std::chrono::steady_clock;
using bf16 = k::bf16;

constexpr std::size_t align_up(std::size_t x, std::size_t a) { return (x + a - 1) / a * a; }

int next_pow2(int x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

// Where each tensor of llama_tensor_specs lands in the one device weight buffer (bf16 elements).
struct WeightPlan {
  struct Layer {
    std::int64_t input_norm, qkv, qkv_bias, o, post_norm, gate_up, down;  // qkv_bias -1 without
    std::int64_t q_norm, k_norm;                                          // -1 without (Qwen3's)
  };
  std::int64_t embed = 0, final_norm = 0, lm_head = 0;  // lm_head == embed when tied
  // A score head's (ModelSpec::score_head), -1 without; lm_head is then -1.
  std::int64_t score_hidden = -1, score_hidden_bias = -1, score_out = -1, score_out_bias = -1;
  std::vector<Layer> layers;
  std::vector<std::int64_t> dst;  // per tensor spec
  std::int64_t total = 0;
};

WeightPlan plan_weights(const ModelSpec& m, const std::vector<LlamaTensorSpec>& specs) {
  const std::int64_t h = m.hidden_size, q = std::int64_t(m.num_heads) * m.head_dim,
                     kv = std::int64_t(m.num_kv_heads) * m.head_dim, f = m.intermediate_size,
                     v = m.vocab_size;
  WeightPlan p;
  std::int64_t off = 0;
  auto take = [&](std::int64_t elems) {
    const std::int64_t o = off;
    off = std::int64_t(align_up(std::size_t(off + elems), 128));  // 256-byte aligned
    return o;
  };
  p.embed = take(v * h);
  for (int l = 0; l < m.num_layers; ++l) {
    WeightPlan::Layer L{};
    L.input_norm = take(h);
    L.qkv = take((q + 2 * kv) * h);
    L.qkv_bias = m.qkv_bias ? take(q + 2 * kv) : -1;
    L.q_norm = m.qk_norm ? take(m.head_dim) : -1;
    L.k_norm = m.qk_norm ? take(m.head_dim) : -1;
    L.o = take(h * q);
    L.post_norm = take(h);
    L.gate_up = take(2 * f * h);
    L.down = take(h * f);
    p.layers.push_back(L);
  }
  p.final_norm = take(h);
  if (m.score_head == ScoreHead::Classifier) {
    p.lm_head = -1;
    p.score_hidden = take(h * h);
    p.score_hidden_bias = take(h);  // 256-byte aligned, as the GEMM's bias epilogue needs
    p.score_out = take(2 * h);
    p.score_out_bias = take(2);
  } else if (m.score_head == ScoreHead::Value) {
    // The value's row and bias, then a row and a bias of zeros (init zeroes the buffer): the head's
    // logits are the value and a constant 0, as the CPU engine's.
    p.lm_head = -1;
    p.score_out = take(2 * h);
    p.score_out_bias = take(2);
  } else {
    p.lm_head = m.tie_word_embeddings ? p.embed : take(v * h);
  }
  p.total = off;

  // The destinations, in llama_tensor_specs order: q, k, v stacked into qkv (their biases into
  // qkv_bias); gate, up into gate_up.
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (const LlamaTensorSpec& t : specs) {
    std::int64_t d = -1;
    if (t.name == "model.embed_tokens.weight") d = p.embed;
    else if (t.name == "model.norm.weight") d = p.final_norm;
    else if (t.name == "lm_head.weight") d = p.lm_head;
    else if (t.name == "score.0.weight") d = p.score_hidden;
    else if (t.name == "score.0.bias") d = p.score_hidden_bias;
    else if (t.name == "score.2.weight" || t.name == "v_head.summary.weight") d = p.score_out;
    else if (t.name == "score.2.bias" || t.name == "v_head.summary.bias") d = p.score_out_bias;
    else if (t.name.rfind("model.layers.", 0) == 0) {
      const std::size_t dot = t.name.find('.', 13);
      const int l = std::stoi(t.name.substr(13, dot - 13));
      const WeightPlan::Layer& L = p.layers.at(std::size_t(l));
      if (ends_with(t.name, ".input_layernorm.weight")) d = L.input_norm;
      else if (ends_with(t.name, ".self_attn.q_proj.weight")) d = L.qkv;
      else if (ends_with(t.name, ".self_attn.k_proj.weight")) d = L.qkv + q * h;
      else if (ends_with(t.name, ".self_attn.v_proj.weight")) d = L.qkv + (q + kv) * h;
      else if (ends_with(t.name, ".self_attn.q_proj.bias")) d = L.qkv_bias;
      else if (ends_with(t.name, ".self_attn.k_proj.bias")) d = L.qkv_bias + q;
      else if (ends_with(t.name, ".self_attn.v_proj.bias")) d = L.qkv_bias + q + kv;
      else if (ends_with(t.name, ".self_attn.q_norm.weight")) d = L.q_norm;
      else if (ends_with(t.name, ".self_attn.k_norm.weight")) d = L.k_norm;
      else if (ends_with(t.name, ".self_attn.o_proj.weight")) d = L.o;
      else if (ends_with(t.name, ".post_attention_layernorm.weight")) d = L.post_norm;
      else if (ends_with(t.name, ".mlp.gate_proj.weight")) d = L.gate_up;
      else if (ends_with(t.name, ".mlp.up_proj.weight")) d = L.gate_up + f * h;
      else if (ends_with(t.name, ".mlp.down_proj.weight")) d = L.down;
    }
    if (d < 0) throw std::logic_error("CudaExecutor: no place for tensor " + t.name);
    p.dst.push_back(d);
  }
  return p;
}

// The step's metadata as one packed block: the same byte layout on the host (staging) and on the
// device, so that one copy uploads it. Copies come last so that a decode graph's pointers (which
// depend on the other sections only) stay valid whatever the step's copy count.
struct MetaLayout {
  std::size_t tokens = 0, positions = 0, slots = 0, query_start = 0, context_len = 0, tables = 0, rows = 0,
              params = 0, copy_src = 0, copy_dst = 0, total = 0;
};

MetaLayout meta_layout(int T, int S, int W, int R, int P, int C) {
  MetaLayout m;
  std::size_t off = 0;
  auto take = [&](std::size_t bytes) {
    off = align_up(off, 16);
    const std::size_t o = off;
    off += bytes;
    return o;
  };
  m.tokens = take(4 * std::size_t(T));
  m.positions = take(4 * std::size_t(T));
  m.slots = take(8 * std::size_t(T));
  m.query_start = take(4 * std::size_t(S + 1));
  m.context_len = take(4 * std::size_t(S));
  m.tables = take(4 * std::size_t(S) * std::size_t(W));
  m.rows = take(4 * std::size_t(R));
  m.params = take(sizeof(k::SampleParams) * std::size_t(P));
  m.copy_src = take(4 * std::size_t(C));
  m.copy_dst = take(4 * std::size_t(C));
  m.total = align_up(off, 16);
  return m;
}

// Sampling keyed by (seed, output index), as CpuExecutor's sample_token: the same Philox uniform
// and the same rule, so the backends draw the same token from the same logits (but for an ulp of
// expf at a boundary); their logits differ (bf16 against float32 arithmetic), and so may tokens.
k::SampleParams sample_params(const Sequence& s) {
  k::SampleParams sp;
  sp.temperature = s.sampling.temperature;
  sp.top_p = s.sampling.top_p;
  sp.seed = s.sampling.seed;
  sp.counter = std::uint64_t(s.num_output_tokens());
  return sp;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

CudaKvArena::CudaKvArena(std::int64_t bytes) {
  if (bytes <= 0) throw Error("CudaKvArena: bytes must be positive, got " + std::to_string(bytes));
  buffer_ = std::make_unique<k::DeviceBuffer>(std::size_t(bytes));
  const k::StreamHandle stream;
  k::fill_zero(buffer_->get(), buffer_->bytes(), stream.get());
  stream.synchronize();
}

CudaKvArena::~CudaKvArena() = default;
void* CudaKvArena::data() const { return buffer_->get(); }
std::int64_t CudaKvArena::bytes() const { return std::int64_t(buffer_->bytes()); }

struct CudaExecutor::Impl {
  ModelSpec spec;
  KvLayout layout;  // the plan's pool, exactly
  CudaExecutorOptions opt;
  std::vector<int> buckets;  // sorted graph batch sizes
  std::string device_name;
  int sm_count = 0;

  // Dimensions.
  int H = 0, Q = 0, KV = 0, F = 0, V = 0, QKV = 0, scratch_width = 0;

  // Created once a device is known to be usable (their constructors call the runtime).
  std::unique_ptr<k::StreamHandle> stream;
  std::unique_ptr<k::Gemm> gemm;
  std::unique_ptr<k::Event> ev_start, ev_end;

  WeightPlan wplan;
  k::DeviceBuffer weights;
  std::shared_ptr<CudaKvArena> pool;  // its own, or a shared pool's
  k::DeviceBuffer inv_freq;

  // Activations and step buffers, with their capacities (rows, logits rows, bytes).
  int cap_tokens = 0, cap_rows = 0;
  std::size_t cap_meta = 0, cap_ws = 0;
  k::DeviceBuffer x, h, d, scratch, gathered, logits, out, meta, ws;
  k::DeviceBuffer head_hidden;  // a score head's hidden layer [cap_rows, H]; empty without one

  // The metadata's host side (cap_meta bytes, grown with meta by ensure(), which synchronizes
  // first), pinned so that its upload is a DMA the host does not wait for. Each step ends in a
  // synchronize (collect), so the next step may rewrite it.
  k::PinnedBuffer staging;
  std::vector<std::int32_t> host_out;
  std::vector<float> host_logits;

  using GraphKey = std::tuple<int, int, int>;  // (bucket, splits, table width)
  std::map<GraphKey, k::Graph> graphs;
  std::set<GraphKey> failed_keys;
  std::optional<GraphKey> pending_capture;  // this step's shape, captured once its outputs are in

  CudaExecutorStats stats;
  CudaExecutorMemory mem;
  double prep_s = 0, cpu_s = 0, wall_s = 0;
  bool used_graph = false;
  std::vector<ItemLogits> last_logits;

  bf16* pool_bf16() const { return static_cast<bf16*>(pool->data()); }

  // ---- construction ----
  void init(const ModelSpec& m, int num_blocks, int block_size, const CudaExecutorOptions& o);
  void upload(const std::vector<LlamaTensorSpec>& specs, const std::vector<const HostTensor*>& tensors);
  void fill_dummy(const std::vector<LlamaTensorSpec>& specs, std::uint64_t seed);
  void allocate_step_buffers(int tokens, int rows, std::size_t meta_bytes, std::size_t ws_bytes);
  std::size_t activation_bytes(int tokens, int rows, std::size_t meta_bytes, std::size_t ws_bytes) const;
  // The output buffer's entries (int32 tokens, then float32 scores): a graph step samples and
  // scores each of its rows, an eager step's rows are at most its tokens (each samples or scores).
  static std::size_t out_entries(int tokens, int rows) { return std::size_t(std::max(2 * rows, tokens)); }

  // ---- a step ----
  struct Fwd {
    int T = 0, S = 0, W = 0, max_q = 1, splits = 1;
    bool decode = false;
    int R = 0;  // logits rows
    bool identity_rows = false;
    int Rs = 0;                  // sampled rows, logits rows [0, Rs)
    int score_row0 = 0, Rp = 0;  // PRM-scored rows, logits rows [score_row0, score_row0 + Rp)
    MetaLayout ml;
  };
  // A planned step: the forward pass's shape, and where each item's outputs land.
  struct Step {
    Fwd f;
    bool graph = false;          // decode-only, padded to a graph bucket: one logits row per item
    std::vector<int> logit_row;  // per item: Sample its row, Score its first score row, else -1
  };
  // The step's metadata arrays in the staging buffer, at MetaLayout's offsets.
  struct HostMeta {
    std::int32_t *tokens, *positions, *query_start, *context_len, *tables, *rows, *copy_src, *copy_dst;
    std::int64_t* slots;
    k::SampleParams* params;
  };
  StepResult execute(const Batch& batch);
  Step plan(const Batch& batch);
  Step plan_shape(const Batch& batch) const;
  void prepare_gemms(const Fwd& f);
  HostMeta host_meta(const MetaLayout& ml) const;
  void write_items(const Batch& batch, Step& step, const HostMeta& m) const;
  static void write_graph_padding(const Fwd& f, int n, const HostMeta& m);
  void stage(const Step& step);
  void launch(const Batch& batch, const Step& step);
  void replay_or_capture(const Fwd& f);
  void capture(const Fwd& f, const GraphKey& key);
  void forward(const Fwd& f);
  void logits_head(const Fwd& f, const bf16* Hn);
  void collect(const Batch& batch, const Step& step);
  StepResult outputs(const Batch& batch, const Step& step);
  void keep_item_logits(const Batch& batch, const Step& step);
  void ensure(int tokens, int rows, std::size_t meta_bytes, std::size_t ws_bytes);
  template <typename T>
  T* meta_ptr(std::size_t off) const {
    return reinterpret_cast<T*>(static_cast<std::byte*>(meta.get()) + off);
  }
};

void CudaExecutor::Impl::init(const ModelSpec& m, int num_blocks, int block_size,
                              const CudaExecutorOptions& o) {
  m.validate();
  // Its weights, activations and KV are bf16: a float16 or float32 model would run as another one
  // than the simulator prices (vLLM's dtype "auto" runs a float32 checkpoint in bf16 too).
  if (m.dtype != DType::BF16)
    throw Error("CudaExecutor: model '" + m.name + "' is " + dtype_name(m.dtype) +
                "; the CUDA engine runs bfloat16 (give its config.json torch_dtype \"bfloat16\")");
  spec = m;
  opt = o;
  if (num_blocks <= 0 || block_size <= 0)
    throw Error("CudaExecutor: num_blocks and block_size must be positive, got " +
                std::to_string(num_blocks) + " and " + std::to_string(block_size));
  check_prm_label_ids(m, o.prm_plus_id, o.prm_minus_id, "CudaExecutor");
  if (o.max_num_batched_tokens <= 0 || o.max_num_seqs <= 0 || o.max_model_len <= 0)
    throw Error("CudaExecutor: max_num_batched_tokens, max_num_seqs and max_model_len must be positive");
  for (int b : o.graph_batch_sizes)
    if (b <= 0) throw Error("CudaExecutor: graph batch sizes must be positive, got " + std::to_string(b));
  buckets = o.graph_batch_sizes;
  std::sort(buckets.begin(), buckets.end());
  buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
  if (!o.use_cuda_graphs) buckets.clear();

  std::string why;
  if (!k::device_available(&why)) throw Error("CudaExecutor: no usable CUDA device: " + why);
  const k::DeviceInfo info = k::device_info();
  device_name = info.name;
  sm_count = std::max(1, info.sm_count);

  layout = KvLayout::of(m, num_blocks, block_size);
  H = m.hidden_size;
  Q = m.num_heads * m.head_dim;
  KV = m.num_kv_heads * m.head_dim;
  F = m.intermediate_size;
  V = m.logits_width();
  QKV = Q + 2 * KV;
  scratch_width = std::max(QKV + Q, 3 * F);

  // Sizes first, so that a model that cannot fit fails before anything is allocated.
  const std::vector<LlamaTensorSpec> specs = llama_tensor_specs(m);
  wplan = plan_weights(m, specs);
  const int max_bucket = buckets.empty() ? 0 : buckets.back();
  const int tokens = std::max(o.max_num_batched_tokens, max_bucket);
  const int seqs = std::max(o.max_num_seqs, max_bucket);
  // The LM head streams its whole weight (1 GB on Llama-3.1-8B) per chunk of logits rows: chunks of
  // fewer than 256 rows (graphs off, a small max_num_seqs) would read it many times a step.
  constexpr int kMinLogitsRows = 256;
  const int rows = std::max(seqs, std::min(tokens, kMinLogitsRows));
  // A graph step's table width is rounded up to a power of two (plan_shape): sized for that, a
  // long context never grows the metadata buffer mid-run, which would drop every captured graph.
  const int width = next_pow2((o.max_model_len + block_size - 1) / block_size + 1);
  // An eager step's logits rows are at most its tokens (a Score item may score every token).
  const std::size_t meta_bytes =
      meta_layout(tokens, seqs, width, std::max(rows, tokens), rows, 0).total + 64 * 1024;
  std::size_t ws_bytes = 0;
  for (int b : buckets)
    ws_bytes = std::max(ws_bytes, k::decode_workspace_bytes(
                                      b, m.num_heads, m.head_dim,
                                      k::choose_decode_splits(b, m.num_kv_heads, o.max_model_len, sm_count)));
  ws_bytes = std::max(
      ws_bytes,
      k::decode_workspace_bytes(seqs, m.num_heads, m.head_dim,
                                k::choose_decode_splits(seqs, m.num_kv_heads, o.max_model_len, sm_count)));

  constexpr std::size_t kGemmWorkspace = 32u << 20;
  mem.weights = wplan.total * 2;
  mem.kv_pool = layout.total_elems() * 2;
  if (o.kv_arena && o.kv_arena->bytes() != mem.kv_pool)
    throw Error("CudaExecutor: a shared KV arena of " + std::to_string(o.kv_arena->bytes()) + " bytes for " +
                std::to_string(num_blocks) + " pages of " + std::to_string(layout.page_elems() * 2) +
                " bytes (" + m.name + ", block_size " + std::to_string(block_size) + ")");
  mem.activations = std::int64_t(activation_bytes(tokens, rows, meta_bytes, ws_bytes));
  mem.gemm_workspace = std::int64_t(kGemmWorkspace);
  // A borrowed arena is allocated already.
  if (mem.total() - (o.kv_arena ? mem.kv_pool : 0) > info.free_bytes)
    throw Error("CudaExecutor: " + m.name + " needs " + gib(mem.total()) + " of device memory (weights " +
                gib(mem.weights) + ", KV pool of " + std::to_string(num_blocks) + " blocks " +
                gib(mem.kv_pool) + ", activations " + gib(mem.activations) + ") but " + info.name + " has " +
                gib(info.free_bytes) + " free of " + gib(info.total_bytes) +
                "; lower gpu_memory_utilization or the block count");

  stream = std::make_unique<k::StreamHandle>();
  ev_start = std::make_unique<k::Event>();
  ev_end = std::make_unique<k::Event>();
  gemm = std::make_unique<k::Gemm>(kGemmWorkspace);
  weights = k::DeviceBuffer(std::size_t(mem.weights));
  if (m.score_head == ScoreHead::Value)
    k::fill_zero(weights.get(), weights.bytes(), stream->get());  // its zero row
  pool = o.kv_arena ? o.kv_arena : std::make_shared<CudaKvArena>(mem.kv_pool);
  const std::vector<double> freq = rope_inv_freq(m);
  const std::vector<float> freq32(freq.begin(), freq.end());
  inv_freq = k::DeviceBuffer(freq32.size() * sizeof(float));
  k::copy_to_device(inv_freq.get(), freq32.data(), freq32.size() * sizeof(float), stream->get());
  allocate_step_buffers(tokens, rows, meta_bytes, ws_bytes);
  stream->synchronize();
}

std::size_t CudaExecutor::Impl::activation_bytes(int tokens, int rows, std::size_t meta_bytes,
                                                 std::size_t ws_bytes) const {
  const std::size_t t = std::size_t(tokens), r = std::size_t(rows);
  const std::size_t head = spec.score_head == ScoreHead::Classifier ? r * std::size_t(H) : 0;  // head_hidden
  return 2 * (3 * t * std::size_t(H) + t * std::size_t(scratch_width) + r * std::size_t(H) + head) +  // bf16
         4 * r * std::size_t(V) + 4 * out_entries(tokens, rows) + meta_bytes + ws_bytes;
}

// Each tensor straight into its place in the fused layout (a fused matrix's parts are row blocks,
// so every tensor is one contiguous range), from the same function as the host's dummy_tensor.
void CudaExecutor::Impl::fill_dummy(const std::vector<LlamaTensorSpec>& specs, std::uint64_t seed) {
  bf16* base = weights.as<bf16>();
  for (std::size_t i = 0; i < specs.size(); ++i) {
    k::fill_dummy(base + wplan.dst[i], specs[i].numel(), dummy_init(specs[i], seed), stream->get());
  }
  stream->synchronize();
}

void CudaExecutor::Impl::allocate_step_buffers(int tokens, int rows, std::size_t meta_bytes,
                                               std::size_t ws_bytes) {
  if (tokens > cap_tokens) {
    x = {}, h = {}, d = {}, scratch = {};
    const std::size_t t = std::size_t(tokens);
    x = k::DeviceBuffer(2 * t * std::size_t(H));
    h = k::DeviceBuffer(2 * t * std::size_t(H));
    d = k::DeviceBuffer(2 * t * std::size_t(H));
    scratch = k::DeviceBuffer(2 * t * std::size_t(scratch_width));
  }
  if (tokens > cap_tokens || rows > cap_rows) {
    out = {};
    out = k::DeviceBuffer(4 * out_entries(std::max(tokens, cap_tokens), std::max(rows, cap_rows)));
  }
  if (tokens > cap_tokens) cap_tokens = tokens;
  if (rows > cap_rows) {
    gathered = {}, logits = {}, head_hidden = {};
    const std::size_t r = std::size_t(rows);
    gathered = k::DeviceBuffer(2 * r * std::size_t(H));
    logits = k::DeviceBuffer(4 * r * std::size_t(V));
    if (spec.score_head == ScoreHead::Classifier) head_hidden = k::DeviceBuffer(2 * r * std::size_t(H));
    cap_rows = rows;
  }
  if (meta_bytes > cap_meta) {
    meta = {}, staging = {};
    meta = k::DeviceBuffer(meta_bytes);
    staging = k::PinnedBuffer(meta_bytes);  // its host side, the same size
    cap_meta = meta_bytes;
  }
  if (ws_bytes > cap_ws) {
    ws = {};
    ws = k::DeviceBuffer(ws_bytes);
    cap_ws = ws_bytes;
  }
}

void CudaExecutor::Impl::ensure(int tokens, int rows, std::size_t meta_bytes, std::size_t ws_bytes) {
  if (tokens <= cap_tokens && rows <= cap_rows && meta_bytes <= cap_meta && ws_bytes <= cap_ws) return;
  // The graphs point into these buffers: drop them before the memory goes.
  stream->synchronize();
  graphs.clear();
  failed_keys.clear();
  ++stats.buffer_growths;
  auto grow = [](auto need, auto have) { return need <= have ? have : std::max(need, have + have / 2); };
  allocate_step_buffers(grow(tokens, cap_tokens), grow(rows, cap_rows), grow(meta_bytes, cap_meta),
                        grow(ws_bytes, cap_ws));
  mem.activations = std::int64_t(activation_bytes(cap_tokens, cap_rows, cap_meta, cap_ws));
}

void CudaExecutor::Impl::upload(const std::vector<LlamaTensorSpec>& specs,
                                const std::vector<const HostTensor*>& tensors) {
  // Tensors are converted (float32 -> bf16) on several threads and copied one at a time.
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const unsigned workers = std::min<unsigned>(std::min(hw, 8u), unsigned(specs.size()));
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex copy_mutex, error_mutex;
  std::exception_ptr error;
  bf16* base = weights.as<bf16>();
  auto work = [&] {
    std::vector<bf16> buf;
    for (;;) {
      const std::size_t i = next++;
      if (i >= specs.size() || failed) return;
      try {
        const HostTensor& t = *tensors[i];
        if (t.shape != specs[i].shape || std::int64_t(t.data.size()) != specs[i].numel())
          throw Error("CudaExecutor: weight " + specs[i].name + " has shape " + shape_string(t.shape) +
                      " and " + std::to_string(t.data.size()) + " values, model " + spec.name + " expects " +
                      shape_string(specs[i].shape));
        buf.resize(t.data.size());
        for (std::size_t e = 0; e < buf.size(); ++e) buf[e] = float_to_bf16(t.data[e]);
        std::lock_guard<std::mutex> lock(copy_mutex);
        k::copy_to_device(base + wplan.dst[i], buf.data(), buf.size() * sizeof(bf16), stream->get());
        stream->synchronize();  // buf is reused
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned w = 1; w < workers; ++w) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

void CudaExecutor::Impl::forward(const Fwd& f) {
  const k::Stream s = stream->get();
  const float eps = float(spec.rms_norm_eps);
  const bf16* W = weights.as<const bf16>();
  bf16* X = x.as<bf16>();
  bf16* Hn = h.as<bf16>();
  bf16* D = d.as<bf16>();
  bf16* qkv = scratch.as<bf16>();
  bf16* attn = qkv + std::size_t(f.T) * std::size_t(QKV);
  bf16* gate_up = scratch.as<bf16>();
  bf16* act = gate_up + std::size_t(f.T) * std::size_t(2 * F);
  const auto* tokens = meta_ptr<const std::int32_t>(f.ml.tokens);
  const auto* positions = meta_ptr<const std::int32_t>(f.ml.positions);
  const auto* slots = meta_ptr<const std::int64_t>(f.ml.slots);

  k::AttentionBatch ab;
  ab.q = qkv;
  ab.q_stride = QKV;
  ab.out = attn;
  ab.out_stride = Q;
  ab.query_start = meta_ptr<const std::int32_t>(f.ml.query_start);
  ab.context_len = meta_ptr<const std::int32_t>(f.ml.context_len);
  ab.block_tables = meta_ptr<const std::int32_t>(f.ml.tables);
  ab.max_blocks = f.W;
  ab.num_seqs = f.S;
  ab.num_heads = spec.num_heads;
  ab.scale = float(1.0 / std::sqrt(double(spec.head_dim)));

  k::embedding_gather(W + wplan.embed, tokens, X, f.T, H, s);
  for (int l = 0; l < spec.num_layers; ++l) {
    const WeightPlan::Layer& L = wplan.layers[std::size_t(l)];
    if (l == 0) k::rmsnorm(X, W + L.input_norm, Hn, f.T, H, eps, s);
    else k::add_rmsnorm(X, D, W + L.input_norm, Hn, f.T, H, eps, s);
    gemm->bf16_out(Hn, W + L.qkv, qkv, f.T, QKV, H, s, L.qkv_bias < 0 ? nullptr : W + L.qkv_bias);
    const k::HeadNorm qk_norm =
        spec.qk_norm ? k::HeadNorm{W + L.q_norm, W + L.k_norm, eps} : k::HeadNorm{};  // Qwen3's, fused
    k::rope(qkv, qkv + Q, positions, inv_freq.as<const float>(), f.T, spec.num_heads, spec.num_kv_heads,
            spec.head_dim, QKV, QKV, s, qk_norm);
    // Every item's K/V of this layer before any attention reads (a same-step prefix hit).
    k::kv_write(pool_bf16(), layout, l, qkv + Q, qkv + Q + KV, QKV, QKV, slots, f.T, s);
    if (f.decode) k::paged_decode_attention(pool_bf16(), layout, l, ab, f.splits, ws.get(), s);
    else k::paged_prefill_attention(pool_bf16(), layout, l, ab, f.max_q, s);
    gemm->bf16_out(attn, W + L.o, D, f.T, H, Q, s);
    k::add_rmsnorm(X, D, W + L.post_norm, Hn, f.T, H, eps, s);
    gemm->bf16_out(Hn, W + L.gate_up, gate_up, f.T, 2 * F, H, s);
    k::silu_mul(gate_up, act, f.T, F, s);
    gemm->bf16_out(act, W + L.down, D, f.T, H, F, s);
  }
  k::add_rmsnorm(X, D, W + wplan.final_norm, Hn, f.T, H, eps, s);
  logits_head(f, Hn);
}

// The LM head, then sampling and PRM scores, on the step's logits rows in chunks of the logits
// buffer's rows (a graph step's rows are one chunk). Rows are independent: a chunk samples or
// scores the rows of [0, Rs) and [score_row0, score_row0 + Rp) that it holds.
void CudaExecutor::Impl::logits_head(const Fwd& f, const bf16* Hn) {
  const k::Stream s = stream->get();
  const bf16* W = weights.as<const bf16>();
  const auto* row_index = meta_ptr<const std::int32_t>(f.ml.rows);
  const auto* params = meta_ptr<const k::SampleParams>(f.ml.params);
  auto* out_tokens = out.as<std::int32_t>();
  auto* out_scores = reinterpret_cast<float*>(out_tokens + f.Rs);
  float* L = logits.as<float>();
  for (int r0 = 0; r0 < f.R; r0 += cap_rows) {
    const int n = std::min(cap_rows, f.R - r0);
    const bf16* rows = Hn + std::size_t(r0) * std::size_t(H);
    if (!f.identity_rows) {
      k::gather_rows(Hn, row_index + r0, gathered.as<bf16>(), n, H, s);
      rows = gathered.as<const bf16>();
    }
    if (spec.score_head == ScoreHead::Classifier) {  // Linear + bias + ReLU (one GEMM), then the labels'
      bf16* hidden = head_hidden.as<bf16>();
      gemm->bf16_out(rows, W + wplan.score_hidden, hidden, n, H, H, s, W + wplan.score_hidden_bias, true);
      k::small_linear_f32(hidden, W + wplan.score_out, W + wplan.score_out_bias, L, n, V, H, s);
    } else if (spec.score_head == ScoreHead::Value) {  // the value and its zero row's constant 0
      k::small_linear_f32(rows, W + wplan.score_out, W + wplan.score_out_bias, L, n, V, H, s);
    } else {
      gemm->f32_out(rows, W + wplan.lm_head, L, n, V, H, s);
    }
    const int sampled_end = std::min(r0 + n, f.Rs);
    // A PRM with a score head samples nothing (a graph step's rows are all "sampled" and scored).
    if (sampled_end > r0 && spec.can_generate())
      k::sample(L, params + r0, out_tokens + r0, sampled_end - r0, V, s);
    const int p0 = std::max(r0, f.score_row0), p1 = std::min(r0 + n, f.score_row0 + f.Rp);
    if (p1 > p0)
      k::prm_scores(L + std::size_t(p0 - r0) * std::size_t(V), out_scores + (p0 - f.score_row0), p1 - p0, V,
                    opt.prm_plus_id, opt.prm_minus_id, s);
  }
}

// A step: plan it on the host, stage its metadata, launch its device work, collect its outputs.
StepResult CudaExecutor::Impl::execute(const Batch& batch) {
  const auto t0 = Steady::now();
  check_batch(batch, layout, spec, "CudaExecutor");
  used_graph = false;
  pending_capture.reset();  // a step that threw before its capture leaves none behind
  last_logits.clear();
  const Step step = plan(batch);
  const auto t_prep = Steady::now();
  stage(step);
  Steady::time_point t_launched;
  try {
    launch(batch, step);
    t_launched = Steady::now();
    collect(batch, step);
  } catch (...) {
    // The metadata upload may still read the pinned staging buffer, which the next step rewrites.
    try {
      stream->synchronize();
    } catch (...) {  // the step's own error is the one to report
    }
    throw;
  }
  const auto t_synced = Steady::now();
  // After the step's end event: the capture is host work (cpu_s), not the step's device time.
  if (pending_capture) {
    capture(step.f, *pending_capture);
    pending_capture.reset();
  }
  StepResult result = outputs(batch, step);
  const auto t_end = Steady::now();
  prep_s = seconds_since(t0, t_prep);
  // The output copies block until the forward is done (pageable host memory): waiting, not work.
  cpu_s = seconds_since(t0, t_launched) + seconds_since(t_synced, t_end);
  wall_s = seconds_since(t0, t_end);
  result.cpu_s = cpu_s;
  return result;
}

// The step's shape, device buffers large enough for it, and its metadata in the staging buffer.
CudaExecutor::Impl::Step CudaExecutor::Impl::plan(const Batch& batch) {
  Step step = plan_shape(batch);
  const Fwd& f = step.f;
  const std::size_t ws_need =
      f.decode ? k::decode_workspace_bytes(f.S, spec.num_heads, spec.head_dim, f.splits) : std::size_t(0);
  // The LM head runs in chunks of the logits buffer's rows (forward), so a step scoring more
  // positions than the memory plan's rows (max_num_seqs) leaves it, and the graphs, as they are;
  // only keep_logits, which copies every row out at once, grows it.
  ensure(f.T, opt.keep_logits ? f.R : std::min(f.R, cap_rows), f.ml.total, ws_need);
  prepare_gemms(f);
  const HostMeta m = host_meta(f.ml);
  write_items(batch, step, m);
  if (step.graph) write_graph_padding(f, int(batch.items.size()), m);
  for (std::size_t c = 0; c < batch.copies.size(); ++c) {
    m.copy_src[c] = batch.copies[c].src;
    m.copy_dst[c] = batch.copies[c].dst;
  }
  return step;
}

// A decode-only batch that a graph bucket holds is padded to the bucket, its rows the items, each
// sampled and scored; any other batch runs eagerly on its own rows, the sampled logits rows first
// and the scored ones after them.
CudaExecutor::Impl::Step CudaExecutor::Impl::plan_shape(const Batch& batch) const {
  const int n = int(batch.items.size());
  const int C = int(batch.copies.size());
  const int bs = layout.block_size;
  bool decode_only = n > 0;
  int T = 0, W = 0, max_q = 1, max_ctx = 0, Rs = 0, Rp = 0;
  for (const BatchItem& it : batch.items) {
    const int end = it.context_len + it.num_new_tokens;
    decode_only = decode_only && it.is_decode && it.num_new_tokens == 1;
    T += it.num_new_tokens;
    W = std::max(W, (end + bs - 1) / bs);
    max_q = std::max(max_q, it.num_new_tokens);
    max_ctx = std::max(max_ctx, end);
    if (it.want == Want::Sample) ++Rs;
    if (it.want == Want::Score) Rp += int(positions_to_score(it).size());
  }
  const auto bucket_it = std::lower_bound(buckets.begin(), buckets.end(), n);
  Step step;
  step.graph = decode_only && bucket_it != buckets.end();
  Fwd& f = step.f;
  f.decode = decode_only;
  f.max_q = max_q;
  if (step.graph) {
    const int b = *bucket_it;
    f.T = f.S = f.R = b;
    f.W = next_pow2(std::max(W, 1));
    f.splits = std::max(1, k::choose_decode_splits(b, spec.num_kv_heads, max_ctx, sm_count));
    f.identity_rows = true;
    f.Rs = b;
    f.score_row0 = 0;
    f.Rp = b;
    f.ml = meta_layout(b, b, f.W, b, b, C);
  } else {
    f.T = T;
    f.S = n;
    f.W = std::max(W, 1);
    f.R = Rs + Rp;
    f.Rs = Rs;
    f.score_row0 = Rs;
    f.Rp = Rp;
    if (decode_only) f.splits = std::max(1, k::choose_decode_splits(n, spec.num_kv_heads, max_ctx, sm_count));
    f.ml = meta_layout(T, n, f.W, f.R, Rs, C);
  }
  return step;
}

CudaExecutor::Impl::HostMeta CudaExecutor::Impl::host_meta(const MetaLayout& ml) const {
  std::byte* base = static_cast<std::byte*>(staging.get());
  auto i32 = [&](std::size_t off) { return reinterpret_cast<std::int32_t*>(base + off); };
  return {.tokens = i32(ml.tokens),
          .positions = i32(ml.positions),
          .query_start = i32(ml.query_start),
          .context_len = i32(ml.context_len),
          .tables = i32(ml.tables),
          .rows = i32(ml.rows),
          .copy_src = i32(ml.copy_src),
          .copy_dst = i32(ml.copy_dst),
          .slots = reinterpret_cast<std::int64_t*>(base + ml.slots),
          .params = reinterpret_cast<k::SampleParams*>(base + ml.params)};
}

// Each item's rows (token, position, KV slot), query start, context length and block table, and
// the logits rows it samples (with its sampling parameters) or scores.
void CudaExecutor::Impl::write_items(const Batch& batch, Step& step, const HostMeta& m) const {
  const Fwd& f = step.f;
  const int n = int(batch.items.size());
  const int bs = layout.block_size;
  step.logit_row.assign(std::size_t(n), -1);
  int r = 0, sample_row = 0, score_row = f.score_row0;
  for (int i = 0; i < n; ++i) {
    const BatchItem& it = batch.items[std::size_t(i)];
    const Sequence& s = *it.seq;
    const int first_row = r;
    m.query_start[i] = r;
    m.context_len[i] = it.context_len + it.num_new_tokens;
    const int need = (m.context_len[i] + bs - 1) / bs;
    std::int32_t* table = m.tables + std::size_t(i) * std::size_t(f.W);
    for (int b = 0; b < f.W; ++b) table[b] = b < need ? s.kv.blocks[std::size_t(b)] : 0;
    for (int p = it.context_len; p < m.context_len[i]; ++p, ++r) {
      m.tokens[r] = s.tokens[std::size_t(p)];
      m.positions[r] = p;
      m.slots[r] = std::int64_t(s.kv.blocks[std::size_t(p / bs)]) * bs + p % bs;
    }
    int& logit_row = step.logit_row[std::size_t(i)];
    if (step.graph) {
      m.params[i] = sample_params(s);  // rows are the items: every row is sampled and scored
      logit_row = i;
    } else if (it.want == Want::Sample) {
      m.rows[sample_row] = r - 1;
      m.params[sample_row] = sample_params(s);
      logit_row = sample_row++;
    } else if (it.want == Want::Score) {
      logit_row = score_row;
      for (int p : positions_to_score(it)) m.rows[score_row++] = first_row + p - it.context_len;
    }
  }
  m.query_start[n] = r;
}

// A graph's rows after the n items, up to its bucket: token 0 at position 0; kv_write skips their
// negative slot, and their attention reads slot 0 of block 0 (finite, whatever it holds). Rows
// are independent all the way to the sampler, so nothing of theirs reaches a real row.
void CudaExecutor::Impl::write_graph_padding(const Fwd& f, int n, const HostMeta& m) {
  for (int i = n; i < f.S; ++i) {
    m.tokens[i] = 0;
    m.positions[i] = 0;
    m.slots[i] = -1;
    m.query_start[i + 1] = i + 1;
    m.context_len[i] = 1;
    std::fill_n(m.tables + std::size_t(i) * std::size_t(f.W), f.W, 0);
    m.rows[i] = i;
    m.params[i] = k::SampleParams{};
  }
  for (int i = 0; i < n; ++i) m.rows[i] = i;
}

// The forward's GEMM shapes, as forward() calls them: a new shape's cuBLASLt heuristic runs here,
// on the host before the step's start event, not between its kernels.
void CudaExecutor::Impl::prepare_gemms(const Fwd& f) {
  if (f.T <= 0) return;
  gemm->prepare(f.T, QKV, H, false, spec.qkv_bias);
  gemm->prepare(f.T, H, Q, false);
  gemm->prepare(f.T, 2 * F, H, false);
  gemm->prepare(f.T, H, F, false);
  for (const int rows : {f.R > 0 ? std::min(f.R, cap_rows) : 0, f.R > cap_rows ? f.R % cap_rows : 0}) {
    if (rows == 0) continue;
    if (spec.score_head == ScoreHead::Classifier) gemm->prepare(rows, H, H, false, true, true);
    else if (spec.can_generate()) gemm->prepare(rows, V, H, true);
  }
}

// The step's metadata in one upload; the step's device time starts here.
void CudaExecutor::Impl::stage(const Step& step) {
  const k::Stream s = stream->get();
  ev_start->record(s);
  k::copy_to_device(meta.get(), staging.get(), step.f.ml.total, s);
}

void CudaExecutor::Impl::launch(const Batch& batch, const Step& step) {
  const int C = int(batch.copies.size());
  // Copy-on-write first: a fork's private copy of a shared partial block must hold the shared
  // tokens before the fork writes its own after them.
  if (C > 0)
    k::copy_blocks(pool_bf16(), layout, meta_ptr<const std::int32_t>(step.f.ml.copy_src),
                   meta_ptr<const std::int32_t>(step.f.ml.copy_dst), C, stream->get());
  if (batch.items.empty()) return;
  ++stats.steps;
  if (step.graph) {
    replay_or_capture(step.f);
  } else {
    forward(step.f);
    ++stats.eager_steps;
  }
}

// Replays the graph of this shape. The first step of a shape runs eagerly instead (its results
// are this step's, and every kernel and cuBLASLt plan has run once), and execute() captures the
// same launches for the next ones after the step has ended.
void CudaExecutor::Impl::replay_or_capture(const Fwd& f) {
  const GraphKey key = std::make_tuple(f.S, f.splits, f.W);
  const auto g = graphs.find(key);
  if (g != graphs.end()) {
    g->second.launch(stream->get());
    used_graph = true;
    ++stats.graph_steps;
    stats.split_graph_steps += f.splits > 1;
    return;
  }
  forward(f);
  ++stats.eager_steps;
  if (!failed_keys.count(key)) pending_capture = key;
}

// A capture that fails leaves this shape to eager steps, for good.
void CudaExecutor::Impl::capture(const Fwd& f, const GraphKey& key) {
  const k::Stream s = stream->get();
  stream->synchronize();
  try {
    k::begin_capture(s);
    try {
      forward(f);
    } catch (...) {
      try {
        k::end_capture(s);
      } catch (...) {
      }
      throw;
    }
    k::Graph captured = k::end_capture(s);
    graphs.emplace(key, std::move(captured));
    ++stats.graphs_captured;
  } catch (const std::exception& e) {
    failed_keys.insert(key);
    ++stats.capture_failures;
    std::fprintf(stderr, "CudaExecutor: CUDA graph capture failed for batch %d (%s); running eagerly\n", f.S,
                 e.what());
  }
}

// The sampled tokens and scores (and with keep_logits the logits rows) to the host; the step's
// device time ends here, and the host waits for it.
void CudaExecutor::Impl::collect(const Batch& batch, const Step& step) {
  const k::Stream s = stream->get();
  const Fwd& f = step.f;
  const bool any = !batch.items.empty();
  const int out_rows = f.Rs + f.Rp;
  host_out.resize(std::size_t(out_rows));
  if (any && out_rows > 0) k::copy_to_host(host_out.data(), out.get(), std::size_t(out_rows) * 4, s);
  if (any && opt.keep_logits && f.R > 0) {
    host_logits.resize(std::size_t(f.R) * std::size_t(V));
    k::copy_to_host(host_logits.data(), logits.get(), host_logits.size() * sizeof(float), s);
  }
  ev_end->record(s);
  ev_end->synchronize();
}

// Sampled or scripted, as CpuExecutor's outputs. The output buffer holds the sampled tokens of
// rows [0, Rs), then the scores: a graph step's row per item, or an eager step's score rows, which
// follow its sampled rows.
StepResult CudaExecutor::Impl::outputs(const Batch& batch, const Step& step) {
  const std::int32_t* tokens = host_out.data();
  const float* scores = reinterpret_cast<const float*>(host_out.data() + step.f.Rs);
  StepResult result = step_outputs(
      batch, opt.honour_scripts, spec.vocab_size,
      [&](std::size_t i) { return TokenId(tokens[step.logit_row[i]]); },
      [&](std::size_t i, std::size_t q) {
        const int row = step.logit_row[i];
        return scores[step.graph ? row : row - step.f.Rs + int(q)];
      });
  result.duration_s = double(k::Event::elapsed_ms(*ev_start, *ev_end)) * 1e-3;
  if (opt.keep_logits) keep_item_logits(batch, step);
  return result;
}

// Each item's logits rows, as CpuExecutor::last_logits() holds them.
void CudaExecutor::Impl::keep_item_logits(const Batch& batch, const Step& step) {
  last_logits.resize(batch.items.size());
  for (std::size_t i = 0; i < batch.items.size(); ++i) {
    const BatchItem& it = batch.items[i];
    ItemLogits& l = last_logits[i];
    if (it.want == Want::Sample) l.positions = {it.context_len + it.num_new_tokens - 1};
    if (it.want == Want::Score) {
      const auto scored = positions_to_score(it);
      l.positions.assign(scored.begin(), scored.end());
    }
    l.logits.resize(Eigen::Index(l.positions.size()), V);
    const int row = step.logit_row[i];
    for (std::size_t q = 0; q < l.positions.size(); ++q)
      std::memcpy(l.logits.row(Eigen::Index(q)).data(),
                  host_logits.data() + std::size_t(row + int(q)) * std::size_t(V),
                  sizeof(float) * std::size_t(V));
  }
}

// ---------------------------------------------------------------------------------------------

CudaExecutor::CudaExecutor(const LlamaWeights& weights, int num_blocks, int block_size,
                           const CudaExecutorOptions& options)
    : impl_(std::make_unique<Impl>()) {
  const ModelSpec& m = weights.spec;
  m.validate();
  if (std::int64_t(weights.layers.size()) != m.num_layers)
    throw Error("CudaExecutor: " + std::to_string(weights.layers.size()) +
                " layers of weights for a model of " + std::to_string(m.num_layers));
  impl_->init(m, num_blocks, block_size, options);
  const std::vector<LlamaTensorSpec> specs = llama_tensor_specs(m);
  const std::vector<const HostTensor*> tensors = llama_tensors(weights);
  if (specs.size() != tensors.size()) throw std::logic_error("CudaExecutor: tensor list mismatch");
  impl_->upload(specs, tensors);
}

CudaExecutor::CudaExecutor(const ModelSpec& spec, DummyWeights dummy, int num_blocks, int block_size,
                           const CudaExecutorOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->init(spec, num_blocks, block_size, options);
  impl_->fill_dummy(llama_tensor_specs(spec), dummy.seed);
}

CudaExecutor::~CudaExecutor() {
  if (!impl_ || !impl_->stream) return;
  try {
    impl_->stream->synchronize();
  } catch (...) {
  }
}

StepResult CudaExecutor::execute(const Batch& batch) { return impl_->execute(batch); }

const ModelSpec& CudaExecutor::spec() const { return impl_->spec; }
const CudaExecutorOptions& CudaExecutor::options() const { return impl_->opt; }
const KvLayout& CudaExecutor::layout() const { return impl_->layout; }
std::string CudaExecutor::device_name() const { return impl_->device_name; }
CudaExecutorMemory CudaExecutor::memory() const { return impl_->mem; }
CudaExecutorStats CudaExecutor::stats() const { return impl_->stats; }
double CudaExecutor::last_prep_s() const { return impl_->prep_s; }
double CudaExecutor::last_cpu_s() const { return impl_->cpu_s; }
double CudaExecutor::last_wall_s() const { return impl_->wall_s; }
bool CudaExecutor::last_used_graph() const { return impl_->used_graph; }
const std::vector<ItemLogits>& CudaExecutor::last_logits() const { return impl_->last_logits; }

std::vector<float> CudaExecutor::kv_pool_to_host() const {
  Impl& m = *impl_;
  m.stream->synchronize();
  std::vector<bf16> raw(std::size_t(m.layout.total_elems()));
  k::copy_to_host(raw.data(), m.pool->data(), raw.size() * sizeof(bf16), m.stream->get());
  m.stream->synchronize();
  std::vector<float> out(raw.size());
  for (std::size_t e = 0; e < raw.size(); ++e) out[e] = bf16_to_float(raw[e]);
  return out;
}

}  // namespace duet
