#pragma once
// Which cost model prices an engine, most specific first: a measured profile of that model on that
// device (committed under profiles/DEVICE/MODEL.json, from `duet profile`), else the device's
// operator prior (profiles/DEVICE/operator-prior.json, from `duet fit-ops` on public kernel
// tables), else the roofline. The choice is the caller's to print and record; a profile or prior
// for another model or device is an error, never a silent use.
#include <memory>
#include <string>
#include <vector>

#include "sim/calibrated.hpp"
#include "sim/cost_model.hpp"

namespace duet {

// Lower-case letters and digits, runs of anything else as one '-': "H100-SXM" -> "h100-sxm".
std::string slug(const std::string& text);
// A simulated GPU's device key: its spec's name as a slug ("h100-sxm").
std::string gpu_device_key(const GpuSpec& gpu);
// Where the profile of `model` on `device` lives under `profile_dir`.
std::string profile_path(const std::string& profile_dir, const std::string& device, const ModelSpec& model);

// The profile that prices `model` in a validation: with none given, the device's committed one;
// with one, that one (whose model check_profile makes sure of); with several (a run of two models),
// the first measured for this model's shape on `device`, else for its shape, else an error naming
// them. Only the profiles' models and devices are read here.
std::string profile_for(const std::vector<std::string>& given, const ModelSpec& model,
                        const std::string& profile_dir, const std::string& device);

// Where the operator prior of `device` lives under `profile_dir`.
std::string prior_path(const std::string& profile_dir, const std::string& device);

// Throws when the profile was measured for another model shape or device.
void check_profile(const CalibrationProfile& profile, const ModelSpec& model, const std::string& device,
                   const std::string& origin);

struct ChosenCostModel {
  std::unique_ptr<CostModel> model;
  std::string kind;    // "profile", "operator" or "roofline"
  std::string reason;  // one line for the user: which and why
};

// name: "auto" (the profile under profile_dir if there is one, else the operator prior there,
// else the roofline), "roofline" (forced), "operator" (the prior under profile_dir, required),
// "operator:PATH", or "profile:PATH" ("calibrated:PATH" is the same).
ChosenCostModel choose_cost_model(const std::string& name, const GpuSpec& gpu, const ModelSpec& model,
                                  const std::string& device, const std::string& profile_dir);
// Whether name has one of those forms (no file is read); check_cost_model_name throws
// duet::Error listing them when it has none.
bool is_cost_model_name(const std::string& name);
void check_cost_model_name(const std::string& name);

// The roofline, or an explicit profile or prior, without the device check (tests, benchmarks).
std::unique_ptr<CostModel> make_cost_model(const std::string& name, const GpuSpec& gpu,
                                           const ModelSpec& model);

}  // namespace duet
