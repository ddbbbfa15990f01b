#pragma once
// What a `duet run` file says about the sweeps in it, so that a run can be resumed (--resume) and
// the shards of one sweep merged (duet merge) without ever mixing two sweeps:
//   /                         duet_run.script_hash, .library_hash, .backend, .record, .args,
//                             .shard ("I/N")
//   /sweeps/NNNN              sweep, grid (JSON: each key's values), points (the grid's size)
//   /sweeps/NNNN/points/MMMM  a finished point: a run, as before
//   /sweeps/NNNN/failed/MMMM  a point that raised an error: error, sweep, point.* attributes
// MMMM is the point's index in the grid, whichever shard, rank or resumed run wrote it.
#include <cstddef>
#include <string>
#include <vector>

#include "io/hdf5_run.hpp"

namespace duet::cli {

// --shard I/N: this process runs the points whose grid index is I-1 modulo N.
struct Shard {
  int index = 1;  // 1..count
  int count = 1;
  bool owns(std::size_t point) const { return int(point % std::size_t(count)) == index - 1; }
};
// Parses "I/N" (1 <= I <= N); throws duet::Error naming --shard otherwise.
Shard parse_shard(const std::string& text);
std::string shard_name(const Shard& shard);

// Which script, with which options, wrote a file: the root's duet_run.* attributes.
struct RunIdentity {
  std::string script_hash;   // of the script's text
  std::string library_hash;  // of the workload library and its data (empty in older files)
  std::string backend;
  std::string record;
  std::string args;  // the script's arguments (after --), as JSON
  std::string shard;
};
RunIdentity identity_of(const std::string& script_text, const std::string& library_hash,
                        const std::string& backend, const std::string& record,
                        const std::vector<std::string>& args, const Shard& shard);
// The hash of the workload library under source_dir (every file under workloads/, names and
// contents: the modules and the data they read, such as math500.jsonl, step_model.json and the
// tokenizer): an edited module or data file must not slip into a resumed sweep, or a merged
// shard, beside points the old one produced.
std::string library_hash(const std::string& source_dir);
RunMetadata identity_metadata(const RunIdentity& identity);
// Throws naming the file when it has no identity (not written by `duet run` with sweeps).
RunIdentity read_identity(const std::string& path);
// Throws naming the file and the attribute that differs; `what` says what is being done
// ("--resume", "merge"). The shard is compared when `with_shard`.
void check_identity(const std::string& path, const RunIdentity& found, const RunIdentity& want,
                    const std::string& what, bool with_shard);

// The run file's groups: /runs/NNNN, /sweeps/NNNN, /sweeps/NNNN/points/MMMM, .../failed/MMMM.
std::string run_group(int run);
std::string sweep_group(int sweep);
std::string point_group(int sweep, std::size_t point);
std::string failed_group(int sweep, std::size_t point);

// The sweep group's attributes, and the check that a file's sweep is the one being run.
RunMetadata sweep_metadata(const std::string& label, const std::string& grid_json, std::size_t points);
// Throws naming the file, the group and the attribute when they differ; true when the file has the
// sweep's group at all.
bool check_sweep(const std::string& path, int sweep, const std::string& label, const std::string& grid_json,
                 std::size_t points, const std::string& what);

// The indices of the groups under /sweeps/NNNN/points (or failed), in order. A name that is not a
// point index is an error naming it.
std::vector<std::size_t> point_indices(const std::string& path, const std::string& parent);

}  // namespace duet::cli
