// libFuzzer target: reading run files back (list_runs, read_run). Byte-level mutation of an HDF5
// file mostly tests libhdf5's own parser, which is not ours to fix; what duet must survive is a
// well-formed HDF5 file whose content is not what it wrote: objects missing, attributes of another
// type or value, tables of another shape or element type. So the input is a list of such edits,
// applied to a valid two-run file before it is read back. Every read must return or throw
// duet::Error.
#include <H5Cpp.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.hpp"
#include "io/hdf5_run.hpp"

namespace {

namespace fs = std::filesystem;

// Reads the edit list: each call takes bytes from the front, 0 when the input is used up.
struct Input {
  const std::uint8_t* data;
  std::size_t size;
  std::uint64_t take(int bytes) {
    std::uint64_t v = 0;
    for (int i = 0; i < bytes && size > 0; ++i, ++data, --size) v = (v << 8) | *data;
    return v;
  }
};

duet::EngineRecords engine(const std::string& name, int rows) {
  duet::EngineRecords e{name, "llama-3.2-1b", 128, 16, {}, {}};
  for (int i = 0; i < rows; ++i) {
    duet::StepRecord s;
    s.start_s = 0.01 * i;
    s.duration_s = 0.01;
    s.num_seqs = i % 7;
    e.steps.push_back(s);
    duet::RequestRecord r;
    r.seq_id = std::uint64_t(i);
    r.finish_s = 0.02 * i;
    r.output_tokens = i;
    e.requests.push_back(r);
  }
  return e;
}

void remove_template();

// A valid file with a single run at "/" and a sweep point, as duet run and duet simulate write them.
// It and each case's copy live in the temp directory until the process exits (libFuzzer ends with
// exit() after -max_total_time or -runs).
const std::string& template_file() {
  static const std::string path = [] {
    const std::string p =
        (fs::temp_directory_path() / ("duet-fuzz-template-" + std::to_string(getpid()) + ".h5"));
    duet::RunFileWriter writer(p);
    const std::vector<duet::EngineRecords> records = {engine("llm", 40), engine("prm", 3)};
    duet::RunSummary summary{1.5, 0.25, {}};
    for (const auto& e : records)
      summary.engines.push_back(duet::EngineSummary{.name = e.name, .model = e.model});
    std::vector<duet::ProblemRecord> problems(4);
    const duet::RunMetadata meta{{{"workload", "beam"}}, {{"seed", 7}}};
    writer.write_run("/", meta, records, summary, &problems);
    writer.write_run("/sweeps/0000/points/0001", meta, records, summary, nullptr, duet::RecordLevel::Summary);
    writer.close();
    return p;
  }();
  // Registered after `path` is built, so it runs before `path` is destroyed.
  [[maybe_unused]] static const int cleanup = std::atexit(remove_template);
  return path;
}

void remove_template() {
  std::error_code ignored;
  fs::remove(template_file(), ignored);
  fs::remove(template_file() + ".case.h5", ignored);
}

// Every object (group or dataset) and every attribute of the file, by path.
struct Inventory {
  std::vector<std::string> objects;
  std::vector<std::pair<std::string, std::string>> attributes;  // (object, attribute)
};

herr_t add_attribute(hid_t, const char* name, const H5A_info_t*, void* op) {
  auto* list = static_cast<std::pair<Inventory*, std::string>*>(op);
  list->first->attributes.emplace_back(list->second, name);
  return 0;
}

herr_t add_object(hid_t root, const char* name, const H5O_info_t*, void* op) {
  auto* inv = static_cast<Inventory*>(op);
  const std::string path = std::string("/") + (std::strcmp(name, ".") == 0 ? "" : name);
  inv->objects.push_back(path);
  std::pair<Inventory*, std::string> ctx{inv, path};
  const hid_t obj = H5Oopen(root, name, H5P_DEFAULT);
  H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, nullptr, add_attribute, &ctx);
  H5Oclose(obj);
  return 0;
}

void replace_attribute(hid_t file, const std::string& object, const std::string& name, Input& in) {
  const hid_t obj = H5Oopen(file, object.c_str(), H5P_DEFAULT);
  H5Adelete(obj, name.c_str());
  const hid_t space = H5Screate(H5S_SCALAR);
  const int kind = int(in.take(1) % 4);
  const std::uint64_t raw = in.take(8);
  hid_t type = H5Tcopy(kind == 0 ? H5T_NATIVE_INT32 : kind == 1 ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE);
  std::string text;
  if (kind == 3) {  // a string, of the bytes given
    for (int i = 0; i < 8; ++i) text.push_back(char(raw >> (8 * i)));
    H5Tclose(type);
    type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, text.size());
  }
  const hid_t attr = H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attr, type, kind == 3 ? static_cast<const void*>(text.data()) : static_cast<const void*>(&raw));
  H5Aclose(attr);
  H5Tclose(type);
  H5Sclose(space);
  H5Oclose(obj);
}

// Replaces a dataset by one of the same name holding `rows` doubles in `rank` dimensions.
void replace_dataset(hid_t file, const std::string& object, Input& in) {
  if (H5Ldelete(file, object.c_str(), H5P_DEFAULT) < 0) return;
  const int rank = 1 + int(in.take(1) % 2);
  const hsize_t dims[2] = {hsize_t(in.take(1)), 2};
  const hid_t space = H5Screate_simple(rank, dims, nullptr);
  const hid_t set =
      H5Dcreate2(file, object.c_str(), H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  std::vector<double> values(dims[0] * (rank == 2 ? 2 : 1), double(in.take(2)) - 1000.0);
  if (!values.empty()) H5Dwrite(set, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  H5Dclose(set);
  H5Sclose(space);
}

void edit(const std::string& path, Input& in) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (file < 0) return;
  for (int n = 0; n < 8 && in.size > 0; ++n) {
    Inventory inv;
    H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_INC, add_object, &inv, H5O_INFO_BASIC);
    const int op = int(in.take(1) % 3);
    if (op == 0 && inv.objects.size() > 1) {  // drop an object (never the root)
      H5Ldelete(file, inv.objects[1 + in.take(1) % (inv.objects.size() - 1)].c_str(), H5P_DEFAULT);
    } else if (op == 1 && !inv.attributes.empty()) {
      const auto& [object, name] = inv.attributes[in.take(1) % inv.attributes.size()];
      replace_attribute(file, object, name, in);
    } else if (op == 2) {
      const std::string& object = inv.objects[in.take(1) % inv.objects.size()];
      H5O_info_t info;
      if (H5Oget_info_by_name2(file, object.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) >= 0 &&
          info.type == H5O_TYPE_DATASET)
        replace_dataset(file, object, in);
    }
  }
  H5Fclose(file);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // libhdf5's error stack printing, for the edits
  const std::string& source = template_file();
  const std::string path = source + ".case.h5";
  fs::copy_file(source, path, fs::copy_options::overwrite_existing);
  Input in{data, size};
  edit(path, in);
  try {
    for (const std::string& run : duet::list_runs(path)) {
      try {
        (void)duet::read_run(path, run);
      } catch (const duet::Error&) {
      }
    }
  } catch (const duet::Error&) {
  }
  return 0;
}
