#pragma once
// How long a batch takes on the device. One interface, two implementations: a roofline from the
// GPU's and the model's public figures (no measurement needed), and a least-squares fit to step
// timings that the real engine measured.
#include <memory>
#include <string>

#include "core/batch.hpp"
#include "core/gpu_spec.hpp"
#include "core/model_spec.hpp"

namespace duet {

class CostModel {
 public:
  virtual ~CostModel() = default;
  // Seconds from the step's start on the host to the last kernel's end, CPU overhead included.
  virtual double step_time(const BatchShape& shape) const = 0;
  virtual std::string describe() const = 0;
};

// "roofline", or "calibrated:PROFILE.json".
std::unique_ptr<CostModel> make_cost_model(const std::string& name, const GpuSpec& gpu, const ModelSpec& model);

}  // namespace duet
