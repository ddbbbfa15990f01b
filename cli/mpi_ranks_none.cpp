// duet built without MPI (DUET_MPI=OFF, or no MPI found): always one process. A launcher that
// starts several copies gets a clear error from each rather than N sweeps writing one file.
#include "cli/mpi_ranks.hpp"
#include "core/error.hpp"

namespace duet::cli {

bool built_with_mpi() { return false; }

Ranks start_ranks(int*, char***) {
  if (launch_from_environment().several)
    throw Error(
        "this duet was built without MPI (DUET_MPI=OFF or no MPI found); run it without mpirun, "
        "or shard the sweep with --shard I/N");
  return {};
}

void end_ranks(const Ranks&, int, bool) {}

void send_bytes(int, int, const std::vector<char>&) { throw Error("send_bytes: built without MPI"); }

std::optional<Message> poll_message() { return std::nullopt; }

std::vector<char> broadcast_bytes(std::vector<char> bytes, const Ranks&) { return bytes; }

}  // namespace duet::cli
