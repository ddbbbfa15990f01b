#include "sim/profiles.hpp"

#include <cctype>
#include <filesystem>
#include <optional>
#include <string_view>

#include "core/error.hpp"
#include "sim/operator_model.hpp"
#include "sim/roofline.hpp"

namespace duet {

std::string slug(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c)) out += char(std::tolower(c));
    else if (!out.empty() && out.back() != '-') out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

std::string gpu_device_key(const GpuSpec& gpu) { return slug(gpu.name); }

std::string profile_path(const std::string& profile_dir, const std::string& device, const ModelSpec& model) {
  return profile_dir + "/" + device + "/" + slug(model.name) + ".json";
}

std::string profile_for(const std::vector<std::string>& given, const ModelSpec& model,
                        const std::string& profile_dir, const std::string& device) {
  if (given.empty()) return profile_path(profile_dir, device, model);
  if (given.size() == 1) return given[0];
  // This model's on this device first; one of this model's on another device is then refused by
  // check_profile, naming the device.
  const std::string shape = model_shape(model);
  const std::string* same_model = nullptr;
  std::string names;
  for (const std::string& path : given) {
    const CalibrationProfile p = load_profile(path);
    if (p.model_shape == shape && p.device == device) return path;
    if (p.model_shape == shape && !same_model) same_model = &path;
    names += (names.empty() ? "" : ", ") + path;
  }
  if (same_model) return *same_model;
  throw Error("none of the profiles given (" + names + ") is for model '" + model.name + "' (" + shape +
              "); measure it with `duet profile` and give that one too");
}

std::string prior_path(const std::string& profile_dir, const std::string& device) {
  return profile_dir + "/" + device + "/operator-prior.json";
}

void check_profile(const CalibrationProfile& p, const ModelSpec& model, const std::string& device,
                   const std::string& origin) {
  const std::string shape = model_shape(model);
  // Named as missing, not as the empty model or device they would compare as.
  for (const auto& [field, value] : {std::pair{"model_shape", &p.model_shape}, {"device", &p.device}})
    if (value->empty())
      throw Error(origin + ": the profile has no field '" + field +
                  "', which tells what it measured (a profile from `duet profile` or `duet fit` has it)");
  if (p.model_shape != shape)
    throw Error(origin + ": the profile is for model '" + p.model + "' (" + p.model_shape + "), not '" +
                model.name + "' (" + shape + "); measure this one with `duet profile`");
  if (p.device != device && p.device.starts_with("cpu-") && !device.starts_with("cpu-"))
    // The simulator prices a GPU; a CPU profile predicts the CPU engine, against its measurement.
    throw Error(origin + ": the profile was measured on the CPU engine ('" + p.device + "'), not on '" +
                device + "'; it prices the simulator in `duet validate --backend cpu --profile " + origin +
                "`, which predicts the CPU engine and measures it");
  if (p.device != device)
    throw Error(origin + ": the profile was measured on device '" + p.device + "', not '" + device +
                "'; measure this device with `duet profile`");
}

namespace {

constexpr std::string_view kOperatorPrefix = "operator:";                     // operator:PRIOR.json
constexpr std::string_view kProfilePrefixes[] = {"profile:", "calibrated:"};  // profile:PROFILE.json

// The profile's path in `profile:PATH` (or `calibrated:PATH`), or nothing for another name.
std::optional<std::string> profile_path_of(const std::string& name) {
  for (const std::string_view prefix : kProfilePrefixes)
    if (name.starts_with(prefix)) return name.substr(prefix.size());
  return std::nullopt;
}

ChosenCostModel from_profile(const std::string& path, const ModelSpec& model, const std::string& device) {
  CalibrationProfile p = load_profile(path);
  check_profile(p, model, device, path);
  ChosenCostModel c;
  c.kind = "profile";
  c.reason = "profile " + path;
  c.model = std::make_unique<CalibratedCostModel>(std::move(p));
  return c;
}

// The device whose efficiencies a GPU borrows (its efficiency_of), "" when it has its own.
std::string lender_of(const GpuSpec& gpu) {
  return gpu.efficiency_of.empty() ? "" : gpu_device_key(gpu_by_name(gpu.efficiency_of));
}

// A prior fitted for `device`, or for the GPU it borrows its efficiencies from (a re-fitted prior
// of that GPU, given by path, prices it as the committed one does).
ChosenCostModel from_prior(const std::string& path, const GpuSpec& gpu, const ModelSpec& model,
                           const std::string& device) {
  OperatorPrior p = load_prior(path);
  const std::string lender = lender_of(gpu);
  const bool borrowed = !lender.empty() && p.device == lender && p.device != device;
  check_prior(p, model, borrowed ? lender : device, path);
  ChosenCostModel c;
  c.kind = "operator";
  c.reason = borrowed ? "operator prior of " + lender + " (" + path + "): its kernel efficiencies at " +
                            gpu.name + "'s peak figures"
                      : "operator prior " + path;
  c.model = std::make_unique<OperatorCostModel>(gpu, model, std::move(p));
  return c;
}

}  // namespace

bool is_cost_model_name(const std::string& name) {
  if (name == "auto" || name == "roofline" || name == "operator") return true;
  if (const std::optional<std::string> path = profile_path_of(name)) return !path->empty();
  return name.starts_with(kOperatorPrefix) && name.size() > kOperatorPrefix.size();
}

void check_cost_model_name(const std::string& name) {
  if (!is_cost_model_name(name))
    throw Error("unknown cost model '" + name +
                "' (valid: auto, roofline, operator, operator:PRIOR.json, profile:PROFILE.json)");
}

ChosenCostModel choose_cost_model(const std::string& name, const GpuSpec& gpu, const ModelSpec& model,
                                  const std::string& device, const std::string& profile_dir) {
  if (const std::optional<std::string> path = profile_path_of(name))
    return from_profile(*path, model, device);
  if (name.starts_with(kOperatorPrefix))
    return from_prior(name.substr(kOperatorPrefix.size()), gpu, model, device);
  if (name == "auto" && !profile_dir.empty()) {
    const std::string path = profile_path(profile_dir, device, model);
    if (std::filesystem::exists(path)) return from_profile(path, model, device);
  }
  if ((name == "auto" || name == "operator") && !profile_dir.empty()) {
    const std::string path = prior_path(profile_dir, device);
    if (std::filesystem::exists(path)) return from_prior(path, gpu, model, device);
    if (const std::string lender = lender_of(gpu); !lender.empty()) {
      const std::string lent = prior_path(profile_dir, lender);
      if (std::filesystem::exists(lent)) return from_prior(lent, gpu, model, device);
    }
  }
  if (name == "operator")
    throw Error("cost model 'operator': no operator prior for device '" + device + "'" +
                (profile_dir.empty() ? "" : " at " + prior_path(profile_dir, device)) +
                "; fit one with `duet fit-ops`");
  check_cost_model_name(name);
  ChosenCostModel c;
  c.kind = "roofline";
  c.reason =
      name == "roofline"
          ? "roofline (forced)"
          : "roofline (no profile of " + model.name + " on " + device + " and no operator prior" +
                (gpu.efficiency_of.empty() ? "" : ", of it or of its efficiency_of " + gpu.efficiency_of) +
                (profile_dir.empty() ? "" : " in " + profile_dir) + ")";
  c.model = std::make_unique<RooflineCostModel>(gpu, model);
  return c;
}

std::unique_ptr<CostModel> make_cost_model(const std::string& name, const GpuSpec& gpu,
                                           const ModelSpec& model) {
  if (const std::optional<std::string> path = profile_path_of(name))
    return std::make_unique<CalibratedCostModel>(load_profile(*path));
  if (name.starts_with(kOperatorPrefix))
    return std::make_unique<OperatorCostModel>(gpu, model, load_prior(name.substr(kOperatorPrefix.size())));
  return choose_cost_model(name, gpu, model, gpu_device_key(gpu), "").model;
}

}  // namespace duet
