// The committed tokenizer (workloads/data/tokenizer/duet-math.model) through duet::Tokenizer, the
// errors for files that are not models, and the committed step model's shape.
#include "exec/tokenizer.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace duet {
namespace {

namespace fs = std::filesystem;

const fs::path kDataDir = fs::path(DUET_SOURCE_DIR) / "workloads" / "data";
const fs::path kModel = kDataDir / "tokenizer" / "duet-math.model";

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A file in the gtest temp dir, removed afterwards. The pid keeps parallel runs from different
// build trees apart.
class TempFile {
 public:
  explicit TempFile(const std::string& stem, const std::string& bytes)
      : path_(fs::path(::testing::TempDir()) / (stem + "-" + std::to_string(::getpid()) + ".model")) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove(path_, ec);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Loading must throw duet::Error whose message names the file; anything else (a crash, another
// exception type, a silent success) fails.
void expect_load_error(const fs::path& path, const std::string& what) {
  try {
    (void)Tokenizer::load(path);
    ADD_FAILURE() << what << ": loaded without an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << what << ": " << e.what();
  }
}

class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tok_ = new Tokenizer(Tokenizer::load(kModel)); }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  static const Tokenizer& tok() { return *tok_; }

 private:
  static inline Tokenizer* tok_ = nullptr;
};

TEST_F(TokenizerTest, CommittedModelHasTheTrainedShape) {
  EXPECT_EQ(tok().vocab_size(), 8000);
  EXPECT_EQ(tok().unk_id(), 0);
  EXPECT_EQ(tok().bos_id(), 1);
  EXPECT_EQ(tok().eos_id(), 2);
  EXPECT_EQ(tok().pad_id(), 3);
  EXPECT_EQ(tok().id_to_piece(tok().unk_id()), "<unk>");
  EXPECT_EQ(tok().id_to_piece(tok().bos_id()), "<s>");
  EXPECT_EQ(tok().id_to_piece(tok().eos_id()), "</s>");
  EXPECT_EQ(tok().id_to_piece(tok().pad_id()), "<pad>");
  EXPECT_EQ(tok().path(), kModel);
}

TEST_F(TokenizerTest, RoundTripsEveryMath500ProblemAndSolution) {
  std::ifstream in(kDataDir / "math500.jsonl");
  ASSERT_TRUE(in) << "missing " << (kDataDir / "math500.jsonl");
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    const auto row = nlohmann::json::parse(line);
    for (const char* field : {"problem", "solution"}) {
      const std::string text = row.at(field).get<std::string>();
      const std::vector<TokenId> ids = tok().encode(text);
      ASSERT_FALSE(ids.empty());
      // A tokenizer trained on this text compresses it: fewer tokens than bytes.
      EXPECT_LT(ids.size(), text.size());
      for (const TokenId id : ids) ASSERT_NE(id, tok().unk_id()) << row.at("unique_id");
      ASSERT_EQ(tok().decode(ids), text) << row.at("unique_id") << " " << field;
    }
    ++rows;
  }
  EXPECT_EQ(rows, 500);
}

TEST_F(TokenizerTest, RoundTripsWhitespaceAndUnseenCharacters) {
  // Identity normalization, no whitespace removal and byte fallback make decode(encode(x)) == x for
  // any valid UTF-8, including characters the corpus never had.
  for (const std::string text : {"  two leading spaces", "tab\tand trailing  ", "a\nb\n\n\nc\r\n",
                                 "\xe6\x97\xa5\xe6\x9c\xac \xc3\xa9 \xf0\x9f\x99\x82", ""}) {
    EXPECT_EQ(tok().decode(tok().encode(text)), text);
  }
  EXPECT_TRUE(tok().encode("").empty());
}

TEST_F(TokenizerTest, InvalidUtf8EncodesAsReplacementCharacter) {
  const std::vector<TokenId> ids = tok().encode(
      "a\xff"
      "b");
  EXPECT_EQ(tok().decode(ids),
            "a\xef\xbf\xbd"
            "b");
}

TEST_F(TokenizerTest, StepSeparatorIsOneToken) {
  ASSERT_TRUE(tok().has_step_separator());
  const TokenId sep = tok().step_separator_id();
  EXPECT_EQ(tok().encode("\n\n"), std::vector<TokenId>{sep});
  EXPECT_EQ(tok().piece_to_id("\n\n"), sep);
  // Inside text it stays one token; a third newline becomes a byte token after it.
  const auto ids = tok().encode("x = 2.\n\nSo y = 3.");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), sep), 1);
  const auto three = tok().encode("\n\n\n");
  ASSERT_EQ(three.size(), 2u);
  EXPECT_EQ(three[0], sep);
  EXPECT_EQ(three[1], tok().piece_to_id("<0x0A>"));
  // Steps joined by the separator encode as the steps plus one token per separator.
  const std::string a = "Let $x=3$.", b = "Then $x^2=9$.";
  const auto joined = tok().encode(a + std::string(Tokenizer::kStepSeparator) + b);
  EXPECT_EQ(joined.size(), tok().encode(a).size() + 1 + tok().encode(b).size());
}

TEST_F(TokenizerTest, PrmLabelsAreSingleTokens) {
  for (const std::string label : {"+", "-"}) {
    const TokenId id = tok().piece_to_id(label);
    EXPECT_EQ(tok().encode(label), std::vector<TokenId>{id}) << label;
    EXPECT_EQ(tok().decode(std::vector<TokenId>{id}), label);
  }
  EXPECT_NE(tok().piece_to_id("+"), tok().piece_to_id("-"));
}

TEST_F(TokenizerTest, ControlTokensDecodeToNothing) {
  const auto ids = tok().encode("x");
  std::vector<TokenId> wrapped{tok().bos_id()};
  wrapped.insert(wrapped.end(), ids.begin(), ids.end());
  wrapped.push_back(tok().eos_id());
  wrapped.push_back(tok().pad_id());
  EXPECT_EQ(tok().decode(wrapped), "x");
}

TEST_F(TokenizerTest, UnknownPieceAndOutOfRangeIdsThrow) {
  EXPECT_EQ(tok().piece_to_id("<unk>"), tok().unk_id());
  EXPECT_THROW((void)tok().piece_to_id("no such piece in duet"), Error);
  EXPECT_THROW((void)tok().piece_to_id(""), Error);
  EXPECT_THROW((void)tok().decode(std::vector<TokenId>{5, 8000}), Error);
  EXPECT_THROW((void)tok().decode(std::vector<TokenId>{-1}), Error);
  EXPECT_THROW((void)tok().id_to_piece(8000), Error);
  try {
    (void)tok().piece_to_id("bad\npiece");
    FAIL();
  } catch (const Error& e) {
    // The message names the model and keeps the piece on one line.
    const std::string msg = e.what();
    EXPECT_NE(msg.find(kModel.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("bad\\npiece"), std::string::npos) << msg;
  }
}

TEST_F(TokenizerTest, MovedTokenizerStillWorks) {
  Tokenizer a = Tokenizer::load(kModel);
  Tokenizer b = std::move(a);
  EXPECT_EQ(b.decode(b.encode("moved")), "moved");
}

TEST(TokenizerLoad, MissingFileNamesIt) {
  const fs::path missing = fs::path(::testing::TempDir()) / "duet-no-such-tokenizer.model";
  expect_load_error(missing, "missing file");
  try {
    (void)Tokenizer::load(missing);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
}

TEST(TokenizerLoad, DirectoryAndEmptyFileAreErrors) {
  expect_load_error(fs::path(DUET_SOURCE_DIR) / "workloads", "directory");
  const TempFile empty("duet-empty", "");
  expect_load_error(empty.path(), "empty file");
}

TEST(TokenizerLoad, RandomBytesAreAnError) {
  std::mt19937 rng(7);
  for (const std::size_t size : {1u, 7u, 64u, 1000u, 4096u, 117000u}) {
    std::string bytes(size, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    const TempFile file("duet-random", bytes);
    expect_load_error(file.path(), "random bytes, size " + std::to_string(size));
  }
  const TempFile text("duet-text", "this is a text file, not a model\n");
  expect_load_error(text.path(), "text file");
}

// A model with an empty piece makes sentencepiece's trie builder throw its own exception instead
// of returning a status; it used to escape and abort (found by tests/fuzz/fuzz_tokenizer, whose
// corpus keeps the input).
TEST(TokenizerLoad, EmptyPieceIsAnError) {
  const fs::path model = fs::path(DUET_SOURCE_DIR) / "tests/fuzz/corpus/tokenizer/regress-empty-piece.model";
  expect_load_error(model, "empty piece");
  try {
    (void)Tokenizer::load(model);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("zero-length key"), std::string::npos) << e.what();
  }
}

// A normalizer table (precompiled charsmap) whose trie is empty: sentencepiece loaded it and read
// past the table on every encode (found by tests/fuzz/fuzz_tokenizer under AddressSanitizer).
TEST(TokenizerLoad, BrokenNormalizerTableIsAnError) {
  const fs::path model =
      fs::path(DUET_SOURCE_DIR) / "tests/fuzz/corpus/tokenizer/regress-charsmap-empty-trie.model";
  expect_load_error(model, "empty normalizer trie");
  try {
    (void)Tokenizer::load(model);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("normalizer table's trie size (0 bytes)"), std::string::npos)
        << e.what();
  }
}

// A real NFKC table loads and normalizes; with bytes of its table corrupted, a model loads and
// encodes, or is refused, and never reads outside the table (the sanitizer build runs this; with
// the check removed, such variants read freed memory under AddressSanitizer).
TEST(TokenizerLoad, CorruptedNormalizerTablesLoadOrAreRefused) {
  const std::string model = read_bytes(fs::path(DUET_SOURCE_DIR) / "tests/exec/data/nmt-nfkc.model");
  ASSERT_EQ(model.size(), 238298u);
  constexpr std::size_t kTableStart = 737, kTableBytes = 237561;  // tests/exec/data/README.md
  const Tokenizer clean = Tokenizer::from_bytes(model, "nmt-nfkc");
  EXPECT_EQ(clean.encode("\xef\xbc\xa6ox"), clean.encode("Fox"));  // full-width F is F after NFKC
  std::mt19937_64 rng(7);
  int loaded = 0, refused = 0;
  for (int k = 0; k < 300; ++k) {
    std::string m = model;
    for (int flips = 1 + int(rng() % 4); flips > 0; --flips)
      m[kTableStart + rng() % kTableBytes] = static_cast<char>(rng());
    try {
      const Tokenizer t = Tokenizer::from_bytes(m, "mutant");
      (void)t.encode("\xef\xbc\xa6ull width \xe2\x91\xa0 \xef\xac\x81 the quick brown fox");
      ++loaded;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("sentencepiece model"), std::string::npos) << e.what();
      ++refused;
    }
  }
  EXPECT_GT(loaded, 0);
  EXPECT_GT(refused, 0);
}

TEST(TokenizerLoad, TruncatedModelIsAnError) {
  const std::string model = read_bytes(kModel);
  ASSERT_GT(model.size(), 100000u);
  // Every length in a stretch of the piece table hits several cuts that end exactly between two
  // pieces: protobuf accepts those, and only the tokenizer's own check (or, for this byte-fallback
  // model, a sentencepiece consistency check) stops them. A sparse sweep covers the rest of the
  // file, including the trainer and normalizer settings at the end.
  std::vector<std::size_t> cuts;
  for (std::size_t n = 50000; n < 50080; ++n) cuts.push_back(n);
  for (std::size_t n = 1; n < model.size(); n += 4099) cuts.push_back(n);
  for (std::size_t back = 1; back <= 300; ++back) cuts.push_back(model.size() - back);
  int between_pieces = 0;
  for (const std::size_t n : cuts) {
    const TempFile file("duet-truncated", model.substr(0, n));
    try {
      const Tokenizer t = Tokenizer::load(file.path());
      // A cut that drops only trailing empty fields is still the same model; anything that loads
      // must behave exactly like the whole file.
      const Tokenizer whole = Tokenizer::load(kModel);
      EXPECT_EQ(t.vocab_size(), whole.vocab_size()) << "cut at " << n;
      EXPECT_EQ(t.encode("Let $x = \\frac{1}{2}$.\n\nSo"), whole.encode("Let $x = \\frac{1}{2}$.\n\nSo"))
          << "cut at " << n;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(file.path().string()), std::string::npos) << msg;
      if (msg.find("truncated?") != std::string::npos) ++between_pieces;
    }
  }
  EXPECT_GT(between_pieces, 0) << "no cut fell between two pieces; the sweep no longer tests that case";
}

TEST(TokenizerStepModel, CommittedJsonHasFiveSaneLevels) {
  std::ifstream in(kDataDir / "step_model.json");
  ASSERT_TRUE(in) << "missing " << (kDataDir / "step_model.json");
  const auto model = nlohmann::json::parse(in);
  EXPECT_EQ(model.at("fitted_by"), "scripts/fit_step_model.py");
  EXPECT_EQ(model.at("tokenizer"), "workloads/data/tokenizer/duet-math.model");
  EXPECT_TRUE(model.contains("source"));
  const auto& levels = model.at("levels");
  ASSERT_EQ(levels.size(), 5u);
  for (std::size_t i = 0; i < levels.size(); ++i) {
    const auto& level = levels[i];
    EXPECT_EQ(level.at("level").get<int>(), static_cast<int>(i) + 1);
    EXPECT_GT(level.at("fit_trajectories").get<int>(), 0);
    for (const char* key : {"step_tokens", "steps_to_answer", "answer_step_tokens"}) {
      const auto& d = level.at(key);
      SCOPED_TRACE(std::string("level ") + std::to_string(i + 1) + " " + key);
      EXPECT_EQ(d.at("dist"), "lognormal");
      const double mu = d.at("mu"), sigma = d.at("sigma");
      const int lo = d.at("min"), hi = d.at("max");
      EXPECT_GT(mu, 0.0);
      EXPECT_LT(mu, std::log(10000.0));
      EXPECT_GT(sigma, 0.0);
      EXPECT_LT(sigma, 3.0);
      EXPECT_GE(lo, 1);
      EXPECT_LT(lo, hi);
      // The median exp(mu) lies inside the clip range.
      EXPECT_GE(std::exp(mu), lo);
      EXPECT_LE(std::exp(mu), hi);
      EXPECT_GT(d.at("n").get<int>(), 0);
    }
  }
  // Harder problems take more steps (the fit's clearest signal).
  EXPECT_LT(levels[0].at("steps_to_answer").at("mu").get<double>(),
            levels[4].at("steps_to_answer").at("mu").get<double>());
}

}  // namespace
}  // namespace duet
