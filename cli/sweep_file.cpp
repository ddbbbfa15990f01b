#include "cli/sweep_file.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/error.hpp"
#include "core/mix.hpp"

namespace duet::cli {

namespace {

std::string numbered(const std::string& prefix, std::size_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04zu", n);
  return prefix + buf;
}

}  // namespace

Shard parse_shard(const std::string& text) {
  Shard s;
  int used = 0;
  if (std::sscanf(text.c_str(), "%d/%d%n", &s.index, &s.count, &used) != 2 || used != int(text.size()) ||
      s.count < 1 || s.index < 1 || s.index > s.count)
    throw Error("--shard " + text + ": expected I/N with 1 <= I <= N (shard I of N), e.g. --shard 2/8");
  return s;
}

std::string shard_name(const Shard& s) { return std::to_string(s.index) + "/" + std::to_string(s.count); }

RunIdentity identity_of(const std::string& script_text, const std::string& library_hash,
                        const std::string& backend, const std::string& record,
                        const std::vector<std::string>& args, const Shard& shard) {
  return {fingerprint(script_text),    library_hash,     backend, record,
          nlohmann::json(args).dump(), shard_name(shard)};
}

std::string library_hash(const std::string& source_dir) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(source_dir) / "workloads";
  std::vector<fs::path> files;
  std::error_code ec;
  // Linked folders are followed (a workloads/data that is a link holds data all the same); hidden
  // files (an editor's swap file) are no module and no data.
  for (fs::recursive_directory_iterator it(root, fs::directory_options::follow_directory_symlink, ec), end;
       !ec && it != end; it.increment(ec)) {
    std::error_code kind;
    if (it->path().filename().string().starts_with('.')) {
      if (it->is_directory(kind)) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file(kind)) files.push_back(it->path().lexically_relative(root));
  }
  // A folder that could not be read would leave its files out of the hash without a word.
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw Error(root.string() + ": cannot read the workload library (" + ec.message() + ")");
  std::sort(files.begin(), files.end());
  std::string all;
  for (const fs::path& f : files) {
    std::ifstream in(root / f, std::ios::binary);
    all += f.generic_string() + '\0' + std::string(std::istreambuf_iterator<char>(in), {}) + '\0';
  }
  return fingerprint(all);
}

RunMetadata identity_metadata(const RunIdentity& id) {
  return {{{"duet_run.script_hash", id.script_hash},
           {"duet_run.library_hash", id.library_hash},
           {"duet_run.backend", id.backend},
           {"duet_run.record", id.record},
           {"duet_run.args", id.args},
           {"duet_run.shard", id.shard}},
          {}};
}

RunIdentity read_identity(const std::string& path) {
  const RunMetadata m = read_attributes(path, "/");
  RunIdentity id;
  const std::pair<const char*, std::string*> fields[] = {{"duet_run.script_hash", &id.script_hash},
                                                         {"duet_run.backend", &id.backend},
                                                         {"duet_run.record", &id.record},
                                                         {"duet_run.args", &id.args},
                                                         {"duet_run.shard", &id.shard}};
  for (const auto& [key, field] : fields) {
    const std::string* v = m.find_text(key);
    if (!v)
      throw Error(path + ": no attribute " + key +
                  " at the root: not a file that `duet run` wrote for a script");
    *field = *v;
  }
  // Files written before the library was hashed have none; they are checked without it.
  if (const std::string* v = m.find_text("duet_run.library_hash")) id.library_hash = *v;
  return id;
}

void check_identity(const std::string& path, const RunIdentity& found, const RunIdentity& want,
                    const std::string& what, bool with_shard) {
  const std::tuple<const char*, const std::string&, const std::string&, const char*> fields[] = {
      {"script_hash", found.script_hash, want.script_hash, "the script's text differs"},
      {"library_hash", found.library_hash, want.library_hash,
       "a file under workloads/, a module or its data, differs"},
      {"backend", found.backend, want.backend, "--backend differs"},
      {"record", found.record, want.record, "--record differs"},
      {"args", found.args, want.args, "the script's arguments (after --) differ"},
      {"shard", found.shard, want.shard, "--shard differs"}};
  for (const auto& [key, a, b, why] : fields) {
    if (a == b || (!with_shard && std::string(key) == "shard")) continue;
    if (std::string(key) == "library_hash" && (a.empty() || b.empty())) continue;  // an older file
    throw Error(what + ": " + path + ": attribute duet_run." + key + " is '" + a + "', expected '" + b +
                "' (" + why + "): refusing to mix two sweeps in one file");
  }
}

std::string run_group(int run) { return numbered("/runs/", std::size_t(run)); }
std::string sweep_group(int sweep) { return numbered("/sweeps/", std::size_t(sweep)); }
std::string point_group(int sweep, std::size_t point) {
  return numbered(sweep_group(sweep) + "/points/", point);
}
std::string failed_group(int sweep, std::size_t point) {
  return numbered(sweep_group(sweep) + "/failed/", point);
}

RunMetadata sweep_metadata(const std::string& label, const std::string& grid_json, std::size_t points) {
  return {{{"sweep", label}, {"grid", grid_json}}, {{"points", double(points)}}};
}

bool check_sweep(const std::string& path, int sweep, const std::string& label, const std::string& grid_json,
                 std::size_t points, const std::string& what) {
  const std::string group = sweep_group(sweep);
  const std::vector<std::string> sweeps = list_groups(path, "/sweeps");
  if (std::find(sweeps.begin(), sweeps.end(), group.substr(group.rfind('/') + 1)) == sweeps.end())
    return false;  // the file stopped before this sweep
  const RunMetadata m = read_attributes(path, group);
  const std::string* l = m.find_text("sweep");
  const std::string* g = m.find_text("grid");
  const double* n = m.find_number("points");
  auto fail = [&](const std::string& attr, const std::string& found, const std::string& want) {
    throw Error(what + ": " + path + ": " + group + ": attribute " + attr + " is '" + found +
                "', expected '" + want + "': refusing to mix two sweeps in one file");
  };
  if (!l || !g || !n)
    throw Error(what + ": " + path + ": " + group + " lacks the sweep, grid or points attribute");
  if (*l != label) fail("sweep", *l, label);
  if (*g != grid_json) fail("grid", *g, grid_json);
  if (std::size_t(*n) != points) fail("points", std::to_string(std::size_t(*n)), std::to_string(points));
  return true;
}

std::vector<std::size_t> point_indices(const std::string& path, const std::string& parent) {
  std::vector<std::size_t> out;
  for (const std::string& name : list_groups(path, parent)) {
    std::size_t used = 0;
    unsigned long long i = 0;
    try {
      i = std::stoull(name, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != name.size() || name.empty())
      throw Error(path + ": " + parent + "/" + name + ": not a sweep point (its name is not a point index)");
    out.push_back(std::size_t(i));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace duet::cli
