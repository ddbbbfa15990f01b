#pragma once
// Text as lines and trimmed pieces: what the trace importers and the kernel-table reader share.
#include <algorithm>
#include <cstddef>
#include <string_view>

namespace duet {

inline bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v' || c == '\n';
}

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

inline bool is_blank(std::string_view s) { return trim(s).empty(); }

// Lines in a text, a last one without its newline included: a bound, as for reserving rows.
inline std::size_t count_lines(std::string_view text) {
  return std::size_t(std::count(text.begin(), text.end(), '\n')) + 1;
}

// Walks text line by line. The "\r" of CRLF endings is dropped, and a last line without a newline
// still counts, so both line-ending conventions read the same.
class LineReader {
 public:
  explicit LineReader(std::string_view text) : rest_(text) {}

  bool next(std::string_view& line) {
    if (rest_.empty()) return false;
    const std::size_t end = rest_.find('\n');
    line = rest_.substr(0, end);
    rest_ = end == std::string_view::npos ? std::string_view{} : rest_.substr(end + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++number_;
    return true;
  }

  bool next_nonblank(std::string_view& line) {
    while (next(line)) {
      if (!is_blank(line)) return true;
    }
    return false;
  }

  std::size_t number() const { return number_; }

 private:
  std::string_view rest_;
  std::size_t number_ = 0;
};

}  // namespace duet
