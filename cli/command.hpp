#pragma once
// The frame every duet subcommand shares: parse the options (no prefix guessing), answer --help,
// run the body, and turn bad usage (exit status 2) and duet errors into one-line messages.
#include <boost/program_options.hpp>
#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/metrics.hpp"
#include "io/hdf5_run.hpp"

namespace duet::cli {

struct Command {
  const char* name;  // "simulate": messages read "duet simulate: ..."
  const boost::program_options::options_description& options;
  const boost::program_options::positional_options_description* positional = nullptr;
  const char* required = nullptr;  // a positional without which the command prints its help
  int error_status = 2;            // exit status for a duet::Error from the body (UsageError: 2)
  bool script_args = false;        // takes a script's own arguments after "--" (run, validate)
};

int run_command(const Command& command, int argc, char** argv,
                const std::function<int(const boost::program_options::variables_map&)>& body);

// "duet" and the command's arguments as typed (argv[0] is the command's name): the command_line a
// run file records.
std::string command_line_of(int argc, char** argv);

// Before any work: throws duet::Error when `out` is one of `inputs` (an output must never overwrite
// what the command reads), or cannot be written (a missing or read-only directory, a read-only
// file, a directory). `what` names the option ("--out").
void check_output(const std::string& out, const std::vector<std::string>& inputs,
                  const std::string& what = "--out");
// check_output for an HDF5 file, which also refuses to replace an existing file of another kind
// (a JSON profile given as --out by mistake) and, unless the command writes beside it and renames
// (`in_place` false), a file another program holds open: before the work, not after it.
void check_hdf5_output(const std::string& out, const std::vector<std::string>& inputs,
                       const std::string& what = "--out", bool in_place = true);

// Bad usage found after parsing (a flag's value, a missing input file): exit status 2 from every
// command, also from those whose other errors exit 1 (a failed run).
struct UsageError : Error {
  using Error::Error;
};

// Runs `checks` (the body's validation of its flags), turning their duet::Error into UsageError.
template <typename F>
void check_usage(F&& checks) {
  try {
    checks();
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

// Before any work: the script exists and can be read (a pipe such as /dev/stdin too); throws
// duet::Error naming it otherwise.
void check_script(const std::string& path);

// An error after which HDF5 could not close a file (a full disk). run_command reports it as any
// error and ends the process without the exit handlers: HDF5 1.10's own would close the file
// again and crash, after the error and the file were already dealt with.
struct FailedCloseError : Error {
  using Error::Error;
};

// After `error` while writing `writer`'s file at `path`: closes the file, removes it if it was left
// unreadable, and throws the error saying which (a FailedCloseError when HDF5 could not close it).
[[noreturn]] void rethrow_after_write_failure(RunFileWriter& writer, const std::string& path,
                                              const std::string& error);

// A flag's value below its floor: throws duet::Error naming the flag and the value given.
void check_at_least(const char* flag, std::int64_t value, std::int64_t floor);

// The --record option: throws duet::Error naming `option` for an unknown level.
RecordLevel parse_record_level(const std::string& option, const std::string& text);

}  // namespace duet::cli
