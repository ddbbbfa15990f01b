#include "cli/command.hpp"

#include <cstdio>
#include <iostream>

#include "core/error.hpp"

namespace po = boost::program_options;

namespace duet::cli {

namespace {

// Boost's default style guesses an option from a prefix ("--max-num-seq" for "--max-num-seqs");
// a typo must be an error, not a silent choice.
constexpr int kStyle = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;

}  // namespace

int run_command(const Command& c, int argc, char** argv, const std::function<int(const po::variables_map&)>& body) {
  try {
    po::variables_map vm;
    po::command_line_parser parser(argc, argv);
    parser.options(c.options).style(kStyle);
    if (c.positional) parser.positional(*c.positional);
    po::store(parser.run(), vm);
    if (vm.count("help") || (c.required && !vm.count(c.required))) {
      std::cout << c.options << "\n";
      return vm.count("help") ? 0 : 2;
    }
    po::notify(vm);
    return body(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "duet %s: %s (see duet %s --help)\n", c.name, e.what(), c.name);
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "duet %s: error: %s\n", c.name, e.what());
    return c.error_status;
  }
}

}  // namespace duet::cli
