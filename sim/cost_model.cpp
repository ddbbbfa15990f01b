#include "sim/cost_model.hpp"

#include "core/error.hpp"
#include "sim/calibrated.hpp"
#include "sim/roofline.hpp"

namespace duet {

std::unique_ptr<CostModel> make_cost_model(const std::string& name, const GpuSpec& gpu, const ModelSpec& model) {
  if (name == "roofline") return std::make_unique<RooflineCostModel>(gpu, model);
  const std::string prefix = "calibrated:";
  if (name.rfind(prefix, 0) == 0) return std::make_unique<CalibratedCostModel>(load_profile(name.substr(prefix.size())));
  throw Error("unknown cost model '" + name + "' (valid: roofline, calibrated:PROFILE.json)");
}

}  // namespace duet
