#pragma once
// A sweep point's result as bytes, for the ranks of an MPI job (a point run on rank 3 is written and
// returned to Lua by rank 0), and rebuilt from the run file (a point that --resume skips). Both
// give back exactly what run_experiment returned, so that writing and push_result see no difference.
#include <string>
#include <vector>

#include "cli/lua/lua_experiment.hpp"
#include "io/hdf5_run.hpp"

namespace duet::lua {

// Bytes for the ranks of one job (the same duet program on every rank): not a file format.
std::vector<char> encode_result(const ExperimentResult& result);
// Throws duet::Error when the bytes end early or hold more than one result.
ExperimentResult decode_result(const std::vector<char>& bytes);

// A run read back from its file, as run_experiment returned it when it was written.
ExperimentResult result_of_run(RunData run);

}  // namespace duet::lua
