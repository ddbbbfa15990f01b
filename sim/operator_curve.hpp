#pragma once
// One operator class's time as a function of its shape (the form is stated in
// sim/operator_model.hpp):
//
//   time = fixed_s + roofline_s * exp(log_slowdown(coordinates))
//
// log_slowdown is multilinear in log2 of each coordinate between knots (an "efficiency surface",
// stored as the log of roofline_time's shortfall), and flat beyond the first and last knot: a shape
// outside the knots is priced at the nearest edge, and flagged so that the caller can warn.
#include <array>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace duet {

inline constexpr int kMaxCurveAxes = 5;
// What a fitted curve may hold (OperatorCurve::validate): a log slowdown over the roofline in
// [-3, 10] (a kernel 20 times faster than its roofline, or 22,000 times slower, is no measurement;
// the committed priors hold -0.80 to 9.51, the highest the A100's decode over 8-token contexts,
// whose floor the surface holds where fixed_s does not) and a fixed cost per kernel below a
// millisecond (the tables' floors are 2 to 11 us).
inline constexpr double kMinLogSlowdown = -3.0;
inline constexpr double kMaxLogSlowdown = 10.0;
inline constexpr double kMaxKernelFixedS = 1e-3;
using CurveCoords = std::array<double, kMaxCurveAxes>;

struct CurveAxis {
  std::string name;           // the shape coordinate it is a function of: "m", "context", ...
  std::vector<double> knots;  // ascending, positive
};

// The knots a point falls between and their multilinear weights.
struct CurveWeights {
  int count = 0;
  std::array<int, 1 << kMaxCurveAxes> index{};
  std::array<double, 1 << kMaxCurveAxes> weight{};
  bool inside = true;  // every coordinate within its axis's first and last knot
};

// The surface at a point: sum of weight * values[index], for any set of knot values (a curve's
// log_slowdown, or a fit's trial values).
double interpolate(const CurveWeights& w, const double* values);

struct OperatorCurve {
  std::vector<CurveAxis> axes;
  std::vector<double> log_slowdown;  // one per knot combination, the last axis varying fastest
  double fixed_s = 0;                // per kernel, under CUDA graph replay

  std::size_t size() const;  // the product of the knot counts
  CurveWeights weights(const CurveCoords& coords) const;
  double slowdown(const CurveCoords& coords) const { return slowdown_at(weights(coords)); }
  double time(double roofline_s, const CurveCoords& coords) const {
    return time_at(roofline_s, weights(coords));
  }
  // The same, from weights already computed (the cost model checks them for extrapolation first).
  double slowdown_at(const CurveWeights& w) const;
  double time_at(double roofline_s, const CurveWeights& w) const {
    return fixed_s + roofline_s * slowdown_at(w);
  }
  // Throws duet::Error naming `what` when the axes, values or fixed cost are malformed.
  void validate(const std::string& what) const;
};

// Powers of two from 2^lo to 2^hi: the knots the priors use (one octave apart).
std::vector<double> octave_knots(int lo, int hi);

nlohmann::json curve_json(const OperatorCurve& curve);
// `what` names the curve in errors ("h100.json: gemm").
OperatorCurve curve_from_json(const nlohmann::json& j, const std::string& what);

}  // namespace duet
