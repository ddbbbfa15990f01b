#include "core/gpu_spec.hpp"

#include <algorithm>
#include <cctype>

#include "core/error.hpp"

namespace duet {

namespace {

constexpr std::int64_t kMiB = 1024LL * 1024;

// A kernel launch costs a few microseconds of host time on current drivers; 4 us is the order
// measured by the CUDA graphs literature (e.g. NVIDIA's "Getting Started with CUDA Graphs" blog).
constexpr double kLaunch = 4e-6;

// NVIDIA H100 Tensor Core GPU datasheet (SXM5): 3.35 TB/s HBM3, 989.4 TFLOPS dense BF16
// (1,979 with sparsity), 132 SMs. nvidia-smi reports 81,559 MiB in total for the 80 GB part.
GpuSpec h100_sxm() { return {"H100-SXM", 81559 * kMiB, 3.35e12, 989.4e12, 132, kLaunch}; }

// NVIDIA H200 Tensor Core GPU datasheet (SXM): 141 GB HBM3e at 4.8 TB/s, same compute as H100
// SXM (989 TFLOPS dense BF16, 132 SMs). nvidia-smi reports 143,771 MiB in total.
GpuSpec h200() { return {"H200", 143771 * kMiB, 4.8e12, 989.4e12, 132, kLaunch}; }

// NVIDIA A100 Tensor Core GPU datasheet (80GB SXM4): 2,039 GB/s HBM2e, 312 TFLOPS dense BF16,
// 108 SMs. nvidia-smi reports 81,920 MiB in total.
GpuSpec a100_80gb() { return {"A100-80GB", 81920 * kMiB, 2.039e12, 312e12, 108, kLaunch}; }

// The same datasheet (40GB SXM4): 1,555 GB/s HBM2, the same compute. nvidia-smi reports 40,536 MiB.
// Two models' weights (Llama-3.2-1B and -3.1-8B: 18.5 GB) leave it about 17 GB of KV at 0.9: a
// GPU where the beam search's KV binds.
GpuSpec a100_40gb() { return {"A100-40GB", 40536 * kMiB, 1.555e12, 312e12, 108, kLaunch}; }

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
  throw Error("unknown GPU '" + name + "' (built-in GPUs: " + builtin_list() + ")");
}

std::vector<std::string> builtin_gpu_names() {
  std::vector<std::string> names;
  for (const auto& b : kBuiltins) names.emplace_back(b.name);
  return names;
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
