#pragma once
// How long a batch takes. One interface, two implementations: a roofline from the GPU's and the
// model's public figures (no measurement needed), and a profile fitted to steps that a real
// engine measured (sim/calibrated.hpp). Both split a step into the device's share and the host's
// (scheduling, batch preparation, postprocessing), because the host's share is what simulators
// that leave it out get wrong (Vidur's and others' TTFT errors of 17-56% at low load).
#include <memory>
#include <string>

#include "core/batch.hpp"
#include "core/gpu_spec.hpp"
#include "core/model_spec.hpp"

namespace duet {

struct StepCost {
  double device_s = 0;  // the forward pass: kernels, or the CPU engine's arithmetic
  double host_s = 0;    // the engine's own work around it: schedule, prepare, postprocess
  double total() const { return device_s + host_s; }
};

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual StepCost step_cost(const BatchShape& shape) const = 0;
  // Seconds from the step's start on the host to its end, host overhead included.
  double step_time(const BatchShape& shape) const { return step_cost(shape).total(); }
  virtual std::string describe() const = 0;
  // After a run: a warning when steps fell outside what the model was fitted on; empty if none.
  virtual std::string extrapolation_report() const { return {}; }
};

}  // namespace duet
