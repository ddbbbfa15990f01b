#pragma once
// Continuous batching for one engine, in the manner of vLLM's v1 scheduler: a per-step token
// budget shared by decodes and (chunked) prefills, running sequences before waiting ones, no
// admissions in a step that preempted, and preemption by recompute (a victim's blocks go back to
// the pool but stay hittable, so it usually resumes from the prefix cache).
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
  // Releases a finished sequence's KV (unless keep_kv) and drops it from the running set.
  void finish(Sequence& seq, bool keep_kv = false);
  void abort(Sequence& seq);

  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  std::size_t num_waiting() const { return waiting_.size(); }
  std::size_t num_running() const { return running_.size(); }
  std::int64_t num_preemptions() const { return num_preemptions_; }
  SchedulerView view() const;
  const SchedulerConfig& config() const { return config_; }
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
  void add_item(Batch& batch, Sequence& seq, int num_new_tokens);
  Sequence& choose_victim(RunningList::iterator from);
  void preempt(Sequence& victim, Batch& batch);

  SchedulerConfig config_;
  KvAllocator& kv_;
  SchedulerPolicy policy_;
  std::set<Sequence*, WaitingOrder> waiting_;
  RunningList running_;  // admission order
  std::uint64_t next_arrival_ = 0;
  std::int64_t num_preemptions_ = 0;
};

}  // namespace duet
