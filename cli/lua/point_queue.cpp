#include "cli/lua/point_queue.hpp"

namespace duet::lua {

std::optional<std::size_t> PointQueue::next() {
  std::unique_lock lock(mutex_);
  to_workers_.wait(lock, [&] { return !todo_.empty() || closed_; });
  if (todo_.empty()) return std::nullopt;
  const std::size_t index = todo_.front();
  todo_.pop_front();
  return index;
}

void PointQueue::report(PointOutcome outcome) {
  {
    const std::lock_guard lock(mutex_);
    done_.push_back(std::move(outcome));
  }
  to_main_.notify_one();
}

void PointQueue::worker_exited() {
  {
    const std::lock_guard lock(mutex_);
    ++exited_;
  }
  to_main_.notify_one();
}

void PointQueue::add(std::size_t index) {
  {
    const std::lock_guard lock(mutex_);
    todo_.push_back(index);
  }
  to_workers_.notify_one();
}

std::optional<std::size_t> PointQueue::take() {
  const std::lock_guard lock(mutex_);
  if (todo_.empty()) return std::nullopt;
  const std::size_t index = todo_.front();
  todo_.pop_front();
  return index;
}

void PointQueue::close() {
  {
    const std::lock_guard lock(mutex_);
    closed_ = true;
  }
  to_workers_.notify_all();
}

void PointQueue::stop() {
  {
    const std::lock_guard lock(mutex_);
    todo_.clear();
    closed_ = true;
  }
  to_workers_.notify_all();
}

std::vector<PointOutcome> PointQueue::outcomes(std::chrono::milliseconds wait) {
  std::unique_lock lock(mutex_);
  const int exited = exited_;
  to_main_.wait_for(lock, wait, [&] { return !done_.empty() || exited_ != exited; });
  std::vector<PointOutcome> out;
  out.swap(done_);
  return out;
}

int PointQueue::exited() const {
  const std::lock_guard lock(mutex_);
  return exited_;
}

}  // namespace duet::lua
