#include "exec/tokenizer_model_check.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace duet {

namespace {

// One field of a protobuf message as the wire format lays it out; payload only for the
// length-delimited kind (strings and embedded messages).
struct WireField {
  std::uint64_t number = 0;
  unsigned type = 0;
  std::string_view payload;
};

// Walks the top level of a message. next() returns false at its end, or with `error` set when the
// bytes are not a well-formed message.
class WireReader {
 public:
  explicit WireReader(std::string_view bytes) : bytes_(bytes) {}

  bool next(WireField& f, std::string& error) {
    if (pos_ >= bytes_.size()) return false;
    std::uint64_t tag = 0;
    if (!varint(tag)) return fail(error, "cut off inside a field tag");
    f.number = tag >> 3;
    f.type = static_cast<unsigned>(tag & 7u);
    f.payload = {};
    if (f.number == 0) return fail(error, "invalid field number 0");
    std::uint64_t skip = 0;
    switch (f.type) {
      case 0: {  // varint
        std::uint64_t ignored = 0;
        if (!varint(ignored)) return fail(error, "cut off inside a number");
        break;
      }
      case 1:
        skip = 8;
        break;
      case 2:
        if (!varint(skip)) return fail(error, "cut off inside a length");
        break;
      case 5:
        skip = 4;
        break;
      default:
        return fail(error, "invalid wire type " + std::to_string(f.type));
    }
    if (skip > bytes_.size() - pos_) return fail(error, "cut off inside a field");
    if (f.type == 2) f.payload = bytes_.substr(pos_, static_cast<std::size_t>(skip));
    pos_ += static_cast<std::size_t>(skip);
    return true;
  }

 private:
  bool varint(std::uint64_t& value) {
    value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= bytes_.size()) return false;
      const auto byte = static_cast<unsigned char>(bytes_[pos_++]);
      value |= std::uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80u) == 0) return true;
    }
    return false;  // more than 10 bytes: not a varint
  }
  static bool fail(std::string& error, std::string why) {
    error = std::move(why);
    return false;
  }

  std::string_view bytes_;
  std::size_t pos_ = 0;
};

// A unit of darts-clone's double array, the trie inside sentencepiece's precompiled charsmap
// (darts-clone's DoubleArrayUnit: a label, a has-leaf flag and an offset, or a leaf's value).
struct DartsUnit {
  std::uint32_t bits = 0;
  bool has_leaf() const { return ((bits >> 8) & 1u) == 1u; }
  std::uint32_t value() const { return bits & ((1u << 31) - 1); }
  std::uint32_t label() const { return bits & ((1u << 31) | 0xffu); }
  std::uint32_t offset() const { return (bits >> 10) << ((bits & (1u << 9)) >> 6); }
};

DartsUnit unit_at(std::string_view trie, std::size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(trie.data()) + 4 * i;
  return {std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 | std::uint32_t(p[2]) << 16 |
          std::uint32_t(p[3]) << 24};
}

// A precompiled charsmap is a little-endian uint32 trie size, the trie, then the replacement
// strings, each ending in NUL, that the trie's leaves index. sentencepiece follows the trie and
// strlen()s the string it reaches without a bounds check, so every transition a lookup can take
// from a reachable node must stay inside the trie (a lookup may try any byte), every leaf must
// point inside the strings, and the strings must end in NUL. (A 6-byte charsmap with an empty trie
// read past its buffer under AddressSanitizer; found by tests/fuzz/fuzz_tokenizer.)
std::string check_charsmap(std::string_view blob) {
  if (blob.empty()) return {};  // no table: the normalizer maps nothing
  if (blob.size() < 4) return "its normalizer table is shorter than its header";
  const std::uint32_t trie_bytes = unit_at(blob, 0).bits;
  if (trie_bytes == 0 || trie_bytes % 4 != 0 || trie_bytes > blob.size() - 4)
    return "its normalizer table's trie size (" + std::to_string(trie_bytes) + " bytes) does not fit its " +
           std::to_string(blob.size()) + " bytes";
  const std::string_view trie = blob.substr(4, trie_bytes);
  const std::string_view strings = blob.substr(4 + std::size_t(trie_bytes));
  if (strings.empty() || strings.back() != '\0') return "its normalizer table's strings do not end in NUL";
  const std::size_t n = trie_bytes / 4;
  std::vector<char> seen(n, 0);
  std::vector<std::size_t> todo{0};
  seen[0] = 1;
  while (!todo.empty()) {
    const std::size_t id = todo.back();
    todo.pop_back();
    const DartsUnit u = unit_at(trie, id);
    const std::size_t base = id ^ u.offset();
    // Children and the leaf's value unit are base ^ label, label 0 to 255: base's whole block.
    if ((base | 0xffu) >= n) return "its normalizer table's trie leads outside itself";
    if (u.has_leaf() && unit_at(trie, base).value() >= strings.size())
      return "its normalizer table's trie points outside its strings";
    for (std::uint32_t label = 1; label <= 0xffu; ++label) {
      const std::size_t child = base ^ label;
      if (unit_at(trie, child).label() == label && !seen[child]) {
        seen[child] = 1;
        todo.push_back(child);
      }
    }
  }
  return {};
}

// The normalizer_spec (and denormalizer_spec) message: its precompiled_charsmap is field 2.
std::string check_normalizer_spec(std::string_view spec) {
  WireReader reader(spec);
  WireField f;
  std::string error;
  while (reader.next(f, error))
    if (f.number == 2 && f.type == 2)
      if (std::string why = check_charsmap(f.payload); !why.empty()) return why;
  return error.empty() ? std::string() : "its normalizer settings are malformed: " + error;
}

}  // namespace

// protobuf accepts any prefix of a message that ends on a field boundary, and sentencepiece then
// loads it: a model cut after some of its pieces would load as a smaller vocabulary with default
// trainer and normalizer settings, and tokenize differently without a word. So the top level must
// be a well-formed message holding pieces (field 1), trainer_spec (2) and normalizer_spec (3),
// which the trainer always writes, in that order, after the pieces; and the normalizer and
// denormalizer (5) tables must be sound (check_charsmap).
std::string check_tokenizer_model(std::string_view bytes) {
  WireReader reader(bytes);
  WireField f;
  std::string error;
  std::size_t pieces = 0;
  bool trainer_spec = false;
  bool normalizer_spec = false;
  while (reader.next(f, error)) {
    if (f.type != 2) continue;
    if (f.number == 1) ++pieces;
    if (f.number == 2) trainer_spec = true;
    if (f.number == 3) normalizer_spec = true;
    if (f.number == 3 || f.number == 5)
      if (std::string why = check_normalizer_spec(f.payload); !why.empty()) return why;
  }
  if (!error.empty()) return error;
  if (pieces == 0) return "it has no vocabulary pieces";
  if (!trainer_spec || !normalizer_spec)
    return "it ends before its trainer and normalizer settings (truncated?)";
  return {};
}

}  // namespace duet
