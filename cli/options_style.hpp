#pragma once
#include <boost/program_options/parsers.hpp>

namespace duet::cli {

// Boost's default style guesses an option from a prefix ("--max-num-seq" for "--max-num-seqs");
// a typo must be an error, not a silent choice.
inline constexpr int kStyle =
    boost::program_options::command_line_style::default_style & ~boost::program_options::command_line_style::allow_guessing;

}  // namespace duet::cli
