// The row kernels, sampling and GEMMs against the CPU reference (exec/cpu_ops), and the device
// wrappers. Tests that need a GPU skip with the reason when there is none; Device.* host checks,
// the Philox known answers and the shape validation run everywhere.
//
// Tolerances (each justified where it is used):
//  - bf16 results against a float32 reference: |got - ref| <= 2^-7 |ref| + 1e-6. Rounding to bf16
//    (nearest even, 8 significant bits) is within 2^-8 relative; the rest covers float32
//    differences between the kernel and the reference (rsqrtf vs a double root, expf vs std::exp,
//    FMA contraction: a few float32 ulp, ~1e-6 relative).
//  - Gathers, the residual of add_rmsnorm and the v part of a fused qkv buffer: bit-exact.
//  - RoPE adds the float32 angle's error: 2^-22 * angle * |pair| (see OpsRope).
//  - PRM scores (float32 out): 2e-6 relative.
//  - GEMM: 2^-16 * sum_i |x_i w_i| (+ 2^-7 |ref| for bf16 out); see GemmTolerance.
//  - Sampling: exact where the draw is exact by construction (integer masses of equal logits),
//    within 1e-4 of the mass otherwise (see Sampling.SeededDrawMatchesCpuReplay), and frequencies
//    within 5 binomial standard deviations.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "exec/cpu_ops.hpp"
#include "exec/weights.hpp"
#include "kernels/device.hpp"
#include "kernels/gemm.hpp"
#include "kernels/ops.hpp"
#include "kernels/philox.hpp"
#include "tests/kernels/require_gpu.hpp"

namespace {

namespace dk = duet::kernels;
using dk::bf16;

// --- Helpers ------------------------------------------------------------------------------------

template <typename T>
dk::DeviceBuffer upload(const std::vector<T>& v, dk::Stream s) {
  dk::DeviceBuffer b(v.size() * sizeof(T));
  dk::copy_to_device(b.get(), v.data(), v.size() * sizeof(T), s);
  return b;
}

template <typename T>
std::vector<T> download(const void* src, std::size_t n, const dk::StreamHandle& s) {
  std::vector<T> v(n);
  dk::copy_to_host(v.data(), src, n * sizeof(T), s.get());
  s.synchronize();
  return v;
}

std::vector<bf16> random_bf16(std::size_t n, float mean, float stddev, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(mean, stddev);
  std::vector<bf16> out(n);
  for (bf16& v : out) v = dk::to_bf16(d(rng));
  return out;
}

std::vector<float> to_float(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = dk::from_bf16(v[i]);
  return out;
}

// Counts elements outside |got - ref| <= rel |ref| + abs and reports the first few.
void expect_bf16_near(const std::vector<bf16>& got, const std::vector<float>& ref, double rel, double abs,
                      const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = dk::from_bf16(got[i]), r = ref[i];
    if (!(std::abs(g - r) <= rel * std::abs(r) + abs)) {
      if (++bad <= 5) ADD_FAILURE() << what << " [" << i << "]: got " << g << ", reference " << r;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": elements outside tolerance";
}

constexpr double kBf16Rel = 0x1.0p-7;  // twice bf16's rounding bound, 2^-8
constexpr double kBf16Abs = 1e-6;

// --- Device: host-side behaviour (everywhere) ---------------------------------------------------

TEST(Device, ReportsWhyItIsUnavailable) {
  std::string why = "unset";
  const bool ok = dk::device_available(&why);
  EXPECT_EQ(dk::device_available(nullptr), ok) << "a null reason is allowed and the answer is stable";
  if (ok) {
    EXPECT_TRUE(why.empty()) << why;
    const dk::DeviceInfo info = dk::device_info();
    EXPECT_FALSE(info.name.empty());
    EXPECT_GT(info.sm_count, 0);
    EXPECT_GE(info.cc_major, 8);
    EXPECT_GT(info.total_bytes, 0);
    EXPECT_GT(info.free_bytes, 0);
    EXPECT_LE(info.free_bytes, info.total_bytes);
  } else {
    EXPECT_FALSE(why.empty());
    EXPECT_NE(why, "unset");
    // Without a device, a call that needs one throws duet::Error naming the call; it never crashes.
    try {
      dk::DeviceBuffer b(1024);
      ADD_FAILURE() << "cudaMalloc succeeded although device_available said: " << why;
    } catch (const duet::Error& e) {
      EXPECT_NE(std::string(e.what()).find("cudaMalloc(1024 bytes): "), std::string::npos) << e.what();
    }
  }
}

TEST(Device, Bf16RoundTrip) {
  // Every bf16 value is a float; converting it back is exact (NaNs stay NaN with their sign).
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = dk::from_bf16(bf16(b));
    std::uint32_t bits = 0;
    std::memcpy(&bits, &f, sizeof bits);
    ASSERT_EQ(bits, b << 16) << b;
    if (std::isnan(f)) {
      const bf16 back = dk::to_bf16(f);
      ASSERT_TRUE(std::isnan(dk::from_bf16(back))) << b;
      ASSERT_EQ(back & 0x8000u, b & 0x8000u) << b;
    } else {
      ASSERT_EQ(dk::to_bf16(f), bf16(b)) << b;
    }
  }
  auto from_bits = [](std::uint32_t bits) {
    float f = 0;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  };
  // Halfway cases round to the even neighbour: 1 + 2^-8 lies between 0x3f80 (1) and 0x3f81.
  EXPECT_EQ(dk::to_bf16(1.0f + 0x1.0p-8f), 0x3f80);
  EXPECT_EQ(dk::to_bf16(1.0f + 3 * 0x1.0p-8f), 0x3f82);  // between 0x3f81 and 0x3f82: up to even
  EXPECT_EQ(dk::to_bf16(-(1.0f + 0x1.0p-8f)), 0xbf80);
  EXPECT_EQ(dk::to_bf16(1.0f + 0x1.0p-8f + 0x1.0p-20f), 0x3f81);  // just above halfway: up
  EXPECT_EQ(dk::to_bf16(1.0f + 0x1.0p-8f - 0x1.0p-20f), 0x3f80);  // just below: down
  EXPECT_EQ(dk::to_bf16(from_bits(0x3f80ffffu)), 0x3f81);
  // Overflow rounds to infinity; the largest bf16 is kept.
  EXPECT_EQ(dk::to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(dk::to_bf16(dk::from_bf16(0x7f7f)), 0x7f7f);
  EXPECT_EQ(dk::to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  // A NaN whose payload is only in the low bits must not truncate to infinity.
  EXPECT_TRUE(std::isnan(dk::from_bf16(dk::to_bf16(from_bits(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(dk::from_bf16(dk::to_bf16(from_bits(0xff800001u)))));
  // Subnormals round like everything else.
  EXPECT_EQ(dk::to_bf16(from_bits(0x00008000u)), 0x0000);  // halfway, even is 0
  EXPECT_EQ(dk::to_bf16(from_bits(0x00018000u)), 0x0002);  // halfway, even is 2
  EXPECT_EQ(dk::from_bf16(0x3f80), 1.0f);
  EXPECT_EQ(dk::from_bf16(0xc040), -3.0f);
}

// --- Device: on a GPU ---------------------------------------------------------------------------

TEST(Device, ErrorsNameTheCall) {
  DUET_REQUIRE_GPU();
  try {
    dk::DeviceBuffer huge(std::size_t(1) << 50);  // 1 PiB
    ADD_FAILURE() << "a 1 PiB cudaMalloc succeeded";
  } catch (const duet::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cudaMalloc(1125899906842624 bytes): ", 0), 0u) << e.what();
  }
  // The failed allocation leaves the runtime usable.
  dk::DeviceBuffer ok(256);
  dk::StreamHandle s;
  dk::fill_zero(ok.get(), 256, s.get());
  s.synchronize();
  dk::Graph empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_THROW(empty.launch(s.get()), duet::Error);
}

TEST(Device, BuffersCopiesStreamsAndEvents) {
  DUET_REQUIRE_GPU();
  dk::StreamHandle s;
  std::vector<std::int32_t> host(1000);
  std::iota(host.begin(), host.end(), -17);
  dk::DeviceBuffer a = upload(host, s.get());
  EXPECT_EQ(a.bytes(), host.size() * 4);
  dk::DeviceBuffer b(a.bytes());
  dk::Event start, end;
  start.record(s.get());
  dk::copy_device(b.get(), a.get(), a.bytes(), s.get());
  end.record(s.get());
  end.synchronize();
  EXPECT_GE(dk::Event::elapsed_ms(start, end), 0.0f);
  EXPECT_EQ(download<std::int32_t>(b.get(), host.size(), s), host);
  dk::fill_zero(b.as<std::int32_t>() + 10, 40, s.get());  // elements 10..19
  auto z = download<std::int32_t>(b.get(), host.size(), s);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(z[i], i >= 10 && i < 20 ? 0 : host[i]) << i;
  // Moves transfer ownership; zero-byte buffers and copies are no-ops.
  dk::DeviceBuffer moved(std::move(b));
  EXPECT_EQ(b.get(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is the test
  EXPECT_EQ(moved.bytes(), host.size() * 4);
  a = std::move(moved);
  EXPECT_EQ(download<std::int32_t>(a.get(), host.size(), s), z);
  dk::DeviceBuffer none(0);
  EXPECT_EQ(none.get(), nullptr);
  dk::copy_to_device(none.get(), host.data(), 0, s.get());
  s.synchronize();
}

// Pinned host memory uploads without the host waiting; its contents survive moves.
TEST(Device, PinnedBufferUploadsAndMoves) {
  DUET_REQUIRE_GPU();
  dk::StreamHandle s;
  dk::PinnedBuffer pinned(4000);
  ASSERT_NE(pinned.get(), nullptr);
  EXPECT_EQ(pinned.bytes(), 4000u);
  auto* p = static_cast<std::int32_t*>(pinned.get());
  std::iota(p, p + 1000, 5);
  dk::PinnedBuffer moved(std::move(pinned));
  EXPECT_EQ(pinned.get(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is the test
  dk::DeviceBuffer d(4000);
  dk::copy_to_device(d.get(), moved.get(), 4000, s.get());
  const auto back = download<std::int32_t>(d.get(), 1000, s);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(back[std::size_t(i)], i + 5) << i;
  pinned = std::move(moved);
  EXPECT_EQ(pinned.bytes(), 4000u);
  EXPECT_EQ(dk::PinnedBuffer(0).get(), nullptr);
}

// --- Ops: gathers -------------------------------------------------------------------------------

// hidden 4096: 16-byte path; 1030: bf16x2 path; 1027 (odd): scalar path.
class OpsHidden : public ::testing::TestWithParam<int> {};

TEST_P(OpsHidden, EmbeddingGatherAndGatherRowsAreExact) {
  DUET_REQUIRE_GPU();
  const int hidden = GetParam(), vocab = 300;
  const std::vector<std::int32_t> tokens = {5, 0, 299, 5, 17, 123, 298};
  const int rows = int(tokens.size());
  const auto table = random_bf16(std::size_t(vocab) * hidden, 0.0f, 1.0f, 1);
  dk::StreamHandle s;
  auto d_table = upload(table, s.get());
  auto d_tokens = upload(tokens, s.get());
  dk::DeviceBuffer d_out(std::size_t(rows) * hidden * 2);
  dk::embedding_gather(d_table.as<bf16>(), d_tokens.as<std::int32_t>(), d_out.as<bf16>(), rows, hidden,
                       s.get());
  auto out = download<bf16>(d_out.get(), std::size_t(rows) * hidden, s);
  for (int r = 0; r < rows; ++r)
    ASSERT_TRUE(std::equal(out.begin() + std::size_t(r) * hidden, out.begin() + std::size_t(r + 1) * hidden,
                           table.begin() + std::size_t(tokens[r]) * hidden))
        << "row " << r;

  // gather_rows from a source that starts one element in (misaligned: the scalar path) and from
  // an aligned one.
  const std::vector<std::int32_t> pick = {6, 0, 3, 3};
  for (int offset : {0, 1}) {
    dk::DeviceBuffer d_g(pick.size() * hidden * 2);
    auto d_pick = upload(pick, s.get());
    dk::gather_rows(d_table.as<bf16>() + offset, d_pick.as<std::int32_t>(), d_g.as<bf16>(), int(pick.size()),
                    hidden, s.get());
    auto g = download<bf16>(d_g.get(), pick.size() * hidden, s);
    for (std::size_t r = 0; r < pick.size(); ++r)
      ASSERT_TRUE(std::equal(g.begin() + r * hidden, g.begin() + (r + 1) * hidden,
                             table.begin() + offset + std::size_t(pick[r]) * hidden))
          << "offset " << offset << " row " << r;
  }
}

// --- Ops: RMSNorm -------------------------------------------------------------------------------

TEST_P(OpsHidden, RmsNormMatchesCpu) {
  DUET_REQUIRE_GPU();
  const int hidden = GetParam(), rows = 5;
  const float eps = 1e-5f;
  auto x = random_bf16(std::size_t(rows) * hidden, 0.0f, 1.0f, 2);
  // Row 1 is large (sum of squares ~1e12: no overflow in float32), row 2 is all zeros (the output
  // is exactly 0), row 3 has a constant offset.
  for (int i = 0; i < hidden; ++i) {
    x[std::size_t(hidden) + i] = dk::to_bf16(dk::from_bf16(x[std::size_t(hidden) + i]) * 1.5e4f);
    x[std::size_t(2 * hidden) + i] = 0;
    x[std::size_t(3 * hidden) + i] = dk::to_bf16(dk::from_bf16(x[std::size_t(3 * hidden) + i]) + 3.0f);
  }
  const auto w = random_bf16(std::size_t(hidden), 1.0f, 0.2f, 3);
  dk::StreamHandle s;
  auto d_x = upload(x, s.get());
  auto d_w = upload(w, s.get());
  dk::DeviceBuffer d_out(x.size() * 2);
  dk::rmsnorm(d_x.as<bf16>(), d_w.as<bf16>(), d_out.as<bf16>(), rows, hidden, eps, s.get());
  auto out = download<bf16>(d_out.get(), x.size(), s);

  const auto xf = to_float(x), wf = to_float(w);
  std::vector<float> ref(x.size());
  for (int r = 0; r < rows; ++r)
    duet::rms_norm({xf.data() + std::size_t(r) * hidden, std::size_t(hidden)}, wf, eps,
                   {ref.data() + std::size_t(r) * hidden, std::size_t(hidden)});
  expect_bf16_near(out, ref, kBf16Rel, kBf16Abs, "rmsnorm hidden " + std::to_string(hidden));
}

TEST_P(OpsHidden, AddRmsNormMatchesCpu) {
  DUET_REQUIRE_GPU();
  const int hidden = GetParam(), rows = 4;
  const float eps = 1e-6f;
  const auto residual = random_bf16(std::size_t(rows) * hidden, 0.0f, 2.0f, 4);
  const auto x = random_bf16(std::size_t(rows) * hidden, 0.0f, 0.5f, 5);
  const auto w = random_bf16(std::size_t(hidden), 1.0f, 0.2f, 6);
  dk::StreamHandle s;
  auto d_res = upload(residual, s.get());
  auto d_x = upload(x, s.get());
  auto d_w = upload(w, s.get());
  dk::DeviceBuffer d_out(x.size() * 2);
  dk::add_rmsnorm(d_res.as<bf16>(), d_x.as<bf16>(), d_w.as<bf16>(), d_out.as<bf16>(), rows, hidden, eps,
                  s.get());
  auto res_out = download<bf16>(d_res.get(), x.size(), s);
  auto out = download<bf16>(d_out.get(), x.size(), s);

  // The residual stream is bf16, as in HF: the float32 sum rounded once to nearest even. Both
  // sides do exactly that, so it is bit-exact.
  std::vector<float> sum(x.size());
  int bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const bf16 expect = dk::to_bf16(dk::from_bf16(residual[i]) + dk::from_bf16(x[i]));
    if (res_out[i] != expect && ++bad <= 5) ADD_FAILURE() << "residual [" << i << "]";
    sum[i] = dk::from_bf16(expect);
  }
  EXPECT_EQ(bad, 0);
  const auto wf = to_float(w);
  std::vector<float> ref(x.size());
  for (int r = 0; r < rows; ++r)
    duet::rms_norm({sum.data() + std::size_t(r) * hidden, std::size_t(hidden)}, wf, eps,
                   {ref.data() + std::size_t(r) * hidden, std::size_t(hidden)});
  expect_bf16_near(out, ref, kBf16Rel, kBf16Abs, "add_rmsnorm hidden " + std::to_string(hidden));
}

// --- Ops: SwiGLU --------------------------------------------------------------------------------

TEST_P(OpsHidden, SiluMulMatchesCpu) {
  DUET_REQUIRE_GPU();
  const int inter = GetParam(), rows = 3;
  auto gate_up = random_bf16(std::size_t(rows) * 2 * inter, 0.0f, 3.0f, 7);
  // Extremes: exp(-g) overflows for g = -100 (the result is -0), saturates for g = +100.
  gate_up[0] = dk::to_bf16(-100.0f);
  gate_up[1] = dk::to_bf16(100.0f);
  dk::StreamHandle s;
  auto d_gu = upload(gate_up, s.get());
  dk::DeviceBuffer d_out(std::size_t(rows) * inter * 2);
  dk::silu_mul(d_gu.as<bf16>(), d_out.as<bf16>(), rows, inter, s.get());
  auto out = download<bf16>(d_out.get(), std::size_t(rows) * inter, s);
  const auto f = to_float(gate_up);
  std::vector<float> ref(std::size_t(rows) * inter);
  for (int r = 0; r < rows; ++r) {
    const float* row = f.data() + std::size_t(r) * 2 * inter;
    duet::silu_mul({row, std::size_t(inter)}, {row + inter, std::size_t(inter)},
                   {ref.data() + std::size_t(r) * inter, std::size_t(inter)});
  }
  expect_bf16_near(out, ref, kBf16Rel, kBf16Abs, "silu_mul inter " + std::to_string(inter));
}

INSTANTIATE_TEST_SUITE_P(Ops, OpsHidden, ::testing::Values(4096, 1030, 1027, 8, 6, 1, 8200));

// --- Ops: RoPE ----------------------------------------------------------------------------------

struct RopeCase {
  int head_dim;
  double theta;
  std::optional<duet::RopeScaling> scaling;
  std::vector<std::int32_t> positions;
  bool head_norm = false;  // Qwen3's q and k head norms, fused before the rotation
  int heads = 4, kv_heads = 2;
};

class OpsRope : public ::testing::TestWithParam<RopeCase> {};

// q and k live in a fused qkv buffer ([rows, (H + 2 KH) * D]: q heads, k heads, v heads), so the
// strides exceed the heads and the v part must come back untouched.
TEST_P(OpsRope, MatchesCpu) {
  DUET_REQUIRE_GPU();
  const RopeCase& c = GetParam();
  const int heads = c.heads, kv_heads = c.kv_heads, d = c.head_dim, half = d / 2;
  const int rows = int(c.positions.size()), stride = (heads + 2 * kv_heads) * d;
  auto qkv = random_bf16(std::size_t(rows) * stride, 0.0f, 1.0f, 8);
  if (c.head_norm) {
    // A q head and a k head whose RMS is sqrt(eps), where eps doubles the denominator (a wrong or
    // missing eps fails), and a zero q head, whose output must be 0.
    const std::size_t last = std::size_t(rows - 1) * stride;
    for (int i = 0; i < d; ++i) {
      for (const std::size_t at : {last + std::size_t(i), last + std::size_t(heads * d + i)})
        qkv[at] = dk::to_bf16(dk::from_bf16(qkv[at]) * 1e-3f);
      qkv[std::size_t(d + i)] = dk::to_bf16(0.0f);
    }
  }
  const std::vector<double> inv = duet::rope_inv_freq(d, c.theta, c.scaling);
  std::vector<float> inv_f(inv.begin(), inv.end());  // the host computes inv_freq; the kernel takes float32
  dk::StreamHandle s;
  auto d_qkv = upload(qkv, s.get());
  auto d_pos = upload(c.positions, s.get());
  auto d_inv = upload(inv_f, s.get());
  // Norm weights far from 1 (a weight left out, or q's used for k, fails the reference).
  const auto q_weight = random_bf16(std::size_t(d), 1.0f, 0.5f, 9),
             k_weight = random_bf16(std::size_t(d), 1.0f, 0.5f, 10);
  auto d_qw = upload(q_weight, s.get());
  auto d_kw = upload(k_weight, s.get());
  const float eps = 1e-6f;
  const dk::HeadNorm qk_norm =
      c.head_norm ? dk::HeadNorm{d_qw.as<bf16>(), d_kw.as<bf16>(), eps} : dk::HeadNorm{};
  dk::rope(d_qkv.as<bf16>(), d_qkv.as<bf16>() + heads * d, d_pos.as<std::int32_t>(), d_inv.as<float>(), rows,
           heads, kv_heads, d, stride, stride, s.get(), qk_norm);
  const auto out = download<bf16>(d_qkv.get(), qkv.size(), s);

  // Tolerance per element of pair i: the bf16 bound, plus the float32 angle's error. The kernel's
  // angle is float(pos) * float(inv_freq[i]), rounded twice (2^-24 relative each), so it is off by
  // up to 2^-23 * angle where the reference uses the exact double angle; turning a pair (a, b) by
  // that error moves each coordinate by up to |(a, b)| * error. 2^-22 leaves a factor 2, and
  // 1e-6 |(a, b)| covers sincosf's 2 ulp. At position 131071 and inv_freq 1 this is a 3% bound:
  // float32 angles are that coarse (HF computes them the same way).
  int bad = 0;
  for (int r = 0; r < rows; ++r) {
    for (int h = 0; h < heads + 2 * kv_heads; ++h) {
      const std::size_t base = std::size_t(r) * stride + std::size_t(h) * d;
      std::vector<float> ref(std::size_t(d), 0.0f);
      for (int i = 0; i < d; ++i) ref[i] = dk::from_bf16(qkv[base + i]);
      if (c.head_norm && h < heads + kv_heads) {
        std::vector<float> w(static_cast<std::size_t>(d));
        for (int i = 0; i < d; ++i) w[i] = dk::from_bf16(h < heads ? q_weight[i] : k_weight[i]);
        duet::rms_norm(ref, w, eps, ref);
      }
      const std::vector<float> in = ref;
      if (h < heads + kv_heads) duet::apply_rope(ref, c.positions[r], inv);
      for (int i = 0; i < d; ++i) {
        const int pair = i % half;
        const double angle = double(c.positions[r]) * inv[pair];
        const double norm = std::hypot(double(in[pair]), double(in[pair + half]));
        const double tol = h < heads + kv_heads
                               ? kBf16Rel * std::abs(ref[i]) + (0x1.0p-22 * angle + 1e-6) * norm + kBf16Abs
                               : 0.0;
        const double got = dk::from_bf16(out[base + i]);
        if (!(std::abs(got - ref[i]) <= tol) && ++bad <= 5)
          ADD_FAILURE() << "row " << r << " head " << h << " i " << i << " pos " << c.positions[r] << ": got "
                        << got << ", reference " << ref[i] << ", tolerance " << tol;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

duet::RopeScaling llama3_scaling(double factor) {
  duet::RopeScaling s;
  s.factor = factor;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = 8192;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Ops, OpsRope,
    ::testing::Values(RopeCase{128, 500000.0, std::nullopt, {0, 1, 2, 777, 4095, 8191}},
                      RopeCase{64, 10000.0, std::nullopt, {0, 3, 100, 2047}},
                      RopeCase{128, 500000.0, llama3_scaling(8.0), {0, 1, 4096, 8192, 32767, 131071}},
                      RopeCase{64, 500000.0, llama3_scaling(32.0), {5, 1000, 16384, 65535}},
                      RopeCase{128, 1000000.0, std::nullopt, {0, 1, 777, 40959}, true},
                      // Qwen3-8B's 32 + 8 heads: 8 warps, each normalising five heads.
                      RopeCase{128, 1000000.0, std::nullopt, {3, 40000}, true, 32, 8},
                      // head_dim 16: lanes with no element of a head, two warps for six heads.
                      RopeCase{16, 10000.0, std::nullopt, {0, 9, 511}, true}));

TEST(Ops, RopeScalingChangesOnlyLowFrequencies) {
  // A sanity check of the host-side inv_freq the kernel consumes: llama3 scaling keeps the high
  // frequencies (short wavelengths) and divides the lowest by `factor`.
  const auto plain = duet::rope_inv_freq(128, 500000.0, std::nullopt);
  const auto scaled = duet::rope_inv_freq(128, 500000.0, llama3_scaling(8.0));
  EXPECT_DOUBLE_EQ(scaled.front(), plain.front());
  EXPECT_NEAR(scaled.back(), plain.back() / 8.0, 1e-18);
}

// --- Ops: PRM scores ----------------------------------------------------------------------------

TEST(Ops, PrmScoresMatchCpu) {
  DUET_REQUIRE_GPU();
  const int vocab = 300, plus = 7, minus = 123;
  const std::vector<std::pair<float, float>> cases = {
      {0, 0},   {1, 0},   {0, 1},          {30, -2},        {-2, 30},       {88, 0},        {0, 88},
      {104, 0}, {0, 104}, {1e30f, -1e30f}, {-1e30f, 1e30f}, {1e38f, 1e38f}, {-5.5f, -5.25f}};
  const int rows = int(cases.size());
  std::vector<float> logits(std::size_t(rows) * vocab);
  std::mt19937_64 rng(9);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (float& v : logits) v = nd(rng);
  for (int r = 0; r < rows; ++r) {
    logits[std::size_t(r) * vocab + plus] = cases[r].first;
    logits[std::size_t(r) * vocab + minus] = cases[r].second;
  }
  dk::StreamHandle s;
  auto d_logits = upload(logits, s.get());
  dk::DeviceBuffer d_out(std::size_t(rows) * 4);
  dk::prm_scores(d_logits.as<float>(), d_out.as<float>(), rows, vocab, plus, minus, s.get());
  const auto out = download<float>(d_out.get(), std::size_t(rows), s);
  for (int r = 0; r < rows; ++r) {
    const float ref =
        duet::prm_score({logits.data() + std::size_t(r) * vocab, std::size_t(vocab)}, plus, minus);
    // float32 exp and one division against double: a few ulp, 2e-6 relative; 1e-37 absolute for
    // results in the subnormal range (e^-104).
    EXPECT_TRUE(std::isfinite(out[r])) << r;
    EXPECT_NEAR(out[r], ref, 2e-6 * ref + 1e-37) << "row " << r;
  }
}

TEST(Ops, FillDummyIsTheHostsDummyTensorInBf16) {
  // The CUDA engine's dummy weights are the CPU engine's, bit for bit after rounding to bf16:
  // both compute kernels/dummy_value.hpp's function (exact integer steps, one fused multiply-add
  // and one rounding to float, which the device does as the host does).
  DUET_REQUIRE_GPU();
  dk::StreamHandle s;
  using Kind = duet::LlamaTensorSpec::Kind;
  const duet::LlamaTensorSpec tensors[] = {
      {"model.layers.3.mlp.down_proj.weight", {300, 1377}, Kind::Projection},
      {"model.embed_tokens.weight", {1000, 64}, Kind::Embedding},
      {"model.norm.weight", {4099}, Kind::Norm},
  };
  for (const auto& t : tensors) {
    const duet::HostTensor host = duet::dummy_tensor(t, 7);
    const std::int64_t n = std::int64_t(host.data.size());
    dk::DeviceBuffer b(std::size_t(n) * sizeof(bf16));
    dk::fill_dummy(b.as<bf16>(), n, duet::dummy_init(t, 7), s.get());
    const std::vector<bf16> got = download<bf16>(b.get(), std::size_t(n), s);
    std::int64_t differ = 0;
    for (std::int64_t i = 0; i < n; ++i)
      if (got[std::size_t(i)] != dk::to_bf16(host.data[std::size_t(i)]) && differ++ < 3)
        ADD_FAILURE() << t.name << "[" << i << "]: device " << dk::from_bf16(got[std::size_t(i)]) << ", host "
                      << host.data[std::size_t(i)];
    EXPECT_EQ(differ, 0) << t.name << ": " << differ << " of " << n << " values differ";
  }
}

TEST(Ops, RejectsBadShapesWithoutTouchingTheDevice) {
  // Validation runs on the host before any CUDA call, so this runs everywhere.
  EXPECT_THROW(dk::prm_scores(nullptr, nullptr, 1, 10, 10, 0, nullptr), duet::Error);
  EXPECT_THROW(dk::prm_scores(nullptr, nullptr, 1, 10, 0, -1, nullptr), duet::Error);
  EXPECT_THROW(dk::sample(nullptr, nullptr, nullptr, 1, 0, nullptr), duet::Error);
  EXPECT_THROW(dk::sample(nullptr, nullptr, nullptr, -1, 10, nullptr), duet::Error);
  EXPECT_THROW(dk::rope(nullptr, nullptr, nullptr, nullptr, 1, 1, 1, 63, 63, 63, nullptr), duet::Error);
  EXPECT_THROW(dk::rope(nullptr, nullptr, nullptr, nullptr, 1, 2, 1, 64, 64, 64, nullptr), duet::Error);
  // Head norms need both weights and a positive eps, checked even for a batch of no rows.
  const bf16 weight[2]{};
  EXPECT_THROW(
      dk::rope(nullptr, nullptr, nullptr, nullptr, 0, 1, 1, 64, 64, 64, nullptr, {weight, nullptr, 1e-6f}),
      duet::Error);
  EXPECT_THROW(
      dk::rope(nullptr, nullptr, nullptr, nullptr, 0, 1, 1, 64, 64, 64, nullptr, {weight, weight, 0.0f}),
      duet::Error);
  EXPECT_THROW(dk::rmsnorm(nullptr, nullptr, nullptr, 1, 0, 1e-5f, nullptr), duet::Error);
  EXPECT_THROW(dk::silu_mul(nullptr, nullptr, -1, 8, nullptr), duet::Error);
  EXPECT_THROW(dk::fill_dummy(nullptr, -1, {}, nullptr), duet::Error);
  // Zero rows launch nothing.
  EXPECT_NO_THROW(dk::rmsnorm(nullptr, nullptr, nullptr, 0, 64, 1e-5f, nullptr));
  EXPECT_NO_THROW(dk::sample(nullptr, nullptr, nullptr, 0, 10, nullptr));
  EXPECT_NO_THROW(dk::gather_rows(nullptr, nullptr, nullptr, 0, 64, nullptr));
  EXPECT_NO_THROW(dk::fill_dummy(nullptr, 0, {}, nullptr));
}

// --- Sampling -----------------------------------------------------------------------------------

TEST(Sampling, PhiloxKnownAnswers) {
  // Random123's tests/kat_vectors, "philox4x32 10" rows: counter, key -> output.
  struct Kat {
    dk::Philox4x32 ctr;
    std::uint32_t k0, k1;
    dk::Philox4x32 out;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       0xffffffffu,
       0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       0xa4093822u,
       0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const Kat& k : kats) {
    const dk::Philox4x32 got = dk::philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], k.out.v[i]) << "word " << i;
  }
  // The documented uniform: key (seed lo, seed hi), counter (ctr lo, ctr hi, 0, 0), top 53 bits
  // of words 1:0. Seed 0 / counter 0 is the first known answer.
  const std::uint64_t w = (std::uint64_t(0xe169c58du) << 32) | 0x6627e8d5u;
  EXPECT_EQ(dk::philox_uniform(0, 0), double(w >> 11) * 0x1.0p-53);
  const std::uint64_t seed = 0x299f31d0a4093822ull, ctr = 0x85a308d3243f6a88ull;
  const dk::Philox4x32 x = dk::philox4x32_10({{0x243f6a88u, 0x85a308d3u, 0, 0}}, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(dk::philox_uniform(seed, ctr),
            double(((std::uint64_t(x.v[1]) << 32) | x.v[0]) >> 11) * 0x1.0p-53);
  for (std::uint64_t c = 0; c < 1000; ++c) {
    const double u = dk::philox_uniform(12345, c);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

// Runs sample() on rows of logits with per-row params; returns the tokens.
std::vector<std::int32_t> run_sample(const std::vector<float>& logits,
                                     const std::vector<dk::SampleParams>& params, int vocab,
                                     const dk::StreamHandle& s) {
  const int rows = int(params.size());
  auto d_logits = upload(logits, s.get());
  auto d_params = upload(params, s.get());
  dk::DeviceBuffer d_out(std::size_t(rows) * 4);
  dk::sample(d_logits.as<float>(), d_params.as<dk::SampleParams>(), d_out.as<std::int32_t>(), rows, vocab,
             s.get());
  return download<std::int32_t>(d_out.get(), std::size_t(rows), s);
}

constexpr int kLlamaVocab = 128256;

std::vector<float> random_logits(int rows, int vocab, float stddev, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, stddev);
  std::vector<float> l(std::size_t(rows) * vocab);
  for (float& v : l) v = nd(rng);
  return l;
}

std::span<const float> row_of(const std::vector<float>& l, int r, int vocab) {
  return {l.data() + std::size_t(r) * vocab, std::size_t(vocab)};
}

TEST(Sampling, GreedyIsArgmaxWithTies) {
  DUET_REQUIRE_GPU();
  const int vocab = kLlamaVocab, rows = 8;
  auto l = random_logits(rows, vocab, 2.0f, 10);
  auto at = [&](int r, int i) -> float& { return l[std::size_t(r) * vocab + i]; };
  at(1, 100) = at(1, 90000) = 50.0f;                 // a tie: the lower id wins
  for (int i = 0; i < vocab; ++i) at(2, i) = 1.25f;  // all equal: id 0
  for (int i = 0; i < vocab; ++i) at(3, i) = -std::numeric_limits<float>::infinity();  // none finite: id 0
  at(4, 0) = std::numeric_limits<float>::quiet_NaN();                                  // NaN never wins
  at(4, 5) = 60.0f;
  at(4, 6) = std::numeric_limits<float>::quiet_NaN();
  at(5, vocab - 1) = 70.0f;  // the last id
  at(6, 77) = 70.0f;         // ties between different threads' elements
  at(6, 77 + 512) = 70.0f;
  at(6, 76) = 70.0f;
  std::vector<dk::SampleParams> params(rows);
  for (int r = 0; r < rows; ++r) params[r].seed = 99, params[r].counter = std::uint64_t(r);
  params[7].temperature = -1.0f;  // negative temperature is greedy too
  dk::StreamHandle s;
  const auto got = run_sample(l, params, vocab, s);
  for (int r = 0; r < rows; ++r) EXPECT_EQ(got[r], duet::argmax(row_of(l, r, vocab))) << "row " << r;
  EXPECT_EQ(got[1], 100);
  EXPECT_EQ(got[2], 0);
  EXPECT_EQ(got[3], 0);
  EXPECT_EQ(got[4], 5);
  EXPECT_EQ(got[5], vocab - 1);
  EXPECT_EQ(got[6], 76);
}

TEST(Sampling, TinyTopPIsGreedy) {
  DUET_REQUIRE_GPU();
  const int vocab = kLlamaVocab, rows = 16;
  auto l = random_logits(rows, vocab, 3.0f, 11);
  l[std::size_t(3) * vocab + 4000] = l[std::size_t(3) * vocab + 70000] = 40.0f;  // tie at the top
  std::vector<dk::SampleParams> params(rows);
  for (int r = 0; r < rows; ++r) {
    params[r].temperature = r % 2 ? 1.0f : 0.6f;
    params[r].top_p = r % 4 < 2 ? 1e-6f : 0.0f;
    params[r].seed = 1234567ull * (r + 1);
    params[r].counter = std::uint64_t(r) * 77;
  }
  dk::StreamHandle s;
  const auto got = run_sample(l, params, vocab, s);
  for (int r = 0; r < rows; ++r) EXPECT_EQ(got[r], duet::argmax(row_of(l, r, vocab))) << "row " << r;
  EXPECT_EQ(got[3], 4000);
}

// With equal logits every token has p = 1 and integer mass exactly 2^40, so the draw is exact
// arithmetic on the Philox uniform: with V = 2^17 tokens and top_p = 1 the token is
// floor(u * 2^17), i.e. it exposes the top 17 bits of the kernel's uniform. top_p < 1 keeps the
// k = ceil(top_p * 2^17) lowest ids (ties rank by id) and the token is floor(u * k * 2^40) >> 40,
// reproduced here with the kernel's own double expressions.
TEST(Sampling, EqualLogitsExposeThePhiloxUniform) {
  DUET_REQUIRE_GPU();
  const int vocab = 1 << 17, rows = 96;
  std::vector<float> l(std::size_t(rows) * vocab, 0.25f);
  std::vector<dk::SampleParams> params(rows);
  const float top_ps[] = {1.0f, 0.5f, 0.3f};
  for (int r = 0; r < rows; ++r) {
    params[r].temperature = r % 3 == 0 ? 1.0f : 0.37f;
    params[r].top_p = top_ps[r % 3];
    // Large seeds and counters exercise the high key and counter words.
    params[r].seed = r % 2 ? 0x0123456789abcdefull + std::uint64_t(r) : std::uint64_t(r);
    params[r].counter = r % 4 < 2 ? std::uint64_t(r) : (std::uint64_t(r) << 36) + 5;
  }
  dk::StreamHandle s;
  const auto got = run_sample(l, params, vocab, s);
  for (int r = 0; r < rows; ++r) {
    const double u = dk::philox_uniform(params[r].seed, params[r].counter);
    const std::uint64_t total = std::uint64_t(vocab) << 40;
    std::uint64_t kept = total;
    if (params[r].top_p < 1.0f) {
      const std::uint64_t need = std::uint64_t(std::ceil(double(params[r].top_p) * double(total)));
      kept = ((need + (1ull << 40) - 1) >> 40) << 40;
    }
    std::uint64_t target = std::uint64_t(u * double(kept));
    if (target >= kept) target = kept - 1;
    EXPECT_EQ(got[r], std::int32_t(target >> 40)) << "row " << r << " u " << u;
    if (params[r].top_p == 1.0f) {
      EXPECT_EQ(got[r], std::int32_t(std::floor(u * vocab))) << "row " << r;
    }
  }
}

// The CPU replay of one draw (the rule of sampling.cu, in double precision and summed in order):
// returns the token, and for every token its cumulative-mass interval [start, end) in the sorted
// order so that a draw can be judged by its distance from the target rather than by identity alone.
struct Replay {
  std::int32_t token = -1;
  double target = 0, kept = 0, total = 0, nucleus_margin = 0;
  std::vector<double> start, end;
};

Replay cpu_replay(std::span<const float> l, float temperature, float top_p, double u) {
  Replay rp;
  const std::size_t n = l.size();
  const double top = double(l[std::size_t(duet::argmax(l))]);
  std::vector<double> p(n);
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = std::isnan(l[i]) ? 0.0 : std::exp((double(l[i]) - top) / temperature);
    rp.total += p[i];
  }
  std::vector<std::int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return p[a] != p[b] ? p[a] > p[b] : a < b; });
  rp.start.assign(n, 0);
  rp.end.assign(n, 0);
  double acc = 0;
  std::size_t kept_n = n;
  for (std::size_t j = 0; j < n; ++j) {
    rp.start[order[j]] = acc;
    acc += p[order[j]];
    rp.end[order[j]] = acc;
    if (kept_n == n && acc >= double(top_p) * rp.total) {
      kept_n = j + 1;
      rp.kept = acc;
      // How far the nucleus decision is from flipping: top_p * total against this boundary and
      // the previous one.
      rp.nucleus_margin =
          std::min(acc - double(top_p) * rp.total, double(top_p) * rp.total - rp.start[order[j]]);
    }
  }
  // The sum in sorted order may round below the sum in id order, so top_p = 1 can end the loop
  // without reaching it: then everything is kept.
  if (kept_n == n) rp.kept = acc;
  rp.target = u * rp.kept;
  for (std::size_t j = 0; j < kept_n; ++j)
    if (rp.target < rp.end[order[j]]) {
      rp.token = order[j];
      break;
    }
  if (rp.token < 0) rp.token = order[kept_n - 1];
  return rp;
}

// Realistic full-vocabulary logits. The kernel's masses are float32 expf values quantised to
// 2^-40 of the top token's, the replay's are exact doubles: they differ by ~4e-6 relative (expf's
// argument rounding, |arg| <= 30 where it matters) plus vocab * 2^-40 absolute, so a draw may
// legitimately differ only when the target lies within that of a token boundary. The check: the
// kernel's token's interval in the CPU order lies within 1e-4 * kept of the CPU target (and equals
// the CPU token in the great majority of draws). Runs are bitwise deterministic and do not depend
// on the batch: the same (seed, counter) in another row of another batch gives the same token.
TEST(Sampling, SeededDrawMatchesCpuReplay) {
  DUET_REQUIRE_GPU();
  const int vocab = kLlamaVocab, rows = 48;
  auto l = random_logits(rows, vocab, 2.5f, 12);
  for (int r = 0; r < rows; ++r)  // a peaked head over a long tail, as a language model's
    for (int j = 0; j < 12; ++j)
      l[std::size_t(r) * vocab + std::size_t((r * 7919 + j * 10007) % vocab)] += 9.0f - j;
  std::vector<dk::SampleParams> params(rows);
  const float temps[] = {1.0f, 0.7f, 1.3f};
  const float top_ps[] = {1.0f, 0.9f, 0.5f, 0.95f};
  for (int r = 0; r < rows; ++r) {
    params[r].temperature = temps[r % 3];
    params[r].top_p = top_ps[r % 4];
    params[r].seed = 0x5eed0000ull + std::uint64_t(r / 8);
    params[r].counter = std::uint64_t(r) * 3 + 1;
  }
  dk::StreamHandle s;
  const auto first = run_sample(l, params, vocab, s);
  const auto again = run_sample(l, params, vocab, s);
  EXPECT_EQ(first, again) << "the same logits and (seed, counter) must give the same tokens";

  // Another batch: the rows reversed and only every other one.
  std::vector<float> l2;
  std::vector<dk::SampleParams> p2;
  std::vector<int> src;
  for (int r = rows - 1; r >= 0; r -= 2) {
    auto row = row_of(l, r, vocab);
    l2.insert(l2.end(), row.begin(), row.end());
    p2.push_back(params[r]);
    src.push_back(r);
  }
  const auto other = run_sample(l2, p2, vocab, s);
  for (std::size_t i = 0; i < src.size(); ++i) EXPECT_EQ(other[i], first[src[i]]) << "row " << src[i];

  int exact = 0, same_as_cpu_engine = 0;
  for (int r = 0; r < rows; ++r) {
    const auto row = row_of(l, r, vocab);
    const double u = dk::philox_uniform(params[r].seed, params[r].counter);
    const Replay rp = cpu_replay(row, params[r].temperature, params[r].top_p, u);
    const double eps = 1e-4 * rp.kept;
    // The CPU engine's sampler follows the kernel's rule (float weights, integer masses): it too
    // lies within the masses' rounding of the replay's target.
    const std::int32_t cpu = duet::sample_top_p(row, params[r].temperature, params[r].top_p, u);
    ASSERT_GE(cpu, 0);
    ASSERT_LT(cpu, vocab);
    EXPECT_TRUE(rp.start[cpu] <= rp.target + eps && rp.end[cpu] >= rp.target - eps)
        << "row " << r << ": CPU engine token " << cpu << ", replay token " << rp.token;
    const std::int32_t g = first[r];
    ASSERT_GE(g, 0);
    ASSERT_LT(g, vocab);
    EXPECT_TRUE(rp.start[g] <= rp.target + eps && rp.end[g] >= rp.target - eps)
        << "row " << r << ": kernel token " << g << " spans [" << rp.start[g] << ", " << rp.end[g]
        << ") of the CPU order, CPU token " << rp.token << ", target " << rp.target << ", kept " << rp.kept;
    exact += g == rp.token;
    same_as_cpu_engine += g == cpu;
  }
  // expf differs between CUDA and glibc by an ulp, so identity is expected for most draws, not
  // demanded for all: against the replay in double, and against the CPU engine, which runs the
  // kernel's own arithmetic (kernels/sample_rule.hpp) with glibc's expf.
  EXPECT_GE(exact, rows * 3 / 4) << "tokens identical to the CPU replay";
  EXPECT_GE(same_as_cpu_engine, rows * 3 / 4) << "tokens identical to the CPU engine's";
}

// Well-separated probabilities (a few candidates, the rest 40 below): every boundary is far from
// every draw, so the kernel must equal the replay exactly. The test asserts that design on the CPU.
TEST(Sampling, SeparatedLogitsMatchCpuReplayExactly) {
  DUET_REQUIRE_GPU();
  const int vocab = kLlamaVocab, rows = 64;
  std::vector<float> l(std::size_t(rows) * vocab, -40.0f);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < 16; ++j)
      l[std::size_t(r) * vocab + std::size_t((r * 131 + j * 8009) % vocab)] = 1.0f - 0.3f * j;
  std::vector<dk::SampleParams> params(rows);
  for (int r = 0; r < rows; ++r) {
    params[r].temperature = r % 2 ? 0.8f : 1.0f;
    params[r].top_p = r % 3 == 0 ? 1.0f : (r % 3 == 1 ? 0.83f : 0.47f);
    params[r].seed = 777;
    params[r].counter = std::uint64_t(r) * 1000003ull;
  }
  dk::StreamHandle s;
  const auto got = run_sample(l, params, vocab, s);
  int checked = 0;
  for (int r = 0; r < rows; ++r) {
    const auto row = row_of(l, r, vocab);
    const double u = dk::philox_uniform(params[r].seed, params[r].counter);
    const Replay rp = cpu_replay(row, params[r].temperature, params[r].top_p, u);
    if (params[r].top_p < 1.0f) {
      ASSERT_GT(rp.nucleus_margin, 1e-3 * rp.total) << "test design, row " << r;
    }
    const double margin = std::min(rp.target - rp.start[rp.token], rp.end[rp.token] - rp.target);
    if (margin < 1e-5 * rp.kept) continue;  // a draw on a boundary: ~1e-5 likely, skipped
    ++checked;
    EXPECT_EQ(got[r], rp.token) << "row " << r << " u " << u;
  }
  EXPECT_GE(checked, rows - 2);
}

// Over many counters, token frequencies follow softmax(logits / T) (restricted to and renormalised
// over the nucleus when top_p < 1; tokens outside it never appear). Per token the count is
// binomial: |f - p| <= 5 sqrt(p (1 - p) / N) + 1/N, a false alarm below 1e-5 for the whole test.
TEST(Sampling, FrequenciesMatchSoftmax) {
  DUET_REQUIRE_GPU();
  const std::vector<float> logits = {3.0f,  2.2f,  2.2f,  1.0f,
                                     0.5f,  0.0f,  -0.5f, -1.0f,
                                     -2.0f, -4.0f, -8.0f, -std::numeric_limits<float>::infinity()};
  const int vocab = int(logits.size()), n = 200000;
  struct Case {
    float temperature, top_p;
  };
  for (const Case c : {Case{0.8f, 1.0f}, Case{1.6f, 1.0f}, Case{1.0f, 0.75f}}) {
    std::vector<float> l;
    l.reserve(std::size_t(n) * vocab);
    for (int r = 0; r < n; ++r) l.insert(l.end(), logits.begin(), logits.end());
    std::vector<dk::SampleParams> params(n);
    for (int r = 0; r < n; ++r) {
      params[r].temperature = c.temperature;
      params[r].top_p = c.top_p;
      params[r].seed = 2024;
      params[r].counter = std::uint64_t(r);
    }
    dk::StreamHandle s;
    const auto got = run_sample(l, params, vocab, s);
    std::vector<int> count(vocab, 0);
    for (auto t : got) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, vocab);
      ++count[t];
    }
    // Expected: softmax in double, then the nucleus (sorted by p, ties by id).
    const Replay rp = cpu_replay(logits, c.temperature, c.top_p, 0.0);
    if (c.top_p < 1.0f) {
      ASSERT_GT(rp.nucleus_margin, 1e-3 * rp.total) << "test design";
    }
    for (int i = 0; i < vocab; ++i) {
      const double p = std::isinf(logits[i]) ? 0.0 : std::exp((double(logits[i]) - 3.0) / c.temperature);
      const bool in_nucleus = rp.start[i] < rp.kept;
      const double expect = in_nucleus ? p / rp.kept : 0.0;
      const double f = double(count[i]) / n;
      if (expect == 0.0) {
        EXPECT_EQ(count[i], 0) << "token " << i << " T " << c.temperature << " top_p " << c.top_p;
      } else {
        EXPECT_NEAR(f, expect, 5.0 * std::sqrt(expect * (1 - expect) / n) + 1.0 / n)
            << "token " << i << " T " << c.temperature << " top_p " << c.top_p;
      }
    }
  }
}

TEST(Sampling, NonFiniteLogits) {
  DUET_REQUIRE_GPU();
  const int vocab = 1000, rows = 4;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  auto l = random_logits(rows, vocab, 1.0f, 13);
  for (int i = 0; i < vocab; i += 3) l[i] = nan;  // row 0: NaNs are never drawn
  for (int i = 0; i < vocab; ++i) l[std::size_t(vocab) + i] = i % 2 ? -inf : nan;  // row 1: nothing finite
  l[std::size_t(2) * vocab + 321] = inf;                                    // row 2: +inf is the argmax
  for (int i = 0; i < vocab; i += 2) l[std::size_t(3) * vocab + i] = -inf;  // row 3: -inf is never drawn
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<dk::SampleParams> params(rows);
    for (int r = 0; r < rows; ++r) params[r] = {1.0f, 0.95f, 5, std::uint64_t(trial * rows + r)};
    dk::StreamHandle s;
    const auto got = run_sample(l, params, vocab, s);
    EXPECT_NE(got[0] % 3, 0) << got[0];
    EXPECT_EQ(got[1], 0);
    EXPECT_EQ(got[2], 321);
    EXPECT_EQ(got[3] % 2, 1) << got[3];
  }
}

// --- GEMM ---------------------------------------------------------------------------------------

struct GemmShape {
  int m, n, k;
};

class GemmTolerance : public ::testing::TestWithParam<GemmShape> {};

using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// y = x W^T in double from the bf16 values of x [m, k] and W [n, k], and S = |x| |W|^T per element,
// the scale of the float32 accumulation's error (float is plenty for it).
struct GemmReference {
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> y;
  MatF bound;
};

GemmReference gemm_reference(const std::vector<bf16>& x, const std::vector<bf16>& w, int m, int n, int k) {
  MatF xf(m, k), wf(n, k);
  for (std::size_t i = 0; i < x.size(); ++i) xf.data()[i] = dk::from_bf16(x[i]);
  for (std::size_t i = 0; i < w.size(); ++i) wf.data()[i] = dk::from_bf16(w[i]);
  return {xf.cast<double>() * wf.cast<double>().transpose(), xf.cwiseAbs() * wf.cwiseAbs().transpose()};
}

// y = x W^T against a double-precision product of the same bf16 values. bf16 x bf16 products are
// exact in float32, so the error is the float32 accumulation: at most k roundings of partial sums
// bounded by S = sum_i |x_i w_i|, k 2^-24 S in the worst case and ~sqrt(k) 2^-24 S typically;
// tensor cores add with truncation, which biases the error but stays within ~k 2^-24 |partials|.
// The bound 2^-16 S (4x the typical sqrt(4096) 2^-24 S) is tight enough that any layout or
// transposition mistake (an O(|y|) error, |y| ~ sqrt(k) << S) fails by orders of magnitude. bf16
// output adds its rounding: 2^-8 |ref|.
TEST_P(GemmTolerance, MatchesDoubleReference) {
  DUET_REQUIRE_GPU();
  const auto [m, n, k] = GetParam();
  const auto x = random_bf16(std::size_t(m) * k, 0.0f, 1.0f, 100 + m);
  const auto w = random_bf16(std::size_t(n) * k, 0.0f, 0.05f, 200 + n);
  const auto [ref, bound] = gemm_reference(x, w, m, n, k);

  dk::StreamHandle s;
  auto d_x = upload(x, s.get());
  auto d_w = upload(w, s.get());
  dk::DeviceBuffer d_y16(std::size_t(m) * n * 2), d_y32(std::size_t(m) * n * 4);
  dk::Gemm gemm;
  gemm.bf16_out(d_x.as<bf16>(), d_w.as<bf16>(), d_y16.as<bf16>(), m, n, k, s.get());
  gemm.f32_out(d_x.as<bf16>(), d_w.as<bf16>(), d_y32.as<float>(), m, n, k, s.get());
  gemm.f32_out(d_x.as<bf16>(), d_w.as<bf16>(), d_y32.as<float>(), m, n, k, s.get());  // the cached plan
  const auto y16 = download<bf16>(d_y16.get(), std::size_t(m) * n, s);
  const auto y32 = download<float>(d_y32.get(), std::size_t(m) * n, s);
  int bad16 = 0, bad32 = 0;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      const std::size_t e = std::size_t(i) * n + j;
      const double r = ref(i, j), acc = 0x1.0p-16 * double(bound(i, j)) + 1e-30;
      if (!(std::abs(double(y32[e]) - r) <= acc) && ++bad32 <= 5)
        ADD_FAILURE() << "f32 y[" << i << ", " << j << "] = " << y32[e] << ", reference " << r << ", tol "
                      << acc;
      const double tol16 = acc + kBf16Rel * std::abs(r);
      if (!(std::abs(double(dk::from_bf16(y16[e])) - r) <= tol16) && ++bad16 <= 5)
        ADD_FAILURE() << "bf16 y[" << i << ", " << j << "] = " << dk::from_bf16(y16[e]) << ", reference "
                      << r;
    }
  EXPECT_EQ(bad32, 0) << "m=" << m << " n=" << n << " k=" << k;
  EXPECT_EQ(bad16, 0) << "m=" << m << " n=" << n << " k=" << k;
}

INSTANTIATE_TEST_SUITE_P(Gemm, GemmTolerance,
                         ::testing::Values(GemmShape{1, 64, 64}, GemmShape{1, 4096, 4096},
                                           GemmShape{2, 128256, 256}, GemmShape{3, 3072, 2048},
                                           GemmShape{7, 72, 4096}, GemmShape{17, 1032, 520},
                                           GemmShape{33, 4104, 72}, GemmShape{64, 4096, 4096},
                                           GemmShape{129, 2056, 1000}, GemmShape{255, 64, 4096},
                                           GemmShape{300, 4096, 1024}, GemmShape{300, 1000, 4096}));

// The bias epilogue: y = x W^T + b on every row, b added in float32 before the bf16 rounding; a
// shape's biased and unbiased plans are kept apart (the same shape runs without a bias after).
TEST(Gemm, BiasEpilogueAddsTheBiasToEveryRow) {
  DUET_REQUIRE_GPU();
  const int m = 5, n = 2048, k = 1536;  // Qwen2.5-1.5B's QKV projection
  const auto x = random_bf16(std::size_t(m) * k, 0.0f, 1.0f, 31);
  const auto w = random_bf16(std::size_t(n) * k, 0.0f, 0.05f, 32);
  const auto b = random_bf16(std::size_t(n), 0.0f, 4.0f, 33);
  const auto [ref, bound] = gemm_reference(x, w, m, n, k);
  dk::StreamHandle s;
  auto d_x = upload(x, s.get());
  auto d_w = upload(w, s.get());
  auto d_b = upload(b, s.get());
  dk::DeviceBuffer d_y(std::size_t(m) * n * 2), d_plain(std::size_t(m) * n * 2),
      d_relu(std::size_t(m) * n * 2);
  dk::Gemm gemm;
  gemm.prepare(m, n, k, false, true);
  gemm.prepare(m, n, k, false, true, true);
  EXPECT_THROW(gemm.prepare(m, n, k, true, true), duet::Error);         // a bias is for bf16 output
  EXPECT_THROW(gemm.prepare(m, n, k, true, false, true), duet::Error);  // and so is a ReLU
  gemm.bf16_out(d_x.as<bf16>(), d_w.as<bf16>(), d_y.as<bf16>(), m, n, k, s.get(), d_b.as<bf16>());
  gemm.bf16_out(d_x.as<bf16>(), d_w.as<bf16>(), d_plain.as<bf16>(), m, n, k, s.get());
  // A score head's hidden layer: max(0, x W^T + b), the ReLU after the bias (half the outputs).
  gemm.bf16_out(d_x.as<bf16>(), d_w.as<bf16>(), d_relu.as<bf16>(), m, n, k, s.get(), d_b.as<bf16>(), true);
  const auto y = download<bf16>(d_y.get(), std::size_t(m) * n, s);
  const auto plain = download<bf16>(d_plain.get(), std::size_t(m) * n, s);
  const auto relu = download<bf16>(d_relu.get(), std::size_t(m) * n, s);
  int bad = 0, bad_plain = 0, bad_relu = 0, zeros = 0;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      const std::size_t e = std::size_t(i) * n + j;
      const double r = ref(i, j) + double(dk::from_bf16(b[std::size_t(j)]));
      const double tol = 0x1.0p-16 * double(bound(i, j)) + kBf16Rel * std::abs(r) + 1e-30;
      if (!(std::abs(double(dk::from_bf16(y[e])) - r) <= tol) && ++bad <= 5)
        ADD_FAILURE() << "y[" << i << ", " << j << "] = " << dk::from_bf16(y[e]) << ", reference " << r;
      // max(0, .) moves no value farther from its reference: the same tolerance holds.
      zeros += dk::from_bf16(relu[e]) == 0.0f;
      if (!(std::abs(double(dk::from_bf16(relu[e])) - std::max(r, 0.0)) <= tol) && ++bad_relu <= 5)
        ADD_FAILURE() << "relu y[" << i << ", " << j << "] = " << dk::from_bf16(relu[e]) << ", reference "
                      << std::max(r, 0.0);
      const double tol_plain = 0x1.0p-16 * double(bound(i, j)) + kBf16Rel * std::abs(ref(i, j)) + 1e-30;
      if (!(std::abs(double(dk::from_bf16(plain[e])) - ref(i, j)) <= tol_plain) && ++bad_plain <= 5)
        ADD_FAILURE() << "unbiased y[" << i << ", " << j << "] = " << dk::from_bf16(plain[e])
                      << ", reference " << ref(i, j);
    }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(bad_plain, 0);
  EXPECT_EQ(bad_relu, 0);
  EXPECT_GT(zeros, m * n / 4) << "the bias should make many outputs negative, which the ReLU zeroes";
  // A bias that is not 256-byte aligned (the plan assumed so) is refused before the call.
  EXPECT_THROW(
      gemm.bf16_out(d_x.as<bf16>(), d_w.as<bf16>(), d_y.as<bf16>(), m, n, k, s.get(), d_b.as<bf16>() + 8),
      duet::Error);
}

// A score head's labels: y = x W^T + b in float32 for n = 2 outputs, below cuBLASLt's alignment.
// One warp sums each output in float32: the GEMM tests' accumulation bound holds.
TEST(Ops, SmallLinearIsAFloat32LinearLayer) {
  DUET_REQUIRE_GPU();
  for (const auto& [m, n, k] : {std::tuple{37, 2, 3584}, std::tuple{1, 2, 256}, std::tuple{300, 3, 100}}) {
    const auto x = random_bf16(std::size_t(m) * k, 0.0f, 1.0f, 41);
    const auto w = random_bf16(std::size_t(n) * k, 0.0f, 0.05f, 42);
    const auto b = random_bf16(std::size_t(n), 0.0f, 2.0f, 43);
    const auto [ref, bound] = gemm_reference(x, w, m, n, k);
    dk::StreamHandle s;
    auto d_x = upload(x, s.get());
    auto d_w = upload(w, s.get());
    auto d_b = upload(b, s.get());
    dk::DeviceBuffer d_y(std::size_t(m) * n * 4);
    dk::small_linear_f32(d_x.as<bf16>(), d_w.as<bf16>(), d_b.as<bf16>(), d_y.as<float>(), m, n, k, s.get());
    const auto y = download<float>(d_y.get(), std::size_t(m) * n, s);
    int bad = 0;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        const double r = ref(i, j) + double(dk::from_bf16(b[std::size_t(j)]));
        const double tol = 0x1.0p-16 * double(bound(i, j)) + 0x1.0p-22 * std::abs(r) + 1e-30;
        if (!(std::abs(double(y[std::size_t(i) * n + j]) - r) <= tol) && ++bad <= 5)
          ADD_FAILURE() << "m=" << m << " k=" << k << ": y[" << i << ", " << j
                        << "] = " << y[std::size_t(i) * n + j] << ", reference " << r;
      }
    EXPECT_EQ(bad, 0) << "m=" << m << " n=" << n << " k=" << k;
  }
}

TEST(Gemm, ValidatesShapesAndAlignment) {
  DUET_REQUIRE_GPU();
  dk::StreamHandle s;
  dk::Gemm gemm(1 << 20);
  dk::DeviceBuffer x(64 * 1024 * 2), w(1024 * 1024 * 2), y(64 * 1024 * 4);
  const bf16* xp = x.as<bf16>();
  const bf16* wp = w.as<bf16>();
  // Leading dimensions must be multiples of 16 bytes: k % 8, and n % 8 (bf16 y) or n % 4 (f32 y).
  EXPECT_THROW(gemm.bf16_out(xp, wp, y.as<bf16>(), 4, 64, 100, s.get()), duet::Error);
  EXPECT_THROW(gemm.bf16_out(xp, wp, y.as<bf16>(), 4, 100, 64, s.get()), duet::Error);
  EXPECT_THROW(gemm.f32_out(xp, wp, y.as<float>(), 4, 102, 64, s.get()), duet::Error);
  EXPECT_NO_THROW(gemm.f32_out(xp, wp, y.as<float>(), 4, 100, 64, s.get()));  // 400-byte rows are fine
  // Pointers must be 16-byte aligned.
  EXPECT_THROW(gemm.bf16_out(xp + 1, wp, y.as<bf16>(), 4, 64, 64, s.get()), duet::Error);
  EXPECT_THROW(gemm.bf16_out(xp, wp + 4, y.as<bf16>(), 4, 64, 64, s.get()), duet::Error);
  EXPECT_NO_THROW(gemm.bf16_out(xp + 8, wp + 64, y.as<bf16>() + 8, 4, 64, 64, s.get()));  // 16-byte offsets
  try {
    gemm.bf16_out(xp, wp, y.as<bf16>(), 4, 64, 100, s.get());
  } catch (const duet::Error& e) {
    EXPECT_NE(std::string(e.what()).find("k=100"), std::string::npos) << e.what();
  }
  // m = 0 is a no-op: y keeps its contents.
  dk::fill_zero(y.get(), y.bytes(), s.get());
  EXPECT_NO_THROW(gemm.bf16_out(nullptr, nullptr, y.as<bf16>(), 0, 64, 64, s.get()));
  const auto after = download<std::uint16_t>(y.get(), 64 * 64, s);
  EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](auto v) { return v == 0; }));
  // prepare() checks shapes as the calls do, and a prepared call runs as an unprepared one.
  EXPECT_THROW(gemm.prepare(4, 64, 100, false), duet::Error);
  EXPECT_THROW(gemm.prepare(4, 102, 64, true), duet::Error);
  EXPECT_NO_THROW(gemm.prepare(0, 64, 64, false));
  EXPECT_NO_THROW(gemm.prepare(5, 64, 64, false));
  EXPECT_NO_THROW(gemm.bf16_out(xp, wp, y.as<bf16>(), 5, 64, 64, s.get()));
}

// A decoder step's shape of work captured into a CUDA graph replays to the same bits as the eager
// launches (plans are cached by the eager warm-up, as an executor would before capturing).
TEST(Gemm, CapturedInAGraphReplaysBitwise) {
  DUET_REQUIRE_GPU();
  const int m = 8, hidden = 2048, n = 4096;
  const auto x = random_bf16(std::size_t(m) * hidden, 0.0f, 1.0f, 14);
  const auto norm_w = random_bf16(std::size_t(hidden), 1.0f, 0.1f, 15);
  const auto w = random_bf16(std::size_t(n) * hidden, 0.0f, 0.02f, 16);
  dk::StreamHandle s;
  auto d_x = upload(x, s.get());
  auto d_nw = upload(norm_w, s.get());
  auto d_w = upload(w, s.get());
  dk::DeviceBuffer d_h(x.size() * 2), d_y(std::size_t(m) * n * 4);
  dk::Gemm gemm;
  auto step = [&] {
    dk::rmsnorm(d_x.as<bf16>(), d_nw.as<bf16>(), d_h.as<bf16>(), m, hidden, 1e-5f, s.get());
    gemm.f32_out(d_h.as<bf16>(), d_w.as<bf16>(), d_y.as<float>(), m, n, hidden, s.get());
  };
  step();
  const auto eager = download<float>(d_y.get(), std::size_t(m) * n, s);
  dk::fill_zero(d_y.get(), d_y.bytes(), s.get());
  dk::fill_zero(d_h.get(), d_h.bytes(), s.get());
  s.synchronize();
  dk::begin_capture(s.get());
  step();
  dk::Graph graph = dk::end_capture(s.get());
  ASSERT_TRUE(graph.valid());
  for (int rep = 0; rep < 2; ++rep) {
    graph.launch(s.get());
    const auto replay = download<float>(d_y.get(), std::size_t(m) * n, s);
    EXPECT_EQ(std::memcmp(replay.data(), eager.data(), eager.size() * 4), 0) << "replay " << rep;
  }
  dk::Graph moved = std::move(graph);
  EXPECT_FALSE(graph.valid());  // NOLINT(bugprone-use-after-move): the moved-from state is the test
  EXPECT_TRUE(moved.valid());
}

}  // namespace
