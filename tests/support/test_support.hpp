#pragma once
// Helpers shared by the test suites: error messages and scratch directories.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.hpp"
#include "core/kv_allocator.hpp"
#include "core/sequence.hpp"

// For property tests' check functions, which return "" when every invariant holds: ends the
// enclosing function with the message `msg` (a << chain, e.g. "block " << b << " lost") when `cond`
// fails. The caller adds the seed and the operation index.
#define DUET_CHECK_OR_RETURN(cond, msg)                                             \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::ostringstream check_os_;                                                 \
      check_os_ << msg; /* NOLINT(bugprone-macro-parentheses): msg is a << chain */ \
      return check_os_.str();                                                       \
    }                                                                               \
  } while (0)

namespace duet::test_support {

// Runs f, which must throw duet::Error, and returns the message ("" and a failure otherwise).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected duet::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected duet::Error, nothing was thrown";
  return "";
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A fresh directory per test (ctest runs tests in parallel processes), removed afterwards.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string test = info ? std::string(info->test_suite_name()) + "-" + info->name() : "test";
    path_ = std::filesystem::temp_directory_path() /
            ("duet-" + test + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// n token ids in [0, vocab), from a seed.
inline std::vector<TokenId> random_tokens(int n, std::uint64_t seed, int vocab) {
  std::mt19937_64 rng(seed);
  std::vector<TokenId> t(static_cast<std::size_t>(n));
  for (TokenId& x : t) x = TokenId(rng() % std::uint64_t(vocab));
  return t;
}

inline std::vector<TokenId> concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A PRM request: all of `tokens` known, scored at `positions`.
inline Sequence score_request(SeqId id, std::vector<TokenId> tokens, std::vector<int> positions) {
  Sequence s;
  s.id = id;
  s.kind = SeqKind::Score;
  s.num_prompt_tokens = int(tokens.size());
  s.tokens = std::move(tokens);
  s.score_positions = std::move(positions);
  return s;
}

// Admission as the scheduler does it: the prefix hit, then the rest of the prompt; the whole
// prompt is then computed. False (and nothing held) when the pool cannot take it.
inline bool admit(KvAllocator& kv, Sequence& s) {
  const int hit = kv.lookup_prefix(s);
  if (!kv.allocate_slots(s, s.num_tokens() - hit, hit)) return false;
  s.num_computed_tokens = s.num_tokens();
  return true;
}

// A soak run of the property tests: DUET_PROPERTY_SCALE multiplies their step and operation counts
// and DUET_PROPERTY_SEED moves their seeds (both 0 / unset: the committed, repeatable runs). For
// long runs by hand, never in CI: `DUET_PROPERTY_SCALE=100 DUET_PROPERTY_SEED=$RANDOM ctest -R Property`.
struct PropertySoak {
  std::int64_t scale = 1;
  std::uint64_t seed_offset = 0;
};

inline PropertySoak property_soak() {
  auto read = [](const char* name) -> std::int64_t {
    const char* v = std::getenv(name);
    if (!v || !*v) return 0;
    char* end = nullptr;
    const long long x = std::strtoll(v, &end, 10);
    if (*end != '\0' || x < 0) throw std::invalid_argument(std::string(name) + "=" + v + ": not a count");
    return x;
  };
  PropertySoak s;
  s.scale = std::max<std::int64_t>(1, read("DUET_PROPERTY_SCALE"));
  s.seed_offset = std::uint64_t(read("DUET_PROPERTY_SEED")) * 0x100000ULL;
  if (s.scale > 1 || s.seed_offset > 0)
    std::cout << "[ soak     ] scale " << s.scale << ", seed offset " << s.seed_offset << "\n";
  return s;
}

inline SamplingParams sampling(float temperature, std::uint64_t seed, float top_p = 1.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_p = top_p;
  p.seed = seed;
  return p;
}

}  // namespace duet::test_support
