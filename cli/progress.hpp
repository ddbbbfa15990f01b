#pragma once
// A one-line progress bar on stderr, drawn only when stderr is a terminal.
#include <chrono>
#include <string>

namespace duet {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  ~ProgressBar();
  // done of total units; `detail` follows the bar (e.g. simulated time).
  void update(double done, double total, const std::string& detail);
  void finish();
  bool enabled() const { return enabled_; }

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace duet
