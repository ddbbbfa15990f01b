#pragma once
// How a sweep's points reach the threads of every rank. Rank 0 holds the points still to run; its
// own threads take them from its queue, and the other ranks ask for one point per idle thread and
// send each outcome back, which asks for the next. Every outcome reaches rank 0's on_outcome, on
// its main thread, as it arrives. A stop (SIGINT, SIGTERM) hands out nothing more; the points that
// were running end as Interrupted.
#include <atomic>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "cli/lua/point_queue.hpp"
#include "cli/lua/sweep_points.hpp"
#include "cli/mpi_ranks.hpp"

namespace duet::lua {

struct SweepHandout {
  std::vector<std::size_t> pending;  // rank 0: the points to run, in grid order
  int threads = 1;                   // sweep threads on this rank
  bool use_threads = true;           // false (one process, one thread): the main thread runs them
  const std::atomic<int>* stop = nullptr;
  std::string grid;  // the sweep's grid as JSON: every rank must have built the same
  std::function<void(PointQueue&)> start_threads;     // `threads` threads that drain the queue
  std::function<void()> join_threads;                 // after the queue is closed and drained
  std::function<PointOutcome(std::size_t)> run_here;  // !use_threads: run one point
  std::function<void(PointOutcome&)> on_outcome;      // rank 0: each Done or Failed point
  std::function<std::string()> thread_error;          // the first thread's error, once they are joined
};

// Busy seconds and points per rank (rank 0's view; other ranks get zeros), and whether a stop cut
// the sweep short.
struct SweepBalance {
  std::vector<double> busy_s;
  std::vector<int> points;
  bool stopped = false;
};

SweepBalance hand_out(const cli::Ranks& ranks, const SweepHandout& handout);

}  // namespace duet::lua
