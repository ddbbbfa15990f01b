#pragma once
// The points a rank's sweep threads take, one at a time, and the outcomes they hand back to the
// rank's main thread (which alone writes the file and talks MPI). Handing points out one at a time
// balances the load: points differ in cost by orders of magnitude.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

#include "cli/lua/sweep_points.hpp"

namespace duet::lua {

class PointQueue {
 public:
  // Sweep threads: the next point, waiting for one; nullopt once the queue is closed and empty.
  std::optional<std::size_t> next();
  void report(PointOutcome outcome);
  void worker_exited();  // a thread's last call

  // The main thread.
  void add(std::size_t index);
  std::optional<std::size_t> take();  // a point for another rank, if any is left
  void close();                       // no more points will be added
  void stop();                        // drop the points not yet taken, and close
  // The outcomes reported so far, waiting up to `wait` for one (or for a thread to exit).
  std::vector<PointOutcome> outcomes(std::chrono::milliseconds wait);
  int exited() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable to_workers_, to_main_;
  std::deque<std::size_t> todo_;
  std::vector<PointOutcome> done_;
  bool closed_ = false;
  int exited_ = 0;
};

}  // namespace duet::lua
