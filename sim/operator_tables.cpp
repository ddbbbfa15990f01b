#include "sim/operator_tables.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <cstdint>

#include "core/error.hpp"
#include "io/file_bytes.hpp"

namespace duet {

namespace {

// Lines of a plain or gzip'd text file, without their "\r\n" or "\n".
std::vector<std::string> read_lines(const std::string& path) {
  const std::string text = read_file_bytes(path);
  std::vector<std::string> lines;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    at = end + 1;
  }
  return lines;
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out(1);
  for (char c : line) {
    if (c == ',') out.emplace_back();
    else out.back().push_back(c);
  }
  return out;
}

struct Columns {
  std::map<std::string, std::size_t> index;
  std::size_t at(const std::string& name, const std::string& path) const {
    const auto it = index.find(name);
    if (it == index.end()) throw Error(path + ":1: no column '" + name + "'");
    return it->second;
  }
};

// `step` may be 0 (no context before the query); every other column must be positive.
double number(const std::string& text, const std::string& where, const std::string& column) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  const bool zero_ok = column == "step";
  if (ec != std::errc() || end != text.data() + text.size() || !(v > 0 || (zero_ok && v == 0)))
    throw Error(where + ": column '" + column + "' is '" + text + "', not a " + (zero_ok ? "non-negative" : "positive") +
                " number");
  return v;
}

}  // namespace

OperatorTable read_operator_table(OperatorClass kind, const std::string& path, const GpuSpec& gpu) {
  const std::vector<std::string> lines = read_lines(path);
  if (lines.empty()) throw Error(path + ": empty kernel table");
  Columns cols;
  const std::vector<std::string> header = split(lines[0]);
  for (std::size_t i = 0; i < header.size(); ++i) cols.index[header[i]] = i;
  const bool gemm = kind == OperatorClass::gemm;
  const std::vector<std::string> names =
      gemm ? std::vector<std::string>{"m", "n", "k", "latency_ms"}
           : std::vector<std::string>{"batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim", "latency_ms"};
  std::vector<std::size_t> at;
  for (const std::string& n : names) at.push_back(cols.at(n, path));

  OperatorTable t{kind, path, {}, {}, {}, 0};
  std::size_t first_impossible = 0;
  for (std::size_t li = 1; li < lines.size(); ++li) {
    if (lines[li].empty()) continue;
    const std::string where = path + ":" + std::to_string(li + 1);
    const std::vector<std::string> f = split(lines[li]);
    if (f.size() != header.size())
      throw Error(where + ": " + std::to_string(f.size()) + " fields, the header has " + std::to_string(header.size()));
    std::vector<double> v;
    for (std::size_t i = 0; i < names.size(); ++i)
      v.push_back(number(f[at[i]], where, names[i]) + (names[i] == "step" ? 1 : 0));  // context: the step's tokens and its own
    OperatorPoint p;
    std::string group, shape;
    if (gemm) {
      p = gemm_point(gpu, v[0], v[1], v[2]);
      group = "n=" + f[at[1]] + " k=" + f[at[2]];
      shape = "m=" + f[at[0]] + " " + group;
    } else {
      const double b = v[0], isl = v[1], ctx = v[2], h = v[3], kvh = v[4], hd = v[5];
      group = "heads=" + f[at[3]] + " kv=" + f[at[4]] + " d=" + f[at[5]];
      if (kind == OperatorClass::decode_attention) {
        p = decode_attention_point(gpu, b, ctx, h, kvh, hd);
        shape = "batch=" + f[at[0]] + " context=" + std::to_string(long(ctx)) + " " + group;
      } else {
        p = prefill_attention_point(gpu, b, isl, b * isl * (isl + 1) / 2, 0, h, kvh, hd);
        shape = "batch=" + f[at[0]] + " isl=" + f[at[1]] + " " + group;
      }
    }
    const double measured = v.back() * 1e-3;
    if (p.roofline_s > measured) {
      if (!t.impossible++) first_impossible = li + 1;
      continue;
    }
    t.rows.push_back({p.coords, p.roofline_s, measured});
    t.groups.push_back(group);
    t.shapes.push_back(shape);
  }
  if (t.impossible > (t.rows.size() + t.impossible) / 50)
    throw Error(path + ": " + std::to_string(t.impossible) + " of " + std::to_string(t.rows.size() + t.impossible) +
                " rows run faster than " + gpu.name + "'s peak FLOP/s and bandwidth allow (first at line " +
                std::to_string(first_impossible) + "): measured on another device, or broken; fit this class from "
                "another table");
  if (t.rows.empty()) throw Error(path + ": no rows");
  return t;
}

std::vector<bool> held_out_rows(const std::vector<std::string>& groups, int every) {
  // FNV-1a: a hash that is the same on every platform, so the split is too.
  auto hash = [](const std::string& s) {
    std::uint64_t h = 14695981039346656037ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
  };
  std::vector<bool> out;
  for (const std::string& g : groups) out.push_back(hash(g) % std::uint64_t(every) == 0);
  return out;
}

}  // namespace duet
