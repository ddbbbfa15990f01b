// duet fit-ops: an operator prior for one GPU from measured kernel tables (sim/operator_model.hpp).
// Each class is fitted twice: without a held-out part of its table, to report the error on
// shapes the fit never saw (beside the roofline's on the same rows), then on every row, for the
// prior that is written.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/source_dir.hpp"
#include "core/error.hpp"
#include "core/gpu_spec.hpp"
#include "exec/build_revision.hpp"
#include "sim/operator_fit.hpp"
#include "sim/operator_tables.hpp"
#include "sim/profiles.hpp"

namespace po = boost::program_options;

namespace duet::cli {

namespace {

// Each class's option and AIConfigurator's file-name ending for its table, in kOperatorClasses' order.
struct ClassTable {
  const char* option;
  const char* file_suffix;
};
constexpr ClassTable kClassTables[] = {{"gemm", "_gemm_bf16.csv"},
                                       {"decode-attention", "_generation_attention_bf16.csv"},
                                       {"prefill-attention", "_context_attention_bf16.csv"}};
static_assert(std::size(kClassTables) == kOperatorClasses.size());

// The first word of AIConfigurator's file names for `gpu` ("h100_sxm_vllm0.19.0_gemm_bf16.csv.gz"):
// its device key's first word.
std::string table_word(const GpuSpec& gpu) {
  const std::string key = gpu_device_key(gpu);
  return key.substr(0, key.find('-'));
}

// Class `i`'s table for `gpu` in `dir`, by AIConfigurator's file names: table_word, then the
// class's ending.
std::string find_table(const std::string& dir, const GpuSpec& gpu, std::size_t i) {
  const std::string prefix = table_word(gpu) + "_";
  const ClassTable& c = kClassTables[i];
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    if (f.starts_with(prefix) && f.find(c.file_suffix) != std::string::npos)
      found.push_back(e.path().string());
  }
  if (ec) throw Error(dir + ": cannot list (" + ec.message() + ")");
  if (found.size() != 1)
    throw Error(dir + ": " + std::to_string(found.size()) + " tables match " + prefix + "*" + c.file_suffix +
                "*; name one with --" + c.option);
  return found[0];
}

// The GPU a table was measured on. AIConfigurator names its files by it ("h100_sxm_..."); a
// table named for another built-in GPU than `gpu` (the H200 prior's prefill attention is the
// H100's table) has its rows' rooflines at that GPU's peaks, so that its curve holds that GPU's
// efficiencies, which pricing then applies at `gpu`'s peaks (as --evaluate does). Priced at
// `gpu`'s, a row bandwidth-bound there would carry its higher slowdown into compute-bound shapes,
// and price the H200 slower than the H100 whose table it is.
// A file name that names no built-in GPU is taken as measured on `gpu`, as --gpu's help says.
// "a100" is the A100-80GB, so --gpu a100-40gb takes AIConfigurator's A100 tables at the 80 GB
// part's peaks.
GpuSpec measured_on(const std::string& file, const GpuSpec& gpu) {
  const std::string name = std::filesystem::path(file).filename().string();
  std::string word = name.substr(0, name.find('_'));
  std::transform(word.begin(), word.end(), word.begin(), [](unsigned char c) { return std::tolower(c); });
  const std::vector<std::string> known = builtin_gpu_names();
  if (std::find(known.begin(), known.end(), word) == known.end()) return gpu;
  GpuSpec other = gpu_by_name(word);
  if (gpu_device_key(other) == gpu_device_key(gpu)) return gpu;
  std::printf("%s: measured on %s (its file name): its rows' rooflines are at %s's peaks\n", file.c_str(),
              other.name.c_str(), other.name.c_str());
  return other;
}

std::string as_written(double x) {  // 0.3, not 0.29999999999999999
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * x);
  return buf;
}

nlohmann::json errors_json(const CurveErrors& e, const std::string& worst_at) {
  return {{"rows", e.rows}, {"mape", e.mape}, {"p95", e.p95}, {"max", e.max}, {"worst_at", worst_at}};
}

// Fits one class, prints its held-out errors, returns the curve fitted on every row.
// One line of a table's errors: "  LABEL MAPE m, p95 p, max x at SHAPE".
void print_errors(const std::string& label, const CurveErrors& e, const std::string& worst_at) {
  std::printf("  %s MAPE %s, p95 %s, max %s at %s\n", label.c_str(), pct(e.mape).c_str(), pct(e.p95).c_str(),
              pct(e.max).c_str(), worst_at.c_str());
}

OperatorCurve fit_class(const OperatorTable& t, const CurveFitOptions& options, nlohmann::json& report) {
  const std::string what = t.path;
  const std::vector<bool> held = held_out_rows(t.groups, t.kind == OperatorClass::gemm ? 5 : 4);
  std::vector<CurveSample> fit_rows, test_rows;
  std::vector<std::size_t> test_index;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    (held[i] ? test_rows : fit_rows).push_back(t.rows[i]);
    if (held[i]) test_index.push_back(i);
  }
  if (test_rows.empty() || fit_rows.empty()) throw Error(what + ": too few shapes to hold some out");
  const OperatorCurve part = fit_curve(operator_axes(t.kind), fit_rows, what, options);
  const CurveErrors op =
      curve_errors(test_rows, [&](const CurveSample& s) { return part.time(s.roofline_s, s.coords); });
  const CurveErrors roof = curve_errors(test_rows, [](const CurveSample& s) { return s.roofline_s; });
  const std::string op_at = t.shapes[test_index[op.worst]], roof_at = t.shapes[test_index[roof.worst]];
  std::printf("%-18s %s: %zu rows (%zu faster than the roofline, dropped), %zu held out\n",
              operator_class_name(t.kind), t.path.c_str(), t.rows.size(), t.impossible, test_rows.size());
  print_errors("held out: operator", op, op_at);
  print_errors("          roofline", roof, roof_at);
  OperatorCurve all = fit_curve(operator_axes(t.kind), t.rows, what, options);
  const CurveErrors in =
      curve_errors(t.rows, [&](const CurveSample& s) { return all.time(s.roofline_s, s.coords); });
  std::printf("  every row: operator MAPE %s (fitted on them); fixed cost %.2f us\n", pct(in.mape).c_str(),
              1e6 * all.fixed_s);
  report[operator_class_name(t.kind)] = {{"table", std::filesystem::path(t.path).filename().string()},
                                         {"rows", t.rows.size()},
                                         {"dropped_faster_than_roofline", t.impossible},
                                         {"held_out_operator", errors_json(op, op_at)},
                                         {"held_out_roofline", errors_json(roof, roof_at)},
                                         {"all_rows_operator_mape", in.mape}};
  return all;
}

// --evaluate: another prior's curves on this GPU's tables, at this GPU's peaks (each row's roofline
// is the GPU's its table was measured on: measured_on), beside that roofline: how well one GPU's
// efficiencies price another's.
void evaluate_class(const OperatorTable& t, const OperatorPrior& prior) {
  const OperatorCurve& curve = prior.curve(t.kind);
  const CurveErrors op =
      curve_errors(t.rows, [&](const CurveSample& s) { return curve.time(s.roofline_s, s.coords); });
  const CurveErrors roof = curve_errors(t.rows, [](const CurveSample& s) { return s.roofline_s; });
  std::printf("%-18s %s: %zu rows (%zu faster than the roofline, dropped)\n", operator_class_name(t.kind),
              t.path.c_str(), t.rows.size(), t.impossible);
  const std::string label = prior.device + "'s curve:";
  print_errors(label, op, t.shapes[op.worst]);
  print_errors("roofline:" + std::string(label.size() - 9, ' '), roof, t.shapes[roof.worst]);
}

}  // namespace

int fit_ops(int argc, char** argv) {
  std::string gpu_name, tables, out, created, evaluate;
  std::string files[3];
  double smoothness = CurveFitOptions{}.smoothness;
  po::options_description options(
      "duet fit-ops: an operator prior for one GPU from measured kernel tables\n"
      "(NVIDIA AIConfigurator's bf16 GEMM and attention tables; see sim/operator_model.hpp)");
  options.add_options()(
      "gpu", po::value(&gpu_name)->required(),
      "the GPU the tables were measured on (h100, h200, a100); a table whose AIConfigurator file "
      "name names another GPU was measured on that one")("tables", po::value(&tables),
                                                         "a directory of tables, found by the GPU's name")(
      kClassTables[0].option, po::value(&files[0]), "the GEMM table (default: found in --tables)")(
      kClassTables[1].option, po::value(&files[1]),
      "the decode (generation) attention table (default: found in --tables)")(
      kClassTables[2].option, po::value(&files[2]),
      "the prefill (context) attention table (default: found in --tables)")(
      "smoothness", po::value(&smoothness)->default_value(smoothness, as_written(smoothness)),
      "the penalty on neighbouring knots' difference")(
      "created", po::value(&created),
      "the date to record (default: none, so that a re-fit is byte-identical)")(
      "out", po::value(&out), "the prior JSON to write (profiles/DEVICE/operator-prior.json)")(
      "evaluate", po::value(&evaluate),
      "instead of fitting, price every row of the tables with this prior's curves (another GPU's) at "
      "the peak figures of the GPU each table was measured on (--gpu's, unless its file name names "
      "another), beside the roofline")("help,h", "this help");
  return run_command({"fit-ops", options}, argc, argv, [&](const po::variables_map&) {
    const GpuSpec gpu = gpu_from(gpu_name);
    std::string other_gpu[3];  // a table measured on another GPU (measured_on): that GPU's name
    auto table_of = [&](std::size_t i) {
      if (files[i].empty()) {
        if (tables.empty())
          throw Error("give --tables DIR, or each table (--gemm, --decode-attention, --prefill-attention)");
        files[i] = find_table(tables, gpu, i);
      }
      const GpuSpec on = measured_on(files[i], gpu);
      if (on.name != gpu.name) other_gpu[i] = on.name;
      return read_operator_table(kOperatorClasses[i], files[i], on);
    };
    if (!evaluate.empty()) {
      if (!out.empty()) throw UsageError("--evaluate writes nothing: leave out --out");
      const OperatorPrior other = load_prior(evaluate);
      std::printf("%s's operator prior (%s) on %s's tables, at %s's peaks unless a table says otherwise\n",
                  other.device.c_str(), evaluate.c_str(), gpu.name.c_str(), gpu.name.c_str());
      for (std::size_t i = 0; i < kOperatorClasses.size(); ++i) evaluate_class(table_of(i), other);
      return 0;
    }
    if (out.empty()) throw UsageError("give --out (the prior to write), or --evaluate PRIOR");
    check_output(out, {files[0], files[1], files[2]});
    OperatorPrior prior;
    prior.device = gpu_device_key(gpu);
    prior.gpu_name = gpu.name;
    prior.created_utc = created;
    prior.git_revision = build_revision();
    nlohmann::json report;
    std::string source;
    std::set<int> head_dims;
    const CurveFitOptions fit{smoothness};
    for (std::size_t i = 0; i < kOperatorClasses.size(); ++i) {
      const OperatorClass c = kOperatorClasses[i];
      const OperatorTable t = table_of(i);
      if (c != OperatorClass::gemm)
        for (const std::string& g : t.groups) head_dims.insert(std::stoi(g.substr(g.rfind("d=") + 2)));
      prior.curve(c) = fit_class(t, fit, report);
      source += (source.empty() ? "" : ", ") + std::filesystem::path(files[i]).filename().string();
      if (!other_gpu[i].empty()) source += " (measured on " + other_gpu[i] + ", at its peaks)";
    }
    prior.source = "NVIDIA AIConfigurator measured tables (" + source + ")";
    prior.covers.head_dims.assign(head_dims.begin(), head_dims.end());
    prior.elementwise_fixed_s = prior.gemm.fixed_s;
    const OperatorPoint gemv = gemm_point(gpu, 1, 4096, 4096);
    prior.elementwise_bandwidth_efficiency = std::min(1.0, 1.0 / prior.gemm.slowdown(gemv.coords));
    prior.held_out_json = report.dump();
    save_prior(prior, out);
    std::printf(
        "elementwise: %.2f us + bytes at %.0f%% of HBM bandwidth (assumed from the GEMM fit)\nwrote %s\n",
        1e6 * prior.elementwise_fixed_s, 100 * prior.elementwise_bandwidth_efficiency, out.c_str());
    return 0;
  });
}

}  // namespace duet::cli
