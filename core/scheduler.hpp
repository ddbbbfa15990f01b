#pragma once
// Continuous batching for one engine, in the manner of vLLM's v1 scheduler: a per-step token
// budget shared by decodes and (chunked) prefills, running sequences before waiting ones, no
// admissions in a step that preempted, and preemption by recompute (a victim's blocks go back to
// the pool but stay hittable, so it usually resumes from the prefix cache).
//
// KV that no running sequence needs (a finished sequence kept to fork from, a fork waiting for
// admission with its parent's blocks) is a cache, not a reservation: when the pool is short, it
// goes back to the pool before any running sequence is preempted, and before the engine would
// stall with nothing running; a kept sequence's also goes back for an admission. Its full blocks
// stay hittable at their retention priority, so a later fork or admission recomputes only what
// was evicted meanwhile. (They join the eviction order when they go back, not when the sequence
// finished, as a vLLM V1 request's do: kept KV outlives what was freed while it was kept.)
//
// On a shared pool (kv_pool = "shared") that holds for the whole pool: the engines on it are each
// other's pool peers, and the idle KV any of them holds goes back before a running sequence is
// preempted, or before an engine with nothing running would stall. An admission while the engine
// runs takes only its own kept KV, not its peers'. Victims of preemption are always chosen within
// the engine that needs the memory.
#include <boost/intrusive/list.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <set>
#include <span>
#include <vector>

#include "core/batch.hpp"
#include "core/kv_allocator.hpp"

namespace duet {

struct SchedulerConfig {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  bool enable_chunked_prefill = true;
  int max_model_len = 8192;
  // Admit a waiting sequence only when the blocks of all its remaining tokens are free, not just
  // those of the chunk it computes now (vLLM's scheduler_reserve_full_isl; its allocate_slots
  // checks full_sequence_must_fit and still allocates the chunk alone).
  bool reserve_full_prompt = false;
};

struct SchedulerView {
  std::size_t num_running = 0;
  std::size_t num_waiting = 0;
  KvUsage kv;
};

// Policy points. Each may be left empty for the built-in behaviour; Lua fills them later.
struct SchedulerPolicy {
  // Waiting-queue order: a key computed once when the sequence arrives, lower first, ties by
  // arrival. Empty: FCFS.
  std::function<double(const Sequence&)> order_key;
  // Admit the head of the waiting queue now? false ends admissions for this step.
  std::function<bool(const Sequence&, const SchedulerView&)> admit;
  // Index of the preemption victim among the candidates (running, not yet scheduled this step,
  // in running order; the last one is the sequence that needs room). Empty: the last.
  std::function<std::size_t(std::span<Sequence* const>)> victim;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvAllocator& kv, SchedulerPolicy policy = {});

  // Queues a sequence. Throws duet::Error if it can never fit in max_model_len.
  void add(Sequence& seq);
  Batch schedule();
  // Releases a finished sequence's KV (unless keep_kv: then it is kept until release(), or until
  // the pool runs short) and drops it from the running set.
  void finish(Sequence& seq, bool keep_kv = false);
  void abort(Sequence& seq);
  // Forgets a sequence: a finished one gives back the KV it kept, a live one is aborted.
  void release(Sequence& seq);

  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  std::size_t num_waiting() const { return waiting_.size(); }
  std::size_t num_running() const { return running_.size(); }
  bool has_admit_policy() const { return bool(policy_.admit); }
  std::int64_t num_preemptions() const { return num_preemptions_; }
  // Sequences not running whose KV went back to the pool because it was short.
  std::int64_t num_idle_releases() const { return num_idle_releases_; }
  std::size_t num_kept() const { return kept_.size(); }
  SchedulerView view() const;
  const SchedulerConfig& config() const { return config_; }
  // The schedulers of the other engines on this engine's shared KV pool (borrowed; empty for a
  // private pool). When this one is short, their idle KV goes back too, after its own (not when
  // this engine's own ceiling is what it is short of).
  void set_pool_peers(std::vector<Scheduler*> peers) { peers_ = std::move(peers); }
  // Gives back the KV of one idle sequence of this engine; false when it holds none.
  bool release_own_idle_kv();
  KvAllocator& kv() { return kv_; }
  const KvAllocator& kv() const { return kv_; }

 private:
  struct WaitingOrder {
    bool operator()(const Sequence* a, const Sequence* b) const {
      if (a->sort_key != b->sort_key) return a->sort_key < b->sort_key;
      return a->arrival_order < b->arrival_order;
    }
  };

  using RunningList = boost::intrusive::list<
      Sequence, boost::intrusive::member_hook<Sequence, Sequence::RunningHook, &Sequence::running_hook>>;

  void schedule_running(Batch& batch, int& budget, bool& preempted);
  void schedule_waiting(Batch& batch, int& budget);
  enum class Admission { Admitted, NoBudget, NoMemory };
  Admission admit(Sequence& seq, Batch& batch, int& budget);
  bool release_idle_kv();
  void add_item(Batch& batch, Sequence& seq, int num_new_tokens);
  Sequence& choose_victim(const RunningList::iterator& from);
  void preempt(Sequence& victim, Batch& batch);

  SchedulerConfig config_;
  KvAllocator& kv_;
  SchedulerPolicy policy_;
  std::set<Sequence*, WaitingOrder> waiting_;
  RunningList running_;  // admission order
  // Finished sequences that hold the KV they kept, in finish order (the oldest goes back to the
  // pool first). A sequence is in at most one of running_ and kept_, so they share its hook.
  RunningList kept_;
  std::size_t waiting_with_kv_ = 0;  // waiting sequences holding blocks (forks); none: no scan
  std::uint64_t next_arrival_ = 0;
  std::int64_t num_preemptions_ = 0;
  std::int64_t num_idle_releases_ = 0;
  std::vector<Scheduler*> peers_;
};

}  // namespace duet
