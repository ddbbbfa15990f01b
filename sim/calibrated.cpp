#include "sim/calibrated.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/executor.hpp"
#include "core/json_fields.hpp"
#include "core/mix.hpp"
#include "io/csv_table.hpp"
#include "io/file_bytes.hpp"

namespace duet {

namespace {
constexpr const char* kFormat = "duet-cost-profile/3";
// Format 2 had no decode_distinct_context_tokens term: its decode_context_tokens term prices every
// KV token the decodes read, shared or not, which is what the new term at 0 prices.
constexpr const char* kFormatWithoutDistinct = "duet-cost-profile/2";
// A feature this much beyond its fitted maximum counts as extrapolation.
constexpr double kExtrapolationMargin = 1.10;
}  // namespace

const std::array<const char*, kNumDeviceFeatures>& device_feature_names() {
  static constexpr std::array<const char*, kNumDeviceFeatures> names = {"constant",
                                                                        "batched_tokens",
                                                                        "batched_logits",
                                                                        "prefill_tokens",
                                                                        "decode_tokens",
                                                                        "prefill_seqs",
                                                                        "logit_rows",
                                                                        "decode_context_tokens",
                                                                        "prefill_attention_keys",
                                                                        "prefill_tokens_squared",
                                                                        "prefill_context_tokens",
                                                                        "copies",
                                                                        "decode_distinct_context_tokens"};
  return names;
}

const std::array<const char*, kNumHostFeatures>& host_feature_names() {
  static constexpr std::array<const char*, kNumHostFeatures> names = {"host_constant", "host_seqs",
                                                                      "host_prefill_tokens"};
  return names;
}

DeviceFeatures device_features(const BatchShape& s) {
  return {1.0,
          s.prefill_tokens + s.decode_tokens >= 2 ? 1.0 : 0.0,
          s.logit_rows >= 2 ? 1.0 : 0.0,
          double(s.prefill_tokens),
          double(s.decode_tokens),
          double(s.prefill_seqs),
          double(s.logit_rows),
          double(s.decode_context_tokens),
          s.prefill_attention_keys,
          s.prefill_tokens_squared,
          double(s.prefill_context_tokens),
          double(s.copies),
          double(s.decode_distinct_context_tokens)};
}

HostFeatures host_features(const BatchShape& s) {
  return {1.0, double(s.prefill_seqs + s.decode_seqs), double(s.prefill_tokens)};
}

BatchShape device_shape(const BatchShape& s, bool cuda_graphs) {
  return cuda_graphs ? cuda_graph_shape(s) : s;
}

const char* regime_of(const BatchShape& s) {
  if (s.prefill_tokens == 0) return "decode";
  if (s.decode_tokens == 0) return "prefill";
  return "mixed";
}

std::string model_shape(const ModelSpec& m) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "L%d h%d q%d kv%d d%d f%d v%d %s", m.num_layers, m.hidden_size, m.num_heads,
                m.num_kv_heads, m.head_dim, m.intermediate_size, m.vocab_size, dtype_name(m.dtype));
  return std::string(buf) + (m.qkv_bias ? " qkv-bias" : "") + (m.qk_norm ? " qk-norm" : "") +
         (m.can_generate() ? "" : std::string(" score-head-") + score_head_name(m.score_head));
}

FitStats fit_stats(const std::vector<double>& pred, const std::vector<double>& y) {
  FitStats f;
  f.rows = y.size();
  if (y.empty()) return f;
  double mean = 0, ss_res = 0, ss_tot = 0;
  for (double v : y) mean += v / double(y.size());
  std::vector<double> rel;
  for (std::size_t i = 0; i < y.size(); ++i) {
    ss_res += (pred[i] - y[i]) * (pred[i] - y[i]);
    ss_tot += (y[i] - mean) * (y[i] - mean);
    rel.push_back(y[i] > 0 ? std::abs(pred[i] / y[i] - 1.0) : 0.0);
  }
  f.r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 1.0;
  f.rmse_s = std::sqrt(ss_res / double(y.size()));
  f.median_abs_rel_error = quantile(rel, 0.5);
  f.p90_abs_rel_error = quantile(rel, 0.9);
  f.max_abs_rel_error = rel.empty() ? 0.0 : *std::max_element(rel.begin(), rel.end());
  return f;
}

namespace {

// Collinear measured columns have no unique fit: any split of their cost between them explains the
// rows equally well. Returns a line naming them, or "" when the columns are independent.
template <class Name>
std::string rank_note(const std::vector<std::vector<double>>& x, const std::vector<double>& y,
                      const std::vector<bool>& active, const std::string& what, const Name& name) {
  std::vector<std::size_t> cols;
  for (std::size_t j = 0; j < active.size(); ++j)
    if (active[j]) cols.push_back(j);
  if (cols.empty() || x.size() < cols.size()) return "";  // the solver's own errors say why
  Eigen::MatrixXd a(Eigen::Index(x.size()), Eigen::Index(cols.size()));
  for (std::size_t i = 0; i < x.size(); ++i)
    for (std::size_t j = 0; j < cols.size(); ++j) a(Eigen::Index(i), Eigen::Index(j)) = x[i][cols[j]] / y[i];
  for (Eigen::Index j = 0; j < a.cols(); ++j) a.col(j) /= a.col(j).cwiseAbs().maxCoeff();
  Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(a);
  qr.setThreshold(1e-9);
  if (qr.rank() == a.cols()) return "";
  std::string dependent;
  for (Eigen::Index r = qr.rank(); r < a.cols(); ++r)
    dependent += (dependent.empty() ? "" : ", ") + name(cols[std::size_t(qr.colsPermutation().indices()(r))]);
  return what + ": the measurements cannot tell " + dependent + " apart from the other features (rank " +
         std::to_string(qr.rank()) + " of " + std::to_string(a.cols()) +
         "): their coefficients split one cost arbitrarily; rows that vary them independently would separate "
         "them";
}

}  // namespace

std::vector<double> fit_linear(const std::vector<std::vector<double>>& x, const std::vector<double>& y,
                               const std::string& what, std::span<const char* const> names,
                               std::vector<std::string>* warnings) {
  if (x.size() != y.size()) throw Error(what + ": feature and duration counts differ");
  const std::size_t k = x.empty() ? 0 : x[0].size();
  auto name = [&](std::size_t j) {
    return j < names.size() ? std::string(names[j]) : "column " + std::to_string(j + 1);
  };
  // Columns that never leave zero carry no information: they stay out of the fit (coefficient 0).
  std::vector<bool> active(k, false);
  for (std::size_t i = 0; i < x.size(); ++i)
    for (std::size_t j = 0; j < k; ++j) {
      if (!std::isfinite(x[i][j]) || x[i][j] < 0)
        throw Error(what + ": row " + std::to_string(i + 1) + ": " + name(j) + " is " +
                    std::to_string(x[i][j]) + "; features are counts, >= 0 and finite");
      active[j] = active[j] || x[i][j] != 0.0;
    }
  for (double v : y)
    if (!std::isfinite(v) || v <= 0) throw Error(what + ": durations must be positive and finite");
  if (const std::string note = rank_note(x, y, active, what, name); !note.empty() && warnings)
    warnings->push_back(note);
  std::vector<double> coef(k, 0.0);
  // Active-set non-negativity: solve, drop the most negative coefficient, solve again. The features
  // are physical costs, so a negative one only ever absorbs collinearity or noise.
  for (;;) {
    std::vector<std::size_t> cols;
    for (std::size_t j = 0; j < k; ++j)
      if (active[j]) cols.push_back(j);
    if (cols.empty()) throw Error(what + ": no feature varies in the measurements");
    const Eigen::Index n = Eigen::Index(x.size()), m = Eigen::Index(cols.size());
    if (n < m)
      throw Error(what + ": " + std::to_string(n) + " rows cannot fit " + std::to_string(m) +
                  " coefficients");
    Eigen::MatrixXd a(n, m);
    Eigen::VectorXd b(n);
    for (Eigen::Index i = 0; i < n; ++i) {
      const double w = 1.0 / y[std::size_t(i)];  // relative error
      for (Eigen::Index j = 0; j < m; ++j) a(i, j) = w * x[std::size_t(i)][cols[std::size_t(j)]];
      b(i) = 1.0;
    }
    // Features span ~12 orders of magnitude (attention keys vs. a constant): scale the columns.
    Eigen::VectorXd scale = a.cwiseAbs().colwise().maxCoeff().transpose();
    for (Eigen::Index j = 0; j < m; ++j) scale(j) = scale(j) > 0 ? scale(j) : 1.0;
    const Eigen::VectorXd cs = (a * scale.cwiseInverse().asDiagonal()).colPivHouseholderQr().solve(b);
    std::size_t worst = k;
    double worst_value = 0;
    for (Eigen::Index j = 0; j < m; ++j) {
      const double c = cs(j) / scale(j);
      if (!std::isfinite(c)) throw Error(what + ": the fit did not converge (non-finite coefficient)");
      coef[cols[std::size_t(j)]] = c;
      if (c < worst_value) worst_value = c, worst = cols[std::size_t(j)];
    }
    if (worst == k) return coef;
    active[worst] = false;
    coef[worst] = 0.0;
  }
}

namespace {

template <std::size_t N>
double dot(const std::array<double, N>& a, const std::array<double, N>& b) {
  double s = 0;
  for (std::size_t i = 0; i < N; ++i) s += a[i] * b[i];
  return s;
}

template <std::size_t N>
std::array<double, N> to_array(const std::vector<double>& v) {
  std::array<double, N> a{};
  std::copy(v.begin(), v.end(), a.begin());
  return a;
}

}  // namespace

CalibrationProfile fit_profile(const std::vector<MeasuredStep>& steps, bool cuda_graphs) {
  CalibrationProfile p;
  p.cuda_graphs = cuda_graphs;
  std::vector<std::vector<double>> xd, xh;
  std::vector<double> yd, yh;
  for (const MeasuredStep& s : steps) {
    const DeviceFeatures d = device_features(device_shape(s.shape, cuda_graphs));
    xd.emplace_back(d.begin(), d.end());
    yd.push_back(s.device_s);
    for (std::size_t j = 0; j < kNumDeviceFeatures; ++j) p.device_max[j] = std::max(p.device_max[j], d[j]);
    if (s.host_s <= 0) continue;
    const HostFeatures h = host_features(s.shape);
    xh.emplace_back(h.begin(), h.end());
    yh.push_back(s.host_s);
    for (std::size_t j = 0; j < kNumHostFeatures; ++j) p.host_max[j] = std::max(p.host_max[j], h[j]);
  }
  p.device_coefficients = to_array<kNumDeviceFeatures>(
      fit_linear(xd, yd, "calibration (device time)", device_feature_names(), &p.warnings));
  if (!yh.empty())
    p.host_coefficients = to_array<kNumHostFeatures>(
        fit_linear(xh, yh, "calibration (host time)", host_feature_names(), &p.warnings));

  std::vector<double> pd, ph;
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> by_regime;
  for (const MeasuredStep& s : steps) {
    const double d = dot(p.device_coefficients, device_features(device_shape(s.shape, cuda_graphs)));
    const double h = dot(p.host_coefficients, host_features(s.shape));
    pd.push_back(d);
    if (s.host_s > 0) ph.push_back(h);
    auto& [pred, meas] = by_regime[regime_of(s.shape)];
    pred.push_back(d + (s.host_s > 0 ? h : 0.0));
    meas.push_back(s.device_s + std::max(0.0, s.host_s));
  }
  p.device_fit = fit_stats(pd, yd);
  p.host_fit = fit_stats(ph, yh);
  for (const auto& [name, pm] : by_regime) p.regimes[name] = fit_stats(pm.first, pm.second);
  return p;
}

namespace {

double parse_number(const std::string& text, const std::string& where) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v))
    throw Error(where + ": '" + text + "' is not a number");
  return v;
}

}  // namespace

CalibrationProfile fit_profile_csv(const std::string& path) {
  CsvTable table(path, "table of measured steps");
  const std::vector<std::string>& header = table.header();
  const std::size_t duration = table.column("duration_s");
  // The shape's members by the device feature names (constant aside).
  const std::map<std::string, void (*)(BatchShape&, double)> setters = {
      {"prefill_tokens", [](BatchShape& s, double v) { s.prefill_tokens = int(v); }},
      {"decode_tokens", [](BatchShape& s, double v) { s.decode_tokens = int(v); }},
      {"decode_seqs", [](BatchShape& s, double v) { s.decode_seqs = int(v), s.decode_tokens = int(v); }},
      {"prefill_seqs", [](BatchShape& s, double v) { s.prefill_seqs = int(v); }},
      {"logit_rows", [](BatchShape& s, double v) { s.logit_rows = int(v); }},
      {"decode_context_tokens", [](BatchShape& s, double v) { s.decode_context_tokens = std::int64_t(v); }},
      {"decode_distinct_context_tokens",
       [](BatchShape& s, double v) { s.decode_distinct_context_tokens = std::int64_t(v); }},
      {"prefill_attention_keys", [](BatchShape& s, double v) { s.prefill_attention_keys = v; }},
      {"prefill_context_tokens", [](BatchShape& s, double v) { s.prefill_context_tokens = std::int64_t(v); }},
      {"prefill_tokens_squared", [](BatchShape& s, double v) { s.prefill_tokens_squared = v; }},
      {"copies", [](BatchShape& s, double v) { s.copies = int(v); }},
  };
  std::vector<std::pair<std::size_t, void (*)(BatchShape&, double)>> used;
  for (const auto& [name, set] : setters)
    if (table.has(name)) used.emplace_back(table.column(name), set);
  // A misspelt column would be a feature left at 0, silently.
  for (const std::string& name : header) {
    if (setters.count(name) || name == "duration_s" || name == "host_s") continue;
    std::string valid = "duration_s, host_s";
    for (const auto& [known, set] : setters) valid += ", " + known;
    throw Error(path + ":1: unknown column '" + name + "' (valid: " + valid + ")");
  }
  if (used.empty()) throw Error(path + ":1: no feature column (e.g. prefill_tokens, decode_seqs)");
  std::vector<MeasuredStep> steps;
  for (std::vector<std::string> f; table.next(f);) {
    const std::string where = table.where();
    MeasuredStep m;
    for (const auto& [i, set] : used) {
      const double v = parse_number(f[i], where);
      if (v < 0) throw Error(where + ": " + header[i] + " is " + f[i] + ", a count that cannot be negative");
      // The two sums of squares are real numbers; the context sums whole counts of 64 bits (taken
      // below 2^53, where a double holds every integer); the rest whole counts of 32 bits.
      const std::string& name = header[i];
      const bool real = name == "prefill_attention_keys" || name == "prefill_tokens_squared";
      const bool wide = name == "decode_context_tokens" || name == "decode_distinct_context_tokens" ||
                        name == "prefill_context_tokens";
      const double bound = wide ? 9007199254740992.0 : double(std::numeric_limits<std::int32_t>::max());
      if (!real && !(v == std::floor(v) && v <= bound))
        throw Error(where + ": " + name + " is " + f[i] + ", not a whole count below 2^" +
                    (wide ? "53" : "31"));
      set(m.shape, v);
    }
    m.device_s = parse_number(f[duration], where);
    if (!(m.device_s > 0)) throw Error(where + ": duration_s is " + f[duration] + ", not a positive time");
    if (table.has("host_s")) m.host_s = parse_number(f[table.column("host_s")], where);
    steps.push_back(m);
  }
  CalibrationProfile p = fit_profile(steps);
  p.source = path;
  p.backend = "fit";
  return p;
}

CalibrationProfile fit_profile_steps(const std::vector<StepRecord>& steps, bool cuda_graphs) {
  std::vector<MeasuredStep> rows;
  for (const StepRecord& r : steps)
    rows.push_back({shape_of(r), r.duration_s, r.host_s > 0 ? r.host_s : -1.0});
  CalibrationProfile p = fit_profile(rows, cuda_graphs);
  p.backend = "fit";
  return p;
}

namespace {

nlohmann::json stats_json(const FitStats& f) {
  return {{"rows", f.rows},
          {"r2", f.r2},
          {"rmse_s", f.rmse_s},
          {"median_abs_rel_error", f.median_abs_rel_error},
          {"p90_abs_rel_error", f.p90_abs_rel_error},
          {"max_abs_rel_error", f.max_abs_rel_error}};
}

FitStats stats_of(const nlohmann::json& j) {
  FitStats f;
  f.rows = j.value("rows", std::size_t(0));
  f.r2 = j.value("r2", 0.0);
  f.rmse_s = j.value("rmse_s", 0.0);
  f.median_abs_rel_error = j.value("median_abs_rel_error", 0.0);
  f.p90_abs_rel_error = j.value("p90_abs_rel_error", 0.0);
  f.max_abs_rel_error = j.value("max_abs_rel_error", 0.0);
  return f;
}

template <std::size_t N>
nlohmann::json terms_json(const std::array<const char*, N>& names, const std::array<double, N>& coef,
                          const std::array<double, N>& max) {
  nlohmann::json j = nlohmann::json::array();
  for (std::size_t i = 0; i < N; ++i)
    j.push_back({{"feature", names[i]}, {"coefficient", coef[i]}, {"max", max[i]}});
  return j;
}

// Reads the first `count` terms (all but the newest for an older format); the others stay 0.
template <std::size_t N>
void read_terms(const nlohmann::json& j, const std::array<const char*, N>& names, std::array<double, N>& coef,
                std::array<double, N>& max, const std::string& origin, const char* field,
                std::size_t count = N) {
  if (!j.is_array() || j.size() != count)
    throw Error(origin + ": field '" + field + "' must list " + std::to_string(count) + " terms");
  for (std::size_t i = 0; i < count; ++i) {
    const std::string at = origin + ": " + field + "[" + std::to_string(i) + "]";
    const nlohmann::json& term = j[i];
    if (!term.is_object() || !term.contains("feature") || !term["feature"].is_string())
      throw Error(at + " must be an object {\"feature\": name, \"coefficient\": seconds, \"max\": value}");
    const std::string name = term["feature"].get<std::string>();
    if (name != names[i]) throw Error(at + " is '" + name + "', expected '" + names[i] + "'");
    auto number = [&](const char* key, bool required) {
      const auto it = term.find(key);
      if (it == term.end() && !required) return 0.0;
      if (it == term.end() || !it->is_number())
        throw Error(at + "." + key + " (" + name + ") must be a number" +
                    (it == term.end() ? ", and is missing" : ", got " + it->dump()));
      return it->get<double>();
    };
    coef[i] = number("coefficient", true);
    max[i] = number("max", false);
    // A term is seconds per unit of its feature: even the constant of a CPU step is milliseconds,
    // so an hour per unit is a corrupted file, not a measurement.
    if (!std::isfinite(coef[i]) || coef[i] < 0 || coef[i] > 3600)
      throw Error(origin + ": " + field + "." + name + " must be a number of seconds in [0, 3600], got " +
                  std::to_string(coef[i]));
    if (!std::isfinite(max[i]) || max[i] < 0)
      throw Error(origin + ": " + field + "." + name + ".max must be a non-negative number, got " +
                  std::to_string(max[i]));
  }
}

}  // namespace

void save_profile(const CalibrationProfile& p, const std::string& path) {
  nlohmann::json j;
  j["format"] = kFormat;
  j["model"] = p.model;
  j["model_shape"] = p.model_shape;
  j["device"] = p.device;
  j["device_name"] = p.device_name;
  j["backend"] = p.backend;
  if (p.cuda_graphs) j["cuda_graphs"] = true;
  j["created_utc"] = p.created_utc;
  j["git_revision"] = p.git_revision;
  j["source"] = p.source;
  j["grid"] = p.grid_json.empty() ? nlohmann::json::object() : nlohmann::json::parse(p.grid_json);
  j["device_terms"] = terms_json(device_feature_names(), p.device_coefficients, p.device_max);
  j["host_terms"] = terms_json(host_feature_names(), p.host_coefficients, p.host_max);
  if (p.alone_coefficients) {
    j["device_terms_alone"] = terms_json(device_feature_names(), *p.alone_coefficients, p.device_max);
    j["fit"]["device_alone"] = stats_json(p.alone_fit);
  }
  j["fit"]["device"] = stats_json(p.device_fit);
  j["fit"]["host"] = stats_json(p.host_fit);
  for (const auto& [name, f] : p.regimes) j["fit"]["regimes"][name] = stats_json(f);
  if (!p.warnings.empty()) j["fit"]["warnings"] = p.warnings;
  write_json_file(path, j, 2);
}

CalibrationProfile parse_profile(const std::string& text, const std::string& origin) {
  const nlohmann::json j = json_fields::parse(text, origin);
  try {
    const std::string format = j.is_object() && j.contains("format") && j["format"].is_string()
                                   ? j["format"].get<std::string>()
                                   : "";
    if (format != kFormat && format != kFormatWithoutDistinct)
      throw Error(origin + ": field 'format' must be \"" + kFormat +
                  "\" (a profile from `duet profile` or `duet fit`)");
    const std::size_t device_terms = kNumDeviceFeatures - (format == kFormatWithoutDistinct);
    CalibrationProfile p;
    // Optional texts, each named when it is not one (nlohmann's type error names no field).
    auto text = [&](const char* field) { return json_fields::optional_string(j, field, origin); };
    p.model = text("model");
    p.model_shape = text("model_shape");
    p.device = text("device");
    p.device_name = text("device_name");
    p.backend = text("backend");
    if (j.contains("cuda_graphs") && !j["cuda_graphs"].is_boolean())
      throw Error(origin + ": field 'cuda_graphs' must be true or false, got " + j["cuda_graphs"].dump());
    p.cuda_graphs = j.value("cuda_graphs", false);
    p.created_utc = text("created_utc");
    p.git_revision = text("git_revision");
    p.source = text("source");
    if (j.contains("grid")) p.grid_json = j["grid"].dump();
    for (const char* field : {"device_terms", "host_terms"})
      if (!j.contains(field)) throw Error(origin + ": missing field '" + field + "'");
    read_terms(j["device_terms"], device_feature_names(), p.device_coefficients, p.device_max, origin,
               "device_terms", device_terms);
    read_terms(j["host_terms"], host_feature_names(), p.host_coefficients, p.host_max, origin, "host_terms");
    if (std::all_of(p.device_coefficients.begin(), p.device_coefficients.end(),
                    [](double c) { return c == 0; }))
      throw Error(origin + ": every device term is 0, so every step would take no time");
    if (j.contains("device_terms_alone")) {
      DeviceFeatures alone{}, max{};
      read_terms(j["device_terms_alone"], device_feature_names(), alone, max, origin, "device_terms_alone",
                 device_terms);
      p.alone_coefficients = alone;
    }
    if (j.contains("fit")) {
      const auto& f = j["fit"];
      if (f.contains("device")) p.device_fit = stats_of(f["device"]);
      if (f.contains("host")) p.host_fit = stats_of(f["host"]);
      if (f.contains("device_alone")) p.alone_fit = stats_of(f["device_alone"]);
      if (f.contains("regimes"))
        for (const auto& [name, r] : f["regimes"].items()) p.regimes[name] = stats_of(r);
      if (f.contains("warnings")) p.warnings = f["warnings"].get<std::vector<std::string>>();
    }
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw Error(origin + ": bad or missing field (" + e.what() + ")");
  }
}

CalibrationProfile load_profile(const std::string& path) {
  const std::string text = read_file_bytes(path);
  CalibrationProfile p = parse_profile(text, path);
  p.file_fingerprint = fingerprint(text);
  return p;
}

CalibratedCostModel::CalibratedCostModel(CalibrationProfile profile)
    : profile_(std::move(profile)),
      warm_(profile_.alone_coefficients.value_or(profile_.device_coefficients)) {}

StepCost CalibratedCostModel::step_cost(const BatchShape& shape) const {
  return price(shape, profile_.device_coefficients);
}

StepCost CalibratedCostModel::warm_step_cost(const BatchShape& shape) const { return price(shape, warm_); }

StepCost CalibratedCostModel::price(const BatchShape& shape, const DeviceFeatures& device) const {
  const DeviceFeatures d = device_features(device_shape(shape, profile_.cuda_graphs));
  ++steps_;
  // Past the constant and the 0/1 switches. A term the profile never measured and prices at 0 (a
  // format-2 profile's distinct KV tokens, a table without the column) has no range to leave.
  for (std::size_t i = 3; i < kNumDeviceFeatures; ++i)
    if (d[i] > kExtrapolationMargin * profile_.device_max[i] && (profile_.device_max[i] > 0 || device[i] > 0))
      ++beyond_[i];
  // A step always takes some time, even where a fit of non-negative terms has no term for it.
  return {std::max(dot(device, d), 1e-7), dot(profile_.host_coefficients, host_features(shape))};
}

std::string CalibratedCostModel::describe() const {
  char buf[320];
  std::snprintf(buf, sizeof buf, "profile(%s on %s, %s, %zu steps, median |error| %.1f%%",
                profile_.model.c_str(), profile_.device.c_str(), profile_.source.c_str(),
                profile_.device_fit.rows, 100.0 * profile_.device_fit.median_abs_rel_error);
  std::string out = buf;
  if (profile_.alone_coefficients) {
    std::snprintf(buf, sizeof buf, "; warm caches %.1f%%", 100.0 * profile_.alone_fit.median_abs_rel_error);
    out += buf;
  }
  // The file's fingerprint: a run file that names the profile by its path alone would not tell an
  // edited profile from the one it ran with.
  return out + (profile_.file_fingerprint.empty() ? "" : ", " + profile_.file_fingerprint) + ")";
}

std::string CalibratedCostModel::extrapolation_report() const {
  std::string out;
  for (std::size_t i = 1; i < kNumDeviceFeatures; ++i) {
    if (!beyond_[i]) continue;
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s%lld of %lld steps had %s beyond the profile's fitted maximum (%.6g)",
                  out.empty() ? "" : "; ", (long long)beyond_[i], (long long)steps_,
                  device_feature_names()[i], profile_.device_max[i]);
    out += buf;
  }
  return out;
}

}  // namespace duet
