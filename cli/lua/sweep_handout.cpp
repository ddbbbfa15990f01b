#include "cli/lua/sweep_handout.hpp"

#include <cstring>
#include <functional>
#include <string>

#include "cli/lua/result_codec.hpp"
#include "core/error.hpp"

namespace duet::lua {

namespace {

// Message tags between ranks. A sweep's messages all arrive before its closing broadcast, so the
// sweeps of one script never mix.
constexpr int kHello = 1;   // rank -> 0: Hello: a request for a point per thread, and the grid
constexpr int kResult = 2;  // rank -> 0: an outcome, and a request for the next point
constexpr int kAssign = 3;  // 0 -> rank: int64 point index, or -1: no more for that thread

template <class T>
std::vector<char> bytes_of(T value) {
  std::vector<char> b(sizeof value);
  std::memcpy(b.data(), &value, sizeof value);
  return b;
}

template <class T>
T value_of(const cli::Message& m) {
  T value{};
  if (m.bytes.size() != sizeof value)
    throw Error("duet.sweep: a message from rank " + std::to_string(m.source) + " has the wrong size");
  std::memcpy(&value, m.bytes.data(), sizeof value);
  return value;
}

struct Hello {  // no padding: every byte sent is set
  std::int64_t threads = 0;
  std::uint64_t grid_hash = 0;  // of the grid's JSON (one binary on every rank: one std::hash)
};
std::uint64_t grid_hash(const SweepHandout& h) { return std::hash<std::string>{}(h.grid); }

bool stop_asked(const SweepHandout& h) { return h.stop && h.stop->load() != 0; }

// Rank 0's bookkeeping of one sweep.
struct Coordinator {
  const cli::Ranks& ranks;
  const SweepHandout& h;
  PointQueue queue;
  SweepBalance balance;
  int hellos = 0, open_slots = 0;

  void stop() {
    balance.stopped = true;
    queue.stop();
  }
  void handle(PointOutcome& o) {
    if (o.status == PointStatus::Interrupted) return stop();
    balance.busy_s[std::size_t(o.rank)] += o.busy_s;
    ++balance.points[std::size_t(o.rank)];
    h.on_outcome(o);
  }
  void assign(int rank) {
    const std::optional<std::size_t> index = queue.take();  // nothing once stopped
    if (!index) --open_slots;
    cli::send_bytes(rank, kAssign, bytes_of(index ? std::int64_t(*index) : std::int64_t(-1)));
  }
  void serve(const cli::Message& m) {
    if (m.tag == kHello) {
      ++hellos;
      const Hello hello = value_of<Hello>(m);
      // Points are numbered in rank 0's grid: another grid there would run other points under its
      // numbers, silently.
      if (hello.grid_hash != grid_hash(h))
        throw Error("duet.sweep: rank " + std::to_string(m.source) +
                    "'s run of the script built another grid than " + "rank 0's " + h.grid +
                    " (a grid must not depend on time, randomness or the MPI rank)");
      const int slots = int(hello.threads);
      open_slots += slots;
      for (int i = 0; i < slots; ++i) assign(m.source);
    } else if (m.tag == kResult) {
      PointOutcome o = decode_outcome(m.bytes);
      o.rank = m.source;
      handle(o);
      assign(m.source);
    } else {
      throw Error("duet.sweep: unexpected message " + std::to_string(m.tag) + " from rank " +
                  std::to_string(m.source));
    }
  }
  bool finished() const { return queue.exited() == h.threads && hellos == ranks.size - 1 && open_slots == 0; }

  SweepBalance run() {
    balance.busy_s.assign(std::size_t(ranks.size), 0.0);
    balance.points.assign(std::size_t(ranks.size), 0);
    for (std::size_t i : h.pending) queue.add(i);
    queue.close();
    h.start_threads(queue);
    try {
      loop();
    } catch (...) {  // a failed write (a full disk): the threads end after their current point
      queue.stop();
      h.join_threads();
      throw;
    }
    h.join_threads();
    return std::move(balance);
  }

  void loop() {
    const auto wait = std::chrono::milliseconds(ranks.size > 1 ? 2 : 200);
    for (;;) {
      if (!balance.stopped && stop_asked(h)) stop();
      const bool last = finished();  // then one more pass takes what was reported before the exits
      for (PointOutcome& o : queue.outcomes(last ? std::chrono::milliseconds(0) : wait)) handle(o);
      while (std::optional<cli::Message> m = ranks.size > 1 ? cli::poll_message() : std::nullopt) serve(*m);
      if (last) return;
    }
  }
};

void serve_rank_zero(const SweepHandout& h, PointQueue& queue);

// Another rank: asks for a point per thread, runs what it is given, sends each outcome back.
SweepBalance follow(const cli::Ranks& ranks, const SweepHandout& h) {
  PointQueue queue;
  h.start_threads(queue);
  try {
    serve_rank_zero(h, queue);
  } catch (...) {  // the job ends (MPI_Abort); the threads first, after their current point
    queue.stop();
    h.join_threads();
    // A thread's own error says why better than the loop's (read once the threads are joined).
    if (const std::string error = h.thread_error ? h.thread_error() : ""; !error.empty()) throw Error(error);
    throw;
  }
  h.join_threads();
  SweepBalance balance;
  balance.busy_s.assign(std::size_t(ranks.size), 0.0);
  balance.points.assign(std::size_t(ranks.size), 0);
  return balance;
}

void serve_rank_zero(const SweepHandout& h, PointQueue& queue) {
  cli::send_bytes(0, kHello, bytes_of(Hello{std::int64_t(h.threads), grid_hash(h)}));
  int retired = 0;
  while (retired < h.threads || queue.exited() < h.threads) {
    // A thread ends before its last assignment only on an error (its copy of the script failed):
    // rank 0 would go on assigning it points and waiting for their results, so the job ends here.
    if (retired < h.threads && queue.exited() > 0)
      throw Error("duet.sweep: a sweep thread ended before its points");
    for (PointOutcome& o : queue.outcomes(std::chrono::milliseconds(2))) {
      if (o.status != PointStatus::Interrupted && stop_asked(h)) o.status = PointStatus::Interrupted;
      cli::send_bytes(0, kResult, encode_outcome(o));
    }
    while (std::optional<cli::Message> m = cli::poll_message()) {
      if (m->tag != kAssign || m->source != 0) throw Error("duet.sweep: unexpected message from rank 0");
      const auto index = value_of<std::int64_t>(*m);
      if (index >= 0) queue.add(std::size_t(index));
      else if (++retired == h.threads) queue.close();
    }
  }
}

// One process, one thread: the main thread runs the points itself, in order.
SweepBalance run_in_order(const SweepHandout& h) {
  SweepBalance balance{{0.0}, {0}, false};
  for (std::size_t i : h.pending) {
    if (stop_asked(h)) return balance.stopped = true, balance;
    PointOutcome o = h.run_here(i);
    if (o.status == PointStatus::Interrupted) return balance.stopped = true, balance;
    balance.busy_s[0] += o.busy_s;
    ++balance.points[0];
    h.on_outcome(o);
  }
  return balance;
}

}  // namespace

SweepBalance hand_out(const cli::Ranks& ranks, const SweepHandout& h) {
  if (ranks.rank != 0) return follow(ranks, h);
  if (!h.use_threads && ranks.size == 1) return run_in_order(h);
  return Coordinator{ranks, h, {}, {}, 0, 0}.run();
}

}  // namespace duet::lua
