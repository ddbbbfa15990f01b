#include "cli/command.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/file_bytes.hpp"

namespace po = boost::program_options;

namespace duet::cli {

namespace {

// Whether the file at `path` is a terminal (a script typed at /dev/stdin), opened without reading.
bool isatty_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOCTTY);
  const bool terminal = fd >= 0 && ::isatty(fd);
  if (fd >= 0) ::close(fd);
  return terminal;
}

// Boost's default style guesses an option from a prefix ("--max-num-seq" for "--max-num-seqs");
// a typo must be an error, not a silent choice.
constexpr int kStyle = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;

// Edits (insertions, deletions, substitutions) between a and b.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// What an unknown option was probably meant to be: one of the command's own within two edits
// ("--no-progres"), else, for a command that runs a script, a script argument given before "--".
std::string unknown_option_hint(const Command& c, const std::string& given) {
  const std::size_t start = given.find_first_not_of('-');
  const std::string name = start == std::string::npos ? given : given.substr(start);
  std::string closest;
  std::size_t best = 3;
  for (const auto& o : c.options.options()) {
    const std::size_t d = edit_distance(name, o->long_name());
    if (d < best) {
      best = d;
      closest = o->long_name();
    }
  }
  if (!closest.empty()) return "; did you mean --" + closest + "?";
  if (c.script_args)
    return std::string("; a script's own arguments go after --: duet ") + c.name + " SCRIPT -- " + given +
           " ...";
  return "";
}

// A text value that names another option of the command ("--out --resume": --out's value was
// forgotten) would be taken as a file called "--resume", and an empty --out as no file or the
// default one: both are errors naming the option.
void check_text_values(const Command& c, const po::variables_map& vm) {
  for (const auto& [name, value] : vm) {
    if (value.defaulted()) continue;
    const auto* text = boost::any_cast<std::string>(&value.value());
    if (!text) continue;
    if (text->empty() && name == "out") throw UsageError("--out: an empty file name");
    if (text->rfind("--", 0) != 0) continue;
    const std::size_t eq = text->find('=');  // --name=value names the option before '='
    const std::string other = text->substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (c.options.find_nothrow(other, false))
      throw UsageError("--" + name + " " + *text + ": the value of --" + name + " is missing (" + *text +
                       " is an option)");
  }
}

}  // namespace

int run_command(const Command& c, int argc, char** argv,
                const std::function<int(const po::variables_map&)>& body) {
  try {
    po::variables_map vm;
    po::command_line_parser parser(argc, argv);
    parser.options(c.options).style(kStyle);
    // A command without positional arguments refuses one (Boost's parser drops them silently).
    const po::positional_options_description none;
    parser.positional(c.positional ? *c.positional : none);
    po::store(parser.run(), vm);
    if (vm.count("help") || (c.required && !vm.count(c.required))) {
      std::cout << c.options << "\n";
      return vm.count("help") ? 0 : 2;
    }
    po::notify(vm);
    check_text_values(c, vm);
    return body(vm);
  } catch (const po::unknown_option& e) {
    const std::string hint = unknown_option_hint(c, e.get_option_name());
    std::fprintf(stderr, "duet %s: %s (see duet %s --help%s)\n", c.name, e.what(), c.name, hint.c_str());
    return 2;
  } catch (const po::error& e) {
    std::fprintf(stderr, "duet %s: %s (see duet %s --help)\n", c.name, e.what(), c.name);
    return 2;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "duet %s: error: %s (see duet %s --help)\n", c.name, e.what(), c.name);
    return 2;
  } catch (const FailedCloseError& e) {
    std::fprintf(stderr, "duet %s: error: %s\n", c.name, e.what());
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(c.error_status);
  } catch (const Error& e) {
    std::fprintf(stderr, "duet %s: error: %s\n", c.name, e.what());
    return c.error_status;
  } catch (const std::bad_alloc&) {
    // A flag or an input that asks for more memory than there is (--evict-mib, a batch, a file
    // that never ends): an error, not an abort.
    std::fprintf(stderr,
                 "duet %s: error: out of memory: an option or input asks for more than this machine gives\n",
                 c.name);
    return c.error_status;
  } catch (const std::exception& e) {  // a library's exception that no layer turned into an Error
    std::fprintf(stderr, "duet %s: internal error: %s\n", c.name, e.what());
    return c.error_status;
  }
}

void rethrow_after_write_failure(RunFileWriter& writer, const std::string& path, const std::string& error) {
  const FailedRunFile failed = close_after_failure(writer, path, error);
  if (!failed.closed) throw FailedCloseError(failed.message);
  throw Error(failed.message);
}

std::string command_line_of(int argc, char** argv) {
  std::string line = "duet";
  for (int i = 0; i < argc; ++i) line += std::string(" ") + argv[i];
  return line;
}

void check_at_least(const char* flag, std::int64_t value, std::int64_t floor) {
  if (value < floor)
    throw Error(std::string(flag) + " must be at least " + std::to_string(floor) + ", got " +
                std::to_string(value));
}

RecordLevel parse_record_level(const std::string& option, const std::string& text) {
  try {
    return record_level_from_name(text);
  } catch (const Error& e) {
    throw Error(option + ": " + e.what());
  }
}

void check_script(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(path + ": no such script file");
  if (fs::is_directory(path, ec)) throw Error(path + ": is a directory, not a script");
  // Not opened here: a script from a pipe can be read once only (by the run).
  if (::access(path.c_str(), R_OK) != 0) throw Error(path + ": cannot open script");
  if ((fs::is_character_file(path, ec) || fs::is_block_file(path, ec)) && !isatty_path(path))
    throw Error(path + ": a device, not a script");
}

void check_output(const std::string& out, const std::vector<std::string>& inputs, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const std::string& in : inputs)
    if (!in.empty() && fs::equivalent(out, in, ec))
      throw Error(what + " " + out + " is the input " + in + ": refusing to overwrite it");
  if (fs::is_directory(out, ec)) throw Error(what + " " + out + ": is a directory, not a file");
  const fs::path dir = fs::absolute(out).parent_path();
  if (!fs::is_directory(dir, ec)) throw Error(what + " " + out + ": no directory " + dir.string());
  if (::access(dir.c_str(), W_OK) != 0)
    throw Error(what + " " + out + ": directory " + dir.string() + " is not writable");
  if (fs::exists(out, ec) && ::access(out.c_str(), W_OK) != 0)
    throw Error(what + " " + out + ": the file is not writable");
  // access() grants root everything, yet root cannot create files in /sys or under NFS's
  // root_squash: for a file not there yet, a file of this process's own is created beside it (a
  // link's target, where the output will go) and removed again, so that a run does not end in
  // an output it cannot write.
  if (!fs::exists(out, ec)) {
    const std::string probe = output_target(out) + ".probe." + std::to_string(::getpid());
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) throw Error(what + " " + out + ": cannot create it: " + std::strerror(errno));
    ::close(fd);
    fs::remove(probe, ec);
  }
}

void check_hdf5_output(const std::string& out, const std::vector<std::string>& inputs,
                       const std::string& what, bool in_place) {
  check_output(out, inputs, what);
  // HDF5's format signature, at offset 0 in every file duet writes (HDF5 File Format Specification,
  // "Format Signature").
  static constexpr char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  std::error_code ec;
  if (!std::filesystem::is_regular_file(out, ec)) return;  // no file yet, or a device (/dev/full)
  std::ifstream in(out, std::ios::binary);
  char head[8] = {};
  in.read(head, sizeof head);
  if (in.gcount() == 0) return;  // an empty file holds nothing to lose
  if (in.gcount() < 8 || !std::equal(head, head + 8, kSignature))
    throw Error(what + " " + out +
                " exists and is not an HDF5 file: refusing to replace it (remove it, or "
                "choose another name)");
  if (in_place) check_not_open_elsewhere(out);
}

}  // namespace duet::cli
