// The safetensors reader and writer: bit-exact round trips, element conversions (f16 with its
// special values and rounding; bf16's are tests/core/test_bf16.cpp's), every header validation
// error and its message, sharded checkpoints, and fuzzing (truncations, byte flips, random
// headers) that must end in either a consistent file or a duet::Error, never a crash or an
// out-of-bounds read.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "exec/safetensors.hpp"
#include "tests/support/test_support.hpp"

namespace duet {
namespace {

using test_support::contains;
using test_support::error_of;
using test_support::TempDir;

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::byte> to_bytes(const std::string& s) {
  std::vector<std::byte> out;
  for (char c : s) out.push_back(std::byte(c));
  return out;
}

void write_bytes(const fs::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::vector<std::byte> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out;
  for (char c : chars) out.push_back(std::byte(c));
  return out;
}

// A file with the given header text and data; `length` overrides the 8-byte header length.
std::vector<std::byte> raw_file(const std::string& header, const std::vector<std::byte>& data = {},
                                std::optional<std::uint64_t> length = {}) {
  const std::uint64_t n = length.value_or(header.size());
  std::vector<std::byte> out;
  for (int i = 0; i < 8; ++i) out.push_back(std::byte((n >> (8 * i)) & 0xff));
  const auto text = to_bytes(header);
  out.insert(out.end(), text.begin(), text.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::vector<std::byte> u16_bytes(const std::vector<std::uint16_t>& values) {
  std::vector<std::byte> out;
  for (std::uint16_t v : values) {
    out.push_back(std::byte(v & 0xff));
    out.push_back(std::byte(v >> 8));
  }
  return out;
}

std::vector<std::byte> view_bytes(const TensorView& v) { return {v.bytes.begin(), v.bytes.end()}; }

std::uint32_t float_bits(float f) { return std::bit_cast<std::uint32_t>(f); }

// --- Round trips ---------------------------------------------------------------------------------

TEST(Safetensors, WrittenFileLoadsBackBitExactForEveryDtype) {
  TempDir dir;
  // Values that bf16 represents exactly, so converting them back must give the same floats.
  const std::vector<float> bf16_values = {1.0f, -2.5f, 0.15625f, 0x1.fep127f, -0.0f, 0x1p-133f};
  const std::vector<std::uint16_t> f16_bits = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x7c00, 0x8000};
  const std::vector<float> f32_values = {1.0f, -1e-45f, 3.4028235e38f, 0.1f, -7.25f, 123456.789f};
  const auto bf16 = floats_to_bytes(bf16_values, DType::BF16);
  const auto f16 = u16_bytes(f16_bits);
  const auto f32 = floats_to_bytes(f32_values, DType::F32);
  const std::vector<std::byte> none;
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "ünïcode"}};
  write_safetensors((dir / "t.safetensors").string(),
                    {{"b", DType::BF16, {2, 3}, bf16},
                     {"h", DType::F16, {6}, f16},
                     {"f", DType::F32, {3, 1, 2}, f32},
                     {"scalar", DType::F32, {}, std::span(f32).first(4)},
                     {"empty", DType::BF16, {0, 7}, none}},
                    metadata);
  const SafetensorsFile file = SafetensorsFile::open((dir / "t.safetensors").string());
  EXPECT_EQ(file.names(), (std::vector<std::string>{"b", "empty", "f", "h", "scalar"}));
  EXPECT_EQ(file.metadata(), metadata);
  const TensorView* b = file.find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, DType::BF16);
  EXPECT_EQ(b->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(view_bytes(*b), bf16);
  const std::vector<float> b_floats = to_float_vector(*b);
  for (std::size_t i = 0; i < bf16_values.size(); ++i)
    EXPECT_EQ(float_bits(b_floats[i]), float_bits(bf16_values[i]));
  EXPECT_EQ(view_bytes(*file.find("h")), f16);
  EXPECT_EQ(
      to_float_vector(*file.find("h")),
      (std::vector<float>{1.0f, -2.0f, 0x1p-24f, 65504.0f, std::numeric_limits<float>::infinity(), -0.0f}));
  EXPECT_EQ(view_bytes(*file.find("f")), f32);
  const std::vector<float> f_floats = to_float_vector(*file.find("f"));
  for (std::size_t i = 0; i < f32_values.size(); ++i)
    EXPECT_EQ(float_bits(f_floats[i]), float_bits(f32_values[i]));
  EXPECT_EQ(file.find("scalar")->numel(), 1);
  EXPECT_EQ(to_float_vector(*file.find("scalar")), std::vector<float>{1.0f});
  EXPECT_EQ(file.find("empty")->numel(), 0);
  EXPECT_TRUE(file.find("empty")->bytes.empty());
  EXPECT_EQ(file.find("missing"), nullptr);
}

TEST(Safetensors, DataStartsEightByteAligned) {
  TempDir dir;
  const auto bytes = floats_to_bytes(std::vector<float>{1, 2, 3}, DType::F32);
  write_safetensors((dir / "a.safetensors").string(), {{"abc", DType::F32, {3}, bytes}});
  const auto raw = read_bytes(dir / "a.safetensors");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<std::uint64_t>(raw[std::size_t(i)]);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(raw.size(), 8 + n + 12);
}

TEST(Safetensors, UnalignedDataConvertsCorrectly) {
  TempDir dir;
  // A 3-byte gap before the f32 tensor and an odd header length put the data at odd addresses.
  const auto f32 = floats_to_bytes(std::vector<float>{1.5f, -2.0f}, DType::F32);
  std::vector<std::byte> data = {std::byte(0), std::byte(0), std::byte(0)};
  data.insert(data.end(), f32.begin(), f32.end());
  const std::string header = R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [3, 11]}} )";
  write_bytes(dir / "u.safetensors", raw_file(header, data));
  const SafetensorsFile file = SafetensorsFile::open((dir / "u.safetensors").string());
  EXPECT_EQ(to_float_vector(*file.find("x")), (std::vector<float>{1.5f, -2.0f}));
}

TEST(Safetensors, ViewsSurviveMovingTheFile) {
  TempDir dir;
  const auto bytes = floats_to_bytes(std::vector<float>{4, 5}, DType::F32);
  write_safetensors((dir / "m.safetensors").string(), {{"w", DType::F32, {2}, bytes}});
  SafetensorsFile first = SafetensorsFile::open((dir / "m.safetensors").string());
  const TensorView* view = first.find("w");
  SafetensorsFile second = std::move(first);
  EXPECT_EQ(second.find("w"), view);
  EXPECT_EQ(to_float_vector(*view), (std::vector<float>{4, 5}));
}

// --- Element conversions -------------------------------------------------------------------------

TEST(Safetensors, F16SpecialValues) {
  EXPECT_EQ(float_bits(f16_to_float(0x0000)), float_bits(0.0f));
  EXPECT_EQ(float_bits(f16_to_float(0x8000)), float_bits(-0.0f));
  EXPECT_EQ(f16_to_float(0x0001), 0x1p-24f);  // smallest subnormal
  EXPECT_EQ(f16_to_float(0x8001), -0x1p-24f);
  EXPECT_EQ(f16_to_float(0x03ff), 1023 * 0x1p-24f);  // largest subnormal
  EXPECT_EQ(f16_to_float(0x0400), 0x1p-14f);         // smallest normal
  EXPECT_EQ(f16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_float(0x3555), 0x1.554p-2f);
  EXPECT_EQ(f16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_float(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_float(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_float(0x7c01)));  // signalling NaN keeps a payload
  EXPECT_TRUE(std::signbit(f16_to_float(0xfe00)));
  // Rounding to f16.
  EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);  // the tie with 65536 goes to inf (even)
  EXPECT_EQ(float_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(float_to_f16(0x1p-25f), 0x0000);    // tie between 0 and the smallest subnormal
  EXPECT_EQ(float_to_f16(0x1.8p-24f), 0x0002);  // tie between 1 and 2 units: even
  EXPECT_EQ(float_to_f16(0x1.0p-25f + 0x1p-40f), 0x0001);
  EXPECT_EQ(float_to_f16(0x1.ffcp-15f), 0x0400);  // tie above the largest subnormal carries
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_f16(1e-30f), 0x0000);
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(std::bit_cast<float>(0x7f800001u)))));
}

TEST(Safetensors, F16EveryValueRoundTrips) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_float(std::uint16_t(h));
    if (std::isnan(f)) EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(f)))) << h;
    else ASSERT_EQ(float_to_f16(f), h) << h;
  }
}

#if defined(__FLT16_MAX__)
// The compiler's own float -> _Float16 conversion (IEEE nearest-even) as a reference.
TEST(Safetensors, F16MatchesCompilerConversionOnRandomFloats) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 200000; ++i) {
    // Exponents around f16's range, where normals, subnormals and overflow meet.
    const std::uint32_t exponent = 95 + std::uint32_t(rng() % 50);
    const std::uint32_t bits = (std::uint32_t(rng()) & 0x807fffffu) | (exponent << 23);
    const float x = std::bit_cast<float>(bits);
    const auto expected = std::bit_cast<std::uint16_t>(static_cast<_Float16>(x));
    ASSERT_EQ(float_to_f16(x), expected) << std::hexfloat << x;
  }
}
#endif

TEST(Safetensors, F16SpecialValuesReadFromAFile) {
  TempDir dir;
  const auto bytes = u16_bytes({0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x7bff, 0x7c00, 0xfc00, 0x7e00});
  write_safetensors((dir / "h.safetensors").string(), {{"h", DType::F16, {9}, bytes}});
  const SafetensorsFile file = SafetensorsFile::open((dir / "h.safetensors").string());
  const std::vector<float> v = to_float_vector(*file.find("h"));
  EXPECT_FALSE(std::signbit(v[0]));
  EXPECT_TRUE(std::signbit(v[1]) && v[1] == 0.0f);
  EXPECT_EQ(v[2], 0x1p-24f);
  EXPECT_EQ(v[3], 1023 * 0x1p-24f);
  EXPECT_EQ(v[4], 0x1p-14f);
  EXPECT_EQ(v[5], 65504.0f);
  EXPECT_TRUE(std::isinf(v[6]) && v[6] > 0);
  EXPECT_TRUE(std::isinf(v[7]) && v[7] < 0);
  EXPECT_TRUE(std::isnan(v[8]));
}

// --- Header validation ---------------------------------------------------------------------------

// The message of opening a file with this header and data.
std::string open_error(const TempDir& dir, const std::string& header, const std::vector<std::byte>& data = {},
                       std::optional<std::uint64_t> length = {}) {
  const fs::path path = dir / "bad.safetensors";
  write_bytes(path, raw_file(header, data, length));
  std::string message = error_of([&] { SafetensorsFile::open(path.string()); });
  EXPECT_TRUE(contains(message, path.string())) << message;
  return message;
}

std::string entry(const std::string& name, const std::string& body) {
  return "{\"" + name + "\": {" + body + "}}";
}

TEST(Safetensors, RejectsBadFramingWithTheFileName) {
  TempDir dir;
  write_bytes(dir / "short.safetensors", to_bytes("abcde"));
  EXPECT_TRUE(contains(error_of([&] { SafetensorsFile::open((dir / "short.safetensors").string()); }),
                       "5 bytes is too short"));
  write_bytes(dir / "empty.safetensors", {});
  EXPECT_TRUE(contains(error_of([&] { SafetensorsFile::open((dir / "empty.safetensors").string()); }),
                       "0 bytes is too short"));
  EXPECT_TRUE(contains(open_error(dir, "{}", {}, 1), "not valid JSON"));
  EXPECT_TRUE(contains(open_error(dir, "{}", {}, 1000),
                       "header length 1000 runs past the end of the file (10 bytes)"));
  EXPECT_TRUE(contains(open_error(dir, "{}", {}, 200'000'000), "beyond the 100 MB limit"));
  EXPECT_TRUE(contains(open_error(dir, "{}", {}, ~std::uint64_t(0)), "beyond the 100 MB limit"));
  EXPECT_TRUE(contains(open_error(dir, "{\"a\": "), "not valid JSON"));
  EXPECT_TRUE(contains(open_error(dir, "[1, 2]"), "header must be a JSON object, got a array"));
  EXPECT_TRUE(contains(error_of([&] { SafetensorsFile::open((dir / "nope.safetensors").string()); }),
                       "nope.safetensors: cannot open"));
  EXPECT_TRUE(contains(error_of([&] { SafetensorsFile::open(dir.path().string()); }), "not a regular file"));
  // An empty header object is a valid file with no tensors.
  write_bytes(dir / "none.safetensors", raw_file("{}"));
  EXPECT_EQ(SafetensorsFile::open((dir / "none.safetensors").string()).size(), 0u);
}

TEST(Safetensors, RejectsBadEntriesNamingTheTensor) {
  TempDir dir;
  const std::vector<std::byte> data(16);
  const std::string t = "tensor 'w': ";
  auto err = [&](const std::string& body) { return open_error(dir, entry("w", body), data); };
  EXPECT_TRUE(contains(open_error(dir, R"({"w": [1]})", data), t + "entry must be an object"));
  EXPECT_TRUE(contains(err(R"("shape": [2], "data_offsets": [0, 8])"), t + "missing \"dtype\""));
  EXPECT_TRUE(contains(err(R"("dtype": "F32", "data_offsets": [0, 8])"), t + "missing \"shape\""));
  EXPECT_TRUE(contains(err(R"("dtype": "F32", "shape": [2])"), t + "missing \"data_offsets\""));
  EXPECT_TRUE(
      contains(err(R"("dtype": 4, "shape": [2], "data_offsets": [0, 8])"), "\"dtype\" must be a string"));
  EXPECT_TRUE(contains(err(R"("dtype": "I64", "shape": [1], "data_offsets": [0, 8])"),
                       t + "unsupported dtype 'I64'"));
  EXPECT_TRUE(
      contains(err(R"("dtype": "bf16", "shape": [4], "data_offsets": [0, 8])"), "unsupported dtype 'bf16'"));
  EXPECT_TRUE(
      contains(err(R"("dtype": "F32", "shape": 2, "data_offsets": [0, 8])"), "\"shape\" must be an array"));
  EXPECT_TRUE(contains(err(R"("dtype": "F32", "shape": [-2], "data_offsets": [0, 8])"),
                       t + "shape dimension must not be negative, got -2"));
  EXPECT_TRUE(
      contains(err(R"("dtype": "F32", "shape": [2.0], "data_offsets": [0, 8])"), "must be an integer"));
  EXPECT_TRUE(
      contains(err(R"("dtype": "F32", "shape": ["2"], "data_offsets": [0, 8])"), "must be an integer"));
  EXPECT_TRUE(contains(err(R"("dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 8])"),
                       "shape dimension 18446744073709551615 is too large"));
  EXPECT_TRUE(contains(err(R"("dtype": "F32", "shape": [2], "data_offsets": [0])"),
                       "\"data_offsets\" must be an array [begin, end]"));
  EXPECT_TRUE(
      contains(err(R"("dtype": "F32", "shape": [2], "data_offsets": {"a": 1})"), "\"data_offsets\" must"));
  EXPECT_TRUE(
      contains(err(R"("dtype": "F32", "shape": [2], "data_offsets": [0, -8])"), "must not be negative"));
  EXPECT_TRUE(contains(err(R"("dtype": "F32", "shape": [2], "data_offsets": [8, 0])"),
                       t + "data_offsets [8, 0] begin after end"));
  EXPECT_TRUE(contains(err(R"("dtype": "F32", "shape": [2], "data_offsets": [12, 20])"),
                       t + "data_offsets [12, 20] run past the data buffer of 16 bytes"));
  EXPECT_TRUE(contains(err(R"("dtype": "F32", "shape": [3], "data_offsets": [0, 8])"),
                       t + "data_offsets [0, 8] hold 8 bytes, shape [3] of F32 needs 12"));
  EXPECT_TRUE(contains(err(R"("dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8])"),
                       t + "shape [4294967296, 4294967296] of F32 is too large"));
  EXPECT_TRUE(contains(err(R"("dtype": "BF16", "shape": [4611686018427387904], "data_offsets": [0, 8])"),
                       "is too large"));
}

TEST(Safetensors, SizeMismatchMessageNamesFileTensorOffsetsAndShape) {
  TempDir dir;
  const std::string header =
      entry("model.norm.weight", R"("dtype": "BF16", "shape": [2048], "data_offsets": [0, 10])");
  const std::string message = open_error(dir, header, std::vector<std::byte>(10));
  EXPECT_EQ(message,
            (dir / "bad.safetensors").string() +
                ": tensor 'model.norm.weight': data_offsets [0, 10] hold 10 bytes, shape [2048] of BF16 "
                "needs 4096");
}

TEST(Safetensors, RejectsOverlapsDuplicatesAndBadMetadata) {
  TempDir dir;
  const std::vector<std::byte> data(16);
  EXPECT_TRUE(contains(open_error(dir,
                                  R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                                  data),
                       "tensor 'b': data overlaps tensor 'a'"));
  EXPECT_TRUE(contains(open_error(dir,
                                  R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                      "a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                                  data),
                       "header: key \"a\" appears twice in one object"));
  EXPECT_TRUE(contains(open_error(dir, R"({"__metadata__": {"format": 1}})"),
                       "\"__metadata__\" value of 'format' must be a string"));
  EXPECT_TRUE(contains(open_error(dir, R"({"__metadata__": [1]})"), "\"__metadata__\" must be an object"));
  // Zero-size tensors overlap nothing, adjacent tensors are fine, holes and trailing bytes too.
  write_bytes(dir / "ok.safetensors",
              raw_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                                   "z": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]},
                                                   "b": {"dtype": "F16", "shape": [2], "data_offsets": [10, 14]}})",
                       data));
  EXPECT_EQ(SafetensorsFile::open((dir / "ok.safetensors").string()).size(), 3u);
}

TEST(Safetensors, WriterRejectsBadInput) {
  TempDir dir;
  const std::string path = (dir / "w.safetensors").string();
  const auto bytes = floats_to_bytes(std::vector<float>{1, 2}, DType::F32);
  EXPECT_TRUE(contains(error_of([&] {
                         write_safetensors(path, {{"a", DType::F32, {3}, bytes}});
                       }),
                       "tensor 'a': 8 bytes given, shape [3] of F32 needs 12"));
  EXPECT_TRUE(
      contains(error_of([&] {
                 write_safetensors(path, {{"a", DType::F32, {2}, bytes}, {"a", DType::F32, {2}, bytes}});
               }),
               "tensor 'a': written twice"));
  EXPECT_TRUE(contains(error_of([&] {
                         write_safetensors(path, {{"__metadata__", DType::F32, {2}, bytes}});
                       }),
                       "reserved"));
  EXPECT_TRUE(contains(error_of([&] {
                         write_safetensors(path, {{"a", DType::F32, {-2}, bytes}});
                       }),
                       "negative dimension"));
  EXPECT_TRUE(contains(error_of([&] { write_safetensors((dir / "no/such/dir/x").string(), {}); }),
                       "cannot open for writing"));
}

// --- Sharded checkpoints -------------------------------------------------------------------------

struct ShardFixture {
  std::vector<std::vector<std::byte>> buffers;
  std::vector<TensorData> tensors;
  ShardFixture() {
    for (int i = 0; i < 6; ++i) {
      std::vector<float> v(16);
      for (int j = 0; j < 16; ++j) v[std::size_t(j)] = float(i * 20 + j);  // exact in bf16
      buffers.push_back(floats_to_bytes(v, i % 2 ? DType::BF16 : DType::F32));
    }
    for (int i = 0; i < 6; ++i)
      tensors.push_back(
          {"t" + std::to_string(i), i % 2 ? DType::BF16 : DType::F32, {4, 4}, buffers[std::size_t(i)]});
  }
};

TEST(Safetensors, ShardedIndexRoundTrip) {
  TempDir dir;
  ShardFixture fx;
  // 64 + 32 bytes fit in 100, so the shards hold {t0, t1}, {t2, t3}, {t4, t5}.
  const auto shards = write_safetensors_sharded((dir / "ckpt").string(), fx.tensors, 100, {{"format", "pt"}});
  ASSERT_EQ(shards.size(), 3u);
  EXPECT_EQ(fs::path(shards[1]).filename(), "model-00002-of-00003.safetensors");
  for (const std::string& path :
       {(dir / "ckpt").string(), (dir / "ckpt/model.safetensors.index.json").string()}) {
    const Checkpoint ckpt = Checkpoint::open(path);
    EXPECT_EQ(ckpt.files().size(), 3u);
    EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"t0", "t1", "t2", "t3", "t4", "t5"}));
    for (int i = 0; i < 6; ++i) {
      const std::string name = "t" + std::to_string(i);
      const TensorView* v = ckpt.find(name);
      ASSERT_NE(v, nullptr) << name;
      EXPECT_EQ(view_bytes(*v), fx.buffers[std::size_t(i)]);
      EXPECT_EQ(to_float_vector(*v)[15], float(i * 20 + 15));
      EXPECT_EQ(ckpt.file_of(name), shards[std::size_t(i / 2)]);
    }
    EXPECT_EQ(ckpt.find("t6"), nullptr);
    EXPECT_TRUE(contains(ckpt.file_of("t6"), "model.safetensors.index.json"));
    EXPECT_EQ(ckpt.files()[0].metadata().at("format"), "pt");
  }
  const json index = json::parse(std::ifstream(dir / "ckpt/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 3 * 64 + 3 * 32);
  EXPECT_EQ(index["weight_map"]["t3"], "model-00002-of-00003.safetensors");
}

TEST(Safetensors, CheckpointOpensSingleFilesAndDirectories) {
  TempDir dir;
  ShardFixture fx;
  fs::create_directories(dir / "single");
  write_safetensors((dir / "single/model.safetensors").string(), fx.tensors);
  write_safetensors((dir / "other.safetensors").string(), fx.tensors);
  for (const fs::path& path : {dir / "single", dir / "single/model.safetensors", dir / "other.safetensors"}) {
    const Checkpoint ckpt = Checkpoint::open(path.string());
    EXPECT_EQ(ckpt.names().size(), 6u);
    EXPECT_EQ(view_bytes(*ckpt.find("t5")), fx.buffers[5]);
  }
  EXPECT_EQ(Checkpoint::open((dir / "single").string()).describe(),
            (dir / "single/model.safetensors").string());
  fs::create_directories(dir / "void");
  EXPECT_TRUE(contains(error_of([&] { Checkpoint::open((dir / "void").string()); }),
                       "neither model.safetensors.index.json nor model.safetensors"));
  EXPECT_TRUE(
      contains(error_of([&] { Checkpoint::open((dir / "nothing").string()); }), "no such checkpoint"));
}

TEST(Safetensors, CheckpointIndexErrorsNameIndexAndShard) {
  TempDir dir;
  ShardFixture fx;
  const std::string ckpt = (dir / "ckpt").string();
  const std::string index = (dir / "ckpt/model.safetensors.index.json").string();
  const auto shards = write_safetensors_sharded(ckpt, fx.tensors, 100);
  auto write_index = [&](const json& j) { std::ofstream(index) << j.dump(); };
  const json good = json::parse(std::ifstream(index));

  fs::rename(shards[1], shards[1] + ".moved");
  std::string message = error_of([&] { Checkpoint::open(ckpt); });
  EXPECT_TRUE(contains(message, index +
                                    ": shard 'model-00002-of-00003.safetensors' (listed for tensor 't2') is "
                                    "missing: no file " +
                                    shards[1]))
      << message;
  fs::rename(shards[1] + ".moved", shards[1]);

  json lacking = good;
  lacking["weight_map"]["t9"] = "model-00003-of-00003.safetensors";
  write_index(lacking);
  message = error_of([&] { Checkpoint::open(ckpt); });
  EXPECT_TRUE(contains(message, index +
                                    ": tensor 't9' is mapped to shard 'model-00003-of-00003.safetensors', "
                                    "which lacks it (" +
                                    shards[2] + ")"))
      << message;

  // A shard that also holds a tensor the index places elsewhere.
  write_safetensors((dir / "ckpt/extra.safetensors").string(),
                    {fx.tensors[0], {"x", DType::F32, {4, 4}, fx.buffers[0]}});
  json twice = good;
  twice["weight_map"]["x"] = "extra.safetensors";
  write_index(twice);
  message = error_of([&] { Checkpoint::open(ckpt); });
  EXPECT_TRUE(contains(message, "tensor 't0' is in two shards")) << message;
  EXPECT_TRUE(contains(message, "extra.safetensors")) << message;

  write_index(json{{"metadata", json::object()}});
  EXPECT_TRUE(contains(error_of([&] { Checkpoint::open(ckpt); }), index + ": missing object \"weight_map\""));
  write_index(json{{"weight_map", {{"t0", 5}}}});
  EXPECT_TRUE(
      contains(error_of([&] { Checkpoint::open(ckpt); }), "entry for tensor 't0' must be a shard file name"));
  std::ofstream(index) << "{not json";
  EXPECT_TRUE(contains(error_of([&] { Checkpoint::open(ckpt); }), index + ": not valid JSON"));
}

// --- Fuzzing -------------------------------------------------------------------------------------

// Checks what a file that opened promises: every view inside the data area, sizes that match the
// shapes, no overlaps, and every element readable.
void expect_consistent(const SafetensorsFile& file) {
  const std::span<const std::byte> all = file.file_bytes();
  std::vector<std::pair<const std::byte*, const std::byte*>> ranges;
  for (const std::string& name : file.names()) {
    const TensorView* v = file.find(name);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->name, name);
    for (std::int64_t d : v->shape) EXPECT_GE(d, 0);
    ASSERT_EQ(v->bytes.size(), std::size_t(v->numel()) * std::size_t(dtype_bytes(v->dtype)));
    if (v->bytes.empty()) continue;
    ASSERT_GE(v->bytes.data(), all.data() + 8);
    ASSERT_LE(v->bytes.data() + v->bytes.size(), all.data() + all.size());
    ranges.emplace_back(v->bytes.data(), v->bytes.data() + v->bytes.size());
    EXPECT_EQ(to_float_vector(*v).size(), std::size_t(v->numel()));
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
}

// Opens what `make` returns: true when it opened (and was consistent), false on duet::Error.
// Any other exception escapes and fails the test.
template <typename Make>
bool opens_with(Make&& make) {
  try {
    const SafetensorsFile file = make();
    expect_consistent(file);
    return true;
  } catch (const Error&) {
    return false;
  }
}

bool opens(const fs::path& path) {
  return opens_with([&] { return SafetensorsFile::open(path.string()); });
}

// Opens `bytes` as a file and from memory (where AddressSanitizer would see a read past the
// end); both must agree. A new file name each time: rewriting one file in place (truncate,
// write, close) makes ext4 flush it to disk on every close, which is slow.
bool opens(const TempDir& dir, const std::vector<std::byte>& bytes) {
  static int counter = 0;
  const fs::path path = dir / ("fuzz-" + std::to_string(counter++) + ".safetensors");
  write_bytes(path, bytes);
  const bool opened = opens(path);
  fs::remove(path);
  // A copy whose capacity is its size, so that ASan flags even a one-byte overread.
  EXPECT_EQ(opens_with([&] {
              return SafetensorsFile::from_bytes("memory", {bytes.begin(), bytes.end()});
            }),
            opened);
  return opened;
}

std::vector<std::byte> fuzz_base_file(const TempDir& dir) {
  const auto a = floats_to_bytes(std::vector<float>{1, 2, 3, 4, 5, 6}, DType::BF16);
  const auto b = floats_to_bytes(std::vector<float>{-1, 0.5f, 65504, 1e-7f}, DType::F16);
  const auto c = floats_to_bytes(std::vector<float>{3.25f, -8, 1e30f}, DType::F32);
  const std::vector<std::byte> none;
  const fs::path path = dir / "base.safetensors";
  write_safetensors(path.string(),
                    {{"model.a", DType::BF16, {2, 3}, a},
                     {"model.b", DType::F16, {4}, b},
                     {"model.c", DType::F32, {3}, c},
                     {"model.s", DType::F32, {}, std::span(c).first(4)},
                     {"model.z", DType::BF16, {0, 3}, none}},
                    {{"format", "pt"}});
  return read_bytes(path);
}

std::uint64_t header_length(const std::vector<std::byte>& file) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<std::uint64_t>(file[std::size_t(i)]);
  return n;
}

TEST(Safetensors, FuzzTruncatedFilesFailCleanly) {
  TempDir dir;
  const auto base = fuzz_base_file(dir);
  ASSERT_TRUE(opens(dir / "base.safetensors"));
  for (std::size_t length = 0; length < base.size(); ++length) {
    // Every proper prefix loses at least the last tensor's bytes, so none may open.
    EXPECT_FALSE(opens(dir, {base.begin(), base.begin() + std::ptrdiff_t(length)})) << "length " << length;
  }
}

TEST(Safetensors, FuzzFlippedHeaderBytes) {
  TempDir dir;
  const auto base = fuzz_base_file(dir);
  const std::size_t header_end = 8 + std::size_t(header_length(base));
  std::mt19937_64 rng(2024);
  int opened = 0;
  for (int round = 0; round < 2000; ++round) {
    auto file = base;
    const int flips = 1 + int(rng() % 3);
    for (int f = 0; f < flips; ++f) {
      const std::size_t at = rng() % header_end;  // includes the 8-byte length
      file[at] ^= std::byte(1 + rng() % 255);
    }
    opened += opens(dir, file);
  }
  // Flips inside names or metadata values leave a valid file: both outcomes must occur.
  EXPECT_GT(opened, 0);
  EXPECT_LT(opened, 2000);
}

const std::vector<std::string> kTokens = {"{",
                                          "}",
                                          "[",
                                          "]",
                                          ":",
                                          ",",
                                          "\"",
                                          "\"dtype\"",
                                          "\"shape\"",
                                          "\"data_offsets\"",
                                          "\"__metadata__\"",
                                          "\"BF16\"",
                                          "\"F16\"",
                                          "\"F32\"",
                                          "\"w\"",
                                          "0",
                                          "1",
                                          "8",
                                          "-1",
                                          "18446744073709551616",
                                          "1e308",
                                          "2.5",
                                          "true",
                                          "null",
                                          " ",
                                          "\\u0000",
                                          "\\",
                                          "\"\\ud800\"",
                                          "\xff",
                                          "\xc3\xa9",
                                          "\n"};

std::string random_garbage(std::mt19937_64& rng) {
  std::string s;
  const int n = int(rng() % 60);
  for (int i = 0; i < n; ++i) {
    if (rng() % 8 == 0) s += char(rng() % 256);
    else s += kTokens[rng() % kTokens.size()];
  }
  return s;
}

json random_value(std::mt19937_64& rng, int depth) {
  switch (rng() % (depth > 2 ? 6 : 8)) {
    case 0:
      return nullptr;
    case 1:
      return rng() % 2 == 0;
    case 2:
      return std::int64_t(rng() % 41) - 20;
    case 3:
      return rng();  // often beyond int64
    case 4:
      return double(rng() % 1000) / 7.0;
    case 5:
      return std::string(1 + rng() % 4, char('a' + rng() % 26));
    case 6: {
      json a = json::array();
      for (int i = int(rng() % 4); i > 0; --i) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      for (int i = int(rng() % 3); i > 0; --i)
        o[std::string(1, char('a' + rng() % 4))] = random_value(rng, depth + 1);
      return o;
    }
  }
}

// A tensor entry that is plausible most of the time, so that some random headers are valid.
json random_entry(std::mt19937_64& rng, std::int64_t& cursor, std::int64_t data_size) {
  static const char* dtypes[] = {"BF16", "F16", "F32", "BF16", "F32", "I64", "bf16", ""};
  const std::string dtype = dtypes[rng() % 8];
  std::vector<std::int64_t> shape(rng() % 4);
  std::int64_t numel = 1;
  for (auto& d : shape) numel *= (d = std::int64_t(rng() % 5));
  const std::int64_t size = numel * (dtype == "F32" ? 4 : dtype == "I64" ? 8 : 2);
  json offsets = {cursor, cursor + size};
  if (rng() % 4 == 0) offsets = {std::int64_t(rng() % 40), std::int64_t(rng() % 40)};
  cursor += size;
  json e = json::object();
  auto field = [&](const char* key, const json& plausible) {
    const auto roll = rng() % 10;
    if (roll < 8) e[key] = plausible;
    else if (roll == 8) e[key] = random_value(rng, 1);
  };
  field("dtype", dtype);
  field("shape", shape);
  field("data_offsets", offsets);
  if (rng() % 10 == 0) e["extra"] = random_value(rng, 1);
  (void)data_size;
  return rng() % 20 == 0 ? random_value(rng, 1) : e;
}

std::string random_json_header(std::mt19937_64& rng, std::int64_t data_size) {
  json header = json::object();
  std::int64_t cursor = 0;
  const int n = int(rng() % 5);
  for (int i = 0; i < n; ++i) header["t" + std::to_string(rng() % 6)] = random_entry(rng, cursor, data_size);
  if (rng() % 4 == 0) header["__metadata__"] = rng() % 2 ? json{{"format", "pt"}} : random_value(rng, 1);
  return rng() % 30 == 0 ? random_value(rng, 0).dump() : header.dump();
}

TEST(Safetensors, FuzzRandomHeaders) {
  TempDir dir;
  std::mt19937_64 rng(99);
  int opened_garbage = 0, opened_json = 0;
  for (int round = 0; round < 2000; ++round) {
    std::vector<std::byte> data(rng() % 64);
    for (auto& b : data) b = std::byte(rng() % 256);
    const std::string header = random_garbage(rng);
    // Mostly the true length; sometimes a wrong one.
    const std::uint64_t length = rng() % 10 == 0 ? rng() % (header.size() + data.size() + 16) : header.size();
    opened_garbage += opens(dir, raw_file(header, data, length));
  }
  for (int round = 0; round < 2000; ++round) {
    std::vector<std::byte> data(rng() % 96);
    for (auto& b : data) b = std::byte(rng() % 256);
    opened_json += opens(dir, raw_file(random_json_header(rng, std::int64_t(data.size())), data));
  }
  // Garbage rarely parses ("{}" or "{ }" can); the JSON rounds must reach both outcomes.
  EXPECT_LT(opened_garbage, 2000);
  EXPECT_GT(opened_json, 50);
  EXPECT_LT(opened_json, 2000);
}

}  // namespace
}  // namespace duet
