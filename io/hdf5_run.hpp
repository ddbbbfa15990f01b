#pragma once
// duet's HDF5 run files: what a run recorded (per-step timeline, per-request table, summary) plus
// the configuration that produced it, in one self-describing file that notebooks read with h5py.
// A sweep writes one run per point into the same file. The schema is documented in
// analysis/README.md; keep the two in step (duet_schema_version says which one a file follows).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/metrics.hpp"

namespace duet {

inline constexpr int kRunSchemaVersion = 3;

// Run configuration, stored as attributes of the run's group. Text holds names, the git revision,
// the Lua script and "config_json"; numbers hold the tunables a notebook filters sweeps by.
// Names must be unique and must not be duet_schema_version or created_utc.
struct RunMetadata {
  std::vector<std::pair<std::string, std::string>> text;
  std::vector<std::pair<std::string, double>> numbers;

  // The value under `key`; nullptr when there is none.
  const std::string* find_text(const std::string& key) const {
    for (const auto& [k, v] : text)
      if (k == key) return &v;
    return nullptr;
  }
  const double* find_number(const std::string& key) const {
    for (const auto& [k, v] : numbers)
      if (k == key) return &v;
    return nullptr;
  }
};

class RunStream;

// How the tables are compressed: HDF5's byte shuffle, then deflate (zlib) at `deflate` (0: none).
// h5py reads every combination without plugins. The default is chosen on measurement (duet bench
// hdf5; bench/results/hdf5-compression.md).
struct TableCompression {
  bool shuffle = true;
  int deflate = 1;
};

// Throws duet::Error naming `path` when another program holds it open through HDF5 (a notebook
// reading it, another duet run writing it). HDF5 truncates a file before it tries to lock it, so a
// file replaced in place is checked first; a command that would replace it checks before its work.
void check_not_open_elsewhere(const std::string& path);

class RunFileWriter {
 public:
  // Creates the file, replacing any file of that name (not one another program holds open).
  explicit RunFileWriter(const std::string& path, TableCompression compression = {});
  // Opens an existing duet file to add runs to it (duet run --resume). The caller checks first that
  // the file is one it may continue: this only opens it, naming the file in its errors.
  static RunFileWriter append(const std::string& path, TableCompression compression = {});
  ~RunFileWriter();
  RunFileWriter(RunFileWriter&&) noexcept;
  RunFileWriter& operator=(RunFileWriter&&) noexcept;

  // Writes one run into `group` ("/" for a single run, "/points/0007" for a sweep point; missing
  // parents are created). The group must not hold a run yet. Every engine of `records` needs the
  // EngineSummary of the same name in `summary` and vice versa. The file is flushed afterwards,
  // so that the points a long sweep has finished survive a crash.
  // `problems` (optional) is the per-problem table of a search workload. Below RecordLevel::Steps
  // the tables the level leaves out are not written (and the run's `record` attribute says so).
  void write_run(const std::string& group, const RunMetadata& metadata,
                 const std::vector<EngineRecords>& records, const RunSummary& summary,
                 const std::vector<ProblemRecord>* problems = nullptr,
                 RecordLevel level = RecordLevel::Steps);
  // Starts a run that is written as it goes (RunStream). `engines` name the engines, their models
  // and pools; their rows are ignored. The writer must outlive the stream, and nothing else may be
  // written to the file until the stream has finished.
  RunStream begin_run(const std::string& group, const RunMetadata& metadata,
                      const std::vector<EngineRecords>& engines, RecordLevel level = RecordLevel::Steps);
  // Attributes on a group that holds no run itself (created when missing): e.g. a validation
  // point's errors above its predicted and measured runs.
  void write_attributes(const std::string& group, const RunMetadata& metadata);
  // Unlinks a group and everything under it (a run cut short by a kill, a failed sweep point that
  // is tried again); nothing happens when there is no such group.
  void remove_group(const std::string& group);
  // Closes the file, reporting errors that the destructor would have to swallow.
  void close();

 private:
  struct Impl;
  explicit RunFileWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A run written as it goes: rows are buffered per table and written a chunk (kChunkRows rows) at a
// time, so memory holds at most a chunk per table, and the file is flushed after each chunk. The
// datasets end up identical to write_run's for the same rows, chunking included. A run that never
// finishes (an error, a signal that unwinds) leaves what it appended in the file, and its group
// says why in an `incomplete` attribute; it is not listed as a run.
class RunStream final : public RecordSink {
 public:
  RunStream(RunStream&&) noexcept;
  RunStream& operator=(RunStream&&) = delete;
  ~RunStream() override;

  void add_step(int engine, const StepRecord& step) override;
  void add_request(int engine, const RequestRecord& request) override;
  void add_problem(const ProblemRecord& problem);  // the table exists only if one is added
  // Writes what is buffered, the summary, then `extra` metadata after begin_run's, and marks the
  // group as a run. The summary must name the stream's engines.
  void finish(const RunSummary& summary, const RunMetadata& extra = {});
  // Ends a run that failed: what was appended stays, with `reason` in the `incomplete` attribute.
  void abandon(const std::string& reason) noexcept;

 private:
  friend class RunFileWriter;
  struct Impl;
  explicit RunStream(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct RunData {
  RunMetadata metadata;                    // in the order it was written
  std::vector<EngineRecords> engines;      // in the order they were written
  RunSummary summary;                      // engines in the same order as `engines`
  std::vector<ProblemRecord> problems;     // empty when the run had no per-problem table
  RecordLevel level = RecordLevel::Steps;  // the tables below it are empty: not recorded
};

// Errors (duet::Error) name the file and the object: a missing, truncated or corrupted file, a
// missing group, attribute or dataset, a table whose columns are not the expected ones.
RunData read_run(const std::string& path, const std::string& group = "/");

// The attributes of any group (as write_attributes wrote them).
RunMetadata read_attributes(const std::string& path, const std::string& group);

// After a run failed with `error` while writing to `writer`'s file at `path`: closes the writer,
// and a file it left unreadable moves to PATH.damaged where some of its runs still read (a
// sweep's finished points), else is removed; says which after the error. `closed` is false
// when HDF5 could not close the file (then it must not be closed again, see cli/command.hpp).
struct FailedRunFile {
  std::string message;
  bool closed = true;
};
FailedRunFile close_after_failure(RunFileWriter& writer, const std::string& path, const std::string& error);

// Every group of the file that holds a run, in name order ("/" for a single-run file).
std::vector<std::string> list_runs(const std::string& path);

// The names of the groups directly under `group`, in name order; empty when there is no such group.
std::vector<std::string> list_groups(const std::string& path, const std::string& group);

}  // namespace duet
