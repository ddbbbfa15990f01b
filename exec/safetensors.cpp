#include "exec/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_fields.hpp"

namespace duet {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A real header (a few hundred tensors) is well under a megabyte; the limit stops a corrupt length
// from making the JSON parser chew through gigabytes.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kIndexName = "model.safetensors.index.json";

std::string tensor_context(const std::string& path, const std::string& name) {
  return path + ": tensor " + in_quotes(name) + ": ";
}

// Elements are little-endian in the file whatever the host is; assembling them byte by byte
// also makes unaligned data safe.
std::uint16_t load_u16(const std::byte* p) {
  return std::uint16_t(std::to_integer<unsigned>(p[0]) | (std::to_integer<unsigned>(p[1]) << 8));
}

std::uint32_t load_u32(const std::byte* p) {
  return std::uint32_t(load_u16(p)) | (std::uint32_t(load_u16(p + 2)) << 16);
}

std::uint64_t load_u64(const std::byte* p) {
  return std::uint64_t(load_u32(p)) | (std::uint64_t(load_u32(p + 4)) << 32);
}

void store_u16(std::byte* p, std::uint16_t v) {
  p[0] = std::byte(v & 0xff);
  p[1] = std::byte(v >> 8);
}

void store_u32(std::byte* p, std::uint32_t v) {
  store_u16(p, std::uint16_t(v & 0xffff));
  store_u16(p + 2, std::uint16_t(v >> 16));
}

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
    case DType::F32:
      return "F32";
  }
  return "?";
}

}  // namespace

// --- Element conversions -------------------------------------------------------------------------

float f16_to_float(std::uint16_t bits) {
  const std::uint32_t sign = std::uint32_t(bits & 0x8000) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1f;
  const std::uint32_t mantissa = bits & 0x3ff;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = float(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  return std::bit_cast<float>(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

std::uint16_t float_to_f16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint16_t sign = std::uint16_t((bits >> 16) & 0x8000);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return std::uint16_t(sign | 0x7e00 | ((magnitude >> 13) & 0x3ff));  // NaN
  if (magnitude >= 0x477ff000u) return std::uint16_t(sign | 0x7c00);  // >= 65520 rounds to inf
  if (magnitude >= 0x38800000u) {
    // Normal half: rebias the exponent (127 -> 15), then round away 13 mantissa bits.
    const std::uint32_t rebiased = magnitude - 0x38000000u;
    const std::uint32_t rounded = rebiased + 0xfffu + ((rebiased >> 13) & 1u);
    return std::uint16_t(sign | (rounded >> 13));
  }
  // Subnormal half (units of 2^-24) or zero. A float with exponent e is m * 2^(e - 150).
  const std::uint32_t exponent = magnitude >> 23;
  if (exponent < 102) return sign;  // below 2^-25: rounds to zero
  const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126 - exponent;  // 14..24
  std::uint32_t q = mantissa >> shift;
  const std::uint32_t remainder = mantissa & ((1u << shift) - 1);
  const std::uint32_t half = 1u << (shift - 1);
  if (remainder > half || (remainder == half && (q & 1u))) ++q;  // may carry into the first normal
  return std::uint16_t(sign | q);
}

std::vector<std::byte> floats_to_bytes(std::span<const float> values, DType dtype) {
  std::vector<std::byte> out(values.size() * std::size_t(dtype_bytes(dtype)));
  for (std::size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case DType::BF16:
        store_u16(&out[2 * i], float_to_bf16(values[i]));
        break;
      case DType::F16:
        store_u16(&out[2 * i], float_to_f16(values[i]));
        break;
      case DType::F32:
        store_u32(&out[4 * i], std::bit_cast<std::uint32_t>(values[i]));
        break;
    }
  }
  return out;
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;  // validated at open: no overflow
  return n;
}

void convert_to_float(const TensorView& view, std::span<float> out) {
  const std::size_t n = std::size_t(view.numel());
  if (out.size() != n || view.bytes.size() != n * std::size_t(dtype_bytes(view.dtype)))
    throw Error("tensor " + in_quotes(view.name) + ": conversion buffer of " + std::to_string(out.size()) +
                " floats does not match " + std::to_string(n) + " elements");
  const std::byte* p = view.bytes.data();
  for (std::size_t i = 0; i < n; ++i) {
    switch (view.dtype) {
      case DType::BF16:
        out[i] = bf16_to_float(load_u16(p + 2 * i));
        break;
      case DType::F16:
        out[i] = f16_to_float(load_u16(p + 2 * i));
        break;
      case DType::F32:
        out[i] = std::bit_cast<float>(load_u32(p + 4 * i));
        break;
    }
  }
}

std::vector<float> to_float_vector(const TensorView& view) {
  std::vector<float> out(std::size_t(view.numel()));
  convert_to_float(view, out);
  return out;
}

std::string in_quotes(const std::string& name) { return "'" + name + "'"; }

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// --- MappedFile ----------------------------------------------------------------------------------

MappedFile MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int stat_errno = errno;
    ::close(fd);
    throw Error(path + ": cannot stat: " + std::strerror(stat_errno));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  MappedFile file;
  file.size_ = std::size_t(st.st_size);
  if (file.size_ > 0) {  // mmap of length 0 is an error; an empty file is a valid (empty) mapping
    void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int mmap_errno = errno;
    ::close(fd);
    if (p == MAP_FAILED) throw Error(path + ": mmap failed: " + std::strerror(mmap_errno));
    file.data_ = static_cast<const std::byte*>(p);
  } else {
    ::close(fd);
  }
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::reset() noexcept {
  if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

// --- Header validation ---------------------------------------------------------------------------

namespace {

DType parse_dtype(const std::string& context, const json& entry) {
  const auto it = entry.find("dtype");
  if (it == entry.end()) throw Error(context + "missing \"dtype\"");
  if (!it->is_string()) throw Error(context + "\"dtype\" must be a string, got " + it->dump());
  const std::string& name = it->get_ref<const std::string&>();
  if (name == "BF16") return DType::BF16;
  if (name == "F16") return DType::F16;
  if (name == "F32") return DType::F32;
  throw Error(context + "unsupported dtype " + in_quotes(name) + " (duet reads BF16, F16 and F32)");
}

// A non-negative integer that fits in int64; `what` names the field for the message.
std::int64_t parse_count(const std::string& context, const json& value, const std::string& what) {
  if (value.is_number_unsigned()) {
    const std::uint64_t v = value.get<std::uint64_t>();
    if (v > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
      throw Error(context + what + " " + std::to_string(v) + " is too large");
    return std::int64_t(v);
  }
  if (value.is_number_integer()) throw Error(context + what + " must not be negative, got " + value.dump());
  throw Error(context + what + " must be an integer, got " + value.dump());
}

std::vector<std::int64_t> parse_shape(const std::string& context, const json& entry) {
  const auto it = entry.find("shape");
  if (it == entry.end()) throw Error(context + "missing \"shape\"");
  if (!it->is_array()) throw Error(context + "\"shape\" must be an array, got " + it->dump());
  std::vector<std::int64_t> shape;
  for (const json& d : *it) shape.push_back(parse_count(context, d, "shape dimension"));
  return shape;
}

std::pair<std::int64_t, std::int64_t> parse_offsets(const std::string& context, const json& entry) {
  const auto it = entry.find("data_offsets");
  if (it == entry.end()) throw Error(context + "missing \"data_offsets\"");
  if (!it->is_array() || it->size() != 2)
    throw Error(context + "\"data_offsets\" must be an array [begin, end], got " + it->dump());
  const std::int64_t begin = parse_count(context, (*it)[0], "data_offsets begin");
  const std::int64_t end = parse_count(context, (*it)[1], "data_offsets end");
  if (begin > end)
    throw Error(context + "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                "] begin after end");
  return {begin, end};
}

// Bytes the shape needs at `dtype`, or -1 when that overflows int64.
std::int64_t needed_bytes(const std::vector<std::int64_t>& shape, DType dtype) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  std::int64_t n = dtype_bytes(dtype);
  for (std::int64_t d : shape) {
    if (n > std::numeric_limits<std::int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

TensorView parse_entry(const std::string& path, const std::string& name, const json& entry,
                       std::span<const std::byte> data) {
  const std::string context = tensor_context(path, name);
  if (!entry.is_object()) throw Error(context + "entry must be an object, got " + entry.dump());
  TensorView view;
  view.name = name;
  view.dtype = parse_dtype(context, entry);
  view.shape = parse_shape(context, entry);
  const auto [begin, end] = parse_offsets(context, entry);
  const std::string offsets = "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "]";
  if (std::uint64_t(end) > data.size())
    throw Error(context + offsets + " run past the data buffer of " + std::to_string(data.size()) + " bytes");
  const std::string of_type =
      "shape " + shape_string(view.shape) + " of " + safetensors_dtype_name(view.dtype);
  const std::int64_t needed = needed_bytes(view.shape, view.dtype);
  if (needed < 0) throw Error(context + of_type + " is too large");
  if (needed != end - begin)
    throw Error(context + offsets + " hold " + std::to_string(end - begin) + " bytes, " + of_type +
                " needs " + std::to_string(needed));
  view.bytes = data.subspan(std::size_t(begin), std::size_t(end - begin));
  return view;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& value) {
  if (!value.is_object()) throw Error(path + ": \"__metadata__\" must be an object, got " + value.dump());
  std::map<std::string, std::string> metadata;
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string())
      throw Error(path + ": \"__metadata__\" value of " + in_quotes(key) + " must be a string, got " +
                  v.dump());
    metadata[key] = v.get<std::string>();
  }
  return metadata;
}

// Parses the header; a tensor listed twice is an error (the JSON parser alone keeps the last).
json parse_header(const std::string& path, std::string_view text) {
  json header = json_fields::parse(text, path + ": header");
  if (!header.is_object()) throw Error(path + ": header must be a JSON object, got a " + header.type_name());
  return header;
}

void check_overlaps(const std::string& path, const std::map<std::string, TensorView>& tensors) {
  std::vector<const TensorView*> by_start;
  for (const auto& [name, view] : tensors)
    if (!view.bytes.empty()) by_start.push_back(&view);
  std::sort(by_start.begin(), by_start.end(),
            [](const TensorView* a, const TensorView* b) { return a->bytes.data() < b->bytes.data(); });
  for (std::size_t i = 1; i < by_start.size(); ++i) {
    const TensorView& a = *by_start[i - 1];
    const TensorView& b = *by_start[i];
    if (a.bytes.data() + a.bytes.size() > b.bytes.data())
      throw Error(tensor_context(path, b.name) + "data overlaps tensor " + in_quotes(a.name));
  }
}

}  // namespace

// --- SafetensorsFile -----------------------------------------------------------------------------

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile file;
  file.path_ = path;
  file.file_ = MappedFile::open(path);
  file.parse();
  return file;
}

SafetensorsFile SafetensorsFile::from_bytes(const std::string& origin, std::vector<std::byte> bytes) {
  SafetensorsFile file;
  file.path_ = origin;
  file.owned_ = std::move(bytes);
  file.parse();
  return file;
}

void SafetensorsFile::parse() {
  const std::string& path = path_;
  const std::span<const std::byte> bytes = file_bytes();
  if (bytes.size() < 8)
    throw Error(path + ": " + std::to_string(bytes.size()) +
                " bytes is too short for a safetensors file (8-byte header length)");
  const std::uint64_t header_bytes = load_u64(bytes.data());
  if (header_bytes > kMaxHeaderBytes)
    throw Error(path + ": header length " + std::to_string(header_bytes) + " is beyond the 100 MB limit");
  if (header_bytes > bytes.size() - 8)
    throw Error(path + ": header length " + std::to_string(header_bytes) +
                " runs past the end of the file (" + std::to_string(bytes.size()) + " bytes)");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), std::size_t(header_bytes));
  const std::span<const std::byte> data = bytes.subspan(8 + std::size_t(header_bytes));
  const json header = parse_header(path, text);
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") metadata_ = parse_metadata(path, value);
    else tensors_.emplace(key, parse_entry(path, key, value, data));
  }
  check_overlaps(path, tensors_);
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, view] : tensors_) out.push_back(name);
  return out;
}

// --- Checkpoint ----------------------------------------------------------------------------------

namespace {

// The index's weight_map grouped by shard file: shard -> the tensors it should hold.
std::map<std::string, std::vector<std::string>> read_weight_map(const std::string& index_path) {
  const json index = json_fields::parse(json_fields::read_file(index_path, "the index", "JSON"), index_path);
  if (!index.is_object()) throw Error(index_path + ": must be a JSON object");
  const auto map = index.find("weight_map");
  if (map == index.end() || !map->is_object()) throw Error(index_path + ": missing object \"weight_map\"");
  std::map<std::string, std::vector<std::string>> shards;
  for (const auto& [tensor, shard] : map->items()) {
    if (!shard.is_string() || shard.get_ref<const std::string&>().empty())
      throw Error(index_path + ": \"weight_map\" entry for tensor " + in_quotes(tensor) +
                  " must be a shard file name, got " + shard.dump());
    shards[shard.get<std::string>()].push_back(tensor);
  }
  return shards;
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  fs::path index_path;
  fs::path single_path;
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / kIndexName, ec)) index_path = p / kIndexName;
    else if (fs::exists(p / "model.safetensors", ec)) single_path = p / "model.safetensors";
    else throw Error(path + ": directory holds neither " + kIndexName + " nor model.safetensors");
  } else if (!fs::exists(p, ec)) {
    throw Error(path + ": no such checkpoint file or directory");
  } else if (path.ends_with(".index.json")) {
    index_path = p;
  } else {
    single_path = p;
  }
  Checkpoint ckpt;
  if (!single_path.empty()) {
    ckpt.description_ = single_path.string();
    ckpt.files_.push_back(SafetensorsFile::open(single_path.string()));
    ckpt.index_files(ckpt.description_);
    return ckpt;
  }
  const std::string index = index_path.string();
  ckpt.description_ = "checkpoint " + index_path.parent_path().string() + " (index " + index + ")";
  for (const auto& [shard, tensors] : read_weight_map(index)) {
    const fs::path shard_path = index_path.parent_path() / shard;
    if (!fs::is_regular_file(shard_path, ec))
      throw Error(index + ": shard " + in_quotes(shard) + " (listed for tensor " +
                  in_quotes(tensors.front()) + ") is missing: no file " + shard_path.string());
    SafetensorsFile file = SafetensorsFile::open(shard_path.string());
    for (const std::string& tensor : tensors)
      if (!file.find(tensor))
        throw Error(index + ": tensor " + in_quotes(tensor) + " is mapped to shard " + in_quotes(shard) +
                    ", which lacks it (" + shard_path.string() + ")");
    ckpt.files_.push_back(std::move(file));
  }
  ckpt.index_files(index);
  return ckpt;
}

// Runs once every file is in files_, so that the view pointers stay put.
void Checkpoint::index_files(const std::string& index_path) {
  for (std::size_t f = 0; f < files_.size(); ++f) {
    for (const std::string& name : files_[f].names()) {
      const auto [it, inserted] = entries_.emplace(name, Entry{f, files_[f].find(name)});
      if (!inserted)
        throw Error(index_path + ": tensor " + in_quotes(name) +
                    " is in two shards: " + files_[it->second.file].path() + " and " + files_[f].path());
    }
  }
}

const TensorView* Checkpoint::find(const std::string& name) const {
  const auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : it->second.view;
}

const std::string& Checkpoint::file_of(const std::string& name) const {
  const auto it = entries_.find(name);
  return it == entries_.end() ? description_ : files_[it->second.file].path();
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

// --- Writing -------------------------------------------------------------------------------------

namespace {

// The header as text, padded so that the data after it starts 8-aligned.
std::string header_text(const std::string& path, const std::vector<TensorData>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::int64_t offset = 0;
  for (const TensorData& t : tensors) {
    const std::string context = tensor_context(path, t.name);
    if (t.name == "__metadata__") throw Error(context + "the name is reserved");
    if (header.contains(t.name)) throw Error(context + "written twice");
    for (std::int64_t d : t.shape)
      if (d < 0) throw Error(context + "negative dimension in shape " + shape_string(t.shape));
    const std::int64_t needed = needed_bytes(t.shape, t.dtype);
    if (needed < 0) throw Error(context + "shape " + shape_string(t.shape) + " is too large");
    if (std::uint64_t(needed) != t.bytes.size())
      throw Error(context + std::to_string(t.bytes.size()) + " bytes given, shape " + shape_string(t.shape) +
                  " of " + safetensors_dtype_name(t.dtype) + " needs " + std::to_string(needed));
    header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + needed}}};
    offset += needed;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {  // a name or metadata string that is not UTF-8
    throw Error(path + ": cannot write the header (" + e.what() + ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string text = header_text(path, tensors, metadata);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(path + ": cannot open for writing: " + std::strerror(errno));
  std::byte length[8];
  store_u32(length, std::uint32_t(text.size() & 0xffffffffu));
  store_u32(length + 4, std::uint32_t(std::uint64_t(text.size()) >> 32));
  out.write(reinterpret_cast<const char*>(length), 8);
  out.write(text.data(), std::streamsize(text.size()));
  for (const TensorData& t : tensors)
    out.write(reinterpret_cast<const char*>(t.bytes.data()), std::streamsize(t.bytes.size()));
  out.close();
  if (!out) throw Error(path + ": write failed");
}

std::vector<std::string> write_safetensors_sharded(const std::string& dir,
                                                   const std::vector<TensorData>& tensors,
                                                   std::int64_t max_shard_bytes,
                                                   const std::map<std::string, std::string>& metadata) {
  // Greedy packing in the given order, as HuggingFace's save_pretrained does.
  std::vector<std::vector<TensorData>> shards(1);
  std::int64_t shard_bytes = 0;
  for (const TensorData& t : tensors) {
    const auto size = std::int64_t(t.bytes.size());
    if (!shards.back().empty() && shard_bytes + size > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(t);
    shard_bytes += size;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir + ": cannot create directory: " + ec.message());
  json weight_map = json::object();
  std::int64_t total = 0;
  std::vector<std::string> paths;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    paths.push_back((fs::path(dir) / name).string());
    write_safetensors(paths.back(), shards[i], metadata);
    for (const TensorData& t : shards[i]) {
      weight_map[t.name] = name;
      total += std::int64_t(t.bytes.size());
    }
  }
  const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  const std::string index_path = (fs::path(dir) / kIndexName).string();
  std::ofstream out(index_path, std::ios::trunc);
  out << index.dump(2) << "\n";
  out.close();
  if (!out) throw Error(index_path + ": write failed");
  return paths;
}

}  // namespace duet
