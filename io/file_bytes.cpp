#include "io/file_bytes.hpp"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_fields.hpp"
#include "io/text_lines.hpp"

namespace duet {

namespace {

[[noreturn]] void fail(const std::string& path, std::size_t line, const std::string& what) {
  throw Error(path + ":" + std::to_string(line) + ": " + what);
}

[[noreturn]] void fail_file(const std::string& path, const std::string& what) {
  throw Error(path + ": " + what);
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose_r(f); }
};

std::string read_gzip(const std::string& path) {
  std::unique_ptr<gzFile_s, GzCloser> gz(gzopen(path.c_str(), "rb"));
  if (!gz) fail_file(path, std::string("cannot open: ") + std::strerror(errno));
  gzbuffer(gz.get(), 1 << 17);
  std::string data;
  std::vector<char> buf(1 << 17);
  int n = 0;
  while ((n = gzread(gz.get(), buf.data(), static_cast<unsigned>(buf.size()))) > 0)
    data.append(buf.data(), n);
  // A truncated stream is not a read error for gzread: it returns what it could inflate and
  // leaves Z_BUF_ERROR behind, so the error state must be checked after the loop.
  int err = Z_OK;
  std::string why = gzerror(gz.get(), &err);
  if (why.starts_with(path + ": ")) why.erase(0, path.size() + 2);  // zlib names the file too
  if (n < 0 || err != Z_OK) {
    fail(path, count_lines(data),
         "gzip data is truncated or corrupt after " + std::to_string(data.size()) +
             " uncompressed bytes (zlib: " + why + ")");
  }
  return data;
}

std::string read_plain(const std::string& path, std::FILE* f) {
  std::string data;
  std::vector<char> buf(1 << 17);
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) data.append(buf.data(), n);
  if (std::ferror(f)) fail_file(path, std::string("cannot read: ") + std::strerror(errno));
  return data;
}

// The whole file, inflated when it starts with the gzip magic bytes whatever its name.
}  // namespace

std::string read_file_bytes(const std::string& path) {
  // A pipe cannot be read from its start again (for the gzip test below), and a device such as
  // /dev/zero never ends: both are refused, not read until memory runs out.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    fail_file(path, "not a regular file (a pipe or a device): give a file");
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) fail_file(path, std::string("cannot open: ") + std::strerror(errno));
  unsigned char magic[2] = {0, 0};
  const std::size_t got = std::fread(magic, 1, 2, f.get());
  if (std::ferror(f.get())) fail_file(path, std::string("cannot read: ") + std::strerror(errno));
  if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b) return read_gzip(path);
  std::rewind(f.get());
  return read_plain(path, f.get());
}

nlohmann::json read_json_file(const std::string& path) {
  return json_fields::parse(read_file_bytes(path), path);
}

std::string output_target(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = path;
  for (int links = 0; links < 40 && fs::is_symlink(p, ec); ++links) {  // 40: Linux's own limit
    const fs::path to = fs::read_symlink(p, ec);
    if (ec) break;
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  const fs::path resolved = fs::weakly_canonical(p, ec);
  return ec ? p.string() : resolved.string();
}

void write_json_file(const std::string& path, const nlohmann::json& json, int indent) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string text = json.dump(indent) + "\n";
  // Writes `text` to `file`: false when the write fails (an open that fails names the path).
  const auto write_text = [&](const std::string& file) {
    std::ofstream out(file);
    if (!out) fail_file(path, std::string("cannot open for writing: ") + std::strerror(errno));
    out << text;
    out.flush();
    return bool(out);
  };
  // A device or a pipe (/dev/stdout) is written as it is; a file is written beside itself (beside
  // the file a link names) and renamed over it, so that a failed write, a full disk, leaves the
  // earlier file whole and no half-written one.
  if (fs::exists(path, ec) && !fs::is_regular_file(path, ec)) {
    if (!write_text(path)) fail_file(path, "cannot write");
    return;
  }
  const fs::path target = output_target(path);
  // A name of this process's own: two writers of one file do not share a half-written one.
  const std::string writing = target.string() + ".writing." + std::to_string(::getpid());
  if (!write_text(writing)) {
    fs::remove(writing, ec);
    fail_file(path, "cannot write (a full disk?); an earlier file there is unchanged");
  }
  // The earlier file's permissions (a profile shared with a group stays shared).
  if (const fs::file_status earlier = fs::status(target, ec); !ec && fs::is_regular_file(earlier))
    fs::permissions(writing, earlier.permissions(), ec);
  fs::rename(writing, target, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(writing, ec);
    fail_file(path, "cannot replace it: " + why);
  }
}

}  // namespace duet
