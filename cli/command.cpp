#include "cli/command.hpp"

#include <cstdio>
#include <iostream>

#include "cli/options_style.hpp"
#include "core/error.hpp"

namespace po = boost::program_options;

namespace duet::cli {

int run_command(const Command& c, int argc, char** argv, const std::function<int(const po::variables_map&)>& body) {
  try {
    po::variables_map vm;
    po::command_line_parser parser(argc, argv);
    parser.options(c.options).style(kStyle);
    if (c.positional) parser.positional(*c.positional);
    po::store(parser.run(), vm);
    if (vm.count("help")) {
      std::cout << c.options << "\n";
      return 0;
    }
    po::notify(vm);
    return body(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "duet %s: %s (see duet %s --help)\n", c.name, e.what(), c.name);
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "duet %s: error: %s\n", c.name, e.what());
    return 2;
  }
}

}  // namespace duet::cli
