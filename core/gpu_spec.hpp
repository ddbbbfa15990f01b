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
};

// Built-ins by name, case-insensitive: "h100" / "h100-sxm", "h200", "a100" / "a100-80gb", "a100-40gb".
GpuSpec gpu_by_name(const std::string& name);
std::vector<std::string> builtin_gpu_names();

}  // namespace duet

namespace duet {
// The built-in spec of a device by the driver's name for it ("NVIDIA H100 80GB HBM3" -> H100-SXM);
// throws when none matches.
GpuSpec gpu_by_device_name(const std::string& device_name);
}  // namespace duet
