#pragma once
// Text <-> token ids for the real engine, over a sentencepiece model file (duet's own
// workloads/data/tokenizer/duet-math.model, or any model of the Llama family's format).
// sentencepiece stays out of this header so that the targets including it do not need its include
// path; the processor lives behind a pointer.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.hpp"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace duet {

class Tokenizer {
 public:
  // The text the beam search puts between reasoning steps (PRM800K's step format).
  static constexpr std::string_view kStepSeparator = "\n\n";

  // Reads a sentencepiece model. Throws duet::Error naming the file when it is missing, cannot be
  // read, or is not a whole sentencepiece model (random bytes, a truncated file, an empty file).
  [[nodiscard]] static Tokenizer load(const std::filesystem::path& path);
  // The same checks on a model's bytes held in memory; `path` names them in errors.
  [[nodiscard]] static Tokenizer from_bytes(const std::string& bytes, const std::filesystem::path& path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Ids of `text`, without BOS/EOS: callers that want them add bos_id()/eos_id() themselves, so
  // that a prompt assembled from pieces gets exactly one BOS. Text that is not valid UTF-8 still
  // encodes, but decoding gives it back with U+FFFD in place of the bad bytes.
  [[nodiscard]] std::vector<TokenId> encode(std::string_view text) const;
  // The text of `ids`; control tokens (BOS, EOS, PAD) decode to nothing. Throws duet::Error for an
  // id outside [0, vocab_size()).
  [[nodiscard]] std::string decode(std::span<const TokenId> ids) const;

  [[nodiscard]] std::int32_t vocab_size() const { return vocab_size_; }
  // The id of one vocabulary entry (a piece, e.g. "▁the", "<0x0A>", "+"). Throws duet::Error when
  // the model has no such piece, rather than quietly answering unk_id().
  [[nodiscard]] TokenId piece_to_id(std::string_view piece) const;
  // The vocabulary entry of `id`; throws duet::Error when out of range.
  [[nodiscard]] std::string id_to_piece(TokenId id) const;

  // Special ids; kNoToken where the model defines none (sentencepiece models can disable each).
  [[nodiscard]] TokenId bos_id() const { return bos_id_; }
  [[nodiscard]] TokenId eos_id() const { return eos_id_; }
  [[nodiscard]] TokenId pad_id() const { return pad_id_; }
  [[nodiscard]] TokenId unk_id() const { return unk_id_; }

  [[nodiscard]] bool has_step_separator() const { return step_separator_id_ != kNoToken; }
  // The single id that kStepSeparator encodes to. Throws duet::Error for a model that splits it
  // into several tokens (e.g. Llama-2's, which gives two "<0x0A>"), since step accounting counts it
  // as one token.
  [[nodiscard]] TokenId step_separator_id() const;

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  Tokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp, std::filesystem::path path);

  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::filesystem::path path_;
  std::int32_t vocab_size_ = 0;
  TokenId bos_id_ = kNoToken;
  TokenId eos_id_ = kNoToken;
  TokenId pad_id_ = kNoToken;
  TokenId unk_id_ = kNoToken;
  TokenId step_separator_id_ = kNoToken;
};

}  // namespace duet
