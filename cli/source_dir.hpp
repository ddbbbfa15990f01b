#pragma once
// The repository whose data (workloads/, models/, traces/, profiles/) the program reads:
// $DUET_HOME when set (a bundle copied elsewhere), else the source tree it was built from.
#include <cstdlib>
#include <string>

#ifndef DUET_SOURCE_DIR
#define DUET_SOURCE_DIR "."
#endif

namespace duet::cli {

inline std::string source_dir() {
  const char* home = std::getenv("DUET_HOME");
  return home ? home : DUET_SOURCE_DIR;
}

}  // namespace duet::cli
