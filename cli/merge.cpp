// duet merge OUT.h5 PART.h5...: the files of a sharded sweep (duet run --shard I/N) as one file,
// the same as one process would have written. Everything is checked before anything is written.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/sweep_file.hpp"
#include "core/error.hpp"
#include "io/file_bytes.hpp"
#include "io/hdf5_run.hpp"

namespace po = boost::program_options;

namespace duet::cli {

namespace {

struct Part {
  std::string path;
  RunIdentity identity;
  Shard shard;
  std::set<std::string> runs;  // groups that hold a finished run
};

// Each part readable, from one script with one set of options, and the shards 1..N each once.
std::vector<Part> read_parts(const std::vector<std::string>& paths) {
  std::vector<Part> parts;
  for (const std::string& path : paths) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
      throw Error(path + (std::filesystem::exists(path, ec) ? ": not a regular file (a shard's .h5)"
                                                            : ": no such file"));
    Part p{path, read_identity(path), {}, {}};
    const std::vector<std::string> runs = list_runs(path);  // a truncated file fails here, named
    p.runs.insert(runs.begin(), runs.end());
    try {
      p.shard = parse_shard(p.identity.shard);
    } catch (const Error& e) {
      throw Error(path + ": attribute duet_run.shard: " + e.what());
    }
    if (!parts.empty()) check_identity(path, p.identity, parts.front().identity, "merge", false);
    parts.push_back(std::move(p));
  }
  const int count = parts.front().shard.count;
  std::map<int, const Part*> by_index;
  for (const Part& p : parts) {
    if (p.shard.count != count)
      throw Error("merge: " + p.path + " is shard " + p.identity.shard + " but " + parts.front().path +
                  " is shard " + parts.front().identity.shard + ": not shards of one split");
    if (!by_index.emplace(p.shard.index, &p).second)
      throw Error("merge: " + by_index[p.shard.index]->path + " and " + p.path + " are both shard " +
                  p.identity.shard + " (overlapping shards)");
  }
  for (int i = 1; i <= count; ++i)
    if (!by_index.count(i))
      throw Error("merge: shard " + std::to_string(i) + "/" + std::to_string(count) +
                  " is missing: give every shard's file");
  std::sort(parts.begin(), parts.end(),
            [](const Part& a, const Part& b) { return a.shard.index < b.shard.index; });
  return parts;
}

// Every sweep any part reached: a shard stopped before a sweep must not hide it.
std::vector<std::string> sweeps_of(const std::vector<Part>& parts) {
  std::set<std::string> names;
  for (const Part& p : parts)
    for (const std::string& name : list_groups(p.path, "/sweeps")) names.insert(name);
  return {names.begin(), names.end()};
}

struct PointSource {
  const Part* part;
  bool failed;
};

// Sweep `name` (NNNN): the same grid in every part, and each point finished or failed in exactly
// the part whose shard owns it. Returns where each point is, in grid order.
std::vector<PointSource> plan_sweep(const std::vector<Part>& parts, const std::string& name,
                                    RunMetadata& meta) {
  const std::string group = "/sweeps/" + name;
  const int sweep = std::stoi(name);
  // The sweep's attributes from the first part that reached it (every part is checked against them).
  const Part& first = *std::find_if(parts.begin(), parts.end(), [&](const Part& p) {
    const std::vector<std::string> sweeps = list_groups(p.path, "/sweeps");
    return std::find(sweeps.begin(), sweeps.end(), name) != sweeps.end();
  });
  meta = read_attributes(first.path, group);
  std::string label, grid;
  double points = -1;
  for (const auto& [k, v] : meta.text) {
    if (k == "sweep") label = v;
    if (k == "grid") grid = v;
  }
  for (const auto& [k, v] : meta.numbers)
    if (k == "points") points = v;
  if (grid.empty() || points < 0)
    throw Error(first.path + ": " + group + " lacks the grid or points attribute");
  std::vector<std::optional<PointSource>> at(static_cast<std::size_t>(points));
  for (const Part& p : parts) {
    if (!check_sweep(p.path, sweep, label, grid, at.size(), "merge")) continue;
    for (bool failed : {false, true})
      for (std::size_t i : point_indices(p.path, group + (failed ? "/failed" : "/points"))) {
        const std::string point = failed ? failed_group(sweep, i) : point_group(sweep, i);
        if (!failed && !p.runs.count(point)) continue;  // cut short by a kill: missing, below
        if (i >= at.size() || !p.shard.owns(i))
          throw Error("merge: " + p.path + ": " + point + " is not a point of shard " + p.identity.shard);
        if (at[i]) throw Error("merge: " + p.path + ": " + point + " is both finished and failed");
        at[i] = PointSource{&p, failed};
      }
  }
  std::vector<PointSource> plan;
  for (std::size_t i = 0; i < at.size(); ++i) {
    if (at[i]) {
      plan.push_back(*at[i]);
      continue;
    }
    const Part& owner =
        *std::find_if(parts.begin(), parts.end(), [&](const Part& p) { return p.shard.owns(i); });
    throw Error("merge: " + owner.path + " (shard " + owner.identity.shard + ") lacks " +
                point_group(sweep, i) +
                ": the shard did not finish; complete it with the same duet run command and --resume");
  }
  return plan;
}

void write_merged(const std::string& out, const std::vector<Part>& parts) {
  RunFileWriter writer(out);
  RunIdentity identity = parts.front().identity;
  identity.shard = shard_name(Shard{});
  writer.write_attributes("/", identity_metadata(identity));
  // Runs outside sweeps ran in every shard alike; the first shard's are kept.
  for (const std::string& run : parts.front().runs)
    if (run.rfind("/runs/", 0) == 0) {
      const RunData d = read_run(parts.front().path, run);
      writer.write_run(run, d.metadata, d.engines, d.summary, &d.problems, d.level);
    }
  for (const std::string& name : sweeps_of(parts)) {
    RunMetadata meta;
    const std::vector<PointSource> plan = plan_sweep(parts, name, meta);
    writer.write_attributes("/sweeps/" + name, meta);
    const int sweep = std::stoi(name);
    for (std::size_t i = 0; i < plan.size(); ++i) {
      const std::string& path = plan[i].part->path;
      if (plan[i].failed) {
        writer.write_attributes(failed_group(sweep, i), read_attributes(path, failed_group(sweep, i)));
        continue;
      }
      const RunData d = read_run(path, point_group(sweep, i));
      writer.write_run(point_group(sweep, i), d.metadata, d.engines, d.summary, &d.problems, d.level);
    }
  }
  writer.close();
}

}  // namespace

int merge(int argc, char** argv) {
  std::string out;
  std::vector<std::string> inputs;
  po::options_description options(
      "duet merge OUT.h5 PART.h5...: merge the files of a sharded sweep (duet run --shard I/N) into one");
  options.add_options()("out", po::value(&out),
                        "the merged file (replaced if it exists, once the merge succeeds)")(
      "parts", po::value(&inputs)->multitoken(), "every shard's file")("help,h", "this help");
  po::positional_options_description positional;
  positional.add("out", 1).add("parts", -1);
  return run_command({"merge", options, &positional, "out"}, argc, argv, [&](const po::variables_map&) {
    if (inputs.empty()) throw Error("no shard files to merge: duet merge OUT.h5 PART.h5...");
    check_hdf5_output(out, inputs, "OUT", false);  // written beside OUT and renamed
    const std::vector<Part> parts = read_parts(inputs);
    // Every sweep planned (checked) before the output is created.
    for (const std::string& name : sweeps_of(parts)) {
      RunMetadata meta;
      plan_sweep(parts, name, meta);
    }
    // Written beside OUT and renamed over it when complete: a merge that fails (a damaged part found
    // while copying) leaves an earlier OUT as it was. A symbolic link stays one: the file it names is
    // replaced.
    const std::string target = output_target(out);
    const std::string partial = target + ".merging";
    try {
      write_merged(partial, parts);
      std::filesystem::rename(partial, target);
    } catch (const std::exception& e) {
      std::error_code ec;
      std::filesystem::remove(partial, ec);
      throw Error(std::string(e.what()) + "; " + out + " is unchanged");
    }
    std::printf("merged %zu shards into %s\n", parts.size(), out.c_str());
    return 0;
  });
}

}  // namespace duet::cli
