// MPI's C API only: its deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <cstdlib>

#include "cli/mpi_ranks.hpp"
#include "core/error.hpp"

namespace duet::cli {

namespace {

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Error(std::string(call) + " failed: " + std::string(text, std::size_t(length)));
}

// MPI counts in int; larger messages go in pieces of at most this many bytes.
constexpr std::size_t kPiece = std::size_t(1) << 30;

}  // namespace

bool built_with_mpi() { return true; }

Ranks start_ranks(int* argc, char*** argv) {
  Ranks ranks;
  if (!launch_from_environment().by_mpi) return ranks;
  int provided = 0;
  check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  if (provided < MPI_THREAD_FUNNELED) throw Error("MPI provides no MPI_THREAD_FUNNELED support");
  MPI_Comm_rank(MPI_COMM_WORLD, &ranks.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks.size);
  return ranks;
}

void end_ranks(const Ranks&, int status, bool finished) {
  int started = 0, ended = 0;
  MPI_Initialized(&started);
  MPI_Finalized(&ended);
  if (!started || ended) return;
  if (!finished) MPI_Abort(MPI_COMM_WORLD, status);
  MPI_Finalize();
}

void send_bytes(int destination, int tag, const std::vector<char>& bytes) {
  // The length first, then the bytes in pieces: a message of any size in int-sized counts.
  const auto size = std::uint64_t(bytes.size());
  check(MPI_Send(&size, 1, MPI_UINT64_T, destination, tag, MPI_COMM_WORLD), "MPI_Send");
  for (std::size_t at = 0; at < bytes.size(); at += kPiece) {
    const int n = int(std::min(kPiece, bytes.size() - at));
    check(MPI_Send(bytes.data() + at, n, MPI_CHAR, destination, tag, MPI_COMM_WORLD), "MPI_Send");
  }
}

std::optional<Message> poll_message() {
  int ready = 0;
  MPI_Status status;
  check(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &ready, &status), "MPI_Iprobe");
  if (!ready) return std::nullopt;
  Message m{status.MPI_SOURCE, status.MPI_TAG, {}};
  std::uint64_t size = 0;
  check(MPI_Recv(&size, 1, MPI_UINT64_T, m.source, m.tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
  m.bytes.resize(std::size_t(size));
  // MPI keeps the order of messages between two ranks with one tag: the pieces follow their length.
  for (std::size_t at = 0; at < m.bytes.size(); at += kPiece) {
    const int n = int(std::min(kPiece, m.bytes.size() - at));
    check(MPI_Recv(m.bytes.data() + at, n, MPI_CHAR, m.source, m.tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
          "MPI_Recv");
  }
  return m;
}

std::vector<char> broadcast_bytes(std::vector<char> bytes, const Ranks& ranks) {
  auto size = std::uint64_t(bytes.size());
  check(MPI_Bcast(&size, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD), "MPI_Bcast");
  if (ranks.rank != 0) bytes.resize(std::size_t(size));
  for (std::size_t at = 0; at < bytes.size(); at += kPiece) {
    const int n = int(std::min(kPiece, bytes.size() - at));
    check(MPI_Bcast(bytes.data() + at, n, MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
  }
  return bytes;
}

}  // namespace duet::cli
