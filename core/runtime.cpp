#include "core/runtime.hpp"

#include <algorithm>
#include <cctype>

#include "core/error.hpp"

namespace duet {

ArbiterKind arbiter_kind_from_name(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  if (n == "alternate") return ArbiterKind::Alternate;
  if (n == "priority") return ArbiterKind::Priority;
  if (n == "oldest" || n == "oldest-ready" || n == "oldest_ready") return ArbiterKind::OldestReady;
  if (n == "callback") return ArbiterKind::Callback;
  throw Error("unknown arbiter '" + name +
              "' (valid: alternate, priority, oldest; a callback is given as a function)");
}

Runtime::Runtime(Clock& clock, Arbiter arbiter) : clock_(clock), arbiter_(std::move(arbiter)) {
  if (arbiter_.kind == ArbiterKind::Callback && !arbiter_.pick)
    throw Error("arbiter 'callback' needs a pick function");
}

int Runtime::add_engine(Engine& engine, std::string model_name) {
  engines_.push_back(EngineSlot{&engine, clock_.now(), engine.kv().counters(), 0, {}});
  EngineRecords rec;
  rec.name = engine.name();
  rec.model = std::move(model_name);
  rec.total_blocks = engine.kv().usage().total_blocks;
  rec.block_size = engine.kv().block_size();
  tallies_.emplace_back(rec.name, rec.model, rec.total_blocks);
  records_.push_back(std::move(rec));
  return num_engines() - 1;
}

void Runtime::set_recording(RecordLevel level, bool keep, RecordSink* sink) {
  record_level_ = level;
  keep_records_ = keep;
  sink_ = sink;
}

void Runtime::push(double t, EventType type, int engine, std::uint64_t payload) {
  events_.push(Event{t, order_++, type, engine, payload});
}

void Runtime::mark_ready(int e) {
  EngineSlot& slot = engines_[std::size_t(e)];
  if (!slot.engine->has_work()) slot.ready_since = ready_instant();
}

void Runtime::enqueue(int e, Sequence seq, double arrival) {
  Engine& engine = *engines_[std::size_t(e)].engine;
  mark_ready(e);
  if (first_arrival_ < 0) first_arrival_ = arrival;
  engine.add(std::move(seq), arrival);
}

void Runtime::check_engine(const char* what, int engine) const {
  // Numbered from 1, as a Lua script numbers them.
  if (engine < 0 || engine >= num_engines())
    throw Error(std::string(what) + ": no engine " + std::to_string(engine + 1) + " (engines 1 to " +
                std::to_string(num_engines()) + ")");
}

void Runtime::submit(int engine, Sequence seq) {
  check_engine("submit", engine);
  enqueue(engine, std::move(seq), now());
}

void Runtime::submit_arrived(int engine, Sequence seq, double arrival) {
  check_engine("submit", engine);
  enqueue(engine, std::move(seq), std::min(arrival, now()));
}

void Runtime::submit_at(double t, int engine, Sequence seq) {
  check_engine("submit_at", engine);
  if (t <= now()) return submit(engine, std::move(seq));
  std::size_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
    arrivals_[slot] = std::move(seq);
  } else {
    slot = arrivals_.size();
    arrivals_.push_back(std::move(seq));
  }
  ++pending_arrivals_;
  push(t, EventType::Arrival, engine, slot);
}

Sequence& Runtime::fork(int e, SeqId src, Sequence child) {
  Engine& engine = *engines_.at(std::size_t(e)).engine;
  mark_ready(e);
  return engine.fork(src, std::move(child), now());
}

void Runtime::release(int e, SeqId id) {
  EngineSlot& slot = engines_.at(std::size_t(e));
  Engine& engine = *slot.engine;
  // Every request the workload lets go of is recorded, so that the requests table accounts for
  // every token the steps computed: one released before it finished is aborted (a search that
  // stops waiting for it); one that finished in the step in flight is recorded as it finished, now
  // rather than at the step's end, where it would no longer be found.
  if (Sequence* seq = engine.find(id)) {
    const auto pending = std::find(slot.finished.begin(), slot.finished.end(), id);
    if (pending != slot.finished.end()) {
      record_request(e, *seq);
      last_finish_ = std::max(last_finish_, seq->finish_time);
      slot.finished.erase(pending);
    } else if (!seq->finished()) {
      seq->finish_reason = FinishReason::Aborted;
      seq->finish_time = now();
      record_request(e, *seq);
    }
  }
  engine.release(id);
}

// A time already reached wakes in the instant being handled, after what is due in it, on either
// clock: the wall clock's now() has moved on from that instant, and a wake-up pushed at now()
// would come after the device's next step, where the virtual clock's comes before it.
void Runtime::wake_at(double t, std::uint64_t tag) {
  push(due_ >= 0 && t <= now() ? due_ : std::max(t, now()), EventType::Wakeup, -1, tag);
}

std::vector<EngineStatus> Runtime::statuses() const {
  std::vector<EngineStatus> out;
  for (std::size_t i = 0; i < engines_.size(); ++i) {
    const Engine& e = *engines_[i].engine;
    out.push_back({int(i), e.has_work(), engines_[i].ready_since, e.scheduler().num_waiting(),
                   e.scheduler().num_running(), e.kv().usage(), e.scheduler().num_preemptions(),
                   e.kv().counters().evictions});
  }
  return out;
}

int Runtime::pick_engine() {
  const int n = num_engines();
  auto ready = [&](int i) { return engines_[std::size_t(i)].engine->has_work(); };
  switch (arbiter_.kind) {
    case ArbiterKind::Alternate:
      for (int k = 1; k <= n; ++k) {
        const int i = (last_ran_ + k + n) % n;
        if (ready(i)) return i;
      }
      return -1;
    case ArbiterKind::Priority: {
      for (int i : arbiter_.priority)
        if (i >= 0 && i < n && ready(i)) return i;
      for (int i = 0; i < n; ++i)
        if (ready(i)) return i;
      return -1;
    }
    case ArbiterKind::OldestReady: {
      int best = -1;
      for (int i = 0; i < n; ++i)
        if (ready(i) &&
            (best < 0 || engines_[std::size_t(i)].ready_since < engines_[std::size_t(best)].ready_since))
          best = i;
      return best;
    }
    case ArbiterKind::Callback: {
      bool any = false;
      for (int i = 0; i < n; ++i) any = any || ready(i);
      if (!any) return -1;
      const int i = arbiter_.pick(statuses());
      // Engines are named as the script names them, and numbered from 1 as Lua does.
      if (i < 0 || i >= n)
        throw Error("the arbiter chose engine " + std::to_string(i + 1) + ", and there are engines 1 to " +
                    std::to_string(n));
      if (!ready(i))
        throw Error("the arbiter chose engine '" + engines_[std::size_t(i)].engine->name() + "' (" +
                    std::to_string(i + 1) + "), which has no work");
      return i;
    }
  }
  return -1;
}

void Runtime::apply_memory_policy() {
  bool any = false;
  for (const EngineSlot& slot : engines_) any = any || slot.engine->has_work();
  if (!any) return;
  const std::vector<std::optional<KvLimits>> limits = memory_policy_(statuses());
  if (limits.size() > engines_.size())
    throw Error("the memory policy returned limits for " + std::to_string(limits.size()) +
                " engines, and there are " + std::to_string(engines_.size()));
  // Floors that fall first: the pool checks each engine's floor against the others' as they stand,
  // so a floor moved from one engine to another fits only once the first has let go of it.
  for (const bool lowering : {true, false})
    for (std::size_t i = 0; i < limits.size(); ++i) {
      if (!limits[i]) continue;
      KvAllocator& kv = engines_[i].engine->kv();
      if ((limits[i]->min_blocks <= kv.usage().limits.min_blocks) == lowering) kv.set_limits(*limits[i]);
    }
}

void Runtime::start_step() {
  if (memory_policy_) apply_memory_policy();
  const int e = pick_engine();
  if (e < 0 || try_step(e)) return;
  // The chosen engine cannot schedule anything yet (it waits for memory): let another run.
  for (int i = 0; i < num_engines(); ++i)
    if (i != e && engines_[std::size_t(i)].engine->has_work() && try_step(i)) return;
}

bool Runtime::try_step(int e) {
  EngineSlot& slot = engines_[std::size_t(e)];
  const double start = now();
  StepOutcome outcome = slot.engine->step(start, &clock_);
  if (outcome.batch.empty()) {
    slot.unrecorded_preemptions += static_cast<std::int32_t>(outcome.batch.preempted.size());
    return false;
  }
  last_ran_ = e;
  device_busy_ = true;
  ++steps_;
  slot.finished.clear();
  for (Sequence* s : outcome.finished) slot.finished.push_back(s->id);
  // The virtual clock ends the step after the predicted device and host time; the wall clock
  // ends it now, and what the step took beyond the executor's device time is the host's.
  const double end = clock_.step_end(start, outcome.result.duration_s + outcome.result.host_s);
  record_step(e, outcome, start, std::max(0.0, end - start - outcome.result.duration_s));
  push(end, EventType::StepDone, e, 0);
  if (on_progress && steps_ % progress_every == 0) on_progress(*this);
  return true;
}

void Runtime::check_stuck() const {
  for (const EngineSlot& slot : engines_) {
    const Engine& e = *slot.engine;
    if (!e.has_work()) continue;
    // Name every limit that can hold them back: the pool's size, what a shared pool keeps out of
    // reach (other models' pages, floors, this model's ceiling), and an admit policy.
    const KvUsage u = e.kv().usage();
    // With no page in use, a policy that refuses is the likelier cause: it is named first.
    const bool policy_first = e.scheduler().has_admit_policy() && u.used_blocks == 0;
    std::string why = std::string(policy_first ? "its admit policy refuses them, or " : "") +
                      "its KV pool (" + std::to_string(u.total_blocks) + " blocks of " +
                      std::to_string(e.kv().block_size()) + " tokens, " + std::to_string(u.used_blocks) +
                      " in use";
    if (u.unavailable_blocks > 0)
      why += ", " + std::to_string(u.unavailable_blocks) +
             " out of its reach: other models' pages, their floors (min_blocks) or its ceiling (max_blocks)";
    why += ") is too small for them";
    if (e.scheduler().has_admit_policy() && !policy_first) why += ", or its admit policy refuses them";
    if (e.scheduler().config().reserve_full_prompt)
      why += " (scheduler_reserve_full_isl: a waiting sequence needs room for all its tokens at once)";
    throw Error("engine '" + e.name() + "' is stuck with " + std::to_string(e.scheduler().num_waiting()) +
                " waiting and " + std::to_string(e.scheduler().num_running()) +
                " running sequences that cannot be scheduled: " + why);
  }
}

void Runtime::handle(const Event& ev, Workload& workload) {
  switch (ev.type) {
    case EventType::Arrival: {
      --pending_arrivals_;
      // The request arrived at its event's time. On the virtual clock that is now; on the wall
      // clock a request that arrived during a step (which blocks the host) is handled after it,
      // and its wait for that step is part of its TTFT, as a client would see it.
      enqueue(ev.engine, std::move(arrivals_[ev.payload]), ev.time);
      free_slots_.push_back(ev.payload);
      break;
    }
    case EventType::StepDone: {
      device_busy_ = false;
      EngineSlot& slot = engines_[std::size_t(ev.engine)];
      slot.ready_since = ready_instant();
      const std::vector<SeqId> finished = std::move(slot.finished);
      slot.finished.clear();
      // Each is recorded before any workload callback runs: a callback may release another one of
      // them (a search that has what it waited for), which then is no longer found below.
      for (SeqId id : finished)
        if (const Sequence* seq = slot.engine->find(id)) record_request(ev.engine, *seq);
      if (!finished.empty()) last_finish_ = std::max(last_finish_, now());
      for (SeqId id : finished) {
        Sequence* seq = slot.engine->find(id);
        if (!seq) continue;  // released by a callback of this loop
        workload.on_finished(*this, ev.engine, *seq);
        seq = slot.engine->find(id);
        if (seq && !seq->keep_kv) slot.engine->release(id);
      }
      break;
    }
    case EventType::Wakeup:
      workload.on_wakeup(*this, ev.payload);
      break;
  }
}

// Handles every event due by `t`, as one instant.
void Runtime::handle_instant(double t, Workload& workload) {
  instant_ = now();
  due_ = t;
  while (!events_.empty() && events_.top().time <= t) {
    const Event ev = events_.top();
    events_.pop();
    handle(ev, workload);
  }
  instant_ = due_ = -1;
}

void Runtime::run(Workload& workload) {
  // The start is the run's first instant: what it makes due at once (a problem that sleeps until
  // now) is handled before the first step, as later instants' are.
  instant_ = due_ = now();
  workload.start(*this);
  handle_instant(now(), workload);
  for (;;) {
    if (stop && stop->load(std::memory_order_relaxed) != 0)
      throw Error("stopped by signal " + std::to_string(stop->load()));
    if (!device_busy_) start_step();
    if (events_.empty()) {
      check_stuck();
      break;
    }
    // Handle every event due at the next instant before the device picks its next batch, so that
    // simultaneous arrivals share a step.
    const double t = events_.top().time;
    clock_.wait_until(t, stop);
    if (stop && stop->load(std::memory_order_relaxed) != 0) continue;  // woken early: ends above
    handle_instant(t, workload);
  }
}

void Runtime::record_step(int e, const StepOutcome& o, double start, double host_s) {
  EngineSlot& slot = engines_[std::size_t(e)];
  const Engine& engine = *slot.engine;
  // Blocks as the batch ran: finished sequences free theirs in postprocess, before this record.
  const KvUsage& kv = o.kv_scheduled;
  const KvCounters c = engine.kv().counters();
  StepRecord r;
  record_shape(o.batch.shape, r);
  r.start_s = start;
  r.duration_s = o.result.duration_s;
  r.host_s = host_s;
  r.cpu_s = o.result.cpu_s;
  r.num_running = static_cast<std::int32_t>(engine.scheduler().num_running());
  r.num_waiting = static_cast<std::int32_t>(engine.scheduler().num_waiting());
  r.kv_blocks_used = kv.used_blocks;
  r.kv_blocks_free = kv.free_blocks();
  r.kv_blocks_cached = kv.cached_blocks;
  r.kv_filled_tokens = kv.filled_tokens;
  r.prefix_query_tokens = c.query_tokens - slot.last_counters.query_tokens;
  r.prefix_hit_tokens = c.hit_tokens - slot.last_counters.hit_tokens;
  r.evictions = static_cast<std::int32_t>(c.evictions - slot.last_counters.evictions);
  r.preemptions = static_cast<std::int32_t>(o.batch.preempted.size()) + slot.unrecorded_preemptions;
  slot.unrecorded_preemptions = 0;
  slot.last_counters = c;
  tallies_[std::size_t(e)].add(r);
  if (!keeps_steps(record_level_)) return;
  if (keep_records_) records_[std::size_t(e)].steps.push_back(r);
  if (sink_) sink_->add_step(e, r);
}

void Runtime::record_request(int e, const Sequence& s) {
  RequestRecord r;
  r.seq_id = s.id;
  r.owner = s.owner;
  r.kind = static_cast<std::uint8_t>(s.kind);
  r.finish_reason = static_cast<std::uint8_t>(s.finish_reason);
  r.arrival_s = s.arrival_time;
  r.first_scheduled_s = s.first_scheduled_time;
  r.first_token_s = s.first_token_time;
  r.finish_s = s.finish_time;
  r.prompt_tokens = s.num_prompt_tokens;
  r.output_tokens = s.num_output_tokens();
  r.cached_tokens = s.num_cached_prompt_tokens;
  r.preemptions = s.num_preemptions;
  tallies_[std::size_t(e)].add(r);
  if (!keeps_requests(record_level_)) return;
  if (keep_records_) records_[std::size_t(e)].requests.push_back(r);
  if (sink_) sink_->add_request(e, r);
}

RunSummary Runtime::summary() const {
  RunSummary s;
  s.makespan_s = first_arrival_ >= 0 ? last_finish_ - first_arrival_ : 0.0;
  for (std::size_t e = 0; e < tallies_.size(); ++e) {
    s.engines.push_back(tallies_[e].summary(s.makespan_s));
    // A step row books the evictions of the engine's blocks since its last step; on a shared pool
    // another model can evict them after this one's last step, and they count too.
    const EngineSlot& slot = engines_[e];
    s.engines.back().evictions += slot.engine->kv().counters().evictions - slot.last_counters.evictions;
  }
  return s;
}

}  // namespace duet
