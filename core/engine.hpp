#pragma once
// One model on one device: Scheduler + KV allocator + Executor. A step is
// schedule -> execute -> postprocess, and nothing else. The engine owns its sequences; the
// caller (the runtime and the workload) names them by id.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/batch.hpp"
#include "core/clock.hpp"
#include "core/executor.hpp"
#include "core/kv_allocator.hpp"
#include "core/scheduler.hpp"

namespace duet {

struct StepOutcome {
  Batch batch;
  KvUsage kv_scheduled;  // KV in use once the batch was scheduled, before finishes free it
  StepResult result;
  std::vector<Sequence*> finished;  // in this step; still owned by the engine until release()
};

// How a fork's child gets its parent's KV.
enum class ForkKv : std::uint8_t {
  // The parent's blocks by reference, a private copy of the partly filled last block at the first
  // write (copy-on-write): vLLM V0's block sharing for beams and parallel samples.
  Share,
  // None: the child is a new request with the whole history, which the prefix cache serves in
  // whole blocks; the rest (the partly filled last block, the last token) is prefilled. vLLM V1 has
  // no fork and runs a search so. A sequence kept to fork from keeps its tokens, not its KV: its
  // blocks go back to the pool (the full ones cached) when it finishes, as a V1 request's do.
  PrefixCache,
};

class Engine {
 public:
  // `scores_only`, when not empty, says why the engine's model cannot generate (a PRM with a score
  // head and no LM head): a Generate sequence is then refused with it.
  Engine(std::string name, const SchedulerConfig& config, std::unique_ptr<KvAllocator> kv, Executor& executor,
         SchedulerPolicy policy = {}, ForkKv fork_kv = ForkKv::Share, std::string scores_only = {});

  const std::string& name() const { return name_; }

  // Takes a new sequence (tokens, kind, sampling, score positions set) and queues it.
  Sequence& add(Sequence seq, double now);
  // A new sequence that continues src: src's tokens followed by child.tokens, sharing src's KV
  // blocks (copy-on-write; ForkKv::PrefixCache: a new sequence, served by the prefix cache). The
  // child's id, kind, sampling and score positions (absolute) come from `child`. Sharing, src must
  // hold its KV: running, or finished with keep_kv. When the pool was short and took a kept
  // sequence's KV back, the child is admitted as a new sequence and recomputes what the prefix
  // cache no longer holds.
  Sequence& fork(SeqId src, Sequence child, double now);
  // Drops a finished sequence (freeing KV it kept) or aborts a live one.
  void release(SeqId id);
  Sequence* find(SeqId id);
  // Retention priority of a sequence's KV blocks (lower is evicted first; `shared`: also the
  // blocks it shares with others). An unknown id is ignored.
  void set_priority(SeqId id, int priority, bool shared = false);

  bool has_work() const { return scheduler_.has_work(); }
  // One engine step at time `now`; duration in result.duration_s. An empty batch means no work.
  // Its tokens and finishes are stamped when `clock` says the step is over (the wall clock: once
  // the executor returns), without one after its device and host time.
  StepOutcome step(double now, const Clock* clock = nullptr);

  Scheduler& scheduler() { return scheduler_; }
  const Scheduler& scheduler() const { return scheduler_; }
  KvAllocator& kv() { return *kv_; }
  const KvAllocator& kv() const { return *kv_; }

 private:
  void check_kind(const Sequence& seq) const;  // a Generate sequence on a scores-only engine
  void admit_or_forget(Sequence& seq);         // scheduler_.add, or no trace of the sequence
  void postprocess(StepOutcome& outcome, double start, double done);  // the step's start and end
  bool should_stop(const Sequence& seq, TokenId token) const;

  std::string name_;
  ForkKv fork_kv_;
  std::string scores_only_;
  std::unique_ptr<KvAllocator> kv_;
  // Before the scheduler: its running list links the sequences, so they must outlive it.
  std::unordered_map<SeqId, std::unique_ptr<Sequence>> seqs_;
  Scheduler scheduler_;
  Executor& executor_;
};

}  // namespace duet
