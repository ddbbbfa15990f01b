#pragma once
// The build's provenance, recorded in every run file, profile and benchmark result.

namespace duet {

// The commit the build's sources were at (12 hex digits), with "-dirty" when tracked files
// differed from it, or "unknown" outside a git checkout. Generated at every build
// (cmake/git_revision.cmake).
const char* build_revision();

// The project's version (CMakeLists.txt's project(VERSION)): what `duet --version` prints.
const char* duet_version();

}  // namespace duet
