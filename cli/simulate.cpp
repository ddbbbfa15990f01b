// duet simulate: replay a public trace (or a synthetic workload) through one engine: the
// simulator by default, or a real engine on the wall clock (--backend cpu|cuda).
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "cli/report.hpp"
#include "cli/source_dir.hpp"
#include "cli/stop_signal.hpp"
#include "cli/trace_experiment.hpp"
#include "core/error.hpp"
#include "io/file_bytes.hpp"

namespace po = boost::program_options;

namespace duet::cli {

namespace {

// Where --out's file goes: the file a symbolic link names (the link stays a link), and the file the
// run is written to until it ends, beside it.
struct OutputFile {
  std::string shown;    // --out as given, for messages
  std::string target;   // the file to replace when the run ends
  std::string writing;  // target + ".running"
};

OutputFile output_file(const std::string& out) {
  const std::string target = output_target(out);
  return {out, target, target + ".running"};
}

// After a run failed with `error` while writing: what was recorded stays in a file that says why
// the run stopped (its `incomplete` attribute), at --out where no file was there, else at
// OUT.incomplete beside the earlier file, which is kept. A file that the failure left unreadable
// (a full disk) is removed. Returns the error, saying which.
std::string keep_what_was_recorded(RunFileWriter& file, const OutputFile& out, const std::string& error) {
  const bool closed = close_after_failure(file, out.writing, error).closed;
  std::error_code ec;
  const bool earlier = std::filesystem::exists(out.target, ec);
  const std::string unchanged = earlier ? " (" + out.shown + " is unchanged)" : "";
  std::string message;
  if (!std::filesystem::exists(out.writing, ec)) {
    message = error + "; the file it left unreadable was removed" + unchanged;
  } else {
    const std::string kept = earlier ? out.target + ".incomplete" : out.target;
    std::filesystem::rename(out.writing, kept, ec);
    message = error + "; " +
              (ec        ? out.writing
               : earlier ? out.shown + ".incomplete"
                         : out.shown) +
              " holds what was recorded before it" + unchanged;
  }
  if (!closed) throw FailedCloseError(message);  // HDF5 must not close it again at exit
  return message;
}

// A run that failed with `error` before it recorded anything: its file goes, and an earlier one stays.
void discard(RunFileWriter& file, const OutputFile& out, const std::string& error) {
  const bool closed = close_after_failure(file, out.writing, error).closed;
  std::error_code ec;
  std::filesystem::remove(out.writing, ec);
  if (!closed) throw FailedCloseError(error);  // HDF5 must not close it again at exit
}

}  // namespace

int simulate(int argc, char** argv) {
  TraceArgs args;
  std::string out;
  std::string record = "steps";
  po::options_description options("duet simulate: replay a trace or a synthetic workload through one engine");
  options.add(trace_options(args, BackendChoice::Any));
  po::options_description output("Output");
  output.add_options()("out", po::value(&out),
                       "HDF5 file to write as the run goes (see analysis/README.md); an earlier one is "
                       "replaced when the run ends")(
      "record", po::value(&record)->default_value("steps"),
      "what the file holds: steps (the timeline, requests and summary), requests (no timeline) or summary")(
      "help,h", "this help");
  options.add(output);
  const std::string command_line = command_line_of(argc, argv);
  // A failed run exits 1; bad usage 2, and so does a configuration that cannot run: the flags are
  // the whole of it.
  return run_command({"simulate", options, nullptr, nullptr, 1}, argc, argv, [&](const po::variables_map&) {
    TraceExperiment x;
    std::optional<TraceReplay> replay_slot;
    // The records go to the file as the run makes them; memory holds a chunk per table. The file is
    // written beside --out and renamed to it when the run ends, so that a run that fails or is
    // stopped leaves an earlier file of that name as it was (and a reader holding it keeps it).
    const OutputFile output = output_file(out);
    std::optional<RunFileWriter> file;
    check_usage([&] {
      if (!out.empty()) check_hdf5_output(out, {args.trace}, "--out", false);
      const RecordLevel level = parse_record_level("--record", record);
      x = trace_experiment(args, source_dir(), command_line);
      x.spec.record = level;
      replay_slot.emplace(x.trace, x.replay);
    });
    if (!out.empty()) {
      try {
        file.emplace(output.writing);
      } catch (const Error&) {  // a full disk: a failed run, and no empty file left beside --out
        std::error_code ec;
        std::filesystem::remove(output.writing, ec);
        throw;
      }
    }
    TraceReplay& replay = *replay_slot;
    ProgressBar bar("simulate");
    std::optional<RunStream> stream;
    x.spec.keep_records = false;
    // SIGINT and SIGTERM end the run between events, so that the file keeps what was recorded.
    install_stop_handlers();
    ExperimentHooks hooks;
    bool configured = false;  // the configuration held: an error from here on is a failed run (1)
    hooks.before_run = [&](Runtime& rt, const ExperimentOutcome& start) {
      rt.stop = &g_stop_signal;
      configured = true;
      if (file) {
        // What is replayed, from the start: a run stopped by a signal keeps it too.
        RunMetadata metadata = start.metadata;
        metadata.text.emplace_back("trace", x.trace.source);
        // Whatever file or options it came from (--max-requests, --synthetic ...).
        metadata.text.emplace_back("trace_fingerprint",
                                   trace_fingerprint(x.trace, std::size_t(args.max_requests)));
        metadata.text.emplace_back("on_too_long", args.on_too_long);
        metadata.text.emplace_back("cost_model", start.cost_models.front());
        metadata.numbers.emplace_back("rate_scale", args.rate_scale);
        metadata.numbers.emplace_back("max_requests", double(args.max_requests));
        if (args.synthetic > 0) {
          metadata.numbers.emplace_back("synthetic_requests", args.synthetic);
          metadata.numbers.emplace_back("input_tokens", args.input_tokens);
          metadata.numbers.emplace_back("output_tokens", args.output_tokens);
          metadata.numbers.emplace_back("request_rate", args.request_rate);
        }
        stream.emplace(file->begin_run("/", metadata, rt.records(), x.spec.record));
        rt.set_recording(x.spec.record, false, &*stream);
      }
      rt.on_progress = [&](const Runtime& r) {
        char detail[64];
        std::snprintf(detail, sizeof detail, "requests, %s %.0f s",
                      args.backend == "sim" ? "simulated" : "ran", r.now());
        bar.update(double(replay.finished()), double(replay.total()), detail);
      };
    };
    // Ends a run cut short (`why`): what was recorded is kept as keep_what_was_recorded says.
    auto cut_short = [&](const std::string& why) {
      stream->abandon(why);
      stream.reset();
      return keep_what_was_recorded(*file, output, why);
    };
    ExperimentOutcome o;
    try {
      o = run_experiment(x.spec, replay, hooks);
    } catch (const std::exception& e) {
      const int signal = g_stop_signal.load();
      // A file whose run never began (the configuration failed, or a full disk) holds nothing: it goes.
      if (file && !stream) discard(*file, output, e.what());
      if (!configured && signal == 0) {  // what the flags describe cannot run, or memory ran out
        if (dynamic_cast<const Error*>(&e) && !dynamic_cast<const UsageError*>(&e))
          throw UsageError(e.what());
        throw;  // run_command reports each kind of error its way
      }
      const std::string message = stream ? cut_short(e.what()) : std::string(e.what());
      bar.finish();
      std::fprintf(stderr, "duet simulate: %s%s\n", signal == 0 ? "error: " : "", message.c_str());
      return signal == 0 ? 1 : stopped_exit_status(signal);
    }
    bar.finish();
    const EngineSetup& e = x.spec.engines[0];
    std::printf(
        "%s: %zu requests (%zu longer than max_model_len, skipped) on %s, %d KV blocks of %d tokens, %s\n",
        x.trace.source.c_str(), replay.finished(), replay.skipped(), x.spec.gpu.name.c_str(),
        o.plan.engines[0].num_blocks, e.config.block_size, o.cost_models[0].c_str());
    std::printf("%s\n", x.max_model_len_choice.c_str());
    for (const std::string& w : o.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    print_summary(o.summary, stdout);
    // Every request skipped: a failed run, which does not replace an earlier file.
    if (replay.finished() == 0 && replay.skipped() > 0) {
      const std::string why = "every request (" + std::to_string(replay.skipped()) +
                              ") is longer than max_model_len " + std::to_string(e.config.max_model_len) +
                              ": nothing was simulated";
      std::fprintf(stderr, "duet simulate: error: %s\n", (stream ? cut_short(why) : why).c_str());
      return 1;
    }
    if (stream) {
      RunMetadata extra;
      if (!o.warnings.empty()) extra.text.emplace_back("warnings", warnings_text(o.warnings));
      extra.numbers.emplace_back("requests_too_long", double(replay.skipped()));
      try {  // a full disk may fail the last chunks too
        stream->finish(o.summary, extra);
      } catch (const std::exception& e) {
        throw Error(cut_short(e.what()));
      }
      stream.reset();
      try {
        file->close();
      } catch (const Error& e) {  // HDF5 must not close it again (FailedCloseError): drop the file
        std::error_code ec;
        std::filesystem::remove(output.writing, ec);
        throw FailedCloseError(
            std::string(e.what()) + "; removed the unfinished file" +
            (std::filesystem::exists(output.target, ec) ? " (" + out + " is unchanged)" : ""));
      }
      std::filesystem::rename(output.writing, output.target);
      std::printf("wrote %s\nopen analysis/notebooks/trace_replay.ipynb with DUET_RUN=%s\n", out.c_str(),
                  absolute_path(out).c_str());
    }
    return 0;
  });
}

}  // namespace duet::cli
