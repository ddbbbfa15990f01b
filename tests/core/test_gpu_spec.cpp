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

// What a run file records reads back to the GPU, its lender too (the A100-40GB borrows the
// A100-80GB's efficiencies; the record left that out, so two lenders recorded alike).
TEST(GpuSpec, ItsJsonReadsBackToIt) {
  for (const auto& n : builtin_gpu_names()) {
    SCOPED_TRACE(n);
    const GpuSpec g = gpu_by_name(n);
    const GpuSpec back = gpu_from_json_text(gpu_spec_json(g), n);
    EXPECT_EQ(back.name, g.name);
    EXPECT_EQ(back.hbm_bytes, g.hbm_bytes);
    EXPECT_EQ(back.hbm_bandwidth, g.hbm_bandwidth);
    EXPECT_EQ(back.bf16_flops, g.bf16_flops);
    EXPECT_EQ(back.sm_count, g.sm_count);
    EXPECT_EQ(back.kernel_launch_s, g.kernel_launch_s);
    EXPECT_EQ(back.efficiency_of, g.efficiency_of);
  }
  EXPECT_NE(gpu_spec_json(gpu_by_name("a100-40gb")).find("\"efficiency_of\":\"A100"), std::string::npos)
      << gpu_spec_json(gpu_by_name("a100-40gb"));
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

// A GPU described in JSON: GpuSpec's fields and units, every mistake an error naming the field.
TEST(GpuSpec, ADescriptionReadsItsFieldsAndRefusesMistakes) {
  const std::string fields =
      R"("name": "L40S", "hbm_bandwidth": 864e9, "bf16_flops": 362.05e12, "sm_count": 142)";
  const GpuSpec g =
      gpu_from_json_text("{" + fields + R"(, "hbm_bytes": 48e9, "source": "a datasheet"})", "g.json");
  EXPECT_EQ(g.name, "L40S");
  EXPECT_EQ(g.hbm_bytes, 48000000000);
  EXPECT_DOUBLE_EQ(g.hbm_bandwidth, 864e9);
  EXPECT_EQ(g.sm_count, 142);
  EXPECT_DOUBLE_EQ(g.kernel_launch_s, kDefaultKernelLaunchS);
  EXPECT_TRUE(g.efficiency_of.empty());
  EXPECT_EQ(
      gpu_from_json_text("{" + fields + R"(, "hbm_bytes": 51539607552, "efficiency_of": "a100"})", "g.json")
          .efficiency_of,
      "A100-80GB");
  auto error_of = [&](const std::string& rest) {
    try {
      gpu_from_json_text("{" + fields + rest + "}", "g.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of(""), "g.json: missing field 'hbm_bytes'");
  EXPECT_EQ(error_of(R"(, "hbm_bytes": 48.5e9, "hbm_gb": 48)"),
            "g.json: unknown field 'hbm_gb' (valid: name, hbm_bytes, hbm_bandwidth, bf16_flops, sm_count, "
            "kernel_launch_s, efficiency_of, source)");
  EXPECT_EQ(error_of(R"(, "hbm_bytes": 48.5)"),
            "g.json: field 'hbm_bytes' must be an integer number of bytes, got 48.5");
  EXPECT_EQ(
      error_of(R"(, "hbm_bytes": 48)"),
      "g.json: GPU 'L40S': hbm_bytes is in bytes (80 GiB is 85899345920), got 48.000000: no GPU has that "
      "little");
  EXPECT_EQ(
      error_of(R"(, "hbm_bytes": 48e9, "efficiency_of": "l40")"),
      "g.json: field 'efficiency_of': unknown GPU 'l40' (built-in GPUs: h100-sxm, h100, h200, a100-80gb, "
      "a100, a100-40gb; or give the path of a GPU description, a .json file: docs/cost-models.md)");
  EXPECT_EQ(error_of(R"(, "hbm_bytes": 48e9, "kernel_launch_s": -1)"),
            "g.json: GPU 'L40S': kernel_launch_s must be in [0, 1) seconds, got -1.000000");
  EXPECT_EQ(error_of(R"(, "hbm_bytes": "48 GB")"),
            "g.json: field 'hbm_bytes' must be an integer number of bytes, got \"48 GB\"");
  // Bandwidth in TB/s, compute in TFLOP/s: the units the datasheets print, not the fields'.
  GpuSpec unit = g;
  unit.hbm_bandwidth = 0.864;
  EXPECT_THROW(unit.validate(), Error);
  unit = g;
  unit.bf16_flops = 362.05;
  EXPECT_THROW(unit.validate(), Error);
  unit = g;
  unit.sm_count = 0;
  EXPECT_THROW(unit.validate(), Error);
  unit = g;
  unit.name = "--";
  EXPECT_THROW(unit.validate(), Error);
  // Figures past any GPU's (a smaller unit than the field's, or a what-if of infinite speed) priced
  // steps at nothing and a run went on: 1e300 bytes/s gave the 8B 27,132 tokens/s.
  auto refusal = [](const GpuSpec& spec) {
    try {
      spec.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  unit = g;
  unit.hbm_bandwidth = 1e300;
  EXPECT_NE(refusal(unit).find("hbm_bandwidth is in bytes/s (3.35 TB/s is 3.35e12)"), std::string::npos);
  unit = g;
  unit.bf16_flops = 1e300;
  EXPECT_NE(refusal(unit).find("no GPU has that much"), std::string::npos) << refusal(unit);
  unit = g;
  unit.sm_count = 1000000;
  EXPECT_THROW(unit.validate(), Error);
  EXPECT_NO_THROW(g.validate());
  for (const auto& n : builtin_gpu_names()) EXPECT_NO_THROW(gpu_by_name(n).validate()) << n;
  // Not JSON, cut short, or not an object.
  EXPECT_NE(error_of(",").find("g.json: not valid JSON"), std::string::npos);
  EXPECT_EQ(error_of(R"(, "hbm_bytes": 48e9, "name": "b")"),
            "g.json: key \"name\" appears twice in one object");
  try {
    gpu_from_json_text("[1]", "g.json");
    ADD_FAILURE() << "an array is not a description";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "g.json: expected a JSON object");
  }
}

// The 40 GB A100 is the 80 GB part's chip: that part's operator prior prices it.
TEST(GpuSpec, TheSmallerA100BorrowsTheLargersEfficiencies) {
  EXPECT_EQ(gpu_by_name("a100-40gb").efficiency_of, gpu_by_name("a100-80gb").name);
  // A description that names it as its lender gets what it borrows, not a GPU without a prior.
  const std::string mine = R"({"name": "My A100", "hbm_bytes": 42949672960, "hbm_bandwidth": 1.5e12,
                               "bf16_flops": 312e12, "sm_count": 108, "efficiency_of": "a100-40gb"})";
  EXPECT_EQ(gpu_from_json_text(mine, "mine.json").efficiency_of, "A100-80GB");
  for (const char* n : {"h100", "h200", "a100"}) EXPECT_TRUE(gpu_by_name(n).efficiency_of.empty()) << n;
}

TEST(GpuSpec, ResolvesANameOrADescriptionsPath) {
  EXPECT_EQ(resolve_gpu("h200").name, "H200");
  EXPECT_THROW(resolve_gpu("missing-gpu.json"), Error);
  try {
    resolve_gpu("missing-gpu.json");
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "missing-gpu.json: cannot open GPU description");
  }
}

}  // namespace
}  // namespace duet
