#include "sim/cost_model.hpp"

namespace duet {

double StepBreakdown::device_s() const {
  double layer = 0;
  for (double s : per_layer_s) layer += s;
  return layers * layer + lm_head_s + sampling_s + other_s + unattributed_s;
}

StepBreakdown CostModel::by_operator(const BatchShape& shape) const {
  const StepCost c = step_cost(shape);
  StepBreakdown b;
  b.unattributed_s = c.device_s;
  b.host_s = c.host_s;
  return b;
}

}  // namespace duet
