#include "io/hdf5_run.hpp"

#include <H5Cpp.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <thread>
#include <type_traits>
#include <utility>

#include "core/error.hpp"
#include "core/record_columns.hpp"
#include "core/sequence.hpp"
#include "io/timestamp.hpp"

namespace duet {
namespace {

// ---- Errors ------------------------------------------------------------------------------------

// HDF5's exceptions say only which call failed ("H5Dopen2 failed"); the innermost entry of its
// error stack says why ("truncated file", "component not found"). Closing handles while an
// exception unwinds clears that stack, so a handler keeps the cause when the error happens.
std::string& hdf5_cause() {
  static std::string cause;
  return cause;
}

herr_t keep_innermost(unsigned n, const H5E_error2_t* err, void*) {
  if (n == 0 && err->desc) {
    hdf5_cause() = err->desc;
    std::replace(hdf5_cause().begin(), hdf5_cause().end(), '\n', ' ');  // one line per message
  }
  return 0;
}

herr_t keep_cause(hid_t stack, void*) {
  H5Ewalk2(stack, H5E_WALK_UPWARD, keep_innermost, nullptr);
  return 0;
}

// The handler is installed only while duet works on a file; otherwise HDF5 has none and prints
// nothing. That also keeps it quiet at exit after a corrupted file: HDF5 1.10 cannot then free
// everything (a bounded leak) and reports so on stderr when a handler is installed.
class CauseKeeper {
 public:
  CauseKeeper() {
    hdf5_cause().clear();
    H5Eset_auto2(H5E_DEFAULT, keep_cause, nullptr);
  }
  ~CauseKeeper() { H5::Exception::dontPrint(); }
  CauseKeeper(const CauseKeeper&) = delete;
  CauseKeeper& operator=(const CauseKeeper&) = delete;
};

// The file and the object being worked on, kept up to date so that an error can name both.
// An empty object means the file itself.
struct Where {
  std::string file;
  std::string object;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(file + (object.empty() ? "" : ": " + object) + ": " + what);
  }
};

template <class Job>
auto guarded(Where& where, Job&& job) -> decltype(job()) {
  const CauseKeeper keeper;
  try {
    return job();
  } catch (const H5::Exception& e) {
    where.fail("HDF5 error: " + (hdf5_cause().empty() ? e.getDetailMsg() : hdf5_cause()));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // A corrupted row count can ask for more memory than there is (bad_alloc, length_error).
    where.fail(std::string("cannot hold it in memory (corrupted sizes?): ") + e.what());
  }
}

// "points/7/" names the same group as "/points/7".
std::string normalized(std::string group) {
  if (group.empty() || group.front() != '/') group.insert(0, "/");
  while (group.size() > 1 && group.back() == '/') group.pop_back();
  return group;
}

std::string join(const std::string& parent, const std::string& name) {
  return parent == "/" ? "/" + name : parent + "/" + name;
}

// ---- Table layouts -----------------------------------------------------------------------------

const H5::PredType& native(ColumnKind kind) {
  switch (kind) {
    case ColumnKind::I32:
      return H5::PredType::NATIVE_INT32;
    case ColumnKind::I64:
      return H5::PredType::NATIVE_INT64;
    case ColumnKind::U64:
      return H5::PredType::NATIVE_UINT64;
    case ColumnKind::U8:
      return H5::PredType::NATIVE_UINT8;
    case ColumnKind::F64:
      break;
  }
  return H5::PredType::NATIVE_DOUBLE;
}

template <class T>
const H5::PredType& native() {
  return native(column_kind<T>());
}

static_assert(member_count<EngineRecords>() == 6 && member_count<RunSummary>() == 3,
              "the run layout changed: update write_run and read_run");
static_assert(std::uint8_t(SeqKind::Score) == 1 && std::uint8_t(FinishReason::Aborted) == 4,
              "the enums changed: update enums_json and analysis/README.md");

H5::CompType memory_type(std::span<const Column> fields, std::size_t row_size) {
  H5::CompType type(row_size);
  for (const Column& f : fields) type.insertMember(f.name, f.offset, native(f.kind));
  return type;
}

// On disk without the structs' padding.
H5::CompType file_type(std::span<const Column> fields, std::size_t row_size) {
  H5::CompType type = memory_type(fields, row_size);
  type.pack();
  return type;
}

std::string units_json(std::span<const Column> fields) {
  nlohmann::ordered_json units = nlohmann::ordered_json::object();
  for (const Column& f : fields) units[f.name] = f.unit;
  return units.dump();
}

std::string enums_json() {
  nlohmann::ordered_json enums;
  enums["kind"] = {{"0", "Generate"}, {"1", "Score"}};
  enums["finish_reason"] = {{"0", "None"}, {"1", "Stop"}, {"2", "Length"}, {"3", "Scored"}, {"4", "Aborted"}};
  return enums.dump();
}

// Every EngineSummary number under its attribute name; Percentiles flatten to <name>_mean etc.
template <class Summary, class Visit>
void visit_summary_numbers(Summary& s, Visit&& visit) {
  visit_summary(s, [&](const std::string& name, auto& field) {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(field)>, Percentiles>) {
      visit(name + "_mean", field.mean);
      visit(name + "_p50", field.p50);
      visit(name + "_p90", field.p90);
      visit(name + "_p99", field.p99);
    } else {
      visit(name, field);
    }
  });
}

// ---- Attributes --------------------------------------------------------------------------------

constexpr const char* kVersionAttr = "duet_schema_version";
constexpr const char* kCreatedAttr = "created_utc";
// Written only below RecordLevel::Steps, so that a full run's attributes are as they always were.
constexpr const char* kRecordAttr = "record_level";
constexpr const char* kIncompleteAttr = "incomplete";  // a streamed run that never finished: why

bool reserved_attr(const std::string& name) {
  return name == kVersionAttr || name == kCreatedAttr || name == kRecordAttr || name == kIncompleteAttr;
}

template <class T>
void put_number(const H5::H5Object& obj, const std::string& name, T value) {
  obj.createAttribute(name, native<T>(), H5::DataSpace()).write(native<T>(), &value);
}

// Variable-length, so that a long Lua script or config dump does not hit the 64 KiB limit of an
// object header; UTF-8, so that h5py returns str.
void put_text(const H5::H5Object& obj, const std::string& name, const std::string& value) {
  H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
  type.setCset(H5T_CSET_UTF8);
  obj.createAttribute(name, type, H5::DataSpace()).write(type, value);
}

// A single string (text) or a single integer or float (!text).
H5::Attribute scalar_attr(const H5::H5Object& obj, const std::string& name, bool text, const Where& where) {
  if (!obj.attrExists(name)) where.fail("attribute '" + name + "' is missing");
  H5::Attribute attr = obj.openAttribute(name);
  const H5T_class_t c = attr.getTypeClass();
  const bool right_class = text ? c == H5T_STRING : c == H5T_INTEGER || c == H5T_FLOAT;
  if (!right_class || attr.getSpace().getSimpleExtentNpoints() != 1)
    where.fail("attribute '" + name + "' is not a single " + (text ? "string" : "number"));
  return attr;
}

template <class T>
T get_number(const H5::H5Object& obj, const std::string& name, const Where& where) {
  T value{};
  scalar_attr(obj, name, false, where).read(native<T>(), &value);
  return value;
}

std::string get_text(const H5::H5Object& obj, const std::string& name, const Where& where) {
  H5::Attribute attr = scalar_attr(obj, name, true, where);
  std::string value;
  attr.read(attr.getStrType(), value);  // fixed-length or variable-length alike
  return value;
}

// ---- Groups ------------------------------------------------------------------------------------

// Groups track the creation order of their attributes and links, so that metadata and engines
// read back in the order they were written (HDF5 lists them by name otherwise). A group made on
// the way to another (`points` in /sweeps/0000/points/0003) lists its links by name: its children
// are numbered, and a sweep on several threads writes them in the order they finish.
void track_creation_order(hid_t plist, bool links) {
  const unsigned flags = H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED;
  if (H5Pset_attr_creation_order(plist, flags) < 0 || (links && H5Pset_link_creation_order(plist, flags) < 0))
    throw H5::PropListIException("track_creation_order", "H5Pset_*_creation_order failed");
}

H5::Group create_one_group(const H5::Group& parent, const std::string& name, bool links_in_creation_order) {
  H5::PropList gcpl(H5P_GROUP_CREATE);
  track_creation_order(gcpl.getId(), links_in_creation_order);
  const hid_t id = H5Gcreate2(parent.getId(), name.c_str(), H5P_DEFAULT, gcpl.getId(), H5P_DEFAULT);
  if (id < 0) throw H5::GroupIException("create_group", "H5Gcreate2 failed");
  H5::Group group(id);  // takes a reference of its own
  H5Gclose(id);
  return group;
}

// `name` is a path below `parent`; the groups on the way that do not exist yet are made too.
H5::Group create_group(const H5::Group& parent, const std::string& name) {
  const std::size_t start = name.front() == '/' ? 1 : 0;
  const std::size_t slash = name.find('/', start);
  if (slash == std::string::npos) return create_one_group(parent, name.substr(start), true);
  const std::string part = name.substr(start, slash - start), rest = name.substr(slash + 1);
  if (part.empty()) return create_group(parent, rest);
  return create_group(
      parent.nameExists(part) ? parent.openGroup(part) : create_one_group(parent, part, false), rest);
}

bool tracks_creation_order(const H5::Group& group, bool attributes) {
  unsigned flags = 0;
  const hid_t gcpl = H5Gget_create_plist(group.getId());
  if (gcpl < 0) throw H5::GroupIException("tracks_creation_order", "H5Gget_create_plist failed");
  const herr_t rc =
      attributes ? H5Pget_attr_creation_order(gcpl, &flags) : H5Pget_link_creation_order(gcpl, &flags);
  H5Pclose(gcpl);
  if (rc < 0) throw H5::PropListIException("tracks_creation_order", "H5Pget_*_creation_order failed");
  return flags & H5P_CRT_ORDER_TRACKED;
}

// Attribute or link names in creation order where the group tracks it (duet's groups do), else
// in name order (groups that another tool made).
std::vector<std::string> names_in_order(const H5::Group& group, bool attributes) {
  const H5_index_t index = tracks_creation_order(group, attributes) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
  const hsize_t count = attributes ? hsize_t(group.getNumAttrs()) : group.getNumObjs();
  auto name_at = [&](hsize_t i, char* buf, std::size_t size) {
    return attributes ? H5Aget_name_by_idx(group.getId(), ".", index, H5_ITER_INC, i, buf, size, H5P_DEFAULT)
                      : H5Lget_name_by_idx(group.getId(), ".", index, H5_ITER_INC, i, buf, size, H5P_DEFAULT);
  };
  std::vector<std::string> names;
  for (hsize_t i = 0; i < count; ++i) {
    const ssize_t length = name_at(i, nullptr, 0);
    if (length < 0) throw H5::GroupIException("names_in_order", "H5[AL]get_name_by_idx failed");
    std::vector<char> buf(std::size_t(length) + 1);
    if (name_at(i, buf.data(), buf.size()) < 0)
      throw H5::GroupIException("names_in_order", "H5[AL]get_name_by_idx failed");
    names.emplace_back(buf.data(), std::size_t(length));
  }
  return names;
}

H5::Group open_group(const H5::Group& parent, const std::string& name, const Where& where) {
  if (!parent.nameExists(name) || parent.childObjType(name) != H5O_TYPE_GROUP) where.fail("no such group");
  return parent.openGroup(name);
}

// Whether an absolute path names an object. Checked component by component: HDF5 1.10 reports a
// missing parent as an error rather than as "no".
bool path_exists(const H5::Group& root, const std::string& path) {
  if (path == "/") return true;
  for (std::size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    if (!root.nameExists(path.substr(0, end))) return false;
    if (end == std::string::npos) return true;
  }
}

// ---- Writing -----------------------------------------------------------------------------------

// Rows per chunk, the unit of compression and of partial reads: 4096 steps (~460 KiB) fit in
// HDF5's default 1 MiB chunk cache.
constexpr hsize_t kChunkRows = 4096;

// An empty, extendible table of `fields` rows, chunked `chunk` rows at a time.
H5::DataSet create_table(const H5::Group& parent, const char* name, std::span<const Column> fields,
                         std::size_t row_size, hsize_t chunk, bool with_enums, TableCompression compression) {
  const hsize_t empty = 0, unlimited = H5S_UNLIMITED;
  H5::DSetCreatPropList dcpl;
  dcpl.setChunk(1, &chunk);
  if (compression.shuffle)
    dcpl.setShuffle();  // before deflate: byte planes of similar numbers compress far better
  if (compression.deflate > 0) dcpl.setDeflate(compression.deflate);
  const H5::DataSet table =
      parent.createDataSet(name, file_type(fields, row_size), H5::DataSpace(1, &empty, &unlimited), dcpl);
  put_text(table, "units", units_json(fields));
  if (with_enums) put_text(table, "enums", enums_json());
  return table;
}

// Appends n rows at the end of the table, which holds `size` rows (updated).
template <class Row>
void append_rows(const H5::DataSet& table, hsize_t& size, const Row* rows, hsize_t n,
                 std::span<const Column> fields) {
  if (n == 0) return;
  const hsize_t grown = size + n;
  table.extend(&grown);
  const H5::DataSpace file_space = table.getSpace();
  file_space.selectHyperslab(H5S_SELECT_SET, &n, &size);
  table.write(rows, memory_type(fields, sizeof(Row)), H5::DataSpace(1, &n), file_space);
  size = grown;
}

template <class Row>
constexpr bool has_enums = std::is_same_v<Row, RequestRecord>;

// A whole table is chunked by its length up to kChunkRows rows.
hsize_t chunk_rows(std::size_t n) { return std::clamp<hsize_t>(n, 1, kChunkRows); }

template <class Row>
void write_table(const H5::Group& parent, const char* name, const std::vector<Row>& rows,
                 std::span<const Column> fields, TableCompression compression) {
  hsize_t size = 0;
  const H5::DataSet table =
      create_table(parent, name, fields, sizeof(Row), chunk_rows(rows.size()), has_enums<Row>, compression);
  append_rows(table, size, rows.data(), rows.size(), fields);
}

// A table written a chunk at a time as its rows arrive. The dataset is made when the first chunk
// is full, or at the end for a table shorter than a chunk, so that it is chunked as write_table
// chunks the same rows.
template <class Row>
struct TableStream {
  const char* name;
  std::span<const Column> fields;
  std::vector<Row> rows;  // buffered, at most kChunkRows
  std::optional<H5::DataSet> table;
  hsize_t size = 0;  // rows in the file

  bool full() const { return rows.size() >= kChunkRows; }
  // Appends `chunk` (a full chunk, or the last rows when `last`).
  void append(const H5::Group& parent, const std::vector<Row>& chunk, bool last,
              TableCompression compression) {
    if (!table) {
      if (!last && chunk.size() < kChunkRows) return;
      table.emplace(create_table(parent, name, fields, sizeof(Row), chunk_rows(chunk.size()), has_enums<Row>,
                                 compression));
    }
    append_rows(*table, size, chunk.data(), chunk.size(), fields);
  }
};

// Runs jobs in order on a thread of its own, so that compressing and writing a chunk overlaps the
// run that makes the next one (about 0.45 s of a 1.4 s trace simulation on 2 cores is the file).
// At most kMaxQueued jobs wait: memory stays bounded when the disk is slower than the run. The
// first job that throws stops the rest; post() and drain() rethrow its error. HDF5 (a build
// without thread safety) is called by one thread at a time: while jobs are queued only this
// thread calls it, and its owner calls it again only after drain().
class ChunkWriter {
 public:
  ChunkWriter() : thread_([this] { work(); }) {}
  ~ChunkWriter() {
    {
      const std::lock_guard lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  ChunkWriter(const ChunkWriter&) = delete;
  ChunkWriter& operator=(const ChunkWriter&) = delete;

  void post(std::function<void()> job) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return jobs_.size() < kMaxQueued || error_; });
    if (error_) std::rethrow_exception(error_);
    jobs_.push_back(std::move(job));
    changed_.notify_all();
  }
  // Waits until every job has run; rethrows the first error.
  void drain() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return (jobs_.empty() && !busy_) || error_; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  static constexpr std::size_t kMaxQueued = 4;

  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stop_, with nothing left
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      busy_ = true;
      lock.unlock();
      std::exception_ptr error;
      try {
        job();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      busy_ = false;
      if (error) {
        error_ = error;
        jobs_.clear();  // post() takes no more
      }
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> jobs_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: it starts once the members above exist
};

// An engine's group with its model and pool; its summary and tables come later.
H5::Group create_engine(const H5::Group& engines, const EngineRecords& records) {
  const H5::Group engine = create_group(engines, records.name);
  put_text(engine, "model", records.model);
  put_number<std::int32_t>(engine, "total_blocks", records.total_blocks);
  put_number<std::int32_t>(engine, "block_size", records.block_size);
  return engine;
}

void put_summary(const H5::Group& engine, const EngineSummary& summary) {
  visit_summary_numbers(summary,
                        [&](const std::string& name, auto value) { put_number(engine, name, value); });
}

void write_engine(const H5::Group& engines, const std::string& path, const EngineRecords& records,
                  const EngineSummary& summary, RecordLevel level, TableCompression compression,
                  Where& where) {
  where.object = path;
  const H5::Group engine = create_engine(engines, records);
  put_summary(engine, summary);
  if (keeps_steps(level)) {
    where.object = join(path, "steps");
    write_table(engine, "steps", records.steps, kStepColumns, compression);
  }
  if (keeps_requests(level)) {
    where.object = join(path, "requests");
    write_table(engine, "requests", records.requests, kRequestColumns, compression);
  }
}

const EngineSummary* find_summary(const RunSummary& summary, const std::string& name) {
  for (const EngineSummary& s : summary.engines)
    if (s.name == name) return &s;
  return nullptr;
}

bool valid_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

// Checked before anything is written, so that a bad call leaves the file as it was. `names`
// collects the metadata names (a stream's extra metadata must not repeat its first).
void check_metadata(const RunMetadata& metadata, std::set<std::string>& names, const Where& where) {
  auto check_key = [&](const std::string& key) {
    if (key.empty() || reserved_attr(key) || !names.insert(key).second)
      where.fail("metadata name '" + key + "' is empty, reserved or repeated");
  };
  for (const auto& [key, value] : metadata.text) check_key(key);
  for (const auto& [key, value] : metadata.numbers) check_key(key);
}

void check_engines(const std::vector<EngineRecords>& records, const Where& where) {
  std::set<std::string> engines;
  for (const EngineRecords& r : records)
    if (!valid_name(r.name) || !engines.insert(r.name).second)
      where.fail("engine name '" + r.name + "' is empty, contains '/' or is repeated");
}

void check_summary(const std::vector<EngineRecords>& records, const RunSummary& summary, const Where& where) {
  for (const EngineRecords& r : records)
    if (!find_summary(summary, r.name)) where.fail("engine '" + r.name + "' has records but no summary");
  for (const EngineSummary& s : summary.engines) {
    const bool known =
        std::any_of(records.begin(), records.end(), [&](const EngineRecords& r) { return r.name == s.name; });
    if (!known) where.fail("engine '" + s.name + "' has a summary but no records");
  }
}

void put_metadata(const H5::Group& run, const RunMetadata& metadata) {
  for (const auto& [key, value] : metadata.text) put_text(run, key, value);
  for (const auto& [key, value] : metadata.numbers) put_number(run, key, value);
}

void put_run_summary(const H5::Group& run, const RunSummary& summary) {
  const H5::Group group = create_group(run, "summary");
  put_number(group, "makespan_s", summary.makespan_s);
  put_number(group, "wall_s", summary.wall_s);
}

// Last, so that a run cut short by an error is not listed as a run.
void mark_run(const H5::Group& run, RecordLevel level) {
  if (!keeps_steps(level)) put_text(run, kRecordAttr, record_level_name(level));
  put_number<std::int32_t>(run, kVersionAttr, kRunSchemaVersion);
}

// The run's group, new or (for "/") the root, which must not hold a run yet.
H5::Group run_group(const H5::H5File& file, const std::string& group, const Where& where) {
  const H5::Group root = file.openGroup("/");
  if (group == "/") {
    if (root.attrExists(kVersionAttr)) where.fail("already holds a run");
    return root;
  }
  if (path_exists(root, group)) where.fail("already exists");
  return create_group(root, group);
}

// ---- Reading -----------------------------------------------------------------------------------

H5::H5File open_for_reading(const std::string& path, const Where& where) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) where.fail("no such file");
  if (!H5::H5File::isHdf5(path)) where.fail("not an HDF5 file");
  return H5::H5File(path, H5F_ACC_RDONLY);
}

bool has_group(const H5::Group& root, const std::string& path) {
  return path == "/" || (path_exists(root, path) && root.childObjType(path) == H5O_TYPE_GROUP);
}

void check_columns(const H5::DataSet& table, std::span<const Column> fields, const Where& where) {
  if (table.getTypeClass() != H5T_COMPOUND) where.fail("is not a table of compound rows");
  const H5::CompType type = table.getCompType();
  std::map<std::string, H5T_class_t> found;
  for (unsigned i = 0; i < unsigned(type.getNmembers()); ++i)
    found[type.getMemberName(i)] = type.getMemberClass(i);
  std::string problems;
  for (const Column& f : fields) {
    const auto it = found.find(f.name);
    const H5T_class_t want = f.kind == ColumnKind::F64 ? H5T_FLOAT : H5T_INTEGER;
    if (it == found.end()) {
      problems += std::string(" missing ") + f.name + ";";
      continue;
    }
    if (it->second != want) problems += std::string(" wrong type ") + f.name + ";";
    found.erase(it);
  }
  for (const auto& [name, cls] : found) problems += " unexpected " + name + ";";
  if (!problems.empty()) where.fail("columns differ from the schema:" + problems);
}

template <class Row>
std::vector<Row> read_table(const H5::Group& engine, const char* name, std::span<const Column> fields,
                            const Where& where) {
  if (!engine.nameExists(name) || engine.childObjType(name) != H5O_TYPE_DATASET)
    where.fail("no such dataset");
  const H5::DataSet table = engine.openDataSet(name);
  check_columns(table, fields, where);
  const H5::DataSpace space = table.getSpace();
  if (space.getSimpleExtentNdims() != 1) where.fail("is not a 1-D table");
  hsize_t n = 0;
  space.getSimpleExtentDims(&n);
  std::vector<Row> rows(n);
  if (n > 0) table.read(rows.data(), memory_type(fields, sizeof(Row)));
  return rows;
}

void read_engine(const H5::Group& engines, const std::string& path, const std::string& name, RunData& run,
                 Where& where) {
  where.object = join(path, name);
  const H5::Group engine = open_group(engines, name, where);
  EngineRecords records;
  records.name = name;
  records.model = get_text(engine, "model", where);
  records.total_blocks = get_number<std::int32_t>(engine, "total_blocks", where);
  records.block_size = get_number<std::int32_t>(engine, "block_size", where);
  EngineSummary summary;
  summary.name = name;
  summary.model = records.model;
  visit_summary_numbers(summary, [&](const std::string& attr, auto& value) {
    value = get_number<std::remove_reference_t<decltype(value)>>(engine, attr, where);
  });
  if (keeps_steps(run.level)) {
    where.object = join(path, name) + "/steps";
    records.steps = read_table<StepRecord>(engine, "steps", kStepColumns, where);
  }
  if (keeps_requests(run.level)) {
    where.object = join(path, name) + "/requests";
    records.requests = read_table<RequestRecord>(engine, "requests", kRequestColumns, where);
  }
  run.engines.push_back(std::move(records));
  run.summary.engines.push_back(std::move(summary));
}

RunMetadata read_metadata(const H5::Group& run, const Where& where) {
  RunMetadata metadata;
  for (const std::string& name : names_in_order(run, true)) {
    if (reserved_attr(name)) continue;
    if (run.openAttribute(name).getTypeClass() == H5T_STRING)
      metadata.text.emplace_back(name, get_text(run, name, where));
    else metadata.numbers.emplace_back(name, get_number<double>(run, name, where));
  }
  return metadata;
}

RunData read_run_group(const H5::H5File& file, const std::string& group, Where& where) {
  where.object = group;
  if (!has_group(file.openGroup("/"), group)) where.fail("no such group");
  const H5::Group run = file.openGroup(group);
  if (!run.attrExists(kVersionAttr)) {
    if (run.attrExists(kIncompleteAttr))
      where.fail("holds a run that did not finish (" + get_text(run, kIncompleteAttr, where) +
                 "); its tables hold what it recorded");
    where.fail("holds no duet run (no duet_schema_version)");
  }
  const int version = get_number<std::int32_t>(run, kVersionAttr, where);
  if (version != kRunSchemaVersion)
    where.fail("schema version " + std::to_string(version) + " is not supported (this duet reads " +
               std::to_string(kRunSchemaVersion) + ")");
  RunData data;
  data.metadata = read_metadata(run, where);
  if (run.attrExists(kRecordAttr)) {
    const std::string level = get_text(run, kRecordAttr, where);
    try {
      data.level = record_level_from_name(level);
    } catch (const Error& e) {
      where.fail(std::string(kRecordAttr) + ": " + e.what());
    }
  }
  where.object = join(group, "summary");
  const H5::Group summary = open_group(run, "summary", where);
  data.summary.makespan_s = get_number<double>(summary, "makespan_s", where);
  data.summary.wall_s = get_number<double>(summary, "wall_s", where);
  where.object = join(group, "engines");
  const H5::Group engines = open_group(run, "engines", where);
  const std::string engines_path = where.object;
  for (const std::string& name : names_in_order(engines, false))
    read_engine(engines, engines_path, name, data, where);
  if (run.nameExists("problems")) {
    where.object = join(group, "problems");
    data.problems = read_table<ProblemRecord>(run, "problems", kProblemColumns, where);
  }
  return data;
}

// Depth first; the depth bound stops a corrupted file whose links form a cycle.
// `skipped` (non-null): a child group that cannot be read (a full disk's last group) is counted
// there and passed over instead of failing the walk.
void collect_runs(const H5::Group& group, const std::string& path, int depth, std::vector<std::string>& runs,
                  Where& where, int* skipped = nullptr) {
  where.object = path;
  if (depth > 64) where.fail("groups nested too deeply (a cycle of links?)");
  if (group.attrExists(kVersionAttr)) runs.push_back(path);
  for (hsize_t i = 0; i < group.getNumObjs(); ++i) {
    const std::string name = group.getObjnameByIdx(i);
    try {
      if (group.childObjType(name) == H5O_TYPE_GROUP)
        collect_runs(group.openGroup(name), join(path, name), depth + 1, runs, where, skipped);
    } catch (const H5::Exception&) {
      if (!skipped) throw;
      ++*skipped;
    }
  }
}

}  // namespace

struct RunFileWriter::Impl {
  std::string path;
  H5::H5File file;
  TableCompression compression;
};

void check_not_open_elsewhere(const std::string& path) {
  // HDF5's sec2 driver locks a file with flock(2) while it is open (shared to read, exclusive to
  // write), so an exclusive flock that cannot be had now means another holder.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;  // no file yet, or one the caller's open names
  const bool busy = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // and with it the lock
  if (busy)
    throw Error(path +
                ": open in another program (a notebook reading it, or another duet run writing it): it is "
                "left as it is; close it there, or choose another name");
}

RunFileWriter::RunFileWriter(const std::string& path, TableCompression compression) {
  if (compression.deflate < 0 || compression.deflate > 9)
    throw Error(path + ": deflate level " + std::to_string(compression.deflate) + " is not 0 (none) to 9");
  check_not_open_elsewhere(path);
  Where where{path, ""};
  impl_ = guarded(where, [&] {
    H5::FileCreatPropList fcpl;
    track_creation_order(fcpl.getId(), true);  // the root group's
    auto impl = std::make_unique<Impl>(Impl{path, H5::H5File(path, H5F_ACC_TRUNC, fcpl), compression});
    where.object = "/";
    put_text(impl->file.openGroup("/"), kCreatedAttr, utc_now());
    return impl;
  });
}

RunFileWriter::RunFileWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RunFileWriter RunFileWriter::append(const std::string& path, TableCompression compression) {
  Where where{path, ""};
  return RunFileWriter(guarded(where, [&] {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) where.fail("no such file");
    // Not H5File::isHdf5 first: HDF5 1.10 then keeps the file open read-only, and refuses RDWR.
    return std::make_unique<Impl>(Impl{path, H5::H5File(path, H5F_ACC_RDWR), compression});
  }));
}

RunFileWriter::~RunFileWriter() {
  try {
    close();
  } catch (const Error&) {
    // Nothing to report it to; close() is there for callers who want to know.
  }
}

RunFileWriter::RunFileWriter(RunFileWriter&&) noexcept = default;
RunFileWriter& RunFileWriter::operator=(RunFileWriter&&) noexcept = default;

void RunFileWriter::write_run(const std::string& group, const RunMetadata& metadata,
                              const std::vector<EngineRecords>& records, const RunSummary& summary,
                              const std::vector<ProblemRecord>* problems, RecordLevel level) {
  if (!impl_) throw Error("RunFileWriter::write_run: the file is closed");
  Where where{impl_->path, normalized(group)};
  std::set<std::string> names;
  check_metadata(metadata, names, where);
  check_engines(records, where);
  check_summary(records, summary, where);
  guarded(where, [&] {
    const std::string path = where.object;
    const H5::Group run = run_group(impl_->file, path, where);
    put_metadata(run, metadata);
    where.object = join(path, "summary");
    put_run_summary(run, summary);
    const std::string engines_path = join(path, "engines");
    where.object = engines_path;
    const H5::Group engines = create_group(run, "engines");
    for (const EngineRecords& r : records)
      write_engine(engines, join(engines_path, r.name), r, *find_summary(summary, r.name), level,
                   impl_->compression, where);
    if (problems && keeps_requests(level)) {
      where.object = join(path, "problems");
      write_table(run, "problems", *problems, kProblemColumns, impl_->compression);
    }
    where.object = path;
    mark_run(run, level);
    impl_->file.flush(H5F_SCOPE_GLOBAL);
  });
}

struct RunStream::Impl {
  struct EngineTables {
    EngineRecords engine;  // name, model and pool
    std::string path;      // of its group, for messages
    H5::Group group;
    TableStream<StepRecord> steps{"steps", kStepColumns, {}, {}, 0};
    TableStream<RequestRecord> requests{"requests", kRequestColumns, {}, {}, 0};
  };
  Where where;
  std::string path;  // the run's group
  H5::H5File file;
  H5::Group run;
  RecordLevel level;
  TableCompression compression;
  std::set<std::string> names;  // metadata written so far
  std::vector<EngineTables> engines;
  std::optional<TableStream<ProblemRecord>> problems;
  bool ended = false;
  ChunkWriter writer;  // last: destroyed (joined) before the tables its jobs write

  // A full chunk goes to the writer thread; the buffer starts again empty.
  template <class Row>
  void post(const H5::Group& parent, std::string object, TableStream<Row>& table) {
    auto chunk = std::make_shared<std::vector<Row>>();
    chunk->swap(table.rows);
    table.rows.reserve(kChunkRows);
    writer.post([this, &parent, &table, object = std::move(object), chunk] {
      Where at{where.file, object};
      guarded(at, [&] {
        table.append(parent, *chunk, false, compression);
        file.flush(H5F_SCOPE_GLOBAL);
      });
    });
  }

  EngineTables& engine(int e) {
    if (e < 0 || std::size_t(e) >= engines.size())
      throw Error(where.file + ": " + path + ": no engine " + std::to_string(e + 1) + " in this run");
    return engines[std::size_t(e)];
  }

  // The rows still buffered, after every posted chunk, on the caller's thread.
  template <class Row>
  void write_last(const H5::Group& parent, const std::string& object, TableStream<Row>& table) {
    where.object = object;
    guarded(where, [&] {
      table.append(parent, table.rows, true, compression);
      table.rows.clear();
    });
  }

  void write_rest() {
    writer.drain();
    for (EngineTables& e : engines) {
      if (keeps_steps(level)) write_last(e.group, join(e.path, "steps"), e.steps);
      if (keeps_requests(level)) write_last(e.group, join(e.path, "requests"), e.requests);
    }
    if (problems && keeps_requests(level)) write_last(run, join(path, "problems"), *problems);
  }
};

RunStream RunFileWriter::begin_run(const std::string& group, const RunMetadata& metadata,
                                   const std::vector<EngineRecords>& engines, RecordLevel level) {
  if (!impl_) throw Error("RunFileWriter::begin_run: the file is closed");
  Where where{impl_->path, normalized(group)};
  const std::string path = where.object;
  std::set<std::string> names;
  check_metadata(metadata, names, where);
  check_engines(engines, where);
  return guarded(where, [&] {
    const H5::Group run = run_group(impl_->file, path, where);
    put_metadata(run, metadata);
    const std::string engines_path = join(path, "engines");
    where.object = engines_path;
    const H5::Group engine_groups = create_group(run, "engines");
    std::vector<RunStream::Impl::EngineTables> tables;
    for (const EngineRecords& r : engines) {
      where.object = join(engines_path, r.name);
      tables.push_back({EngineRecords{r.name, r.model, r.total_blocks, r.block_size, {}, {}}, where.object,
                        create_engine(engine_groups, r)});
    }
    impl_->file.flush(H5F_SCOPE_GLOBAL);
    where.object = path;
    // Not make_unique: Impl is an aggregate, and clang before 16 lacks C++20's parenthesized
    // aggregate initialization.
    return RunStream(
        std::unique_ptr<RunStream::Impl>(new RunStream::Impl{where,  // NOLINT(modernize-make-unique)
                                                             path,
                                                             impl_->file,
                                                             run,
                                                             level,
                                                             impl_->compression,
                                                             std::move(names),
                                                             std::move(tables),
                                                             {},
                                                             false,
                                                             {}}));
  });
}

RunStream::RunStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RunStream::RunStream(RunStream&&) noexcept = default;

RunStream::~RunStream() {
  if (impl_ && !impl_->ended) abandon("the run stopped before it finished");
}

void RunStream::add_step(int e, const StepRecord& step) {
  Impl::EngineTables& t = impl_->engine(e);
  if (!keeps_steps(impl_->level)) return;
  t.steps.rows.push_back(step);
  if (t.steps.full()) impl_->post(t.group, join(t.path, "steps"), t.steps);
}

void RunStream::add_request(int e, const RequestRecord& request) {
  Impl::EngineTables& t = impl_->engine(e);
  if (!keeps_requests(impl_->level)) return;
  t.requests.rows.push_back(request);
  if (t.requests.full()) impl_->post(t.group, join(t.path, "requests"), t.requests);
}

void RunStream::add_problem(const ProblemRecord& problem) {
  if (!impl_->problems)
    impl_->problems.emplace(TableStream<ProblemRecord>{"problems", kProblemColumns, {}, {}, 0});
  if (!keeps_requests(impl_->level)) return;
  impl_->problems->rows.push_back(problem);
  if (impl_->problems->full()) impl_->post(impl_->run, join(impl_->path, "problems"), *impl_->problems);
}

void RunStream::finish(const RunSummary& summary, const RunMetadata& extra) {
  Impl& s = *impl_;
  if (s.ended) throw Error("RunStream::finish: the run has ended");
  std::vector<EngineRecords> engines;
  for (const Impl::EngineTables& t : s.engines) engines.push_back(t.engine);
  s.where.object = s.path;
  check_summary(engines, summary, s.where);
  check_metadata(extra, s.names, s.where);
  s.write_rest();
  guarded(s.where, [&] {
    for (Impl::EngineTables& t : s.engines) {
      s.where.object = t.path;
      put_summary(t.group, *find_summary(summary, t.engine.name));
    }
    s.where.object = join(s.path, "summary");
    put_run_summary(s.run, summary);
    s.where.object = s.path;
    put_metadata(s.run, extra);
    mark_run(s.run, s.level);
    s.file.flush(H5F_SCOPE_GLOBAL);
  });
  s.ended = true;
}

void RunStream::abandon(const std::string& reason) noexcept {
  if (!impl_ || impl_->ended) return;
  Impl& s = *impl_;
  s.ended = true;
  try {
    s.write_rest();
  } catch (...) {
    // The disk may be full: keep what reached the file and still try to say why.
  }
  try {
    s.where.object = s.path;
    guarded(s.where, [&] {
      put_text(s.run, kIncompleteAttr, reason);
      s.file.flush(H5F_SCOPE_GLOBAL);
    });
  } catch (...) {
  }
}

void RunFileWriter::write_attributes(const std::string& group, const RunMetadata& metadata) {
  if (!impl_) throw Error("RunFileWriter::write_attributes: the file is closed");
  Where where{impl_->path, normalized(group)};
  guarded(where, [&] {
    const H5::Group root = impl_->file.openGroup("/");
    const H5::Group g = where.object == "/"               ? root
                        : path_exists(root, where.object) ? root.openGroup(where.object)
                                                          : create_group(root, where.object);
    put_metadata(g, metadata);
    impl_->file.flush(H5F_SCOPE_GLOBAL);
  });
}

void RunFileWriter::remove_group(const std::string& group) {
  if (!impl_) throw Error("RunFileWriter::remove_group: the file is closed");
  Where where{impl_->path, normalized(group)};
  if (where.object == "/") where.fail("the root group cannot be removed");
  guarded(where, [&] {
    const H5::Group root = impl_->file.openGroup("/");
    if (!path_exists(root, where.object)) return;
    // The space it held is not given back (HDF5 does not shrink files); the link goes, and with it
    // everything below.
    if (H5Ldelete(root.getId(), where.object.c_str(), H5P_DEFAULT) < 0)
      throw H5::GroupIException("remove_group", "H5Ldelete failed");
    impl_->file.flush(H5F_SCOPE_GLOBAL);
  });
}

void RunFileWriter::close() {
  if (!impl_) return;
  std::unique_ptr<Impl> impl = std::move(impl_);
  Where where{impl->path, ""};
  // The file is closed once, here. H5::H5File would close it again in its destructor after a
  // failed close (a full disk), and HDF5 1.10 crashes on a file it has half closed. An extra
  // reference lets the H5::H5File go first without closing anything.
  const hid_t id = impl->file.getId();
  if (H5Iinc_ref(id) < 0) throw Error(impl->path + ": cannot close the file (H5Iinc_ref failed)");
  impl.reset();
  guarded(where, [&] {
    if (H5Fclose(id) < 0) throw H5::FileIException("RunFileWriter::close", "H5Fclose failed");
  });
}

namespace {

// The runs of a file that can still be reached, past the groups that cannot be read (counted in
// `skipped`); nullopt when the file does not open.
std::optional<std::vector<std::string>> reachable_runs(const std::string& path, int& skipped) {
  std::vector<std::string> runs;
  Where where{path, ""};
  try {
    guarded(where, [&] {
      const H5::H5File file = open_for_reading(path, where);
      collect_runs(file.openGroup("/"), "/", 0, runs, where, &skipped);
    });
  } catch (const Error&) {
    return std::nullopt;
  }
  return runs;
}

// A file whose runs cannot all be read back (a full disk can leave one that opens but holds a
// damaged heap, in the group it was writing) is not left at `path`: --resume and duet merge would
// refuse it. Where some of its runs still read (a sweep's finished points), it moves to
// PATH.damaged, so that nothing recorded is lost; where none does, it is removed. What happened,
// for the error message; empty when the file reads whole (or is absent).
std::string set_aside_unreadable(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return "";
  int skipped = 0;
  const std::optional<std::vector<std::string>> runs = reachable_runs(path, skipped);
  std::size_t readable = 0;
  for (const std::string& group : runs.value_or(std::vector<std::string>{})) {
    try {
      read_run(path, group);  // every run read: a file that opens can still hold a damaged heap
      ++readable;
    } catch (const Error&) {
    }
  }
  if (runs && skipped == 0 && readable == runs->size()) return "";
  if (readable > 0) {
    const std::string damaged = path + ".damaged";
    std::filesystem::rename(path, damaged, ec);
    if (!ec)
      return "; moved " + path + ", which it left damaged, to " + damaged + ", where " +
             std::to_string(readable) + " finished run" + (readable == 1 ? "" : "s") +
             " still read (duet_h5.load_run by group, or h5py; --resume and duet merge refuse the file)";
  }
  std::filesystem::remove(path, ec);
  return "; removed " + path + ", which it left unreadable";
}

}  // namespace

FailedRunFile close_after_failure(RunFileWriter& writer, const std::string& path, const std::string& error) {
  FailedRunFile out;
  try {
    writer.close();
  } catch (const Error&) {
    out.closed = false;
  }
  const std::string set_aside = set_aside_unreadable(path);
  out.message = error + (set_aside.empty() ? "; " + path + " holds what was recorded before it" : set_aside);
  return out;
}

RunData read_run(const std::string& path, const std::string& group) {
  Where where{path, ""};
  return guarded(where, [&] {
    const H5::H5File file = open_for_reading(path, where);
    return read_run_group(file, normalized(group), where);
  });
}

RunMetadata read_attributes(const std::string& path, const std::string& group) {
  Where where{path, normalized(group)};
  return guarded(where, [&] {
    const H5::H5File file = open_for_reading(path, where);
    const H5::Group root = file.openGroup("/");
    if (!has_group(root, where.object)) where.fail("no such group");
    return read_metadata(where.object == "/" ? root : root.openGroup(where.object), where);
  });
}

std::vector<std::string> list_runs(const std::string& path) {
  Where where{path, ""};
  return guarded(where, [&] {
    const H5::H5File file = open_for_reading(path, where);
    std::vector<std::string> runs;
    collect_runs(file.openGroup("/"), "/", 0, runs, where);
    return runs;
  });
}

std::vector<std::string> list_groups(const std::string& path, const std::string& group) {
  Where where{path, normalized(group)};
  return guarded(where, [&] {
    const H5::H5File file = open_for_reading(path, where);
    const H5::Group root = file.openGroup("/");
    std::vector<std::string> names;
    if (!has_group(root, where.object)) return names;
    const H5::Group g = where.object == "/" ? root : root.openGroup(where.object);
    for (hsize_t i = 0; i < g.getNumObjs(); ++i) {
      const std::string name = g.getObjnameByIdx(i);
      if (g.childObjType(name) == H5O_TYPE_GROUP) names.push_back(name);
    }
    std::sort(names.begin(), names.end());
    return names;
  });
}

}  // namespace duet
