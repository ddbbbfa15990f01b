#pragma once
// The points of a duet.sweep and what became of each: the vocabulary that the sweep's threads, its
// MPI ranks and its file share.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cli/lua/lua_experiment.hpp"

namespace duet::lua {

// A grid point's parameters, in the grid's key order.
struct SweepPoint {
  std::vector<std::pair<std::string, std::string>> text;
  std::vector<std::pair<std::string, double>> numbers;  // booleans as 1 and 0
  std::vector<std::string> booleans;                    // the keys in numbers that are booleans
};

enum class PointStatus : std::uint8_t {
  NotRun,       // another shard's point, or not reached before a stop
  Done,         // ran (or was read back from the file by --resume)
  Failed,       // run(point) or the run raised an error: `error` says which
  Interrupted,  // stopped by SIGINT/SIGTERM before it finished: neither done nor failed
};

struct PointOutcome {
  std::size_t index = 0;  // in the grid
  PointStatus status = PointStatus::NotRun;
  ExperimentResult result;  // Done
  std::string error;        // Failed
  double busy_s = 0;        // wall seconds the point took where it ran
  int rank = 0;             // the MPI rank that ran it; -1: read back from the file
};

// A finished sweep: one outcome per grid point, in grid order.
struct SweepResults {
  std::vector<PointOutcome> outcomes;
};

// For the ranks of an MPI job: an outcome as bytes and back (the result through result_codec).
std::vector<char> encode_outcome(const PointOutcome& outcome);
PointOutcome decode_outcome(const std::vector<char>& bytes);

}  // namespace duet::lua
