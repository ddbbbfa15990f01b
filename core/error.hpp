#pragma once
// One exception type for every user-facing error. The message names the file, field or option at
// fault, so that the CLI can print it as it is.
#include <stdexcept>
#include <string>

namespace duet {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace duet
