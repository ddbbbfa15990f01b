// write_json_file: a profile or prior written beside its file and renamed over it, so that a write
// that fails (a full disk) leaves the earlier file whole.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/file_bytes.hpp"
#include "tests/support/test_support.hpp"

namespace duet {
namespace {

namespace fs = std::filesystem;
using test_support::contains;
using test_support::error_of;
using test_support::TempDir;

std::size_t files_in(const fs::path& dir) {
  return std::size_t(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

nlohmann::json big_document() {
  nlohmann::json j;
  j["rows"] = nlohmann::json::array();
  for (int i = 0; i < 20000; ++i) j["rows"].push_back({{"index", i}, {"value", i * 0.5}});
  return j;
}

TEST(WriteJsonFile, WritesAndReplacesAWholeDocument) {
  const TempDir dir;
  const std::string path = dir.file("p.json");
  write_json_file(path, {{"a", 1}}, 2);
  write_json_file(path, {{"b", 2}}, 2);
  EXPECT_EQ(read_json_file(path), (nlohmann::json{{"b", 2}}));
  EXPECT_EQ(files_in(dir.path()), 1) << "a temporary file was left";
}

// A child process limited to 4 KiB of file (RLIMIT_FSIZE, SIGXFSZ ignored, as a full disk fails a
// write) writes over an earlier profile: the write fails with an error naming the file, and the
// earlier profile is still there, whole, with no partial file beside it.
TEST(WriteJsonFile, AFailedWriteLeavesTheEarlierFileWhole) {
  const TempDir dir;
  const std::string path = dir.file("p.json");
  write_json_file(path, {{"earlier", true}}, 2);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{4096, 4096};
    setrlimit(RLIMIT_FSIZE, &limit);
    const std::string msg = error_of([&] { write_json_file(path, big_document(), 2); });
    _exit(contains(msg, path) && contains(msg, "cannot write") ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the write did not fail with an error naming the file";
  EXPECT_EQ(read_json_file(path), (nlohmann::json{{"earlier", true}}));
  EXPECT_EQ(files_in(dir.path()), 1) << "a temporary file was left";
}

// A link stays a link: the file it names is replaced, or made when it does not exist yet.
TEST(WriteJsonFile, ALinkStaysALink) {
  const TempDir dir;
  const std::string target = dir.file("real.json"), link = dir.file("link.json");
  write_json_file(target, {{"v", 1}}, 0);
  fs::create_symlink(target, link);
  write_json_file(link, {{"v", 2}}, 0);
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_json_file(target), (nlohmann::json{{"v", 2}}));
  const std::string dangling = dir.file("dangling.json"), later = dir.file("later.json");
  fs::create_symlink(later, dangling);
  write_json_file(dangling, {{"v", 3}}, 0);
  EXPECT_TRUE(fs::is_symlink(dangling));
  EXPECT_EQ(read_json_file(later), (nlohmann::json{{"v", 3}}));
}

// The file keeps its permissions when it is replaced (a profile shared with a group stays shared).
TEST(WriteJsonFile, KeepsTheEarlierFilesPermissions) {
  const TempDir dir;
  const std::string path = dir.file("p.json");
  write_json_file(path, {{"v", 1}}, 0);
  const fs::perms shared = fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                           fs::perms::group_write | fs::perms::others_read;
  fs::permissions(path, shared);
  write_json_file(path, {{"v", 2}}, 0);
  EXPECT_EQ(fs::status(path).permissions(), shared);
}

TEST(WriteJsonFile, AnUnwritablePlaceIsAnErrorNamingTheFile) {
  const TempDir dir;
  const std::string path = dir.file("missing-dir/p.json");
  const std::string msg = error_of([&] { write_json_file(path, {{"a", 1}}, 2); });
  EXPECT_TRUE(contains(msg, path) && contains(msg, "cannot open for writing")) << msg;
}

}  // namespace
}  // namespace duet
