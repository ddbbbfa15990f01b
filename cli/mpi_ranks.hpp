#pragma once
// The ranks of an MPI job (mpirun -n N duet run ...), through MPI's C API, or one process. Only
// the main thread of each rank calls these (MPI_THREAD_FUNNELED): sweep threads never do.
// In a build without MPI (DUET_MPI=OFF), mpi_ranks_none.cpp stands in: always one process.
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace duet::cli {

struct Ranks {
  int rank = 0;  // this process; rank 0 owns the HDF5 file and the printed output
  int size = 1;
};

// Whether this build can run under mpirun.
bool built_with_mpi();

// What an MPI launcher says in the environment, for both builds: Open MPI's mpirun, and PMI/PMIx
// (Slurm's srun, MPICH). `several`: it started other copies beside this one (a size above 1, or a
// rank above 0, where the launcher gives no size).
struct Launch {
  bool by_mpi = false;
  bool several = false;
};
inline Launch launch_from_environment() {
  Launch l;
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(name)) l.by_mpi = true, l.several = l.several || std::atoi(v) > 1;
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* v = std::getenv(name)) l.by_mpi = true, l.several = l.several || std::atoi(v) > 0;
  return l;
}

// Starts MPI when the process was started by an MPI launcher (mpirun, srun --mpi), else returns
// one process without touching MPI, so that a plain `duet run` pays nothing for it.
Ranks start_ranks(int* argc, char*** argv);

// Ends MPI after a command: MPI_Finalize when every rank reached the end together (`finished`: the
// script ran to its end, or a stop that every rank learned of); otherwise MPI_Abort with `status`,
// which ends every rank (a rank that failed alone would leave the others waiting for it).
void end_ranks(const Ranks& ranks, int status, bool finished);

// Bytes from one rank to another, tagged; a message names where it came from.
struct Message {
  int source = 0;
  int tag = 0;
  std::vector<char> bytes;
};
void send_bytes(int destination, int tag, const std::vector<char>& bytes);
// A message that has arrived from any rank, if one has; never waits.
std::optional<Message> poll_message();
// Rank 0's `bytes` on every rank (a collective call: every rank must make it).
std::vector<char> broadcast_bytes(std::vector<char> bytes, const Ranks& ranks);

}  // namespace duet::cli
