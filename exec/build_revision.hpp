#pragma once
// The build's provenance, recorded in every run file, profile and benchmark result.

namespace duet {

// The commit the build's sources were at (12 hex digits), with "-dirty." and 8 hex digits of the
// SHA-1 of the diff from it when tracked files differed ("-dirty.1a2b3c4d"), or "unknown" outside a
// git checkout. Generated at every build
// (cmake/git_revision.cmake).
const char* build_revision();

// The project's version (CMakeLists.txt's project(VERSION)): what `duet --version` prints.
const char* duet_version();

}  // namespace duet
