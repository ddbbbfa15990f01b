#include "cli/progress.hpp"

#include <unistd.h>

#include <cstdio>

#include "exec/wall_clock.hpp"

namespace duet {

ProgressBar::ProgressBar(std::string label)
    : label_(std::move(label)),
      enabled_(::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(double done, double total, const std::string& detail) {
  if (!enabled_ || total <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_ < std::chrono::milliseconds(100)) return;  // redraw at most 10 times a second
  last_ = now;
  const double frac = std::min(1.0, std::max(0.0, done / total));
  const double elapsed = seconds_since(start_, now);
  const double eta = frac > 0 ? elapsed * (1 - frac) / frac : 0;
  constexpr int kWidth = 30;
  char bar[kWidth + 1];
  const int filled = int(frac * kWidth);
  for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
  bar[kWidth] = 0;
  std::fprintf(stderr, "\r%s [%s] %.0f/%.0f %s ETA %.0fs\033[K", label_.c_str(), bar, done, total,
               detail.c_str(), eta);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (drawn_) std::fprintf(stderr, "\r\033[K");
  drawn_ = false;
}

}  // namespace duet
