#include "sim/operator_tables.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>

#include "core/error.hpp"
#include "core/mix.hpp"
#include "io/csv_table.hpp"

namespace duet {

namespace {

// `step` may be 0 (no context before the query); every other column must be positive.
double number(const std::string& text, const std::string& where, const std::string& column) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  const bool zero_ok = column == "step";
  if (ec != std::errc() || end != text.data() + text.size() || !(v > 0 || (zero_ok && v == 0)))
    throw Error(where + ": column '" + column + "' is '" + text + "', not a " +
                (zero_ok ? "non-negative" : "positive") + " number");
  return v;
}

}  // namespace

OperatorTable read_operator_table(OperatorClass kind, const std::string& path, const GpuSpec& gpu) {
  CsvTable table(path, "kernel table");
  const bool gemm = kind == OperatorClass::gemm;
  const std::vector<std::string> names =
      gemm ? std::vector<std::string>{"m", "n", "k", "latency_ms"}
           : std::vector<std::string>{"batch_size",          "isl",      "step",      "num_heads",
                                      "num_key_value_heads", "head_dim", "latency_ms"};
  std::vector<std::size_t> at;
  for (const std::string& n : names) at.push_back(table.column(n));

  OperatorTable t{kind, path, {}, {}, {}, 0};
  std::size_t first_impossible = 0;
  for (std::vector<std::string> f; table.next(f);) {
    const std::string where = table.where();
    std::vector<double> v;
    for (std::size_t i = 0; i < names.size(); ++i)
      // A decode row's context: the step's tokens and the query's own.
      v.push_back(number(f[at[i]], where, names[i]) + (names[i] == "step" ? 1 : 0));
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
      if (!t.impossible++) first_impossible = table.line();
      continue;
    }
    t.rows.push_back({p.coords, p.roofline_s, measured});
    t.groups.push_back(group);
    t.shapes.push_back(shape);
  }
  if (t.impossible > (t.rows.size() + t.impossible) / 50)
    throw Error(path + ": " + std::to_string(t.impossible) + " of " +
                std::to_string(t.rows.size() + t.impossible) + " rows run faster than " + gpu.name +
                "'s peak FLOP/s and bandwidth allow (first at line " + std::to_string(first_impossible) +
                "): measured on another device, or broken; fit this class from "
                "another table");
  if (t.rows.empty()) throw Error(path + ": no rows");
  return t;
}

std::vector<bool> held_out_rows(const std::vector<std::string>& groups, int every) {
  // A hash that is the same on every platform, so the split is too.
  std::vector<bool> out;
  for (const std::string& g : groups) out.push_back(fnv1a64(g) % std::uint64_t(every) == 0);
  return out;
}

}  // namespace duet
