// duet fit: a calibrated cost profile from measured step timings (CSV, or a run's HDF5 file).
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "core/error.hpp"
#include "io/hdf5_run.hpp"
#include "sim/calibrated.hpp"

namespace po = boost::program_options;

namespace duet::cli {

int fit(int argc, char** argv) {
  std::string csv, run, engine = "llm", group = "/", model, gpu, out;
  po::options_description options("duet fit: fit a calibrated cost profile (see sim/calibrated.hpp for the format)");
  options.add_options()
    ("csv", po::value(&csv), "measurements: CSV with prefill_tokens, decode_seqs, decode_context_tokens, "
                             "prefill_attention_keys and duration_s columns")
    ("run", po::value(&run), "measurements: a duet HDF5 run file (its steps table)")
    ("group", po::value(&group)->default_value("/"), "the run's group in that file")
    ("engine", po::value(&engine)->default_value("llm"), "the engine whose steps to fit")
    ("model", po::value(&model)->default_value(""), "model name recorded in the profile")
    ("gpu", po::value(&gpu)->default_value(""), "GPU name recorded in the profile")
    ("out", po::value(&out)->required(), "profile JSON to write")
    ("help,h", "this help");
  return run_command({"fit", options}, argc, argv, [&](const po::variables_map&) {
    if (csv.empty() == run.empty()) throw Error("give exactly one of --csv and --run");
    CalibrationProfile p;
    if (!csv.empty()) {
      p = fit_profile_csv(csv);
    } else {
      const RunData data = read_run(run, group);
      const EngineRecords* rec = nullptr;
      for (const auto& e : data.engines)
        if (e.name == engine) rec = &e;
      if (!rec) throw Error(run + ": no engine '" + engine + "' in group " + group);
      p = fit_profile_steps(rec->steps);
      p.source = run + ":" + group + ":" + engine;
      if (model.empty()) model = rec->model;
    }
    p.model = model;
    p.gpu = gpu;
    save_profile(p, out);
    std::printf("fitted %zu rows: r2 %.5f, rmse %.3g s\n", p.rows, p.r2, p.rmse_s);
    for (std::size_t i = 0; i < kNumCalibrationFeatures; ++i)
      std::printf("  %-24s %.6g\n", calibration_feature_names()[i], p.coefficients[i]);
    std::printf("wrote %s\n", out.c_str());
    return 0;
  });
}

}  // namespace duet::cli
