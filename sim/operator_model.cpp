#include "sim/operator_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_fields.hpp"
#include "core/mix.hpp"
#include "io/file_bytes.hpp"

namespace duet {

namespace {

constexpr double kBf16 = 2.0;  // bytes per element: the tables are bf16

}  // namespace

const char* operator_class_name(OperatorClass c) {
  switch (c) {
    case OperatorClass::gemm:
      return "gemm";
    case OperatorClass::decode_attention:
      return "decode_attention";
    case OperatorClass::prefill_attention:
      return "prefill_attention";
  }
  return "?";
}

// The knots span the tables' grids (AIConfigurator: m 1..32768, n and k 32..65536; decode batch
// 1..2048 x KV heads 1..8, context to 131072; prefill batch 1..256 x heads, 1..16384 tokens).
std::vector<CurveAxis> operator_axes(OperatorClass c) {
  switch (c) {
    case OperatorClass::gemm: {
      std::vector<double> m = octave_knots(0, 13);
      m.push_back(32768);  // the tables jump from m = 8192 to 16384 and 32768
      return {{"m", m}, {"n", octave_knots(5, 16)}, {"k", octave_knots(5, 16)}};
    }
    case OperatorClass::decode_attention:
      // Sequences x KV heads is the kernel's work items; KV heads on their own axis too, because
      // the tables' decode kernel splits long contexts by sequence, not by head: on the H200, 8
      // sequences of one KV head take 569 us at 131,072 tokens and one sequence of 8 heads 140 us.
      return {{"seqs_x_kv_heads", octave_knots(0, 14)},
              {"kv_heads", octave_knots(0, 3)},
              {"context", octave_knots(0, 17)},
              {"group", octave_knots(0, 6)},
              {"head_dim", {64, 128}}};
    case OperatorClass::prefill_attention:
      return {
          {"seqs_x_heads", octave_knots(0, 14)}, {"query_len", octave_knots(0, 14)}, {"head_dim", {64, 128}}};
  }
  return {};
}

OperatorPoint gemm_point(const GpuSpec& gpu, double m, double n, double k) {
  return {{m, n, k, 0}, roofline_time(gpu, 2 * m * n * k, kBf16 * (n * k + m * (n + k)))};
}

// Attention's HBM traffic: Q read and O written for each query token, K and V read for each key
// token of each KV head.
double attention_bytes(double query_tokens, double kv_tokens, double heads, double kv_heads,
                       double head_dim) {
  return kBf16 * head_dim * (2 * heads * query_tokens + 2 * kv_heads * kv_tokens);
}

OperatorPoint decode_attention_point(const GpuSpec& gpu, double seqs, double context, double heads,
                                     double kv_heads, double head_dim) {
  // Each query reads its sequence's K and V once per KV head; Q and O are negligible beside them.
  return {{seqs * kv_heads, kv_heads, context, heads / kv_heads, head_dim},
          roofline_time(gpu, 4 * seqs * context * heads * head_dim,
                        2 * kBf16 * seqs * context * kv_heads * head_dim)};
}

OperatorPoint prefill_attention_point(const GpuSpec& gpu, double seqs, double query_len, double keys,
                                      double cached, double heads, double kv_heads, double head_dim) {
  const double tokens = seqs * query_len;
  return {{seqs * heads, query_len, head_dim, 0},
          roofline_time(gpu, 4 * heads * head_dim * keys,
                        attention_bytes(tokens, tokens + cached, heads, kv_heads, head_dim))};
}

OperatorPoint chunk_on_context_point(const GpuSpec& gpu, double seqs, double query_len, double context,
                                     double keys, double heads, double kv_heads, double head_dim,
                                     double max_rows) {
  const double rows = query_len * heads / kv_heads;
  const double tiles = std::max(1.0, std::ceil(rows / max_rows));
  // Each tile reads the whole context's K and V; the FLOPs are the chunk's causal ones.
  return {{seqs * kv_heads * tiles, kv_heads, context + query_len, rows / tiles, head_dim},
          roofline_time(gpu, 4 * heads * head_dim * keys,
                        attention_bytes(seqs * query_len, seqs * (query_len + context) * tiles, heads,
                                        kv_heads, head_dim))};
}

const OperatorCurve& OperatorPrior::curve(OperatorClass c) const {
  return c == OperatorClass::gemm               ? gemm
         : c == OperatorClass::decode_attention ? decode_attention
                                                : prefill_attention;
}

OperatorCurve& OperatorPrior::curve(OperatorClass c) {
  return const_cast<OperatorCurve&>(std::as_const(*this).curve(c));
}

void save_prior(const OperatorPrior& p, const std::string& path) {
  nlohmann::json j;
  j["format"] = kOperatorPriorFormat;
  j["device"] = p.device;
  j["gpu"] = p.gpu_name;
  j["created_utc"] = p.created_utc;
  j["git_revision"] = p.git_revision;
  j["source"] = p.source;
  j["covers"] = {
      {"dtype", p.covers.dtype}, {"architecture", p.covers.architecture}, {"head_dims", p.covers.head_dims}};
  j["elementwise"] = {
      {"fixed_s", p.elementwise_fixed_s},
      {"bandwidth_efficiency", p.elementwise_bandwidth_efficiency},
      {"basis", "not measured: the GEMM curve's floor, and the efficiency of an m=1, n=k=4096 GEMM"}};
  j["held_out"] = p.held_out_json.empty() ? nlohmann::json::object() : nlohmann::json::parse(p.held_out_json);
  for (OperatorClass c : kOperatorClasses) j[operator_class_name(c)] = curve_json(p.curve(c));
  write_json_file(path, j, 1);
}

OperatorPrior load_prior(const std::string& path) {
  const std::string text = read_file_bytes(path);
  OperatorPrior p = parse_prior(text, path);
  p.file_fingerprint = fingerprint(text);
  return p;
}

OperatorPrior parse_prior(std::string_view text, const std::string& path) {
  const nlohmann::json j = json_fields::parse(text, path);
  if (!j.is_object() || j.value("format", "") != kOperatorPriorFormat)
    throw Error(path + ": field 'format' must be \"" + std::string(kOperatorPriorFormat) +
                "\" (a prior from `duet fit-ops`)");
  using namespace json_fields;
  OperatorPrior p;
  const auto object_field = [&](const char* key) -> const nlohmann::json& {
    const nlohmann::json& v = require(j, key, path);
    if (!v.is_object()) throw Error(path + ": field '" + key + "' must be an object, got " + v.dump());
    return v;
  };
  p.device = require_string(j, "device", path);
  p.gpu_name = optional_string(j, "gpu", path);
  p.created_utc = optional_string(j, "created_utc", path);
  p.git_revision = optional_string(j, "git_revision", path);
  p.source = optional_string(j, "source", path);
  const std::string covers = path + ": covers";
  const nlohmann::json& cov = object_field("covers");
  p.covers.dtype = require_string(cov, "dtype", covers);
  try {
    dtype_from_name(p.covers.dtype);
  } catch (const Error& e) {
    throw Error(covers + ": field 'dtype': " + e.what());
  }
  p.covers.architecture = require_string(cov, "architecture", covers);
  const nlohmann::json& dims = require(cov, "head_dims", covers);
  if (!dims.is_array())
    throw Error(covers + ": field 'head_dims' must be a list of integers, got " + dims.dump());
  for (const nlohmann::json& d : dims) {
    if (!d.is_number_integer() || d.get<std::int64_t>() <= 0 || d.get<std::int64_t>() > 1024)
      throw Error(covers + ": field 'head_dims' holds " + d.dump() + ", not a head size in 1 to 1024");
    p.covers.head_dims.push_back(d.get<int>());
  }
  const nlohmann::json& elementwise = object_field("elementwise");
  p.elementwise_fixed_s = require_number(elementwise, "fixed_s", path + ": elementwise");
  p.elementwise_bandwidth_efficiency =
      require_number(elementwise, "bandwidth_efficiency", path + ": elementwise");
  if (j.contains("held_out")) p.held_out_json = j["held_out"].dump();
  std::vector<std::string> known = {"format", "device", "gpu",         "created_utc", "git_revision",
                                    "source", "covers", "elementwise", "held_out"};
  for (OperatorClass c : kOperatorClasses) known.emplace_back(operator_class_name(c));
  check_known_fields(j, known, path);
  for (OperatorClass c : kOperatorClasses) {
    const std::string what = path + ": " + operator_class_name(c);
    if (!j.contains(operator_class_name(c))) throw Error(what + ": missing");
    p.curve(c) = curve_from_json(j[operator_class_name(c)], what);
    const std::vector<CurveAxis> want = operator_axes(c);
    bool same = p.curve(c).axes.size() == want.size();
    // Names and knots: a knot moved would apply each slowdown to another shape, without a word.
    for (std::size_t i = 0; same && i < want.size(); ++i)
      same = p.curve(c).axes[i].name == want[i].name && p.curve(c).axes[i].knots == want[i].knots;
    if (!same)
      throw Error(what +
                  ": its axes are not the ones this duet prices that class by; re-fit with `duet fit-ops`");
  }
  if (p.covers.head_dims.empty()) throw Error(path + ": covers.head_dims is empty");
  if (!(p.elementwise_fixed_s >= 0 && p.elementwise_fixed_s < kMaxKernelFixedS) ||
      !(p.elementwise_bandwidth_efficiency > 0 && p.elementwise_bandwidth_efficiency <= 1))
    throw Error(path +
                ": elementwise needs 0 <= fixed_s < 0.001 (seconds) and 0 < bandwidth_efficiency <= 1");
  return p;
}

void check_prior(const OperatorPrior& p, const ModelSpec& model, const std::string& device,
                 const std::string& origin) {
  if (p.device != device)
    throw Error(origin + ": the operator prior was fitted for device '" + p.device + "', not '" + device +
                "'");
  if (dtype_from_name(p.covers.dtype) != model.dtype)
    throw Error(origin + ": the operator prior covers " + dtype_name(dtype_from_name(p.covers.dtype)) +
                " kernels (" + p.covers.architecture + "), and " + model.name + " is " +
                dtype_name(model.dtype) + "; price it with --cost-model roofline");
}

OperatorCostModel::OperatorCostModel(const GpuSpec& gpu, const ModelSpec& model, OperatorPrior prior,
                                     RooflineParams launch_and_host)
    : gpu_(gpu), model_(model), prior_(std::move(prior)), p_(launch_and_host) {
  model_.validate();
  const std::vector<int>& dims = prior_.covers.head_dims;
  head_dim_measured_ = std::find(dims.begin(), dims.end(), model_.head_dim) != dims.end();
}

double OperatorCostModel::kernel(OperatorClass c, const OperatorPoint& point, bool eager, StepBreakdown& b,
                                 const char* what) const {
  const OperatorCurve& curve = prior_.curve(c);
  // Two second coordinates beyond the tables are priced at their edge, unflagged. A GEMM wider than
  // the tables (n: an LM head over a 128k vocabulary) is tiled along n; the tables' slowdown is flat
  // within ~10% from n = 8192 to 65536, so the edge's is no guess. Decode attention over more KV
  // heads than the tables' 8 (a multi-head model's) has more of the same work items, which the
  // first axis counts; the second, KV heads alone, tells how a long context splits. (The weights
  // clamp every coordinate to its knots, so the probe's are the point's.)
  CurveCoords probe = point.coords;
  if (c != OperatorClass::prefill_attention) probe[1] = std::min(probe[1], curve.axes[1].knots.back());
  const CurveWeights w = curve.weights(probe);
  // The attention tables may not hold the model's head_dim (A100's hold only 128): the curve's
  // knot there is its neighbours', by the fit's smoothness, so it is an extrapolation too.
  const bool head_dim_ok = c == OperatorClass::gemm || head_dim_measured_;
  if (!w.inside || !head_dim_ok) {
    std::string where = std::string(what) + " (" + operator_class_name(c);
    for (std::size_t i = 0; i < curve.axes.size(); ++i) {
      char coord[64];
      std::snprintf(coord, sizeof coord, " %s=%.0f", curve.axes[i].name.c_str(), point.coords[i]);
      where += coord;
    }
    b.outside.push_back(where + (head_dim_ok ? ")" : ", a head_dim the tables lack)"));
  }
  const double t = curve.time_at(point.roofline_s, w);
  return eager ? std::max(t, gpu_.kernel_launch_s) : t;
}

namespace {

// The decode curve's largest measured query rows per KV head: a tile of a chunk priced as decode.
double largest_group(const OperatorCurve& decode) {
  for (const CurveAxis& a : decode.axes)
    if (a.name == "group") return a.knots.back();
  throw Error("the decode attention curve has no 'group' axis");
}

const std::vector<double>& axis_knots(const OperatorCurve& curve, const char* name) {
  for (const CurveAxis& a : curve.axes)
    if (a.name == name) return a.knots;
  throw Error(std::string("an operator curve has no '") + name + "' axis");
}

// How far rows may be padded: past 64x the padding's own work outweighs any floor.
constexpr double kMaxPadding = 64;

// Kernels pad rows to their tiles, so no shape costs more than one of more rows: the cheapest of
// `price(r, out)` at `rows` and at each of the axis's `knots` above it, up to kMaxPadding times it.
// The warnings of the one chosen go into `b`.
template <class Price>
double cheapest_padded(double rows, const std::vector<double>& knots, StepBreakdown& b, Price&& price) {
  double best = std::numeric_limits<double>::infinity();
  StepBreakdown chosen;
  auto price_as = [&](double r) {
    StepBreakdown priced;
    const double t = price(r, priced);
    if (t < best) best = t, chosen = std::move(priced);
  };
  price_as(rows);
  for (double knot : knots)
    if (knot > rows && knot <= kMaxPadding * rows) price_as(knot);
  b.outside.insert(b.outside.end(), chosen.outside.begin(), chosen.outside.end());
  return best;
}

}  // namespace

// What an extrapolation warning calls a prefill chunk priced as decode (below): the decode curve's
// "group" is then the chunk's query rows per KV head.
constexpr const char* kChunkAsDecode =
    "attention of a chunk after its cached context, priced as decode with its query rows per KV head "
    "as the group";

// The tables' prefill kernels start from an empty cache, so a few new tokens after a long cached
// context would take their slowdown from a kernel of a few query rows and no keys, floor-bound
// (8-67x the roofline at one token in the H100 prior), and apply it to the context's reads. Such a
// chunk is a decode with more query rows per KV head, in tiles of the decode curve's largest
// measured group (64 rows: 16 tokens of a 4-query group), each tile reading the context again. A
// chunk after a context costs the cheaper of that and the prefill curve, as a kernel picks its
// tiling: the first for a few tokens after a long context, the second once a chunk fills tiles.
double OperatorCostModel::prefill_attention(const BatchShape& s, bool eager, StepBreakdown& b) const {
  const ModelSpec& m = model_;
  const double chunk = double(s.prefill_tokens) / s.prefill_seqs;
  const double context = double(s.prefill_context_tokens) / s.prefill_seqs;
  StepBreakdown as_prefill, as_decode;
  // A kernel's query tiles are padded (FlashAttention's hold 64-128 rows), so a chunk never costs
  // more than a longer one: the curve, fitted where a chunk starts from an empty cache, takes a
  // few query rows' floor-bound slowdown to a roofline that long context reads dominate, and
  // priced 49 tokens after 32,768 above 72. The chunk is priced at its own length and at the
  // curve's query_len knots up to kMaxPadding times it, the FLOPs scaled to each, the cheapest kept.
  const double keys_per_chunk = chunk * context + chunk * (chunk + 1) / 2;
  const double prefill = cheapest_padded(
      chunk, axis_knots(prior_.prefill_attention, "query_len"), as_prefill,
      [&](double query_len, StepBreakdown& priced) {
        const double keys = s.prefill_attention_keys *
                            (query_len * context + query_len * (query_len + 1) / 2) / keys_per_chunk;
        return kernel(
            OperatorClass::prefill_attention,
            prefill_attention_point(gpu_, s.prefill_seqs, query_len, keys, double(s.prefill_context_tokens),
                                    m.num_heads, m.num_kv_heads, m.head_dim),
            eager, priced, "attention");
      });
  const double decode =
      context > 0 ? kernel(OperatorClass::decode_attention,
                           chunk_on_context_point(gpu_, s.prefill_seqs, chunk, context,
                                                  s.prefill_attention_keys, m.num_heads, m.num_kv_heads,
                                                  m.head_dim, largest_group(prior_.decode_attention)),
                           eager, as_decode, kChunkAsDecode)
                  : prefill;
  const StepBreakdown& chosen = decode < prefill ? as_decode : as_prefill;
  b.outside.insert(b.outside.end(), chosen.outside.begin(), chosen.outside.end());
  // The prefill curve has no context coordinate to flag: a context longer than any the tables
  // measured (the decode curve's longest) is flagged here, whichever kernel priced it.
  const double longest = axis_knots(prior_.decode_attention, "context").back();
  if (decode >= prefill && context + chunk > longest) {
    char where[160];
    std::snprintf(
        where, sizeof where,
        "attention (a chunk of %.0f tokens after %.0f cached, beyond the tables' longest context %.0f)",
        chunk, context, longest);
    b.outside.emplace_back(where);
  }
  return std::min(prefill, decode);
}

// A GEMM of m rows never costs more than one of more rows: cuBLAS pads m to its tiles. The curve,
// smoothed through knots the tables lack (n = 32768 between their 16384 and 51200), priced
// Llama-3.1-8B's gate_up_proj at m = 1 above m = 4 on the H100 (94 against 81 us), and a decode
// step of one sequence 6% above three. So m is priced at itself and at the curve's m knots up to
// kMaxPadding times it, the FLOPs those rows' own, and the cheapest kept.
double OperatorCostModel::gemm(double rows, double n, double k, bool eager, StepBreakdown& b,
                               const char* what) const {
  return cheapest_padded(rows, axis_knots(prior_.gemm, "m"), b, [&](double m, StepBreakdown& priced) {
    return kernel(OperatorClass::gemm, gemm_point(gpu_, m, n, k), eager, priced, what);
  });
}

double OperatorCostModel::elementwise(double bytes, bool eager) const {
  const double t =
      prior_.elementwise_fixed_s + bytes / (gpu_.hbm_bandwidth * prior_.elementwise_bandwidth_efficiency);
  return eager ? std::max(t, gpu_.kernel_launch_s) : t;
}

StepBreakdown OperatorCostModel::by_operator(const BatchShape& logical) const {
  const ModelSpec& m = model_;
  StepBreakdown b;
  b.layers = m.num_layers;
  const bool eager = graph_batch(p_, logical) == 0;
  const BatchShape s = executed_shape(p_, logical);
  const double tokens = double(s.prefill_tokens + s.decode_tokens);
  const double h = m.hidden_size, hd = m.head_dim, heads = m.num_heads, kvh = m.num_kv_heads;
  const double q = heads * hd, kv = kvh * hd, inter = m.intermediate_size;
  auto& l = b.per_layer_s;
  if (tokens > 0) {
    // The layer's GEMMs depend on the token count alone, which most steps repeat (a decode batch
    // of the same size): the last count's times are kept, unless a GEMM was beyond the tables (its
    // warning is then made again).
    if (gemm_memo_.tokens == tokens && gemm_memo_.eager == eager) {
      std::copy(gemm_memo_.s.begin(), gemm_memo_.s.end(), l.begin() + kQkvProj);
    } else {
      const std::size_t warned = b.outside.size();
      l[kQkvProj] = gemm(tokens, q + 2 * kv, h, eager, b, "qkv_proj");
      l[kOProj] = gemm(tokens, h, q, eager, b, "o_proj");
      l[kGateUpProj] = gemm(tokens, 2 * inter, h, eager, b, "gate_up_proj");
      l[kDownProj] = gemm(tokens, h, inter, eager, b, "down_proj");
      if (b.outside.size() == warned) {
        gemm_memo_ = {tokens, eager, {}};
        std::copy(l.begin() + kQkvProj, l.begin() + kDownProj + 1, gemm_memo_.s.begin());
      }
    }
    // Attention at the real rows: a graph step's padding rows are decodes of one token with no
    // cached context (core/executor.hpp), whose one key each is nothing beside the real rows' KV.
    // Averaged into the context they would price the real rows' long contexts as short ones over
    // more sequences, which the curve finds cheaper: 33 sequences at 8,192 priced below 32.
    if (logical.decode_seqs > 0) {
      const double seqs = logical.decode_seqs;
      const double context = double(logical.decode_context_tokens + logical.decode_seqs) / seqs;
      const OperatorPoint p = decode_attention_point(gpu_, seqs, context, heads, kvh, hd);
      l[kAttention] += kernel(OperatorClass::decode_attention, p, eager, b, "attention");
    }
    if (s.prefill_seqs > 0) l[kAttention] += prefill_attention(s, eager, b);
    const double act = kBf16 * tokens;  // bytes per feature of the batch's activations
    // The input and post-attention RMSNorms, each fused with the residual add before it (it reads
    // the residual and the delta, and writes both): one kernel each, as the CUDA engine runs them.
    const double add_norm_bytes = 4 * act * h + kBf16 * h;
    l[kNorm] = 2 * elementwise(add_norm_bytes, eager);
    // RoPE on Q and K, in place; Qwen3's head norms run in the same pass (kernels::rope's HeadNorm).
    l[kRope] = elementwise(2 * act * (q + kv), eager);
    l[kAct] = elementwise(act * 3 * inter, eager);       // SiLU(gate) * up
    l[kKvWrite] = elementwise(2 * act * 2 * kv, eager);  // K and V into the paged cache
    b.other_s += elementwise(2 * act * h, eager) + elementwise(add_norm_bytes, eager);  // embed, final norm
  }
  if (s.logit_rows > 0 && m.can_generate()) {
    b.lm_head_s = gemm(s.logit_rows, m.vocab_size, h, eager, b, "lm_head");
    b.sampling_s = elementwise(4.0 * s.logit_rows * m.vocab_size, eager);  // one pass over fp32 logits
  } else if (s.logit_rows > 0) {
    // A score head: a classifier's hidden layer is a GEMM (its bias and ReLU in the epilogue); the
    // last layer a reduction per row and output that reads its input rows and weights once.
    const double outputs = m.logits_width();
    if (m.score_head == ScoreHead::Classifier) b.lm_head_s = gemm(s.logit_rows, h, h, eager, b, "score_head");
    b.lm_head_s +=
        elementwise(kBf16 * (s.logit_rows * h + outputs * h) + 4.0 * s.logit_rows * outputs, eager);
    b.sampling_s = elementwise(4.0 * s.logit_rows * outputs, eager);  // the two columns' softmax
  }
  // The step's copy-on-write copies are one kernel, launched before the forward and outside its graph
  // (the CUDA engine's copy_blocks), that reads and writes each block in every layer.
  if (s.copies > 0)
    b.other_s += elementwise(2.0 * s.copies * s.block_size * double(m.kv_bytes_per_token()), true);
  if (!eager) b.other_s += gpu_.kernel_launch_s;  // the graph's one launch
  b.host_s = p_.cpu_step_s + p_.cpu_per_seq_s * double(logical.prefill_seqs + logical.decode_seqs);
  return b;
}

StepCost OperatorCostModel::step_cost(const BatchShape& shape) const {
  const StepBreakdown b = by_operator(shape);
  ++steps_;
  if (!b.outside.empty()) {
    if (!steps_outside_) first_outside_ = b.outside.front();
    ++steps_outside_;
  }
  return {b.device_s(), b.host_s};
}

std::string OperatorCostModel::describe() const {
  // The prior file's fingerprint: its path alone would not tell an edited prior from the one used.
  return "operator(" + model_.name + " on " + gpu_.name +
         (prior_.file_fingerprint.empty() ? "" : ", prior " + prior_.file_fingerprint) + ")";
}

std::string OperatorCostModel::extrapolation_report() const {
  if (!steps_outside_) return {};
  return std::to_string(steps_outside_) + " of " + std::to_string(steps_) +
         " steps had a kernel beyond the operator prior's tables, priced at the nearest edge (first: " +
         first_outside_ + ")";
}

}  // namespace duet
