// Trace importers: Azure CSV and Mooncake JSONL parsing (plain and gzip, CRLF, no final newline),
// every error message naming file and line, the shipped public traces against the figures their
// READMEs publish, synthetic prompt tokens and the Mooncake reference prefix hit rate.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>
#include <zlib.h>

#include "core/error.hpp"
#include "io/trace.hpp"
#include "tests/support/test_support.hpp"

namespace duet {
namespace {

using test_support::contains;
using test_support::error_of;
using test_support::TempDir;

namespace fs = std::filesystem;

std::string write_text(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  return path;
}

std::string write_gz(const std::string& path, const std::string& content) {
  gzFile gz = gzopen(path.c_str(), "wb");
  EXPECT_NE(gz, nullptr);
  EXPECT_EQ(gzwrite(gz, content.data(), static_cast<unsigned>(content.size())),
            static_cast<int>(content.size()));
  EXPECT_EQ(gzclose(gz), Z_OK);
  return path;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Expects load_trace(path) to fail with a message that starts "PATH:LINE: " and holds `what`.
void expect_error_at(const std::string& path, int line, const std::string& what,
                     TraceFormat format = TraceFormat::Auto) {
  const std::string msg = error_of([&] { load_trace(path, format); });
  EXPECT_TRUE(contains(msg, path + ":" + std::to_string(line) + ": ")) << msg;
  EXPECT_TRUE(contains(msg, what)) << msg;
}

const std::string kHeader = "TIMESTAMP,ContextTokens,GeneratedTokens";

// --- Azure CSV -----------------------------------------------------------------------------------

TEST(TraceAzure, ReadsCrlfWithoutFinalNewline) {
  TempDir dir;
  const std::string path = write_text(dir.file("a.csv"), kHeader + "\r\n" +
                                                             "2023-11-16 18:17:03.9799600,4808,10\r\n"
                                                             "2023-11-16 18:17:04.0319600,3180,8\r\n"
                                                             "2023-11-16 18:17:04.0319601,1,1");
  const Trace t = load_trace(path);
  EXPECT_EQ(t.source, path);
  EXPECT_EQ(t.format, TraceFormat::AzureCsv);
  EXPECT_EQ(t.hash_block_size, 0);
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_EQ(t.requests[0].arrival_s, 0.0);
  EXPECT_NEAR(t.requests[1].arrival_s, 0.052, 1e-12);
  EXPECT_NEAR(t.requests[2].arrival_s - t.requests[1].arrival_s, 1e-7, 1e-12);  // 100 ns kept
  EXPECT_EQ(t.requests[0].input_tokens, 4808);
  EXPECT_EQ(t.requests[0].output_tokens, 10);
  EXPECT_EQ(t.requests[2].input_tokens, 1);
  EXPECT_TRUE(t.requests[1].hash_ids.empty());
}

TEST(TraceAzure, ReadsLfBlankLinesAndShortFractions) {
  TempDir dir;
  const std::string path = write_text(dir.file("a.csv"), kHeader +
                                                             "\n2023-11-16 18:17:03,1,2\n\n"
                                                             "2023-11-16 18:17:04.5,3,4\n\n");
  const Trace t = load_trace(path, TraceFormat::AzureCsv);
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_DOUBLE_EQ(t.requests[1].arrival_s, 1.5);
  EXPECT_EQ(t.requests[1].output_tokens, 4);
}

TEST(TraceAzure, CountsDaysAcrossMidnightMonthAndLeapYear) {
  TempDir dir;
  const std::string path = write_text(dir.file("a.csv"), kHeader +
                                                             "\r\n2024-02-28 23:59:59.5000000,1,1\r\n"
                                                             "2024-02-29 00:00:00.5000000,1,1\r\n"
                                                             "2024-03-01 00:00:00.5000000,1,1\r\n"
                                                             "2025-01-01 00:00:00.5000000,1,1\r\n");
  const Trace t = load_trace(path);
  ASSERT_EQ(t.requests.size(), 4u);
  EXPECT_DOUBLE_EQ(t.requests[1].arrival_s, 1.0);
  EXPECT_DOUBLE_EQ(t.requests[2].arrival_s, 86401.0);
  EXPECT_DOUBLE_EQ(t.requests[3].arrival_s, 1.0 + (1 + 306) * 86400.0);  // Mar 1 -> Jan 1 is 306 days
}

TEST(TraceAzure, ReadsGzipByMagicBytesNotByName) {
  TempDir dir;
  const std::string content = kHeader + "\r\n2023-11-16 18:17:03.9799600,4808,10\r\n2023-11-16 18:17:05,5,6";
  const Trace gz = load_trace(write_gz(dir.file("packed.csv"), content));
  ASSERT_EQ(gz.requests.size(), 2u);
  EXPECT_NEAR(gz.requests[1].arrival_s, 1.02004, 1e-12);
  const Trace plain = load_trace(write_text(dir.file("plain.csv.gz"), content));
  ASSERT_EQ(plain.requests.size(), 2u);
  EXPECT_EQ(plain.requests[1].input_tokens, 5);
}

TEST(TraceAzure, RejectsAMissingOrUnknownHeader) {
  TempDir dir;
  expect_error_at(write_text(dir.file("noheader.csv"), "2023-11-16 18:17:03.9799600,4808,10\r\n"), 1,
                  "missing header", TraceFormat::AzureCsv);
  expect_error_at(write_text(dir.file("unknown.csv"), "TIMESTAMP,Prompt,Output\r\n2023-11-16 18:17:03,1,1"),
                  1, "unknown header");
  expect_error_at(write_text(dir.file("late.csv"), "\r\n\r\nTIMESTAMP,ContextTokens\r\n"), 3,
                  "unknown header");
  expect_error_at(write_text(dir.file("only.csv"), kHeader + "\r\n"), 2, "no requests");
}

TEST(TraceAzure, RejectsAWrongFieldCount) {
  TempDir dir;
  const std::string rows = kHeader + "\r\n2023-11-16 18:17:03,1,1\r\n";
  expect_error_at(write_text(dir.file("four.csv"), rows + "2023-11-16 18:17:04,1,1,1\r\n"), 3, "got 4");
  expect_error_at(write_text(dir.file("two.csv"), rows + "2023-11-16 18:17:04,1"), 3, "got 2");
}

TEST(TraceAzure, RejectsBadTokenCounts) {
  TempDir dir;
  const std::string rows = kHeader + "\r\n2023-11-16 18:17:03,1,1\r\n2023-11-16 18:17:04,2,2\r\n";
  expect_error_at(write_text(dir.file("frac.csv"), rows + "2023-11-16 18:17:05,12.5,1"), 4,
                  "ContextTokens '12.5' is not an integer");
  expect_error_at(write_text(dir.file("word.csv"), rows + "2023-11-16 18:17:05,1,ten"), 4,
                  "GeneratedTokens 'ten' is not an integer");
  expect_error_at(write_text(dir.file("empty.csv"), rows + "2023-11-16 18:17:05,,1"), 4, "is not an integer");
  expect_error_at(write_text(dir.file("neg.csv"), rows + "2023-11-16 18:17:05,1,-3\r\n"), 4,
                  "GeneratedTokens '-3' is negative");
  expect_error_at(write_text(dir.file("big.csv"), rows + "2023-11-16 18:17:05,99999999999999999999,1"), 4,
                  "out of range");
  expect_error_at(write_text(dir.file("zero.csv"), rows + "2023-11-16 18:17:05,0,1"), 4,
                  "ContextTokens is 0: a request needs a prompt");
}

TEST(TraceAzure, RejectsBadTimestamps) {
  TempDir dir;
  const std::string rows = kHeader + "\r\n2023-11-16 18:17:03,1,1\r\n";
  for (const std::string bad : {"2023-13-01 00:00:00", "2023-02-29 00:00:00", "2023-11-16 24:00:00",
                                "2023-11-16 18:17", "2023-11-16 18:17:03.", "2023-11-16 18:17:03.1234567890",
                                "yesterday", "1700000000", "2023-11-16 18:17:03Z"}) {
    expect_error_at(write_text(dir.file("ts.csv"), rows + bad + ",1,1"), 3, "bad timestamp '" + bad + "'");
  }
}

TEST(TraceAzure, RejectsRowsOutOfArrivalOrder) {
  TempDir dir;
  const std::string path =
      write_text(dir.file("order.csv"), kHeader +
                                            "\r\n2023-11-16 18:17:03,1,1\r\n"
                                            "2023-11-16 18:17:03,1,1\r\n"  // ties are fine
                                            "2023-11-16 18:17:02.9999999,1,1\r\n");
  expect_error_at(path, 4, "arrival order");
}

// --- Mooncake JSONL ------------------------------------------------------------------------------

std::string mooncake_line(int ms, int input, int output, const std::string& ids) {
  return "{\"timestamp\": " + std::to_string(ms) + ", \"input_length\": " + std::to_string(input) +
         ", \"output_length\": " + std::to_string(output) + ", \"hash_ids\": [" + ids + "]}";
}

TEST(TraceMooncake, ReadsJsonLines) {
  TempDir dir;
  const std::string path = write_text(
      dir.file("m.jsonl"), mooncake_line(0, 1000, 5, "0, 1") + "\n" + mooncake_line(0, 512, 6, "0") + "\n" +
                               mooncake_line(1500, 1025, 7, "0, 1, 9") + "\n");
  const Trace t = load_trace(path);
  EXPECT_EQ(t.format, TraceFormat::MooncakeJsonl);
  EXPECT_EQ(t.hash_block_size, 512);
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_DOUBLE_EQ(t.requests[2].arrival_s, 1.5);
  EXPECT_EQ(t.requests[2].input_tokens, 1025);
  EXPECT_EQ(t.requests[2].output_tokens, 7);
  EXPECT_EQ(t.requests[2].hash_ids, (std::vector<std::int64_t>{0, 1, 9}));
}

TEST(TraceMooncake, ReadsGzipCrlfAndNoFinalNewline) {
  TempDir dir;
  const std::string path =
      write_gz(dir.file("m.jsonl.gz"),
               "\r\n" + mooncake_line(3, 1, 1, "7") + "\r\n\r\n" + mooncake_line(3536999, 1, 2, "9"));
  const Trace t = load_trace(path, TraceFormat::MooncakeJsonl);
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_DOUBLE_EQ(t.requests[0].arrival_s, 0.003);  // the file's own clock: not shifted to 0
  EXPECT_DOUBLE_EQ(t.requests[1].arrival_s, 3536.999);
  EXPECT_EQ(t.requests[1].hash_ids, std::vector<std::int64_t>{9});
}

TEST(TraceMooncake, RejectsInvalidJsonAndNonObjects) {
  TempDir dir;
  const std::string ok = mooncake_line(0, 1, 1, "0") + "\n";
  expect_error_at(write_text(dir.file("bad.jsonl"), ok + "{\"timestamp\": 1,\n"), 2, "invalid JSON");
  expect_error_at(write_text(dir.file("arr.jsonl"), ok + ok + "[1, 2]\n"), 3, "expected a JSON object");
  // out_of_range, not parse_error, in nlohmann: it used to abort the program.
  expect_error_at(write_text(dir.file("big.jsonl"), ok + "{\"timestamp\": 1e400}\n"), 2,
                  "invalid JSON: number overflow");
  expect_error_at(write_text(dir.file("csv.jsonl"), kHeader + "\n"), 1, "invalid JSON",
                  TraceFormat::MooncakeJsonl);
  // The parser alone keeps the last of two values silently: the line would mean 9, not 1.
  expect_error_at(
      write_text(dir.file("twice.jsonl"),
                 ok + R"({"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [0], )"
                      R"("input_length": 9})"
                      "\n"),
      2, "key \"input_length\" appears twice in one object");
}

TEST(TraceMooncake, RejectsMissingFields) {
  TempDir dir;
  const std::string ok = mooncake_line(0, 1, 1, "0") + "\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}", "timestamp"},
      {"{\"timestamp\": 1, \"output_length\": 1, \"hash_ids\": [0]}", "input_length"},
      {"{\"timestamp\": 1, \"input_length\": 1, \"hash_ids\": [0]}", "output_length"},
      {"{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1}", "hash_ids"},
  };
  for (const auto& [line, name] : cases) {
    expect_error_at(write_text(dir.file("missing.jsonl"), ok + ok + line), 3, "missing field '" + name + "'");
  }
}

TEST(TraceMooncake, RejectsBadValues) {
  TempDir dir;
  const std::string ok = mooncake_line(5, 1, 1, "0") + "\n";
  const std::string file = dir.file("v.jsonl");
  expect_error_at(write_text(file, ok + mooncake_line(5, -1, 1, "")), 2, "input_length -1 is negative");
  expect_error_at(write_text(file, ok + mooncake_line(5, 0, 1, "")), 2,
                  "input_length is 0: a request needs a prompt");
  expect_error_at(write_text(file, ok + "{\"timestamp\": 5, \"input_length\": 1, \"output_length\": 1.5, "
                                        "\"hash_ids\": [0]}"),
                  2, "output_length 1.5 is not an integer");
  expect_error_at(write_text(file, ok + "{\"timestamp\": 5, \"input_length\": \"1\", \"output_length\": 1, "
                                        "\"hash_ids\": [0]}"),
                  2, "is not an integer");
  expect_error_at(write_text(file, ok + "{\"timestamp\": 5, \"input_length\": 1, \"output_length\": 1, "
                                        "\"hash_ids\": [0.5]}"),
                  2, "not a 64-bit integer");
  expect_error_at(write_text(file, ok + "{\"timestamp\": \"5\", \"input_length\": 1, \"output_length\": 1, "
                                        "\"hash_ids\": [0]}"),
                  2, "bad timestamp");
  expect_error_at(write_text(file, mooncake_line(-5, 1, 1, "0")), 1, "bad timestamp");
}

TEST(TraceMooncake, RejectsHashIdsOfTheWrongLength) {
  TempDir dir;
  const std::string ok = mooncake_line(0, 1, 1, "0") + "\n";
  expect_error_at(write_text(dir.file("h.jsonl"), ok + mooncake_line(0, 1024, 1, "0, 1, 2")), 2,
                  "hash_ids has 3 ids, but input_length 1024 needs ceil(1024/512) = 2");
  expect_error_at(write_text(dir.file("h.jsonl"), ok + ok + mooncake_line(0, 1025, 1, "0, 1")), 3, "= 3");
}

TEST(TraceMooncake, RejectsLinesOutOfArrivalOrder) {
  TempDir dir;
  const std::string path =
      write_text(dir.file("o.jsonl"), mooncake_line(10, 1, 1, "0") + "\n" + mooncake_line(10, 1, 1, "0") +
                                          "\n" + mooncake_line(9, 1, 1, "0") + "\n");
  expect_error_at(path, 3, "arrival order");
}

// --- Files, detection and names ------------------------------------------------------------------

TEST(TraceLoad, RejectsEmptyAndBlankFiles) {
  TempDir dir;
  expect_error_at(write_text(dir.file("empty.csv"), ""), 1, "empty file");
  expect_error_at(write_text(dir.file("blank.jsonl"), "\r\n  \n\r\n"), 1, "empty file");
  expect_error_at(write_gz(dir.file("empty.gz"), ""), 1, "empty file");
  expect_error_at(write_text(dir.file("empty.csv"), ""), 1, "empty file", TraceFormat::MooncakeJsonl);
}

TEST(TraceLoad, RejectsUnreadableFiles) {
  TempDir dir;
  const std::string missing = dir.file("missing.csv");
  std::string msg = error_of([&] { load_trace(missing); });
  EXPECT_TRUE(contains(msg, missing + ": cannot open")) << msg;
  msg = error_of([&] { load_trace(dir.file("")); });  // a directory
  EXPECT_TRUE(contains(msg, "cannot read")) << msg;
}

TEST(TraceLoad, RejectsUnknownContent) {
  TempDir dir;
  expect_error_at(write_text(dir.file("x.txt"), "\n\nhello,world\n"), 3, "cannot tell the trace format");
}

// The line a broken gzip stream stopped in: somewhere inside, as zlib inflates in chunks.
int gzip_error_line(const std::string& path) {
  const std::string msg = error_of([&] { load_trace(path); });
  const std::string prefix = path + ":";
  if (!msg.starts_with(prefix) || !contains(msg, ": gzip data is truncated or corrupt")) {
    ADD_FAILURE() << msg;
    return -1;
  }
  return std::stoi(msg.substr(prefix.size()));
}

TEST(TraceLoad, RejectsTruncatedAndCorruptGzip) {
  TempDir dir;
  std::string content;
  for (int i = 0; i < 20000; ++i) content += mooncake_line(i, 600, 1, std::to_string(2 * i) + ", 1") + "\n";
  const std::string bytes = read_bytes(write_gz(dir.file("full.gz"), content));
  ASSERT_GT(bytes.size(), 1000u);

  const int cut = gzip_error_line(write_text(dir.file("cut.jsonl.gz"), bytes.substr(0, bytes.size() / 2)));
  EXPECT_GT(cut, 1);
  EXPECT_LT(cut, 20000);
  EXPECT_EQ(gzip_error_line(write_text(dir.file("head.gz"), bytes.substr(0, 2))), 1);  // magic bytes only
  std::string flipped = bytes;
  flipped[bytes.size() - 6] ^= 0x55;  // inside the CRC-32 trailer
  const int crc = gzip_error_line(write_text(dir.file("crc.gz"), flipped));
  EXPECT_GT(crc, 1);
  EXPECT_LE(crc, 20001);
}

TEST(TraceLoad, FormatNames) {
  EXPECT_EQ(trace_format_from_name("auto"), TraceFormat::Auto);
  EXPECT_EQ(trace_format_from_name("azure"), TraceFormat::AzureCsv);
  EXPECT_EQ(trace_format_from_name("Mooncake"), TraceFormat::MooncakeJsonl);
  const std::string msg = error_of([] { trace_format_from_name("sharegpt"); });
  EXPECT_TRUE(contains(msg, "'sharegpt'")) << msg;
  EXPECT_TRUE(contains(msg, "mooncake")) << msg;
}

TEST(TraceLoad, ScaleArrivals) {
  Trace t;
  t.requests.resize(2);
  t.requests[1].arrival_s = 3.0;
  scale_arrivals(t, 2.0);
  EXPECT_DOUBLE_EQ(t.requests[1].arrival_s, 1.5);
  scale_arrivals(t, 0.5);
  EXPECT_DOUBLE_EQ(t.requests[1].arrival_s, 3.0);
  for (double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    const std::string msg = error_of([&] { scale_arrivals(t, bad); });
    EXPECT_TRUE(contains(msg, "rate_scale")) << msg;
  }
  EXPECT_DOUBLE_EQ(t.requests[1].arrival_s, 3.0);
}

// --- Synthetic prompt tokens ---------------------------------------------------------------------

Trace small_mooncake() {
  Trace t;
  t.source = "small";
  t.format = TraceFormat::MooncakeJsonl;
  t.hash_block_size = 512;
  t.requests = {{0.0, 1000, 1, {7, 8}}, {0.0, 1500, 1, {7, 8, 9}}, {0.0, 600, 1, {7, 4}},
                {0.0, 100, 1, {5}},     {0.0, 700, 1, {7, 8}},     {0.0, 512, 1, {9}}};
  return t;
}

std::vector<TokenId> block_of(const std::vector<TokenId>& tokens, std::size_t k) {
  const std::size_t end = std::min(tokens.size(), (k + 1) * 512);
  return {tokens.begin() + k * 512, tokens.begin() + end};
}

TEST(TraceTokens, EqualHashIdsGiveEqualBlocks) {
  const Trace t = small_mooncake();
  std::vector<std::vector<TokenId>> p;
  for (std::size_t i = 0; i < t.requests.size(); ++i) {
    p.push_back(trace_prompt_tokens(t, i, 128256, 42));
    EXPECT_EQ(p[i].size(), static_cast<std::size_t>(t.requests[i].input_tokens));
    for (TokenId tok : p[i]) ASSERT_TRUE(tok >= 0 && tok < 128256);
  }
  EXPECT_EQ(block_of(p[0], 0), block_of(p[1], 0));                                              // id 7
  EXPECT_EQ(block_of(p[0], 1), std::vector<TokenId>(p[1].begin() + 512, p[1].begin() + 1000));  // id 8, cut
  const std::vector<TokenId> tail9 = block_of(p[1], 2);  // id 9 cut to 476 tokens at the end of row 1
  ASSERT_EQ(tail9.size(), 476u);
  EXPECT_EQ(tail9, std::vector<TokenId>(p[5].begin(), p[5].begin() + 476));  // row 5 starts with id 9
  EXPECT_NE(block_of(p[2], 1), block_of(p[1], 1));                           // 4 vs 8
  EXPECT_NE(block_of(p[3], 0), std::vector<TokenId>(p[2].begin(), p[2].begin() + 100));  // 5 vs 7
  EXPECT_EQ(p[1], trace_prompt_tokens(t, 1, 128256, 42));                                // deterministic
  EXPECT_NE(p[1], trace_prompt_tokens(t, 1, 128256, 43));                                // the seed matters
  EXPECT_EQ(block_of(trace_prompt_tokens(t, 4, 128256, 42), 0), block_of(p[0], 0));
}

TEST(TraceTokens, RequestsWithoutHashIdsShareNothing) {
  Trace t;
  t.requests = {{0.0, 64, 1, {}}, {0.0, 64, 1, {}}, {0.0, 0, 1, {}}};
  const std::vector<TokenId> a = trace_prompt_tokens(t, 0, 32000);
  const std::vector<TokenId> b = trace_prompt_tokens(t, 1, 32000);
  ASSERT_EQ(a.size(), 64u);
  EXPECT_NE(std::vector<TokenId>(a.begin(), a.begin() + 16), std::vector<TokenId>(b.begin(), b.begin() + 16));
  EXPECT_EQ(a, trace_prompt_tokens(t, 0, 32000));
  EXPECT_TRUE(trace_prompt_tokens(t, 2, 32000).empty());
  EXPECT_GT(std::set<TokenId>(a.begin(), a.end()).size(), 50u);  // not a constant stream
}

TEST(TraceTokens, RejectsBadArguments) {
  Trace t = small_mooncake();
  EXPECT_TRUE(contains(error_of([&] { trace_prompt_tokens(t, 6, 100); }), "out of range"));
  EXPECT_TRUE(contains(error_of([&] { trace_prompt_tokens(t, 0, 0); }), "vocab_size"));
  t.requests[0].hash_ids = {7};  // 512 tokens of ids for 1000 input tokens
  EXPECT_TRUE(contains(error_of([&] { trace_prompt_tokens(t, 0, 100); }), "too few"));
}

TEST(TraceHitRate, FollowsTheMooncakeFormula) {
  // Leading ids seen before: -, {7,8}, {7}, -, {7,8} capped by 700 input tokens, {9} seen in row 1.
  const double expected = (0 + 1024 + 512 + 0 + 700 + 512) / double(1000 + 1500 + 600 + 100 + 700 + 512);
  EXPECT_DOUBLE_EQ(reference_prefix_hit_rate(small_mooncake()), expected);
  Trace none;
  none.requests = {{0.0, 10, 1, {}}};
  EXPECT_EQ(reference_prefix_hit_rate(none), 0.0);
  EXPECT_EQ(reference_prefix_hit_rate(Trace{}), 0.0);
}

// --- The shipped public traces -------------------------------------------------------------------

std::string shipped(const std::string& rel) { return std::string(DUET_SOURCE_DIR) + "/traces/" + rel; }

struct Summary {
  double span_s, mean_in, mean_out;
};

Summary summarize(const Trace& t) {
  double in = 0, out = 0;
  for (const TraceRequest& r : t.requests) {
    in += r.input_tokens;
    out += r.output_tokens;
  }
  const double n = static_cast<double>(t.requests.size());
  return {t.requests.back().arrival_s - t.requests.front().arrival_s, in / n, out / n};
}

// Loads and reports how long it took, for the importers' speed budget.
Trace timed_load(const std::string& path) {
  const auto start = std::chrono::steady_clock::now();
  Trace t = load_trace(path);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ load     ] %s: %zu requests in %.1f ms\n", path.c_str(), t.requests.size(), ms);
  return t;
}

TEST(TraceShipped, AzureCode) {
  const Trace t = timed_load(shipped("azure_llm_2023/AzureLLMInferenceTrace_code.csv"));
  ASSERT_EQ(t.requests.size(), 8819u);
  const Summary s = summarize(t);
  EXPECT_EQ(t.requests.front().arrival_s, 0.0);
  EXPECT_NEAR(s.span_s, 3435.948056, 1e-6);  // 18:17:03.9799600 -> 19:14:19.9280160
  EXPECT_NEAR(s.mean_in, 2048, 1);
  EXPECT_NEAR(s.mean_out, 27.9, 0.05);
}

TEST(TraceShipped, AzureConv) {
  const Trace t = timed_load(shipped("azure_llm_2023/AzureLLMInferenceTrace_conv.csv"));
  ASSERT_EQ(t.requests.size(), 19366u);
  const Summary s = summarize(t);
  EXPECT_NEAR(s.span_s, 3502, 1);
  EXPECT_NEAR(s.mean_in, 1155, 1);
  EXPECT_NEAR(s.mean_out, 211, 1);
  EXPECT_EQ(t.requests[0].input_tokens, 374);
  EXPECT_EQ(t.requests[0].output_tokens, 44);
}

TEST(TraceShipped, MooncakeConversation) {
  const Trace t = timed_load(shipped("mooncake_fast25/conversation_trace.jsonl.gz"));
  ASSERT_EQ(t.requests.size(), 12031u);
  EXPECT_EQ(t.hash_block_size, 512);
  const Summary s = summarize(t);
  EXPECT_DOUBLE_EQ(t.requests.back().arrival_s, 3536.999);
  EXPECT_DOUBLE_EQ(s.span_s, 3536.999);
  EXPECT_NEAR(s.mean_in, 12035, 1);
  EXPECT_NEAR(s.mean_out, 343, 1);
  EXPECT_EQ(t.requests[0].input_tokens, 6758);
  EXPECT_EQ(t.requests[1].hash_ids.size(), 15u);
}

TEST(TraceShipped, MooncakeSynthetic) {
  const Trace t = timed_load(shipped("mooncake_fast25/synthetic_trace.jsonl.gz"));
  ASSERT_EQ(t.requests.size(), 3993u);
  const Summary s = summarize(t);
  EXPECT_DOUBLE_EQ(s.span_s, 1022.025);
  EXPECT_NEAR(s.mean_in, 15325.5, 1);
  EXPECT_NEAR(s.mean_out, 149, 1);
}

TEST(TraceShipped, ReferenceHitRates) {
  for (const char* name : {"conversation", "synthetic"}) {
    const Trace t = load_trace(shipped(std::string("mooncake_fast25/") + name + "_trace.jsonl.gz"));
    const double rate = reference_prefix_hit_rate(t);
    std::printf("[ hit rate ] Mooncake %s: %.6f\n", name, rate);
    EXPECT_GT(rate, 0.0);
    EXPECT_LT(rate, 1.0);
    EXPECT_EQ(rate, reference_prefix_hit_rate(t));
  }
}

TEST(TraceShipped, PromptTokensFollowTheMooncakeHashIds) {
  const Trace t = load_trace(shipped("mooncake_fast25/conversation_trace.jsonl.gz"));
  std::vector<std::vector<TokenId>> p;
  for (std::size_t i = 0; i < 3; ++i) {
    p.push_back(trace_prompt_tokens(t, i, 128256));
    ASSERT_EQ(p[i].size(), static_cast<std::size_t>(t.requests[i].input_tokens));
  }
  ASSERT_EQ(t.requests[0].hash_ids[0], t.requests[1].hash_ids[0]);  // rows 1-3 share block 0
  ASSERT_NE(t.requests[0].hash_ids[1], t.requests[1].hash_ids[1]);
  EXPECT_EQ(block_of(p[0], 0), block_of(p[1], 0));
  EXPECT_EQ(block_of(p[0], 0), block_of(p[2], 0));
  EXPECT_NE(block_of(p[0], 1), block_of(p[1], 1));
  for (std::size_t i = t.requests.size() - 50; i < t.requests.size(); ++i) {
    EXPECT_EQ(trace_prompt_tokens(t, i, 128256).size(), static_cast<std::size_t>(t.requests[i].input_tokens));
  }
}

// The copies in traces/ must stay byte-for-byte the public files (their sources: traces/README.md),
// checked against a data folder beside the repository when one is there.
TEST(TraceShipped, CopiesMatchSharedData) {
  const fs::path shared = DUET_SHARED_DATA_DIR;
  if (!fs::exists(shared)) GTEST_SKIP() << "no shared data folder at " << shared;
  for (const char* rel :
       {"azure_llm_2023/AzureLLMInferenceTrace_code.csv", "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
        "azure_llm_2023/LICENSE", "mooncake_fast25/conversation_trace.jsonl.gz",
        "mooncake_fast25/synthetic_trace.jsonl.gz", "mooncake_fast25/LICENSE-APACHE"}) {
    const std::string original = read_bytes((shared / rel).string());
    ASSERT_FALSE(original.empty()) << rel;
    EXPECT_EQ(read_bytes(shipped(rel)), original) << rel;
  }
}

}  // namespace
}  // namespace duet
