#include "exec/tokenizer.hpp"

#include <sentencepiece_processor.h>

#include <cstddef>
#include <exception>
#include <fstream>
#include <system_error>
#include <type_traits>
#include <utility>

#include "core/error.hpp"
#include "exec/tokenizer_model_check.hpp"

namespace duet {

// sentencepiece speaks std::vector<int>; TokenId must be the same type so that ids pass through
// without a copy.
static_assert(std::is_same_v<TokenId, int>, "TokenId must be int to share sentencepiece's id vectors");

namespace {

// Real models are well under 100 MB; the cap stops a wrong path (a weights file) from being read
// whole into memory only to be rejected.
constexpr std::uintmax_t kMaxModelBytes = std::uintmax_t{1} << 30;

std::string quoted(const std::filesystem::path& path) { return "'" + path.string() + "'"; }

// Pieces can hold newlines and other control bytes ("\n\n" is one); escape them so that an error
// message stays on one line.
std::string printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string read_model_file(const std::filesystem::path& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) {
    throw Error("tokenizer: model file " + quoted(path) + " does not exist");
  }
  if (!std::filesystem::is_regular_file(status)) {
    throw Error("tokenizer: model file " + quoted(path) + " is not a regular file");
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw Error("tokenizer: cannot read model file " + quoted(path) + ": " + ec.message());
  if (size > kMaxModelBytes) {
    throw Error("tokenizer: " + quoted(path) + " is not a sentencepiece model (" + std::to_string(size) +
                " bytes, more than any tokenizer model)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("tokenizer: cannot open model file " + quoted(path));
  std::string bytes(static_cast<std::size_t>(size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (in.gcount() != static_cast<std::streamsize>(bytes.size())) {
    throw Error("tokenizer: cannot read model file " + quoted(path) + " (short read)");
  }
  return bytes;
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  return from_bytes(read_model_file(path), path);
}

Tokenizer Tokenizer::from_bytes(const std::string& bytes, const std::filesystem::path& path) {
  if (bytes.empty()) throw Error("tokenizer: model file " + quoted(path) + " is empty");
  if (const std::string why = check_tokenizer_model(bytes); !why.empty()) {
    throw Error("tokenizer: " + quoted(path) + " is not a sentencepiece model: " + why);
  }
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  sentencepiece::util::Status status;
  try {
    status = sp->LoadFromSerializedProto(bytes);
  } catch (const std::exception& e) {
    // Some malformed models throw instead of returning a status: an empty piece makes the trie
    // builder (darts-clone) throw "zero-length key" (found by tests/fuzz/fuzz_tokenizer).
    throw Error("tokenizer: " + quoted(path) + " is not a usable sentencepiece model: " + e.what());
  }
  if (!status.ok())
    throw Error("tokenizer: " + quoted(path) + " is not a usable sentencepiece model: " + status.ToString());
  return Tokenizer(std::move(sp), path);
}

Tokenizer::Tokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp, std::filesystem::path path)
    : sp_(std::move(sp)), path_(std::move(path)) {
  vocab_size_ = sp_->GetPieceSize();
  // sentencepiece reports a disabled special token as -1, which is kNoToken; anything else out of
  // range would be a broken model, and is mapped to "none" rather than trusted.
  const auto special = [&](int id) { return id >= 0 && id < vocab_size_ ? TokenId{id} : kNoToken; };
  bos_id_ = special(sp_->bos_id());
  eos_id_ = special(sp_->eos_id());
  pad_id_ = special(sp_->pad_id());
  unk_id_ = special(sp_->unk_id());
  const auto separator = encode(kStepSeparator);
  if (separator.size() == 1) step_separator_id_ = separator.front();
}

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<TokenId> Tokenizer::encode(std::string_view text) const {
  std::vector<TokenId> ids;
  if (const auto status = sp_->Encode(text, &ids); !status.ok()) {
    throw Error("tokenizer " + quoted(path_) + ": cannot encode text: " + status.ToString());
  }
  return ids;
}

std::string Tokenizer::decode(std::span<const TokenId> ids) const {
  for (const TokenId id : ids) {
    if (id < 0 || id >= vocab_size_) {
      throw Error("tokenizer " + quoted(path_) + ": cannot decode token id " + std::to_string(id) +
                  ", outside the vocabulary [0, " + std::to_string(vocab_size_) + ")");
    }
  }
  std::string text;
  const std::vector<int> copy(ids.begin(), ids.end());
  if (const auto status = sp_->Decode(copy, &text); !status.ok()) {
    throw Error("tokenizer " + quoted(path_) + ": cannot decode: " + status.ToString());
  }
  return text;
}

TokenId Tokenizer::piece_to_id(std::string_view piece) const {
  // sentencepiece answers unk_id for a piece it lacks, so an unknown piece and "<unk>" itself look
  // alike until the answer is mapped back.
  const int id = sp_->PieceToId(piece);
  if (id < 0 || id >= vocab_size_ || sp_->IdToPiece(id) != piece) {
    throw Error("tokenizer " + quoted(path_) + ": no piece " + printable(piece) + " in the vocabulary");
  }
  return id;
}

std::string Tokenizer::id_to_piece(TokenId id) const {
  if (id < 0 || id >= vocab_size_) {
    throw Error("tokenizer " + quoted(path_) + ": token id " + std::to_string(id) +
                " is outside the vocabulary [0, " + std::to_string(vocab_size_) + ")");
  }
  return sp_->IdToPiece(id);
}

TokenId Tokenizer::step_separator_id() const {
  if (step_separator_id_ == kNoToken) {
    throw Error("tokenizer " + quoted(path_) + ": the step separator " + printable(kStepSeparator) +
                " is not a single token in this model");
  }
  return step_separator_id_;
}

}  // namespace duet
