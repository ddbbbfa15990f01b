#include "sim/calibrated.hpp"

#include <Eigen/Dense>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace duet {

namespace {
constexpr const char* kFormat = "duet-cost-profile/1";
}

const std::array<const char*, kNumCalibrationFeatures>& calibration_feature_names() {
  static constexpr std::array<const char*, kNumCalibrationFeatures> names = {
      "prefill_tokens", "decode_seqs", "decode_context_tokens", "prefill_attention_keys", "constant"};
  return names;
}

std::array<double, kNumCalibrationFeatures> calibration_features(const BatchShape& s) {
  return {double(s.prefill_tokens), double(s.decode_seqs), double(s.decode_context_tokens), s.prefill_attention_keys,
          1.0};
}

CalibrationProfile fit_profile(const std::vector<std::array<double, kNumCalibrationFeatures>>& x,
                               const std::vector<double>& y) {
  const Eigen::Index n = Eigen::Index(x.size());
  const Eigen::Index k = Eigen::Index(kNumCalibrationFeatures);
  if (x.size() != y.size()) throw Error("calibration: feature and duration counts differ");
  if (n < k) throw Error("calibration: " + std::to_string(n) + " rows cannot fit " + std::to_string(k) + " coefficients");
  Eigen::MatrixXd a(n, k);
  Eigen::VectorXd b(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    for (Eigen::Index j = 0; j < k; ++j) a(i, j) = x[std::size_t(i)][std::size_t(j)];
    b(i) = y[std::size_t(i)];
  }
  // Features span ~12 orders of magnitude (keys vs. a constant): scale columns before solving.
  Eigen::VectorXd scale = a.cwiseAbs().colwise().maxCoeff().transpose();
  for (Eigen::Index j = 0; j < k; ++j) scale(j) = scale(j) > 0 ? scale(j) : 1.0;
  const Eigen::MatrixXd as = a * scale.cwiseInverse().asDiagonal();
  Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(as);
  const Eigen::VectorXd cs = qr.solve(b);
  CalibrationProfile p;
  for (Eigen::Index j = 0; j < k; ++j) p.coefficients[std::size_t(j)] = cs(j) / scale(j);
  // A feature that never varies (no prefill rows, say) leaves its coefficient undetermined: the
  // QR gives it zero, which is the honest answer for a shape the measurements never showed.
  const Eigen::VectorXd pred = as * cs;
  const double mean = b.mean();
  const double ss_res = (b - pred).squaredNorm();
  const double ss_tot = (b.array() - mean).square().sum();
  p.rows = std::size_t(n);
  p.rmse_s = std::sqrt(ss_res / double(n));
  p.r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 1.0;
  if (!std::isfinite(p.rmse_s)) throw Error("calibration: the fit did not converge (non-finite residual)");
  return p;
}

namespace {

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, ',')) {
    while (!field.empty() && (field.back() == '\r' || field.back() == ' ')) field.pop_back();
    out.push_back(field);
  }
  return out;
}

double parse_number(const std::string& text, const std::string& where) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v))
    throw Error(where + ": '" + text + "' is not a number");
  return v;
}

}  // namespace

CalibrationProfile fit_profile_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open calibration table");
  std::string line;
  if (!std::getline(in, line)) throw Error(path + ":1: empty file, expected a header");
  const auto header = split_csv(line);
  std::map<std::string, std::size_t> col;
  for (std::size_t i = 0; i < header.size(); ++i) col[header[i]] = i;
  std::array<std::size_t, kNumCalibrationFeatures> idx{};
  for (std::size_t j = 0; j + 1 < kNumCalibrationFeatures; ++j) {
    auto it = col.find(calibration_feature_names()[j]);
    if (it == col.end()) throw Error(path + ":1: missing column '" + calibration_feature_names()[j] + "'");
    idx[j] = it->second;
  }
  if (!col.count("duration_s")) throw Error(path + ":1: missing column 'duration_s'");
  std::vector<std::array<double, kNumCalibrationFeatures>> x;
  std::vector<double> y;
  for (int lineno = 2; std::getline(in, line); ++lineno) {
    if (line.empty() || line == "\r") continue;
    const auto f = split_csv(line);
    const std::string where = path + ":" + std::to_string(lineno);
    if (f.size() != header.size())
      throw Error(where + ": " + std::to_string(f.size()) + " fields, header has " + std::to_string(header.size()));
    std::array<double, kNumCalibrationFeatures> row{};
    for (std::size_t j = 0; j + 1 < kNumCalibrationFeatures; ++j) row[j] = parse_number(f[idx[j]], where);
    row[kNumCalibrationFeatures - 1] = 1.0;
    x.push_back(row);
    y.push_back(parse_number(f[col["duration_s"]], where));
  }
  CalibrationProfile p = fit_profile(x, y);
  p.source = path;
  return p;
}

CalibrationProfile fit_profile_steps(const std::vector<StepRecord>& steps) {
  std::vector<std::array<double, kNumCalibrationFeatures>> x;
  std::vector<double> y;
  for (const StepRecord& r : steps) {
    x.push_back({double(r.prefill_tokens), double(r.decode_seqs), double(r.decode_context_tokens),
                 r.prefill_attention_keys, 1.0});
    y.push_back(r.duration_s);
  }
  return fit_profile(x, y);
}

void save_profile(const CalibrationProfile& p, const std::string& path) {
  nlohmann::json j;
  j["format"] = kFormat;
  j["model"] = p.model;
  j["gpu"] = p.gpu;
  j["source"] = p.source;
  j["features"] = calibration_feature_names();
  j["coefficients"] = p.coefficients;
  j["fit"] = {{"rows", p.rows}, {"r2", p.r2}, {"rmse_s", p.rmse_s}};
  std::ofstream out(path);
  if (!out) throw Error(path + ": cannot write profile");
  out << j.dump(2) << "\n";
}

CalibrationProfile parse_profile(const std::string& text, const std::string& origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(origin + ": not valid JSON (" + e.what() + ")");
  }
  try {
    if (j.value("format", "") != kFormat)
      throw Error(origin + ": field 'format' must be \"" + kFormat + "\"");
    CalibrationProfile p;
    p.model = j.value("model", "");
    p.gpu = j.value("gpu", "");
    p.source = j.value("source", "");
    const auto& names = j.at("features");
    const auto& coefs = j.at("coefficients");
    if (!names.is_array() || names.size() != kNumCalibrationFeatures || !coefs.is_array() ||
        coefs.size() != kNumCalibrationFeatures)
      throw Error(origin + ": fields 'features' and 'coefficients' must list " +
                  std::to_string(kNumCalibrationFeatures) + " entries");
    for (std::size_t i = 0; i < kNumCalibrationFeatures; ++i) {
      if (names[i].get<std::string>() != calibration_feature_names()[i])
        throw Error(origin + ": feature " + std::to_string(i) + " is '" + names[i].get<std::string>() + "', expected '" +
                    calibration_feature_names()[i] + "'");
      p.coefficients[i] = coefs[i].get<double>();
    }
    if (j.contains("fit")) {
      p.rows = j["fit"].value("rows", std::size_t(0));
      p.r2 = j["fit"].value("r2", 0.0);
      p.rmse_s = j["fit"].value("rmse_s", 0.0);
    }
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw Error(origin + ": bad or missing field (" + e.what() + ")");
  }
}

CalibrationProfile load_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open cost profile");
  std::stringstream s;
  s << in.rdbuf();
  return parse_profile(s.str(), path);
}

CalibratedCostModel::CalibratedCostModel(CalibrationProfile profile) : profile_(std::move(profile)) {}

double CalibratedCostModel::step_time(const BatchShape& shape) const {
  const auto f = calibration_features(shape);
  double t = 0;
  for (std::size_t i = 0; i < kNumCalibrationFeatures; ++i) t += profile_.coefficients[i] * f[i];
  // A fit can extrapolate below zero for shapes it never saw; a step always takes some time.
  return std::max(t, 1e-6);
}

std::string CalibratedCostModel::describe() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "calibrated(%s on %s, %zu rows, r2 %.4f)", profile_.model.c_str(),
                profile_.gpu.c_str(), profile_.rows, profile_.r2);
  return buf;
}

}  // namespace duet
