#pragma once
// A comma-separated file with a header line, as duet's measured tables are written (the public
// kernel tables, `duet fit --csv`'s steps): no quoting; a field's blanks and a CRLF ending dropped;
// blank lines skipped, before the header too. Every column has a name. Every error names the file, and the
// line where there is one.
#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "io/text_lines.hpp"

namespace duet {

class CsvTable {
 public:
  // Reads the file (plain or gzip'd) and its header; `what` names it in the empty file's error.
  CsvTable(std::string path, const std::string& what);
  CsvTable(const CsvTable&) = delete;  // its line reader points into its own text
  CsvTable& operator=(const CsvTable&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<std::string>& header() const { return header_; }
  bool has(const std::string& column) const { return index_.count(column) > 0; }
  // The column's index; an error "PATH:1: missing column 'NAME'" when there is none.
  std::size_t column(const std::string& name) const;
  // The next non-blank row, with as many fields as the header has.
  bool next(std::vector<std::string>& fields);
  std::size_t line() const { return lines_.number(); }
  std::string where() const { return path_ + ":" + std::to_string(lines_.number()); }

 private:
  std::string path_;
  std::string text_;
  LineReader lines_{{}};
  std::vector<std::string> header_;
  std::map<std::string, std::size_t, std::less<>> index_;
  std::size_t header_line_ = 1;  // blank lines may come before it
};

}  // namespace duet
