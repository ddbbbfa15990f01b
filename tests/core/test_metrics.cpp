// The sample statistics that summaries, profiles and reports print: which quantile each one is.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/metrics.hpp"

namespace duet {
namespace {

TEST(Metrics, PercentilesInterpolateBetweenRanksAndLeaveNansOut) {
  const Percentiles p = percentiles({4, NAN, 1, 3, 2});
  EXPECT_DOUBLE_EQ(p.mean, 2.5);
  EXPECT_DOUBLE_EQ(p.p50, 2.5);     // between 2 and 3
  EXPECT_DOUBLE_EQ(p.p90, 3.7);     // 0.9 x 3 = rank 2.7
  EXPECT_NEAR(p.p99, 3.97, 1e-12);  // rank 2.97
  const Percentiles none = percentiles({NAN});
  EXPECT_EQ(none.mean, 0);
  EXPECT_EQ(none.p99, 0);
}

TEST(Metrics, TheMedianOfAnEvenSampleIsTheMeanOfItsMiddleTwo) {
  EXPECT_DOUBLE_EQ(median({5, 1, 3}), 3);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(median({}), 0);
}

TEST(Metrics, QuantileIsAMeasuredValueNotAnInterpolatedOne) {
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_EQ(quantile(v, 0.5), 3);  // rank round(1.5) = 2
  EXPECT_EQ(quantile(v, 0.9), 4);
  EXPECT_EQ(quantile(v, 0), 1);
  EXPECT_EQ(quantile({}, 0.5), 0);
}

}  // namespace
}  // namespace duet
