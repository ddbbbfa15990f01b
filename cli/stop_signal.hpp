#pragma once
// SIGINT and SIGTERM (Ctrl-C, Slurm's scancel and time limit, mpirun passing either on) ask a
// sweep to stop between points, so that it closes its HDF5 file holding every finished point. The
// handler only records the signal; the sweep checks it between points and the Lua instruction
// hook checks it inside one. A second signal ends the process at once.
#include <atomic>

namespace duet::cli {

// The signal that asked to stop, 0 while none has. The one process-wide variable in duet: a signal
// handler can reach nothing else. A lock-free atomic, which a handler may store to.
extern std::atomic<int> g_stop_signal;

// Installs the handlers for SIGINT and SIGTERM (duet run and duet simulate; other commands keep the
// defaults).
void install_stop_handlers();

// The exit status of a process ended by `signal`, as a shell reports it: 128 + the signal.
int stopped_exit_status(int signal);

}  // namespace duet::cli
