// GpuSpec: the built-in GPUs resolve by name and their figures are sane relative to each other.
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "core/gpu_spec.hpp"

namespace duet {
namespace {

void expect_positive_figures(const GpuSpec& g) {
  EXPECT_FALSE(g.name.empty());
  EXPECT_GT(g.hbm_bytes, 0) << g.name;
  EXPECT_GT(g.hbm_bandwidth, 0) << g.name;
  EXPECT_GT(g.bf16_flops, 0) << g.name;
  EXPECT_GT(g.sm_count, 0) << g.name;
  EXPECT_GT(g.kernel_launch_s, 0) << g.name;
}

TEST(GpuSpec, BuiltInNamesResolveCaseInsensitively) {
  for (const char* name : {"h100", "H100-SXM", "h200", "a100", "A100-80GB"}) {
    SCOPED_TRACE(name);
    expect_positive_figures(gpu_by_name(name));
  }
  // Aliases give the same part.
  EXPECT_EQ(gpu_by_name("h100").name, gpu_by_name("H100-SXM").name);
  EXPECT_EQ(gpu_by_name("h100").hbm_bytes, gpu_by_name("h100-sxm").hbm_bytes);
  EXPECT_EQ(gpu_by_name("a100").name, gpu_by_name("A100-80GB").name);
  EXPECT_EQ(gpu_by_name("a100").hbm_bytes, gpu_by_name("a100-80gb").hbm_bytes);
  EXPECT_NE(gpu_by_name("h100").name, gpu_by_name("h200").name);
  // The 40 GB A100: half the memory, the same compute, less bandwidth.
  const GpuSpec a100_40 = gpu_by_name("A100-40GB"), a100_80 = gpu_by_name("a100");
  EXPECT_EQ(a100_40.name, "A100-40GB");
  EXPECT_LT(a100_40.hbm_bytes, a100_80.hbm_bytes / 2 + 1);
  EXPECT_LT(a100_40.hbm_bandwidth, a100_80.hbm_bandwidth);
  EXPECT_EQ(a100_40.bf16_flops, a100_80.bf16_flops);
  EXPECT_EQ(gpu_by_device_name("NVIDIA A100-SXM4-40GB").name, "A100-40GB");
  EXPECT_EQ(gpu_by_device_name("NVIDIA A100-SXM4-80GB").name, "A100-80GB");
}

TEST(GpuSpec, EveryListedNameResolves) {
  for (const auto& n : builtin_gpu_names()) {
    SCOPED_TRACE(n);
    expect_positive_figures(gpu_by_name(n));
  }
}

TEST(GpuSpec, FiguresOrderAsTheDatasheetsDo) {
  const GpuSpec h100 = gpu_by_name("h100");
  const GpuSpec h200 = gpu_by_name("h200");
  const GpuSpec a100 = gpu_by_name("a100");
  // HBM3e > HBM3 > HBM2e.
  EXPECT_GT(h200.hbm_bandwidth, h100.hbm_bandwidth);
  EXPECT_GT(h100.hbm_bandwidth, a100.hbm_bandwidth);
  // 141 GB against 80 GB; H100 and A100 are both 80 GB parts.
  EXPECT_GT(h200.hbm_bytes, h100.hbm_bytes);
  EXPECT_GT(h100.hbm_bytes, 79LL * 1000 * 1000 * 1000);
  EXPECT_GT(a100.hbm_bytes, 79LL * 1000 * 1000 * 1000);
  // Hopper has about 3x Ampere's dense bf16 compute; H200 is an H100 with more memory.
  EXPECT_GT(h100.bf16_flops, 2.5 * a100.bf16_flops);
  EXPECT_DOUBLE_EQ(h200.bf16_flops, h100.bf16_flops);
  EXPECT_GT(h100.sm_count, a100.sm_count);
  // Sanity of units: bandwidth in bytes/s (TB/s range), compute in FLOP/s (hundreds of TFLOP/s).
  EXPECT_GT(a100.hbm_bandwidth, 1e12);
  EXPECT_LT(h200.hbm_bandwidth, 1e13);
  EXPECT_GT(a100.bf16_flops, 1e14);
  EXPECT_LT(h100.bf16_flops, 1e15 * 1.5);
}

TEST(GpuSpec, UnknownNameThrowsWithTheBuiltInList) {
  try {
    gpu_by_name("rtx-4090");
    FAIL() << "expected duet::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rtx-4090"), std::string::npos) << msg;
    const auto names = builtin_gpu_names();
    ASSERT_FALSE(names.empty());
    for (const auto& n : names)
      EXPECT_NE(msg.find(n), std::string::npos) << "missing " << n << " in: " << msg;
  }
}

}  // namespace
}  // namespace duet
