// duet fit: a calibrated cost profile from measured step timings: a CSV table, or the steps of a
// real engine's runs (every run of the file, or one group), one profile per engine.
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <map>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/source_dir.hpp"
#include "core/error.hpp"
#include "io/hdf5_run.hpp"
#include "sim/calibrated.hpp"
#include "sim/profiles.hpp"

namespace po = boost::program_options;

namespace duet::cli {

namespace {

std::string text_of(const RunMetadata& m, const std::string& key) {
  const std::string* v = m.find_text(key);
  return v ? *v : "";
}

// OUT for one engine; OUT's stem + ".ENGINE.json" when the file has several.
std::string out_for(const std::string& out, const std::string& engine, bool several) {
  if (!several) return out;
  const std::filesystem::path p(out);
  return (p.parent_path() / (p.stem().string() + "." + engine + ".json")).string();
}

void report(const CalibrationProfile& p, const std::string& out) {
  std::printf("%s on %s: fitted %zu steps, device median |error| %.1f%%, host median |error| %.1f%%\n",
              p.model.c_str(), p.device.c_str(), p.device_fit.rows, 100 * p.device_fit.median_abs_rel_error,
              100 * p.host_fit.median_abs_rel_error);
  for (std::size_t i = 0; i < kNumDeviceFeatures; ++i)
    std::printf("  %-24s %.6g\n", device_feature_names()[i], p.device_coefficients[i]);
  for (std::size_t i = 0; i < kNumHostFeatures; ++i)
    std::printf("  %-24s %.6g\n", host_feature_names()[i], p.host_coefficients[i]);
  for (const std::string& w : p.warnings) std::printf("warning: %s\n", w.c_str());
  std::printf("wrote %s\n", out.c_str());
}

int fit_runs(const std::string& path, const std::string& group, const std::string& engine,
             const std::string& model, const std::string& out) {
  const std::vector<std::string> groups = group.empty() ? list_runs(path) : std::vector<std::string>{group};
  if (groups.empty()) throw Error(path + ": holds no run");
  struct Engine {
    std::string model, shape, device, backend;
    std::vector<StepRecord> steps;
  };
  std::map<std::string, Engine> engines;
  for (const std::string& g : groups) {
    const RunData run = read_run(path, g);
    const std::string backend = text_of(run.metadata, "backend");
    if (backend == "sim")
      throw Error(path + ":" + g +
                  ": a simulated run; fit the steps that a real engine measured (--backend cpu|cuda)");
    const std::string device = text_of(run.metadata, "device");
    if (device.empty())
      throw Error(path + ":" + g + ": no 'device' attribute (written by duet before profiles existed)");
    for (const EngineRecords& r : run.engines) {
      if (!engine.empty() && r.name != engine) continue;
      Engine& e = engines[r.name];
      if (!e.device.empty() && (e.device != device || e.model != r.model || e.backend != backend))
        throw Error(path + ":" + g + ": engine '" + r.name + "' ran " + r.model + " on " + device + " (" +
                    backend + "), another run " + e.model + " on " + e.device + " (" + e.backend +
                    "); fit them apart with --group");
      e.model = r.model, e.device = device, e.backend = backend;
      e.shape = text_of(run.metadata, r.name + ".model_shape");
      e.steps.insert(e.steps.end(), r.steps.begin(), r.steps.end());
    }
  }
  if (engines.empty()) throw Error(path + ": no engine '" + engine + "'");
  for (const auto& [name, e] : engines) {
    CalibrationProfile p = fit_profile_steps(e.steps, e.backend == "cuda");
    // The file records each engine's model shape; --model is for files that do not, and is checked.
    if (e.shape.empty() || !model.empty()) {
      const ModelSpec spec = model_from(model.empty() ? e.model : model);
      if (!e.shape.empty() && model_shape(spec) != e.shape)
        throw Error(path + ": engine '" + name + "' ran " + e.model + " (" + e.shape + "), not --model " +
                    spec.name + " (" + model_shape(spec) + ")");
      // A file without shapes (a profile's measurements before they recorded one) names its model.
      if (e.shape.empty() && spec.name != e.model)
        throw Error(path + ": engine '" + name + "' ran " + e.model + ", not --model " + spec.name);
      p.model = spec.name;
      p.model_shape = model_shape(spec);
    } else {
      p.model = e.model;
      p.model_shape = e.shape;
    }
    p.device = e.device;
    p.source = path + " (" + std::to_string(groups.size()) + " run(s), engine " + name + ")";
    const std::string file = out_for(out, name, engines.size() > 1);
    save_profile(p, file);
    report(p, file);
  }
  return 0;
}

}  // namespace

int fit(int argc, char** argv) {
  std::string csv, run, engine, group, model, device, out;
  po::options_description options(
      "duet fit: fit a calibrated cost profile (see sim/calibrated.hpp for the format)");
  options.add_options()(
      "csv", po::value(&csv),
      "measurements: CSV with feature columns (prefill_tokens, decode_seqs, ...) and duration_s")(
      "run", po::value(&run), "measurements: a duet HDF5 file of real-engine runs (every run's steps)")(
      "group", po::value(&group), "only this run of that file (default: every run)")(
      "engine", po::value(&engine), "only this engine (default: one profile per engine)")(
      "model", po::value(&model),
      "the model (name or config.json): required with --csv; "
      "with --run, when the run's model name is not a built-in")(
      "device", po::value(&device),
      "--csv: the device the timings were measured on (a profile key, e.g. h100-sxm)")(
      "out", po::value(&out)->required(), "profile JSON to write (several engines: OUT's stem.ENGINE.json)")(
      "help,h", "this help");
  return run_command({"fit", options}, argc, argv, [&](const po::variables_map&) {
    if (csv.empty() == run.empty()) throw Error("give exactly one of --csv and --run");
    check_output(out, {csv, run});
    if (!run.empty()) return fit_runs(run, group, engine, model, out);
    if (model.empty() || device.empty())
      throw Error("--csv needs --model and --device: a profile names both");
    CalibrationProfile p = fit_profile_csv(csv);
    const ModelSpec spec = model_from(model);
    p.model = spec.name;
    p.model_shape = model_shape(spec);
    p.device = device;
    save_profile(p, out);
    report(p, out);
    return 0;
  });
}

}  // namespace duet::cli
