#pragma once
// The real engines' clock: sleeps until an event is due and measures steps as they happen.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "core/clock.hpp"

namespace duet {

// Wall seconds from t0 to t1, by default to now: how long a measured piece of work took.
inline double seconds_since(std::chrono::steady_clock::time_point t0,
                            std::chrono::steady_clock::time_point t1 = std::chrono::steady_clock::now()) {
  return std::chrono::duration<double>(t1 - t0).count();
}

class WallClock final : public Clock {
 public:
  WallClock() : start_(std::chrono::steady_clock::now()) {}
  double now() const override { return seconds_since(start_); }
  // In slices of at most 50 ms when a stop may come: a signal ends a long wait within one.
  void wait_until(double t, const std::atomic<int>* stop) override {
    for (double dt = t - now(); dt > 0; dt = t - now()) {
      if (stop && stop->load(std::memory_order_relaxed) != 0) return;
      std::this_thread::sleep_for(std::chrono::duration<double>(stop ? std::min(dt, 0.05) : dt));
    }
  }
  // A real step has already happened when the executor returns: it ends now.
  double step_end(double, double) const override { return now(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace duet
