#pragma once
// Fits an OperatorCurve to measured kernel times.
//
// The fit minimises the sum of squared relative errors, (predicted / measured - 1)^2, because the
// tables span five decades of time and a step's error is relative too, plus a smoothness penalty:
// smoothness^2 * (difference between neighbouring knots' log_slowdown)^2 along every axis. The
// penalty ties knots that few rows touch to their neighbours, and so lets the curve interpolate
// to shapes the tables do not hold (a 3B model's widths between an 1B's and an 8B's) instead of
// fitting each knot's noise. The problem is nonlinear in fixed_s and log_slowdown together; it is
// solved by Levenberg-Marquardt on the sparse normal equations (each row touches at most 2^axes
// knots), with fixed_s = exp(gamma) kept positive.
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "sim/operator_curve.hpp"

namespace duet {

struct CurveSample {
  CurveCoords coords{};
  double roofline_s = 0;
  double measured_s = 0;
};

struct CurveFitOptions {
  // Chosen on held-out head configurations (bench/results/op-cost.md): the decode curve's held-out
  // error falls from 0.3 to 0.08 on the three GPUs' tables (H200: 7.4% to 4.3%), GEMM and prefill
  // move by 0.1-0.6 points, and at 0.04 the H100's and H200's decode fits leave the knots' bounds.
  double smoothness = 0.1;
  int max_iterations = 60;
};

// Throws duet::Error (naming `what`) when there are no rows, or a row's times are not positive.
OperatorCurve fit_curve(std::vector<CurveAxis> axes, std::span<const CurveSample> samples,
                        const std::string& what, const CurveFitOptions& options = {});

// Relative errors of a model on rows: the mean and 95th percentile of |predicted / measured - 1|,
// and the worst row.
struct CurveErrors {
  std::size_t rows = 0;
  double mape = 0;
  double p95 = 0;
  double max = 0;
  std::size_t worst = 0;  // index of the worst row
};
CurveErrors curve_errors(std::span<const CurveSample> samples,
                         const std::function<double(const CurveSample&)>& predict);

}  // namespace duet
