// The header-CSV reader of the kernel tables and of `duet fit --csv`: fields by column name, blank
// lines and CRLF endings, and every error naming the file and line.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/csv_table.hpp"
#include "tests/support/test_support.hpp"

namespace duet {
namespace {

using test_support::error_of;
using test_support::TempDir;

std::string write_text(const TempDir& dir, const std::string& content) {
  std::string path = dir.file("t.csv");
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(CsvTable, ReadsRowsByColumnNameAcrossBlankLinesAndCrlf) {
  TempDir dir;
  CsvTable t(write_text(dir, "m, n ,latency_ms\r\n1,2,0.5\r\n\r\n  \n3,4, 0.25 \n5,6,7"), "kernel table");
  EXPECT_EQ(t.header(), (std::vector<std::string>{"m", "n", "latency_ms"}));
  EXPECT_EQ(t.column("latency_ms"), 2u);
  EXPECT_TRUE(t.has("n"));
  EXPECT_FALSE(t.has("k"));
  std::vector<std::vector<std::string>> rows;
  std::vector<std::size_t> lines;
  for (std::vector<std::string> f; t.next(f);) {
    rows.push_back(f);
    lines.push_back(t.line());
  }
  EXPECT_EQ(rows,
            (std::vector<std::vector<std::string>>{{"1", "2", "0.5"}, {"3", "4", "0.25"}, {"5", "6", "7"}}));
  EXPECT_EQ(lines, (std::vector<std::size_t>{2, 5, 6}));
}

TEST(CsvTable, ErrorsNameTheFileAndLine) {
  TempDir dir;
  const std::string empty = write_text(dir, "");
  EXPECT_EQ(error_of([&] { CsvTable t(empty, "kernel table"); }),
            empty + ": empty kernel table, expected a header");
  // Blank lines before the header are skipped; a header column with no name is an error at its line.
  const std::string comma = write_text(dir, "\n\nm,n,\n1,2,\n");
  EXPECT_EQ(error_of([&] { CsvTable t(comma, "kernel table"); }),
            comma + ":3: column 3 has no name (a comma too many?)");
  const std::string twice = write_text(dir, "m,n,m\n1,2,3\n");
  EXPECT_EQ(error_of([&] { CsvTable t(twice, "kernel table"); }), twice + ":1: column 'm' appears twice");
  const std::string short_row = write_text(dir, "m,n\n1,2\n\n3\n");
  CsvTable t(short_row, "kernel table");
  EXPECT_EQ(error_of([&] { t.column("k"); }), short_row + ":1: missing column 'k'");
  std::vector<std::string> f;
  ASSERT_TRUE(t.next(f));
  EXPECT_EQ(error_of([&] { t.next(f); }), short_row + ":4: 1 fields, the header has 2");
  const std::string missing = dir.file("none.csv");
  EXPECT_NE(error_of([&] { CsvTable u(missing, "kernel table"); }).find(missing + ": cannot open"),
            std::string::npos);
}

}  // namespace
}  // namespace duet
