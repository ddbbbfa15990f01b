#include "sim/operator_fit.hpp"

#include <Eigen/IterativeLinearSolvers>
#include <Eigen/SparseCore>
#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/metrics.hpp"

namespace duet {

namespace {

// Neighbouring knot pairs along every axis: the penalty's differences.
std::vector<std::pair<int, int>> neighbours(const std::vector<CurveAxis>& axes) {
  std::vector<int> stride(axes.size(), 1);
  for (std::size_t d = axes.size() - 1; d > 0; --d) stride[d - 1] = stride[d] * int(axes[d].knots.size());
  int total = 1;
  for (const CurveAxis& a : axes) total *= int(a.knots.size());
  std::vector<std::pair<int, int>> pairs;
  for (int i = 0; i < total; ++i)
    for (std::size_t d = 0; d < axes.size(); ++d)
      if ((i / stride[d]) % int(axes[d].knots.size()) + 1 < int(axes[d].knots.size()))
        pairs.emplace_back(i, i + stride[d]);
  return pairs;
}

struct Problem {
  const OperatorCurve& shape;
  std::span<const CurveSample> rows;
  std::vector<CurveWeights> w;  // per row, fixed
  std::vector<std::pair<int, int>> pairs;
  double lambda;

  double cost(const Eigen::VectorXd& theta, double gamma) const {
    const double c = std::exp(gamma);
    double sum = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const double r =
          (c + rows[i].roofline_s * std::exp(interpolate(w[i], theta.data()))) / rows[i].measured_s - 1;
      sum += r * r;
    }
    for (const auto& [a, b] : pairs) sum += lambda * lambda * (theta[a] - theta[b]) * (theta[a] - theta[b]);
    return sum;
  }

  // The normal equations J'J + D'D and the gradient J'r + D'D theta at (theta, gamma); gamma is the
  // last unknown.
  void normal_equations(const Eigen::VectorXd& theta, double gamma, Eigen::SparseMatrix<double>& a,
                        Eigen::VectorXd& g) const {
    const int p = int(theta.size());
    const double c = std::exp(gamma);
    std::vector<Eigen::Triplet<double>> t;
    t.reserve(rows.size() * 100 + pairs.size() * 4 + std::size_t(p) + 1);
    g = Eigen::VectorXd::Zero(p + 1);
    int idx[(1 << kMaxCurveAxes) + 1];
    double jac[(1 << kMaxCurveAxes) + 1];
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const CurveWeights& wi = w[i];
      const double y = rows[i].measured_s,
                   scaled = rows[i].roofline_s * std::exp(interpolate(wi, theta.data()));
      const double r = (c + scaled) / y - 1;
      for (int j = 0; j < wi.count; ++j) {
        idx[j] = wi.index[j];
        jac[j] = scaled / y * wi.weight[j];
      }
      idx[wi.count] = p;
      jac[wi.count] = c / y;
      for (int j = 0; j <= wi.count; ++j) {
        g[idx[j]] += jac[j] * r;
        for (int k = 0; k <= wi.count; ++k) t.emplace_back(idx[j], idx[k], jac[j] * jac[k]);
      }
    }
    const double l2 = lambda * lambda;
    for (const auto& [u, v] : pairs) {
      t.emplace_back(u, u, l2);
      t.emplace_back(v, v, l2);
      t.emplace_back(u, v, -l2);
      t.emplace_back(v, u, -l2);
      g[u] += l2 * (theta[u] - theta[v]);
      g[v] += l2 * (theta[v] - theta[u]);
    }
    for (int i = 0; i <= p; ++i) t.emplace_back(i, i, 0.0);  // a full diagonal for the damping
    a.resize(p + 1, p + 1);
    a.setFromTriplets(t.begin(), t.end());
  }
};

}  // namespace

OperatorCurve fit_curve(std::vector<CurveAxis> axes, std::span<const CurveSample> samples,
                        const std::string& what, const CurveFitOptions& options) {
  if (samples.empty()) throw Error(what + ": no rows to fit");
  OperatorCurve curve;
  curve.axes = std::move(axes);
  curve.log_slowdown.assign(curve.size(), 0.0);
  curve.validate(what);
  std::vector<double> ratio;
  double min_time = samples[0].measured_s;
  for (const CurveSample& s : samples) {
    if (!(s.measured_s > 0) || !(s.roofline_s > 0) || !std::isfinite(s.measured_s))
      throw Error(what + ": a row's measured and roofline times must be positive");
    ratio.push_back(s.measured_s / s.roofline_s);
    min_time = std::min(min_time, s.measured_s);
  }
  Problem pr{curve, samples, {}, neighbours(curve.axes), options.smoothness};
  for (const CurveSample& s : samples) pr.w.push_back(curve.weights(s.coords));

  // Start from a flat surface at the median shortfall and a fixed cost of half the fastest row.
  Eigen::VectorXd theta =
      Eigen::VectorXd::Constant(Eigen::Index(curve.size()), std::log(quantile(ratio, 0.5)));
  double gamma = std::log(0.5 * min_time);
  double cost = pr.cost(theta, gamma), mu = 1e-3;
  Eigen::SparseMatrix<double> a;
  Eigen::VectorXd g;
  // Conjugate gradients, not a sparse Cholesky: a 5-axis surface's normal equations couple 3^5
  // knots each, and a Cholesky factor of them fills in (minutes per fit for the decode curve).
  Eigen::ConjugateGradient<Eigen::SparseMatrix<double>, Eigen::Lower | Eigen::Upper,
                           Eigen::IncompleteCholesky<double>>
      solver;
  solver.setTolerance(1e-10);
  int steps = 0;  // taken
  for (int it = 0; it < options.max_iterations; ++it) {
    pr.normal_equations(theta, gamma, a, g);
    bool improved = false;
    while (mu < 1e10) {
      Eigen::SparseMatrix<double> damped = a;
      for (Eigen::Index i = 0; i < damped.rows(); ++i)
        damped.coeffRef(i, i) *= 1 + mu, damped.coeffRef(i, i) += 1e-12;
      solver.compute(damped);
      if (solver.info() != Eigen::Success) {  // the preconditioner's factorisation failed
        mu *= 10;
        continue;
      }
      // A step short of the solver's tolerance is still a step: the cost below decides.
      const Eigen::VectorXd step = solver.solve(-g);
      if (!step.allFinite()) {
        mu *= 10;
        continue;
      }
      const Eigen::VectorXd theta2 = theta + step.head(theta.size());
      const double gamma2 = gamma + step[theta.size()];
      const double cost2 = pr.cost(theta2, gamma2);
      if (std::isfinite(cost2) && cost2 < cost) {
        improved = cost - cost2 > 1e-9 * cost;
        ++steps;
        theta = theta2, gamma = gamma2, cost = cost2;
        mu = std::max(mu / 3, 1e-9);
        break;
      }
      mu *= 10;
    }
    if (!improved) break;
  }
  // The flat start is no fit: a table its surface cannot move from at any damping is one to look at.
  if (steps == 0) throw Error(what + ": the fit found no step that lowers its error from a flat surface");
  curve.log_slowdown.assign(theta.data(), theta.data() + theta.size());
  curve.fixed_s = std::exp(gamma);
  // What a prior may hold (a run refuses anything else): a fit beyond it is a table in another unit
  // than it says, or rows faster than the GPU allows, not a prior to write.
  try {
    curve.validate(what);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) +
                "; the fitted table's times may be in another unit than its header says, or its rows "
                "faster than the GPU's peaks allow");
  }
  return curve;
}

CurveErrors curve_errors(std::span<const CurveSample> samples,
                         const std::function<double(const CurveSample&)>& predict) {
  CurveErrors e;
  e.rows = samples.size();
  if (samples.empty()) return e;
  std::vector<double> err;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    err.push_back(std::abs(predict(samples[i]) / samples[i].measured_s - 1));
    e.mape += err.back();
    if (err.back() > e.max) e.max = err.back(), e.worst = i;
  }
  e.mape /= double(samples.size());
  e.p95 = quantile(std::move(err), 0.95);
  return e;
}

}  // namespace duet
