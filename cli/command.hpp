#pragma once
// The frame every duet subcommand shares: parse the options (no prefix guessing), answer --help,
// run the body, and turn bad usage and duet errors into one-line messages with exit status 2.
#include <boost/program_options.hpp>
#include <functional>

namespace duet::cli {

struct Command {
  const char* name;  // "simulate": messages read "duet simulate: ..."
  const boost::program_options::options_description& options;
  const boost::program_options::positional_options_description* positional = nullptr;
  const char* required = nullptr;  // a positional without which the command prints its help
  int error_status = 2;            // exit status for a duet::Error from the body
};

int run_command(const Command& command, int argc, char** argv,
                const std::function<int(const boost::program_options::variables_map&)>& body);

}  // namespace duet::cli
