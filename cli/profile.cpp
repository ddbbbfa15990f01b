// duet profile: measure a real engine on a designed grid of batches and fit its cost profile.
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "cli/source_dir.hpp"
#include "core/error.hpp"
#include "exec/profiler.hpp"
#include "io/hdf5_run.hpp"
#include "sim/profiles.hpp"

namespace po = boost::program_options;

namespace duet::cli {

namespace {

void print_profile(const ProfileResult& r) {
  const CalibrationProfile& p = r.profile;
  std::printf("profile: %s on %s (%s), %zu points in %.1f s\n", p.model.c_str(), p.device.c_str(),
              p.device_name.c_str(), r.points.size(), r.wall_s);
  std::printf("  %-30s %12s %10s\n", "device term", "coefficient", "max seen");
  for (std::size_t i = 0; i < kNumDeviceFeatures; ++i)
    std::printf("  %-30s %12.6g %10.4g\n", device_feature_names()[i], p.device_coefficients[i],
                p.device_max[i]);
  for (std::size_t i = 0; i < kNumHostFeatures; ++i)
    std::printf("  %-30s %12.6g %10.4g\n", host_feature_names()[i], p.host_coefficients[i], p.host_max[i]);
  std::printf("  %-10s %6s %12s %12s %12s\n", "fit", "rows", "median |err|", "p90 |err|", "max |err|");
  auto row = [](const char* name, const FitStats& f) {
    std::printf("  %-10s %6zu %11.1f%% %11.1f%% %11.1f%%\n", name, f.rows, 100 * f.median_abs_rel_error,
                100 * f.p90_abs_rel_error, 100 * f.max_abs_rel_error);
  };
  row("device", p.device_fit);
  if (p.alone_coefficients) row("alone", p.alone_fit);
  row("host", p.host_fit);
  for (const auto& [name, f] : p.regimes) row(name.c_str(), f);
}

// The raw measurements beside the profile: one row per point and repeat, as a run's steps table
// (duration_s the device time, host_s the host time) so that `duet fit --run` and notebooks read it.
void write_measurements(const ProfileResult& r, const EngineConfig& c, const std::string& path) {
  // One engine per cache state: "profile" after the caches were evicted (engines taking turns),
  // "profile_alone" right after itself (CPU engine only).
  auto records = [&](const char* name, std::vector<double> MeasuredPoint::*times) {
    EngineRecords rec;
    rec.name = name;
    rec.model = c.model.name;
    rec.block_size = c.block_size;
    for (const MeasuredPoint& m : r.points)
      for (std::size_t k = 0; k < (m.*times).size(); ++k) {
        StepRecord s;
        record_shape(m.shape, s);
        s.duration_s = (m.*times)[k];
        s.host_s = m.host_s[k];
        rec.steps.push_back(s);
      }
    return rec;
  };
  std::vector<EngineRecords> engines = {records("profile", &MeasuredPoint::device_s)};
  if (r.profile.alone_coefficients)
    engines.push_back(records("profile_alone", &MeasuredPoint::alone_device_s));
  RunSummary summary;
  summary.wall_s = r.wall_s;
  for (const EngineRecords& e : engines) {
    summary.engines.push_back(summarize(e, 0));
    summary.engines.back().name = e.name;
  }
  RunMetadata meta;
  meta.text.emplace_back("backend", r.profile.backend);
  meta.text.emplace_back("device", r.profile.device);
  meta.text.emplace_back("device_name", r.profile.device_name);
  meta.text.emplace_back("git_revision", r.profile.git_revision);
  meta.text.emplace_back("grid_json", r.profile.grid_json);
  // What `duet fit --run` checks a --model against, as in every run file.
  for (const EngineRecords& e : engines)
    meta.text.emplace_back(e.name + ".model_shape", r.profile.model_shape);
  RunFileWriter(path).write_run("/", meta, engines, summary);
}

}  // namespace

int profile(int argc, char** argv) {
  std::string backend = "cpu", model, gpu, out, load_format = "dummy";
  ProfileLimits limits;
  std::uint64_t seed = 0;
  int evict_mib = 64;
  po::options_description options(
      "duet profile --backend cpu|cuda --model M --out PROFILE.json: measure a real engine on a grid of "
      "batches "
      "(prefill chunks with and without cached context, decode batches over contexts, mixed, copy-on-write), "
      "fit the calibrated cost model, and write the profile (and the raw measurements as PROFILE.h5)");
  options.add_options()("backend", po::value(&backend)->default_value("cpu"), "cpu or cuda")(
      "model", po::value(&model)->required(), "built-in model, or a HuggingFace config.json or its folder")(
      "gpu", po::value(&gpu), "cuda: the GPU spec to record (default: detected from the device name)")(
      "out", po::value(&out)->required(),
      "profile JSON (profiles/DEVICE/MODEL.json is where the simulator looks)")(
      "max-num-seqs", po::value(&limits.max_num_seqs)->default_value(limits.max_num_seqs),
      "largest decode batch")(
      "max-num-batched-tokens",
      po::value(&limits.max_num_batched_tokens)->default_value(limits.max_num_batched_tokens),
      "largest prefill chunk")("max-model-len",
                               po::value(&limits.max_model_len)->default_value(limits.max_model_len),
                               "longest context")(
      "block-size", po::value(&limits.block_size)->default_value(limits.block_size), "tokens per KV block")(
      "repeats", po::value(&limits.repeats)->default_value(limits.repeats),
      "timed runs per point (the fastest is fitted; median and spread are kept)")(
      "evict-mib", po::value(&evict_mib)->default_value(64),
      "cpu: MiB streamed through the caches before the timed run "
      "that stands for engines taking turns; each point is also "
      "timed warm, for an engine alone (0: warm only)")(
      "load-format", po::value(&load_format)->default_value("dummy"), "dummy, or a checkpoint path")(
      "seed", po::value(&seed)->default_value(0), "dummy weights' seed")("help,h", "this help");
  // Bad flags and inputs exit 2 (check_usage), a measurement or write that fails 1.
  return run_command({"profile", options, nullptr, nullptr, 1}, argc, argv, [&](const po::variables_map&) {
    GpuSpec spec;
    EngineConfig c;
    std::string h5;
    BackendOptions b;
    check_usage([&] {
      if (!is_real_backend(backend))
        throw Error("--backend must be a real engine (cpu or cuda), got '" + backend + "'");
      check_at_least("--max-num-seqs", limits.max_num_seqs, 1);
      check_at_least("--max-num-batched-tokens", limits.max_num_batched_tokens, 1);
      check_at_least("--max-model-len", limits.max_model_len, 1);
      check_at_least("--block-size", limits.block_size, 1);
      check_at_least("--repeats", limits.repeats, 1);
      check_at_least("--evict-mib", evict_mib, 0);
      limits.evict_bytes = backend == "cpu" ? std::int64_t(evict_mib) << 20 : 0;
      spec = gpu.empty()
                 ? (backend == "cuda" ? gpu_by_device_name(device_name(backend)) : gpu_by_name("h100"))
                 : gpu_from(gpu);
      c.name = "profile";
      c.model = model_from(model);
      // Before the measurement, not after it: the output's directory, and outputs that can be written.
      const std::filesystem::path dir = std::filesystem::path(out).parent_path();
      std::error_code ec;
      if (!dir.empty()) std::filesystem::create_directories(dir, ec);
      if (ec)
        throw Error("--out " + out + ": cannot create its directory " + dir.string() + ": " + ec.message());
      h5 = (std::filesystem::path(out).replace_extension(".h5")).string();
      if (h5 == out)
        throw Error("--out " + out +
                    ": the profile is JSON, and its measurements go beside it as PROFILE.h5 (give "
                    "--out PROFILE.json)");
      check_output(out, {model});
      check_hdf5_output(h5, {model}, "--out's measurements");
      b.load_format = checkpoint_from(load_format);
    });
    b.name = backend;
    b.seed = seed;
    b.source_dir = source_dir();
    ProgressBar bar("profile");
    const ProfileResult r = run_profile(b, spec, c, limits, [&](std::size_t done, std::size_t total) {
      bar.update(double(done), double(total), "points");
    });
    bar.finish();
    // The measurements first: should the profile's write fail, `duet fit --run PROFILE.h5` refits them.
    write_measurements(r, c, h5);
    save_profile(r.profile, out);
    print_profile(r);
    std::printf("wrote %s and %s\n", out.c_str(), h5.c_str());
    return 0;
  });
}

}  // namespace duet::cli
