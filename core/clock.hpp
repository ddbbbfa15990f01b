#pragma once
// Time for the runtime, as a parameter: core never reads real time. The simulator's virtual clock
// (here, pure data) jumps from event to event; the real engines' WallClock lives in exec/.

#include <atomic>

namespace duet {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual double now() const = 0;
  // Moves time to t (>= now): the virtual clock jumps, the wall clock sleeps, and wakes early once
  // `stop` (when given) is non-zero, so that a signal is not slept through (Runtime::stop).
  virtual void wait_until(double t, const std::atomic<int>* stop) = 0;
  // When a step that began at `start` and took `device_s` on the device is over.
  virtual double step_end(double start, double device_s) const = 0;
};

class VirtualClock final : public Clock {
 public:
  double now() const override { return now_; }
  void wait_until(double t, const std::atomic<int>*) override { now_ = t > now_ ? t : now_; }
  double step_end(double start, double device_s) const override { return start + device_s; }

 private:
  double now_ = 0.0;
};

}  // namespace duet
