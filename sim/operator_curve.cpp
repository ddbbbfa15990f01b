#include "sim/operator_curve.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_fields.hpp"

namespace duet {

std::size_t OperatorCurve::size() const {
  std::size_t n = 1;
  for (const CurveAxis& a : axes) n *= a.knots.size();
  return n;
}

CurveWeights OperatorCurve::weights(const CurveCoords& coords) const {
  CurveWeights w;
  w.count = 1;
  w.index[0] = 0;
  w.weight[0] = 1.0;
  for (std::size_t d = 0; d < axes.size(); ++d) {
    const std::vector<double>& k = axes[d].knots;
    const double x = coords[d];
    // A relative tolerance keeps a shape exactly on the last knot inside.
    if (x < k.front() * (1 - 1e-9) || x > k.back() * (1 + 1e-9)) w.inside = false;
    std::size_t lo = 0;
    double t = 0;
    if (k.size() > 1) {
      const auto it = std::upper_bound(k.begin(), k.end(), x);
      lo = std::size_t(std::clamp<std::ptrdiff_t>(it - k.begin() - 1, 0, std::ptrdiff_t(k.size()) - 2));
      t = std::clamp(std::log2(std::max(x, 1e-300) / k[lo]) / std::log2(k[lo + 1] / k[lo]), 0.0, 1.0);
    }
    // Row-major: each axis multiplies the flat index by its knot count.
    const int n = w.count;
    for (int i = 0; i < n; ++i) {
      const int base = w.index[i] * int(k.size());
      const double wi = w.weight[i];
      w.index[i] = base + int(lo);
      w.weight[i] = wi * (1 - t);
      if (k.size() > 1) {
        w.index[n + i] = base + int(lo) + 1;
        w.weight[n + i] = wi * t;
      }
    }
    if (k.size() > 1) w.count = 2 * n;
  }
  return w;
}

double interpolate(const CurveWeights& w, const double* values) {
  double s = 0;
  for (int i = 0; i < w.count; ++i) s += w.weight[i] * values[w.index[i]];
  return s;
}

double OperatorCurve::slowdown_at(const CurveWeights& w) const {
  return std::exp(interpolate(w, log_slowdown.data()));
}

void OperatorCurve::validate(const std::string& what) const {
  if (axes.empty() || axes.size() > std::size_t(kMaxCurveAxes))
    throw Error(what + ": a curve needs 1 to " + std::to_string(kMaxCurveAxes) + " axes");
  for (const CurveAxis& a : axes) {
    if (a.knots.empty()) throw Error(what + ": axis '" + a.name + "' has no knots");
    for (std::size_t i = 0; i < a.knots.size(); ++i)
      if (!(a.knots[i] > 0) || (i > 0 && !(a.knots[i] > a.knots[i - 1])))
        throw Error(what + ": axis '" + a.name + "' needs positive, ascending knots");
  }
  if (log_slowdown.size() != size())
    throw Error(what + ": 'log_slowdown' has " + std::to_string(log_slowdown.size()) +
                " values, the axes need " + std::to_string(size()));
  for (double v : log_slowdown)
    if (!(v >= kMinLogSlowdown && v <= kMaxLogSlowdown))
      throw Error(what + ": 'log_slowdown' holds " + std::to_string(v) + ", outside [" +
                  std::to_string(int(kMinLogSlowdown)) + ", " + std::to_string(int(kMaxLogSlowdown)) +
                  "]: a kernel 20 times faster than its roofline, or 22,000 times slower, is no measurement");
  if (!(fixed_s >= 0 && fixed_s < kMaxKernelFixedS))
    throw Error(what + ": 'fixed_s' must be in [0, 0.001) seconds, got " + std::to_string(fixed_s) +
                " (a kernel's fixed cost is microseconds: a value in us written as seconds?)");
}

std::vector<double> octave_knots(int lo, int hi) {
  std::vector<double> k;
  for (int e = lo; e <= hi; ++e) k.push_back(std::ldexp(1.0, e));
  return k;
}

nlohmann::json curve_json(const OperatorCurve& c) {
  nlohmann::json axes = nlohmann::json::array();
  for (const CurveAxis& a : c.axes) axes.push_back({{"name", a.name}, {"knots", a.knots}});
  // Four decimals of a log: 0.01% of the time, far below the tables' noise.
  std::vector<double> rounded;
  for (double v : c.log_slowdown) rounded.push_back(std::round(v * 1e4) / 1e4);
  return {{"fixed_s", c.fixed_s}, {"axes", axes}, {"log_slowdown", rounded}};
}

OperatorCurve curve_from_json(const nlohmann::json& j, const std::string& what) {
  OperatorCurve c;
  // Only these keys: a misspelt one ("fixed_us") would leave the field it meant at its default.
  if (j.is_object()) json_fields::check_known_fields(j, {"fixed_s", "axes", "log_slowdown"}, what);
  if (!j.is_object()) throw Error(what + ": expected an object, got " + j.dump());
  c.fixed_s = json_fields::require_number(j, "fixed_s", what);
  const nlohmann::json& axes = json_fields::require(j, "axes", what);
  if (!axes.is_array()) throw Error(what + ": field 'axes' must be a list, got " + axes.dump());
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const std::string axis = what + ": axes[" + std::to_string(i + 1) + "]";
    if (!axes[i].is_object()) throw Error(axis + ": expected an object {name, knots}, got " + axes[i].dump());
    c.axes.push_back({json_fields::require_string(axes[i], "name", axis),
                      json_fields::require_numbers(axes[i], "knots", axis)});
  }
  c.log_slowdown = json_fields::require_numbers(j, "log_slowdown", what);
  c.validate(what);
  return c;
}

}  // namespace duet
