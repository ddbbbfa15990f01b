#include "cli/stop_signal.hpp"

#include <csignal>

namespace duet::cli {

std::atomic<int> g_stop_signal{0};

static_assert(std::atomic<int>::is_always_lock_free, "a signal handler may only touch lock-free atomics");

namespace {

// Async-signal-safe: one atomic store and signal(). The default action is restored, so that a
// second Ctrl-C ends a process that does not stop soon enough.
extern "C" void on_stop_signal(int signal) {
  g_stop_signal.store(signal);
  std::signal(signal, SIG_DFL);
}

}  // namespace

void install_stop_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

int stopped_exit_status(int signal) { return 128 + signal; }

}  // namespace duet::cli
