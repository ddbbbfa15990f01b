#include "core/gpu_spec.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

#include "core/error.hpp"
#include "core/json_fields.hpp"

namespace duet {

namespace {

constexpr std::int64_t kMiB = 1024LL * 1024;

// kDefaultKernelLaunchS: a kernel launch costs a few microseconds of host time on current drivers;
// 4 us is the order measured by the CUDA graphs literature (e.g. NVIDIA's "Getting Started with
// CUDA Graphs" blog).
constexpr double kLaunch = kDefaultKernelLaunchS;

// NVIDIA H100 Tensor Core GPU datasheet (SXM5): 3.35 TB/s HBM3, 989.4 TFLOPS dense BF16
// (1,979 with sparsity), 132 SMs. nvidia-smi reports 81,559 MiB in total for the 80 GB part.
GpuSpec h100_sxm() { return {"H100-SXM", 81559 * kMiB, 3.35e12, 989.4e12, 132, kLaunch, ""}; }

// NVIDIA H200 Tensor Core GPU datasheet (SXM): 141 GB HBM3e at 4.8 TB/s, same compute as H100
// SXM (989 TFLOPS dense BF16, 132 SMs). nvidia-smi reports 143,771 MiB in total.
GpuSpec h200() { return {"H200", 143771 * kMiB, 4.8e12, 989.4e12, 132, kLaunch, ""}; }

// NVIDIA A100 Tensor Core GPU datasheet (80GB SXM4): 2,039 GB/s HBM2e, 312 TFLOPS dense BF16,
// 108 SMs. nvidia-smi reports 81,920 MiB in total.
GpuSpec a100_80gb() { return {"A100-80GB", 81920 * kMiB, 2.039e12, 312e12, 108, kLaunch, ""}; }

// The same datasheet (40GB SXM4): 1,555 GB/s HBM2, the same compute. nvidia-smi reports 40,536 MiB.
// Two models' weights (Llama-3.2-1B and -3.1-8B: 18.5 GB) leave it about 17 GB of KV at 0.9: a
// GPU where the beam search's KV binds.
// Its kernels are the 80 GB part's (the same GA100 chip and clocks), so that part's operator prior
// prices them, at this part's bandwidth.
GpuSpec a100_40gb() { return {"A100-40GB", 40536 * kMiB, 1.555e12, 312e12, 108, kLaunch, "A100-80GB"}; }

struct BuiltinGpu {
  const char* name;
  GpuSpec (*make)();
};

constexpr BuiltinGpu kBuiltins[] = {
    {"h100-sxm", h100_sxm},   {"h100", h100_sxm},  {"h200", h200},
    {"a100-80gb", a100_80gb}, {"a100", a100_80gb}, {"a100-40gb", a100_40gb},
};

// The built-ins' names, for errors: "h100-sxm, h100, ...".
std::string builtin_list() {
  std::string names;
  for (const auto& b : kBuiltins) names += std::string(names.empty() ? "" : ", ") + b.name;
  return names;
}

}  // namespace

GpuSpec gpu_by_name(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const auto& b : kBuiltins)
    if (n == b.name) return b.make();
  throw Error("unknown GPU '" + name + "' (built-in GPUs: " + builtin_list() +
              "; or give the path of a GPU description, a .json file: docs/cost-models.md)");
}

std::vector<std::string> builtin_gpu_names() {
  std::vector<std::string> names;
  for (const auto& b : kBuiltins) names.emplace_back(b.name);
  return names;
}

// The floors below are far under any accelerator's figures: a value beneath one was given in a
// larger unit (GiB, TB/s, TFLOP/s) than the field's. The ceilings are hundreds of times a B200's
// (192 GB, 8 TB/s, 2.25 dense bf16 PFLOP/s): a value past one would price steps at nothing.
void GpuSpec::validate() const {
  const std::string who = "GPU '" + name + "': ";
  if (std::none_of(name.begin(), name.end(), [](unsigned char c) { return std::isalnum(c); }))
    throw Error("a GPU's name needs a letter or digit, got '" + name + "'");
  auto check = [&](const char* field, double v, double floor, double ceiling, const char* unit,
                   const char* example) {
    if (!std::isfinite(v) || v <= 0)
      throw Error(who + field + " must be a positive number of " + unit + ", got " + std::to_string(v));
    if (v < floor)
      throw Error(who + field + " is in " + unit + " (" + example + "), got " + std::to_string(v) +
                  ": no GPU has that little");
    if (v > ceiling)
      throw Error(who + field + " is in " + unit + " (" + example + "), got " + std::to_string(v) +
                  ": no GPU has that much");
  };
  check("hbm_bytes", double(hbm_bytes), double(1LL << 30), double(1LL << 42), "bytes",
        "80 GiB is 85899345920");
  check("hbm_bandwidth", hbm_bandwidth, 1e9, 1e15, "bytes/s", "3.35 TB/s is 3.35e12");
  check("bf16_flops", bf16_flops, 1e9, 1e18, "FLOP/s", "989 TFLOP/s is 9.89e14");
  if (sm_count < 1 || sm_count > 100000)
    throw Error(who + "sm_count must be in [1, 100000], got " + std::to_string(sm_count));
  if (!std::isfinite(kernel_launch_s) || kernel_launch_s < 0 || kernel_launch_s >= 1)
    throw Error(who + "kernel_launch_s must be in [0, 1) seconds, got " + std::to_string(kernel_launch_s));
}

std::string gpu_spec_json(const GpuSpec& g) {
  json_fields::json j = {{"name", g.name},
                         {"hbm_bytes", g.hbm_bytes},
                         {"hbm_bandwidth", g.hbm_bandwidth},
                         {"bf16_flops", g.bf16_flops},
                         {"sm_count", g.sm_count},
                         {"kernel_launch_s", g.kernel_launch_s}};
  if (!g.efficiency_of.empty()) j["efficiency_of"] = g.efficiency_of;
  return j.dump();
}

GpuSpec gpu_from_json_text(const std::string& text, const std::string& origin) {
  using json_fields::json;
  const json j = json_fields::parse_object(text, origin);
  json_fields::check_known_fields(j,
                                  {"name", "hbm_bytes", "hbm_bandwidth", "bf16_flops", "sm_count",
                                   "kernel_launch_s", "efficiency_of", "source"},
                                  origin);
  GpuSpec g;
  g.name = json_fields::optional_string(j, "name", origin);
  if (g.name.empty()) throw Error(origin + ": missing field 'name'");
  // 48e9 is an integer number of bytes written as JSON writes large numbers.
  const json& bytes = json_fields::require(j, "hbm_bytes", origin);
  const double b = bytes.is_number() ? bytes.get<double>() : NAN;
  if (!bytes.is_number() || b != std::floor(b))
    throw Error(origin + ": field 'hbm_bytes' must be an integer number of bytes, got " + bytes.dump());
  if (!(std::abs(b) < 0x1p62)) throw Error(origin + ": field 'hbm_bytes' is out of range: " + bytes.dump());
  g.hbm_bytes =
      bytes.is_number_integer() ? json_fields::require_int64(j, "hbm_bytes", origin) : std::int64_t(b);
  g.hbm_bandwidth = json_fields::require_number(j, "hbm_bandwidth", origin);
  g.bf16_flops = json_fields::require_number(j, "bf16_flops", origin);
  g.sm_count = json_fields::require_int(j, "sm_count", origin);
  g.kernel_launch_s = json_fields::optional_field<double>(
      j, "kernel_launch_s", kDefaultKernelLaunchS,
      [&](const json&) { return json_fields::require_number(j, "kernel_launch_s", origin); });
  if (const std::string lender = json_fields::optional_string(j, "efficiency_of", origin); !lender.empty()) {
    try {
      // A lender that borrows itself (the A100-40GB) lends what it borrows.
      const GpuSpec l = gpu_by_name(lender);
      g.efficiency_of = l.efficiency_of.empty() ? l.name : l.efficiency_of;
    } catch (const Error& e) {
      throw Error(origin + ": field 'efficiency_of': " + e.what());
    }
  }
  json_fields::optional_string(j, "source", origin);  // checked as text, not used
  try {
    g.validate();
  } catch (const Error& e) {
    throw Error(origin + ": " + e.what());
  }
  return g;
}

GpuSpec gpu_from_json_file(const std::string& path) {
  return gpu_from_json_text(json_fields::read_file(path, "GPU description", "GPU .json"), path);
}

GpuSpec resolve_gpu(const std::string& name_or_path) {
  if (json_fields::names_a_file(name_or_path)) return gpu_from_json_file(name_or_path);
  return gpu_by_name(name_or_path);
}

}  // namespace duet

namespace duet {

GpuSpec gpu_by_device_name(const std::string& device_name) {
  std::string n = device_name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::toupper(c); });
  if (n.find("H200") != std::string::npos) return gpu_by_name("h200");
  if (n.find("H100") != std::string::npos) return gpu_by_name("h100");
  if (n.find("A100") != std::string::npos)
    return gpu_by_name(n.find("40GB") != std::string::npos ? "a100-40gb" : "a100");
  throw Error("no built-in GPU spec for device '" + device_name + "': name one (" + builtin_list() + ")");
}

}  // namespace duet
