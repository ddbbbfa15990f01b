#pragma once
// Reading and writing the safetensors format (HuggingFace's checkpoint format):
//   8 bytes: header length N, unsigned little-endian
//   N bytes: JSON object {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]},
//                         ..., "__metadata__": {string: string} (optional)}
//   the byte buffer; data_offsets are relative to its start.
// A file is mapped read-only and checked completely before any view is handed out, so that a
// corrupt or hostile file throws duet::Error (naming the file and the tensor) instead of reading
// out of bounds. Only the floating-point types a Llama checkpoint holds are accepted.
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/bf16.hpp"  // float_to_bf16, bf16_to_float
#include "core/model_spec.hpp"

namespace duet {

// --- Element conversions -------------------------------------------------------------------------

// bfloat16: core/bf16.hpp. float16, rounding as float_to_bf16 does (nearest even; NaN stays a
// quiet NaN with its sign; overflow becomes inf):
float f16_to_float(std::uint16_t bits);
std::uint16_t float_to_f16(float value);

// Raw little-endian bytes of `values` at `dtype` (what a safetensors file stores).
std::vector<std::byte> floats_to_bytes(std::span<const float> values, DType dtype);

// --- Reading -------------------------------------------------------------------------------------

// One tensor inside a mapped file. `bytes` may be unaligned; read it with memcpy or the
// conversions below. Valid while the SafetensorsFile it came from (or one it was moved into) lives.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> bytes;

  std::int64_t numel() const;  // 1 for a scalar (shape [])
};

// Converts every element to float32; out.size() must equal view.numel().
void convert_to_float(const TensorView& view, std::span<float> out);
std::vector<float> to_float_vector(const TensorView& view);

// "[2048, 64]"
std::string shape_string(const std::vector<std::int64_t>& shape);
// "'name'": a tensor's or a model's name in a message.
std::string in_quotes(const std::string& name);

// A read-only POSIX mapping of a whole file, unmapped on destruction. Movable, not copyable.
class MappedFile {
 public:
  MappedFile() = default;
  static MappedFile open(const std::string& path);  // throws duet::Error naming the path
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  void reset() noexcept;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

class SafetensorsFile {
 public:
  // Maps and validates the file; every error is a duet::Error naming `path` (and the tensor).
  static SafetensorsFile open(const std::string& path);
  // The same checks on bytes held in memory (`origin` names them in errors). Tests use it too:
  // AddressSanitizer sees out-of-bounds reads of a heap buffer, not of a mapping.
  static SafetensorsFile from_bytes(const std::string& origin, std::vector<std::byte> bytes);

  const TensorView* find(const std::string& name) const;  // nullptr when absent
  std::vector<std::string> names() const;                 // sorted
  std::size_t size() const { return tensors_.size(); }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }
  // The whole mapped file, header included: every view's bytes lie inside it.
  std::span<const std::byte> file_bytes() const { return owned_.empty() ? file_.bytes() : owned_; }

 private:
  void parse();  // fills tensors_ and metadata_ from file_bytes()
  std::string path_;
  MappedFile file_;
  std::vector<std::byte> owned_;  // from_bytes; a moved vector keeps its buffer, so views stay valid
  // A node-based map: views keep their addresses when the file object is moved.
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A model checkpoint: one safetensors file or a sharded set. `path` may be
//   - a directory holding model.safetensors.index.json ({"metadata": {..}, "weight_map":
//     {tensor: shard file}}): every shard it lists is opened;
//   - a directory holding model.safetensors;
//   - an index file (*.index.json) or a single safetensors file.
// Index errors name the index and the shard: a missing shard file, a tensor the index maps to a
// shard that lacks it, a tensor present in two shards. Tensors a shard holds beyond the index
// are served too (the shard is the authority on what it contains).
class Checkpoint {
 public:
  static Checkpoint open(const std::string& path);

  const TensorView* find(const std::string& name) const;  // nullptr when absent
  // The file holding `name`; for an absent tensor, what describe() says.
  const std::string& file_of(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  // "DIR/model.safetensors" or "checkpoint DIR (index DIR/model.safetensors.index.json)".
  const std::string& describe() const { return description_; }
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  struct Entry {
    std::size_t file = 0;
    const TensorView* view = nullptr;
  };
  void index_files(const std::string& index_path);  // fills entries_ from files_
  std::string description_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, Entry> entries_;
};

// --- Writing -------------------------------------------------------------------------------------

// A tensor to write; `bytes` (little-endian elements) must outlive the call.
struct TensorData {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> bytes;
};

// Writes tensors in the given order. The header is padded with spaces to a multiple of 8 bytes
// so that the data starts 8-aligned, as HuggingFace's writer does. Throws duet::Error on a
// duplicate or reserved name, a byte count that does not match the shape, or an I/O failure.
void write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes HuggingFace-style shards into `dir` (created if needed): model-0000K-of-0000M.safetensors,
// each holding consecutive tensors up to `max_shard_bytes` of data (a bigger tensor gets a shard
// of its own), plus model.safetensors.index.json. Returns the shard paths.
std::vector<std::string> write_safetensors_sharded(const std::string& dir,
                                                   const std::vector<TensorData>& tensors,
                                                   std::int64_t max_shard_bytes,
                                                   const std::map<std::string, std::string>& metadata = {});

}  // namespace duet
