#include "io/csv_table.hpp"

#include "core/error.hpp"
#include "io/file_bytes.hpp"

namespace duet {

namespace {

std::vector<std::string> split(std::string_view line) {
  std::vector<std::string> out;
  for (std::size_t start = 0;;) {
    const std::size_t comma = line.find(',', start);
    out.emplace_back(trim(line.substr(start, comma - start)));
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

}  // namespace

CsvTable::CsvTable(std::string path, const std::string& what)
    : path_(std::move(path)), text_(read_file_bytes(path_)), lines_(text_) {
  std::string_view line;
  if (!lines_.next_nonblank(line)) throw Error(path_ + ": empty " + what + ", expected a header");
  header_ = split(line);
  for (std::size_t i = 0; i < header_.size(); ++i) {
    if (header_[i].empty())
      throw Error(where() + ": column " + std::to_string(i + 1) + " has no name (a comma too many?)");
    if (!index_.emplace(header_[i], i).second)
      throw Error(where() + ": column '" + header_[i] + "' appears twice");
  }
  header_line_ = lines_.number();
}

std::size_t CsvTable::column(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end())
    throw Error(path_ + ":" + std::to_string(header_line_) + ": missing column '" + name + "'");
  return it->second;
}

bool CsvTable::next(std::vector<std::string>& fields) {
  std::string_view line;
  if (!lines_.next_nonblank(line)) return false;
  fields = split(line);
  if (fields.size() != header_.size())
    throw Error(where() + ": " + std::to_string(fields.size()) + " fields, the header has " +
                std::to_string(header_.size()));
  return true;
}

}  // namespace duet
