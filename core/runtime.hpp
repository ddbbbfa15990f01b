#pragma once
// The event loop that drives the engines of one GPU and the workload. Events: request arrivals
// (trace replay), engine step completions and workload wake-ups. The engines share one device
// timeline: an arbiter picks whose batch runs next when several have work. The clock is a
// parameter, so the same loop simulates (virtual time) or executes (wall time).
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <vector>

#include "core/clock.hpp"
#include "core/engine.hpp"
#include "core/metrics.hpp"

namespace duet {

// The latest time a run's events may be set for: 1e8 s, 3.2 years from its start. A later one is a
// date (Unix seconds are past 1.7e9), a unit error or a vanishing rate, and would have the wall
// clock sleep for years or the virtual one report nonsense rates.
inline constexpr double kMaxRunTime_s = 1e8;

struct EngineStatus {
  int index = 0;
  bool has_work = false;
  double ready_since = 0.0;  // when it last became ready to step
  std::size_t num_waiting = 0;
  std::size_t num_running = 0;
  KvUsage kv;
  std::int64_t preemptions = 0;  // so far
  std::int64_t evictions = 0;    // of its cached blocks, so far
};

enum class ArbiterKind { Alternate, Priority, OldestReady, Callback };

struct Arbiter {
  ArbiterKind kind = ArbiterKind::Alternate;
  std::vector<int> priority;  // Priority: engine indices, most important first
  // Callback: the index of the engine to run among those with work (statuses of all engines).
  std::function<int(const std::vector<EngineStatus>&)> pick;
};

ArbiterKind arbiter_kind_from_name(
    const std::string& name);  // alternate, priority, oldest (callback: internal)

// Floors and ceilings of the engines on a shared KV pool, decided before each arbiter decision
// (each device step) from every engine's status: one entry per engine, nullopt to leave one as it
// is. Lua's memory_policy is one.
using MemoryPolicy = std::function<std::vector<std::optional<KvLimits>>(const std::vector<EngineStatus>&)>;

class Runtime;

// A workload reacts to the runtime: it submits sequences and, when they finish, submits more.
class Workload {
 public:
  virtual ~Workload() = default;
  virtual void start(Runtime& rt) = 0;
  // At the sequence's finish time. Afterwards the runtime releases it unless seq.keep_kv is set
  // (then the workload releases it, after forking from it).
  virtual void on_finished(Runtime& rt, int engine, Sequence& seq) = 0;
  virtual void on_wakeup(Runtime&, std::uint64_t /*tag*/) {}
};

class Runtime {
 public:
  Runtime(Clock& clock, Arbiter arbiter = {});

  // Engines are borrowed; records name them by their engine name.
  int add_engine(Engine& engine, std::string model_name);

  double now() const { return clock_.now(); }
  SeqId next_seq_id() { return next_id_++; }
  void submit(int engine, Sequence seq);  // arrives now
  // Arrived at `arrival` (<= now) and is handled only now: on the wall clock, a request due while
  // a step blocked the host. Its latencies count from `arrival`, as its client's would.
  void submit_arrived(int engine, Sequence seq, double arrival);
  void submit_at(double t, int engine, Sequence seq);     // arrives at t (trace replay)
  Sequence& fork(int engine, SeqId src, Sequence child);  // arrives now
  void release(int engine, SeqId id);
  void wake_at(double t, std::uint64_t tag);

  // Runs until no event is pending and no engine has work.
  void run(Workload& workload);

  Engine& engine(int i) { return *engines_[std::size_t(i)].engine; }
  int num_engines() const { return static_cast<int>(engines_.size()); }
  // What the run records: `level` says how much, `keep` whether records() holds it in memory, and
  // `sink` (optional, borrowed) receives each record as it is made. The summary is built as the
  // run goes, whatever is kept. Set before run(); by default everything is kept in memory.
  void set_recording(RecordLevel level, bool keep, RecordSink* sink);
  // Each engine's name, model and pool; the steps and requests the recording kept.
  const std::vector<EngineRecords>& records() const { return records_; }
  std::vector<EngineRecords> take_records() { return std::move(records_); }  // after run()
  const SummaryAccumulator& tally(int engine) const { return tallies_.at(std::size_t(engine)); }
  RunSummary summary() const;
  std::int64_t steps() const { return steps_; }
  std::size_t pending_arrivals() const { return pending_arrivals_; }

  // Consulted before each arbiter decision while an engine has work; set before run().
  void set_memory_policy(MemoryPolicy policy) { memory_policy_ = std::move(policy); }

  // Non-zero asks the run to end (a signal handler sets it: SIGINT, SIGTERM): run() then throws
  // duet::Error at its next event, and what was recorded so far stays recorded.
  const std::atomic<int>* stop = nullptr;
  // Called every `progress_every` steps (for progress bars).
  std::function<void(const Runtime&)> on_progress;
  std::int64_t progress_every = 4096;

 private:
  // Throws naming `what` when `engine` is not one of this runtime's.
  void check_engine(const char* what, int engine) const;
  enum class EventType : std::uint8_t { Arrival, StepDone, Wakeup };
  struct Event {
    double time;
    std::uint64_t order;  // ties: first scheduled, first handled
    EventType type;
    int engine;
    std::uint64_t payload;  // arrival slot, or wake-up tag
    bool operator>(const Event& o) const { return time != o.time ? time > o.time : order > o.order; }
  };
  double instant_ = -1;  // while the events due at one instant are handled: that instant
  double due_ = -1;      // ... and the time they were due, which a wake-up for a time reached joins
  struct EngineSlot {
    Engine* engine;
    double ready_since = 0.0;
    KvCounters last_counters;
    // Preempted by a pass that then scheduled nothing (the only running sequence gave its own KV
    // up): no step records them, so the engine's next step does.
    std::int32_t unrecorded_preemptions = 0;
    std::vector<SeqId> finished;  // the step in flight's finished sequences
  };

  void push(double t, EventType type, int engine, std::uint64_t payload);
  void handle_instant(double t, Workload& workload);
  // When an engine given work now became ready to step: the instant of the events being handled,
  // else now. On the wall clock the events due at one instant are handled one after another, and
  // an engine given work by another's finished step must not look younger than that engine (the
  // oldest-ready arbiter would then pick otherwise than the virtual clock, where they tie).
  double ready_instant() const { return instant_ >= 0 ? instant_ : now(); }
  void mark_ready(int engine);  // its ready_since, if it had no work
  void enqueue(int engine, Sequence seq, double arrival);
  void start_step();
  void apply_memory_policy();
  bool try_step(int engine);
  int pick_engine();
  void check_stuck() const;
  void handle(const Event& ev, Workload& workload);
  void record_step(int e, const StepOutcome& outcome, double start, double host_s);
  void record_request(int e, const Sequence& seq);
  std::vector<EngineStatus> statuses() const;

  Clock& clock_;
  Arbiter arbiter_;
  MemoryPolicy memory_policy_;
  std::vector<EngineSlot> engines_;
  std::vector<EngineRecords> records_;
  std::vector<SummaryAccumulator> tallies_;
  RecordLevel record_level_ = RecordLevel::Steps;
  bool keep_records_ = true;
  RecordSink* sink_ = nullptr;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::vector<Sequence> arrivals_;  // future arrivals, by slot
  std::vector<std::size_t> free_slots_;
  std::size_t pending_arrivals_ = 0;
  std::uint64_t order_ = 0;
  SeqId next_id_ = 1;
  bool device_busy_ = false;
  int last_ran_ = -1;
  std::int64_t steps_ = 0;
  double first_arrival_ = -1.0;
  double last_finish_ = 0.0;
};

}  // namespace duet
