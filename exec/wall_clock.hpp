#pragma once
// The real engines' clock: sleeps until an event is due and measures steps as they happen.
#include <chrono>
#include <thread>

#include "core/clock.hpp"

namespace duet {

class WallClock final : public Clock {
 public:
  WallClock() : start_(std::chrono::steady_clock::now()) {}
  double now() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void wait_until(double t) override {
    const double dt = t - now();
    if (dt > 0) std::this_thread::sleep_for(std::chrono::duration<double>(dt));
  }
  // A real step has already happened when the executor returns: it ends now.
  double step_end(double, double) const override { return now(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace duet
