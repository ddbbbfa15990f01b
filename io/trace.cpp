#include "io/trace.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <compare>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_fields.hpp"
#include "core/mix.hpp"
#include "io/file_bytes.hpp"
#include "io/text_lines.hpp"

namespace duet {

namespace {

using nlohmann::json;

constexpr int kMooncakeBlockSize = 512;
constexpr std::string_view kAzureHeader = "TIMESTAMP,ContextTokens,GeneratedTokens";

[[noreturn]] void fail(const std::string& path, std::size_t line, const std::string& what) {
  throw Error(path + ":" + std::to_string(line) + ": " + what);
}

// Quotes a piece of the input for an error message, cut short so a huge line stays readable.
std::string excerpt(std::string_view s) {
  constexpr std::size_t kMax = 80;
  // Appended rather than "'" + string: GCC 12 warns falsely (-Wrestrict, its bug 105329) at -O3.
  std::string quoted = "'";
  quoted.append(s.substr(0, kMax)).append(s.size() > kMax ? "...'" : "'");
  return quoted;
}

// --- Azure CSV -----------------------------------------------------------------------------------

// A wall-clock time split into whole days and nanoseconds within the day, so that any year fits
// without overflow and differences stay exact to the nanosecond.
struct WallTime {
  std::int64_t day = 0;
  std::int64_t ns = 0;
  auto operator<=>(const WallTime&) const = default;  // NOLINT(modernize-use-nullptr): tidy 14 misreads it
};

bool read_digits(std::string_view s, std::size_t& pos, int count, int& value) {
  if (pos + count > s.size()) return false;
  value = 0;
  for (int i = 0; i < count; ++i) {
    const char c = s[pos + i];
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  pos += count;
  return true;
}

bool read_char(std::string_view s, std::size_t& pos, char c) {
  if (pos >= s.size() || s[pos] != c) return false;
  ++pos;
  return true;
}

// ".fffffff" (1 to 9 digits) as nanoseconds; an absent fraction is zero.
bool read_fraction(std::string_view s, std::size_t& pos, std::int64_t& ns) {
  ns = 0;
  if (!read_char(s, pos, '.')) return true;
  std::int64_t scale = 100'000'000;
  int digits = 0;
  for (; pos < s.size() && s[pos] >= '0' && s[pos] <= '9'; ++pos, ++digits, scale /= 10) {
    if (digits == 9) return false;
    ns += (s[pos] - '0') * scale;
  }
  return digits > 0;
}

// "YYYY-MM-DD HH:MM:SS[.fffffff]". The fields are read by hand, with the calendar arithmetic of
// <chrono>, because the trace's clock has no zone: no locale or time zone must shift it.
std::optional<WallTime> parse_timestamp(std::string_view s) {
  std::size_t p = 0;
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
  std::int64_t frac = 0;
  const bool ok = read_digits(s, p, 4, y) && read_char(s, p, '-') && read_digits(s, p, 2, mo) &&
                  read_char(s, p, '-') && read_digits(s, p, 2, d) &&
                  (read_char(s, p, ' ') || read_char(s, p, 'T')) && read_digits(s, p, 2, h) &&
                  read_char(s, p, ':') && read_digits(s, p, 2, mi) && read_char(s, p, ':') &&
                  read_digits(s, p, 2, sec) && read_fraction(s, p, frac) && p == s.size();
  if (!ok || h > 23 || mi > 59 || sec > 59) return std::nullopt;
  using namespace std::chrono;
  const year_month_day date{year{y}, month{static_cast<unsigned>(mo)}, day{static_cast<unsigned>(d)}};
  if (!date.ok()) return std::nullopt;
  const std::int64_t seconds = (h * 60 + mi) * 60 + sec;
  return WallTime{sys_days{date}.time_since_epoch().count(), seconds * 1'000'000'000 + frac};
}

double seconds_between(const WallTime& from, const WallTime& to) {
  return static_cast<double>(to.day - from.day) * 86400.0 + static_cast<double>(to.ns - from.ns) * 1e-9;
}

// A token count: a non-negative integer that fits an int.
int parse_count(std::string_view field, std::string_view name, const std::string& path, std::size_t line) {
  const std::string_view s = trim(field);
  long long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  const std::string what = std::string(name) + " " + excerpt(s);
  if (s.empty() || end != s.data() + s.size() ||
      (ec != std::errc{} && ec != std::errc::result_out_of_range)) {
    fail(path, line, what + " is not an integer");
  }
  if (ec == std::errc::result_out_of_range || v > std::numeric_limits<int>::max()) {
    fail(path, line, what + " is out of range");
  }
  if (v < 0) fail(path, line, what + " is negative");
  return static_cast<int>(v);
}

void check_azure_header(std::string_view line, const std::string& path, std::size_t number) {
  const std::string_view h = trim(line);
  if (h == kAzureHeader) return;
  const std::string expected = "expected the header '" + std::string(kAzureHeader) + "'";
  if (h.starts_with("TIMESTAMP")) fail(path, number, "unknown header " + excerpt(h) + ": " + expected);
  fail(path, number, "missing header: " + expected + ", got " + excerpt(h));
}

// Splits a row into exactly three comma-separated fields.
void split_azure_row(std::string_view line, std::string_view (&fields)[3], const std::string& path,
                     std::size_t number) {
  const std::size_t count = std::count(line.begin(), line.end(), ',') + 1;
  if (count != 3) {
    fail(path, number, "expected 3 fields (" + std::string(kAzureHeader) + "), got " + std::to_string(count));
  }
  const std::size_t a = line.find(',');
  const std::size_t b = line.find(',', a + 1);
  fields[0] = line.substr(0, a);
  fields[1] = line.substr(a + 1, b - a - 1);
  fields[2] = line.substr(b + 1);
}

Trace parse_azure(const std::string& path, std::string_view text) {
  Trace trace;
  trace.source = path;
  trace.format = TraceFormat::AzureCsv;
  LineReader lines(text);
  std::string_view line;
  if (!lines.next_nonblank(line)) fail(path, 1, "empty file");
  check_azure_header(line, path, lines.number());
  trace.requests.reserve(count_lines(text));
  WallTime first, previous;
  while (lines.next_nonblank(line)) {
    const std::size_t n = lines.number();
    std::string_view fields[3];
    split_azure_row(line, fields, path, n);
    const std::optional<WallTime> t = parse_timestamp(trim(fields[0]));
    if (!t)
      fail(path, n, "bad timestamp " + excerpt(trim(fields[0])) + ": expected YYYY-MM-DD HH:MM:SS.fffffff");
    if (trace.requests.empty()) first = *t;
    if (!trace.requests.empty() && *t < previous) {
      fail(path, n,
           "timestamp " + excerpt(trim(fields[0])) +
               " is earlier than the row before; rows must be in arrival order");
    }
    previous = *t;
    TraceRequest& r = trace.requests.emplace_back();
    r.arrival_s = seconds_between(first, *t);
    r.input_tokens = parse_count(fields[1], "ContextTokens", path, n);
    if (r.input_tokens == 0) fail(path, n, "ContextTokens is 0: a request needs a prompt");
    r.output_tokens = parse_count(fields[2], "GeneratedTokens", path, n);
  }
  if (trace.requests.empty()) fail(path, lines.number() + 1, "no requests after the header");
  return trace;
}

// --- Mooncake JSONL ------------------------------------------------------------------------------

const json& field(const json& row, const char* name, const std::string& path, std::size_t line) {
  const auto it = row.find(name);
  if (it == row.end()) fail(path, line, std::string("missing field '") + name + "'");
  return *it;
}

int json_count(const json& row, const char* name, const std::string& path, std::size_t line) {
  const json& v = field(row, name, path, line);
  const std::string what = std::string(name) + " " + v.dump();
  if (!v.is_number_integer()) fail(path, line, what + " is not an integer");
  if (v.is_number_unsigned()) {
    if (v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) {
      fail(path, line, what + " is out of range");
    }
    return static_cast<int>(v.get<std::uint64_t>());
  }
  const std::int64_t i = v.get<std::int64_t>();
  if (i < 0) fail(path, line, what + " is negative");
  if (i > std::numeric_limits<int>::max()) fail(path, line, what + " is out of range");
  return static_cast<int>(i);
}

std::vector<std::int64_t> json_hash_ids(const json& row, int input_tokens, const std::string& path,
                                        std::size_t line) {
  const json& v = field(row, "hash_ids", path, line);
  if (!v.is_array()) fail(path, line, "hash_ids must be an array of integers, got " + excerpt(v.dump()));
  std::vector<std::int64_t> ids;
  ids.reserve(v.size());
  for (const json& id : v) {
    constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    const bool fits = id.is_number_integer() && (!id.is_number_unsigned() || id.get<std::uint64_t>() <= kMax);
    if (!fits) fail(path, line, "hash_ids holds " + excerpt(id.dump()) + ", not a 64-bit integer");
    ids.push_back(id.get<std::int64_t>());
  }
  const std::size_t expected =
      (static_cast<std::size_t>(input_tokens) + kMooncakeBlockSize - 1) / kMooncakeBlockSize;
  if (ids.size() != expected) {
    fail(path, line,
         "hash_ids has " + std::to_string(ids.size()) + " ids, but input_length " +
             std::to_string(input_tokens) + " needs ceil(" + std::to_string(input_tokens) + "/" +
             std::to_string(kMooncakeBlockSize) + ") = " + std::to_string(expected));
  }
  return ids;
}

double json_timestamp_ms(const json& row, const std::string& path, std::size_t line) {
  const json& v = field(row, "timestamp", path, line);
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0.0) {
    fail(path, line, "bad timestamp " + excerpt(v.dump()) + ": expected milliseconds, a number >= 0");
  }
  return v.get<double>();
}

json parse_json_line(std::string_view line, const std::string& path, std::size_t number) {
  json row;
  try {
    row = json_fields::parse_unique_keys(line);
  } catch (const Error& e) {  // a key given twice
    fail(path, number, e.what());
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number beyond double
    // nlohmann prefixes "[json.exception.parse_error.101] "; the file and line say more.
    std::string why = e.what();
    if (const std::size_t close = why.find("] "); close != std::string::npos) why.erase(0, close + 2);
    // Each JSON text is one line of the file, so its own "line 1" would only mislead.
    if (const std::size_t at = why.find("at line 1, "); at != std::string::npos) why.erase(at + 3, 8);
    fail(path, number, "invalid JSON: " + why);
  }
  if (!row.is_object()) fail(path, number, std::string("expected a JSON object, got ") + row.type_name());
  return row;
}

Trace parse_mooncake(const std::string& path, std::string_view text) {
  Trace trace;
  trace.source = path;
  trace.format = TraceFormat::MooncakeJsonl;
  trace.hash_block_size = kMooncakeBlockSize;
  trace.requests.reserve(count_lines(text));
  LineReader lines(text);
  std::string_view line;
  double previous_ms = 0.0;
  while (lines.next_nonblank(line)) {
    const std::size_t n = lines.number();
    const json row = parse_json_line(line, path, n);
    const double ms = json_timestamp_ms(row, path, n);
    if (ms < previous_ms) {
      fail(path, n,
           "timestamp " + row.at("timestamp").dump() +
               " ms is earlier than the line before; lines must be in arrival order");
    }
    previous_ms = ms;
    TraceRequest& r = trace.requests.emplace_back();
    r.arrival_s = ms / 1000.0;
    r.input_tokens = json_count(row, "input_length", path, n);
    if (r.input_tokens == 0) fail(path, n, "input_length is 0: a request needs a prompt");
    r.output_tokens = json_count(row, "output_length", path, n);
    r.hash_ids = json_hash_ids(row, r.input_tokens, path, n);
  }
  if (trace.requests.empty()) fail(path, 1, "empty file");
  return trace;
}

// --- Format detection ----------------------------------------------------------------------------

TraceFormat detect_format(const std::string& path, std::string_view text) {
  LineReader lines(text);
  std::string_view line;
  if (!lines.next_nonblank(line)) fail(path, 1, "empty file");
  line = trim(line);
  if (line.starts_with("TIMESTAMP")) return TraceFormat::AzureCsv;
  if (line.front() == '{') return TraceFormat::MooncakeJsonl;
  fail(path, lines.number(),
       "cannot tell the trace format: expected an Azure CSV header (TIMESTAMP,...) or Mooncake JSON lines "
       "({...}), got " +
           excerpt(line));
}

// --- Synthetic prompt tokens ---------------------------------------------------------------------

// Separate streams for hash-id blocks and per-request tokens, so neither can reproduce the other.
constexpr std::uint64_t kBlockStream = 0x68617368626c6b31ULL;
constexpr std::uint64_t kRequestStream = 0x7265717565737431ULL;

std::uint64_t stream_key(std::uint64_t stream, std::uint64_t seed, std::uint64_t id) {
  return mix64(mix64(seed ^ stream) ^ id);
}

// Maps 32 random bits onto [0, vocab_size) by multiplication, which avoids a division.
TokenId token_at(std::uint64_t key, std::uint64_t position, int vocab_size) {
  const std::uint64_t bits = mix64(key + position) >> 32;
  return static_cast<TokenId>((bits * static_cast<std::uint64_t>(vocab_size)) >> 32);
}

}  // namespace

std::string trace_fingerprint(const Trace& trace, std::size_t max_requests) {
  // The requests as text, each number in full (%.17g round-trips a double): the same on every
  // platform, unlike the structs' bytes.
  std::string text = std::to_string(trace.hash_block_size) + '\n';
  char buf[64];
  const std::size_t n = max_requests ? std::min(max_requests, trace.requests.size()) : trace.requests.size();
  for (std::size_t i = 0; i < n; ++i) {
    const TraceRequest& r = trace.requests[i];
    std::snprintf(buf, sizeof buf, "%.17g %d %d", r.arrival_s, r.input_tokens, r.output_tokens);
    text += buf;
    for (const std::int64_t h : r.hash_ids) text += ' ' + std::to_string(h);
    text += '\n';
  }
  return fingerprint(text);
}

TraceFormat trace_format_from_name(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  if (n == "auto") return TraceFormat::Auto;
  if (n == "azure") return TraceFormat::AzureCsv;
  if (n == "mooncake") return TraceFormat::MooncakeJsonl;
  throw Error("unknown trace format '" + name + "' (expected auto, azure or mooncake)");
}

Trace load_trace(const std::string& path, TraceFormat format) {
  return parse_trace(read_file_bytes(path), path, format);
}

Trace parse_trace(std::string_view text, const std::string& path, TraceFormat format) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // a UTF-8 byte order mark
  if (is_blank(text)) fail(path, 1, "empty file");
  if (format == TraceFormat::Auto) format = detect_format(path, text);
  switch (format) {
    case TraceFormat::AzureCsv:
      return parse_azure(path, text);
    case TraceFormat::MooncakeJsonl:
      return parse_mooncake(path, text);
    case TraceFormat::Auto:
      break;
  }
  throw Error(path + ": unknown trace format");
}

std::vector<TokenId> trace_prompt_tokens(const Trace& trace, std::size_t index, int vocab_size,
                                         std::uint64_t seed) {
  if (index >= trace.requests.size()) {
    throw Error(trace.source + ": request " + std::to_string(index) + " is out of range (the trace has " +
                std::to_string(trace.requests.size()) + ")");
  }
  if (vocab_size <= 0) {
    throw Error("trace_prompt_tokens: vocab_size must be positive, got " + std::to_string(vocab_size));
  }
  const TraceRequest& r = trace.requests[index];
  std::vector<TokenId> tokens(static_cast<std::size_t>(std::max(r.input_tokens, 0)));
  if (r.hash_ids.empty()) {
    const std::uint64_t key = stream_key(kRequestStream, seed, index);
    for (std::size_t p = 0; p < tokens.size(); ++p) tokens[p] = token_at(key, p, vocab_size);
    return tokens;
  }
  const std::size_t block = static_cast<std::size_t>(std::max(trace.hash_block_size, 0));
  if (block == 0 || r.hash_ids.size() * block < tokens.size()) {
    throw Error(trace.source + ": request " + std::to_string(index) + " has " +
                std::to_string(r.hash_ids.size()) + " hash ids of " + std::to_string(block) +
                " tokens, too few for " + std::to_string(r.input_tokens) + " input tokens");
  }
  for (std::size_t start = 0, k = 0; start < tokens.size(); start += block, ++k) {
    const std::uint64_t key = stream_key(kBlockStream, seed, static_cast<std::uint64_t>(r.hash_ids[k]));
    const std::size_t end = std::min(start + block, tokens.size());
    for (std::size_t p = start; p < end; ++p) tokens[p] = token_at(key, p - start, vocab_size);
  }
  return tokens;
}

void scale_arrivals(Trace& trace, double rate_scale) {
  if (!(rate_scale > 0.0) || !std::isfinite(rate_scale)) {
    throw Error("trace rate_scale must be a positive number, got " + std::to_string(rate_scale));
  }
  for (TraceRequest& r : trace.requests) r.arrival_s /= rate_scale;
}

double reference_prefix_hit_rate(const Trace& trace) {
  std::unordered_set<std::int64_t> seen;
  std::int64_t hit = 0, total = 0;
  const std::int64_t block = trace.hash_block_size;
  for (const TraceRequest& r : trace.requests) {
    std::int64_t leading = 0;
    while (leading < static_cast<std::int64_t>(r.hash_ids.size()) && seen.count(r.hash_ids[leading]))
      ++leading;
    hit += std::min<std::int64_t>(block * leading, r.input_tokens);
    total += r.input_tokens;
    seen.insert(r.hash_ids.begin(), r.hash_ids.end());
  }
  return total > 0 ? static_cast<double>(hit) / static_cast<double>(total) : 0.0;
}

}  // namespace duet
