#pragma once
// The figures of a GPU that the cost models and the memory plan need.
#include <cstdint>
#include <string>
#include <vector>

namespace duet {

struct GpuSpec {
  std::string name;
  std::int64_t hbm_bytes = 0;  // device memory as the driver reports it in total
  double hbm_bandwidth = 0;    // bytes/s, peak
  double bf16_flops = 0;       // dense bf16 tensor-core FLOP/s, peak (no sparsity)
  int sm_count = 0;
  double kernel_launch_s = 0;  // host-side cost of one kernel launch
  // A built-in GPU whose operator prior prices this one when it has none of its own: that GPU's
  // kernel efficiencies at this one's peak figures (docs/cost-models.md measures how far one
  // GPU's efficiencies carry to another). Empty: this GPU's own prior, or the roofline.
  std::string efficiency_of;

  // Throws duet::Error naming the field of an impossible figure (a described GPU's), including
  // one given in the wrong unit (3.35 for 3.35 TB/s).
  void validate() const;
};

// The host cost of a kernel launch that the built-ins take, and a described GPU unless it says.
inline constexpr double kDefaultKernelLaunchS = 4e-6;

// Built-ins by name, case-insensitive: "h100" / "h100-sxm", "h200", "a100" / "a100-80gb", "a100-40gb".
GpuSpec gpu_by_name(const std::string& name);
std::vector<std::string> builtin_gpu_names();

// A GPU described in JSON, with GpuSpec's fields and units: "name", "hbm_bytes", "hbm_bandwidth"
// (bytes/s), "bf16_flops" (FLOP/s), "sm_count", optionally "kernel_launch_s" (default
// kDefaultKernelLaunchS), "efficiency_of" (a built-in GPU's name) and "source" (free text: where
// the figures come from). Any other field is
// an error, as is a missing or impossible one; errors start with `origin`.
GpuSpec gpu_from_json_text(const std::string& text, const std::string& origin);
GpuSpec gpu_from_json_file(const std::string& path);
// The GPU as such a JSON text, one that reads back to it: what a run file records, a lender too.
std::string gpu_spec_json(const GpuSpec& gpu);
// A built-in's name, or the path of such a JSON file (a name ending in .json, or with a '/').
GpuSpec resolve_gpu(const std::string& name_or_path);

}  // namespace duet

namespace duet {
// The built-in spec of a device by the driver's name for it ("NVIDIA H100 80GB HBM3" -> H100-SXM);
// throws when none matches.
GpuSpec gpu_by_device_name(const std::string& device_name);
}  // namespace duet
