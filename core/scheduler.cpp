#include "core/scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>

#include "core/error.hpp"

namespace duet {

namespace {

bool holds_kv(const KvState& kv) { return !kv.blocks.empty() || kv.naive_region >= 0; }

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, KvAllocator& kv, SchedulerPolicy policy)
    : config_(config), kv_(kv), policy_(std::move(policy)) {
  if (config.max_num_seqs <= 0)
    throw Error("max_num_seqs must be positive, got " + std::to_string(config.max_num_seqs));
  if (config.max_num_batched_tokens <= 0)
    throw Error("max_num_batched_tokens must be positive, got " +
                std::to_string(config.max_num_batched_tokens));
  if (config.max_model_len <= 0)
    throw Error("max_model_len must be positive, got " + std::to_string(config.max_model_len));
  // A step must be able to decode every running sequence; vLLM's SchedulerConfig refuses it too.
  if (config.max_num_batched_tokens < config.max_num_seqs)
    throw Error("max_num_batched_tokens (" + std::to_string(config.max_num_batched_tokens) +
                ") must be at least max_num_seqs (" + std::to_string(config.max_num_seqs) +
                "): a step could not decode every running sequence");
  if (!config.enable_chunked_prefill && config.max_num_batched_tokens < config.max_model_len)
    throw Error("without chunked prefill, max_num_batched_tokens (" +
                std::to_string(config.max_num_batched_tokens) + ") must be at least max_model_len (" +
                std::to_string(config.max_model_len) + ")");
}

void Scheduler::add(Sequence& seq) {
  const int longest = seq.num_tokens() + (seq.kind == SeqKind::Generate ? seq.sampling.max_tokens : 0);
  if (seq.num_tokens() == 0) throw Error("sequence " + std::to_string(seq.id) + " has no tokens");
  if (longest > config_.max_model_len)
    throw Error(
        "sequence " + std::to_string(seq.id) + " needs " + std::to_string(longest) +
        (seq.kind == SeqKind::Generate ? " tokens (prompt + max_tokens)" : " tokens (its prompt, scored)") +
        ", more than max_model_len " + std::to_string(config_.max_model_len));
  if (seq.kind == SeqKind::Score) {
    if (seq.score_positions.empty()) seq.score_positions.push_back(seq.num_tokens() - 1);
    // Ascending, not sorted here: a scripted score pairs with its position by index, and the
    // results come back in the positions' order.
    // Each once: a position twice would come back as two scores of one token.
    const auto descent =
        std::adjacent_find(seq.score_positions.begin(), seq.score_positions.end(), std::greater_equal<>());
    if (descent != seq.score_positions.end())
      throw Error("sequence " + std::to_string(seq.id) + ": score_positions must ascend, each once (" +
                  std::to_string(*descent) + " before " + std::to_string(*(descent + 1)) +
                  "): each scripted score pairs with the position at its index");
    if (seq.score_positions.front() < 0 || seq.score_positions.back() >= seq.num_tokens())
      throw Error("sequence " + std::to_string(seq.id) + ": score position " +
                  std::to_string(seq.score_positions.front() < 0 ? seq.score_positions.front()
                                                                 : seq.score_positions.back()) +
                  " out of range: positions are 0-based token indices, 0 to " +
                  std::to_string(seq.num_tokens() - 1));
  }
  seq.status = SeqStatus::Waiting;
  seq.arrival_order = next_arrival_++;
  seq.sort_key = policy_.order_key ? policy_.order_key(seq) : 0.0;
  // The waiting queue is ordered by this key: a NaN would break the order and lose sequences.
  if (!std::isfinite(seq.sort_key))
    throw Error("sequence " + std::to_string(seq.id) + ": the order policy's key is not a finite number");
  waiting_.insert(&seq);
  waiting_with_kv_ += holds_kv(seq.kv);  // a fork, holding its parent's blocks
}

SchedulerView Scheduler::view() const { return {running_.size(), waiting_.size(), kv_.usage()}; }

Batch Scheduler::schedule() {
  Batch batch;
  batch.block_size = kv_.block_size();
  int budget = config_.max_num_batched_tokens;
  bool preempted = false;
  schedule_running(batch, budget, preempted);
  if (!preempted) schedule_waiting(batch, budget);
  // A step that runs nothing copies nothing: copies made since the last step (a naive allocator's
  // fork) wait for the next step that runs, so that each copy is executed and counted once.
  if (!batch.empty()) batch.copies = kv_.take_copies();
  batch.shape = shape_of(batch);
  return batch;
}

Sequence& Scheduler::choose_victim(const RunningList::iterator& from) {
  if (!policy_.victim) return running_.back();
  // Candidates: the sequence that needs room and those after it, none scheduled yet this step.
  std::vector<Sequence*> candidates;
  for (auto it = from; it != running_.end(); ++it) candidates.push_back(&*it);
  const std::size_t pick = policy_.victim(candidates);
  if (pick >= candidates.size()) throw Error("victim policy chose an index out of range");
  return *candidates[pick];
}

void Scheduler::schedule_running(Batch& batch, int& budget, bool& preempted) {
  auto it = running_.begin();
  while (it != running_.end() && budget > 0) {
    Sequence& seq = *it;
    const int remaining = seq.num_tokens() - seq.num_computed_tokens;
    if (remaining <= 0 || (!config_.enable_chunked_prefill && remaining > budget)) {
      ++it;
      continue;
    }
    const int n = std::min(remaining, budget);
    bool self_preempted = false;
    while (!kv_.allocate_slots(seq, n)) {
      if (release_idle_kv()) continue;  // cached KV goes back before running work is lost
      Sequence& victim = choose_victim(it);
      self_preempted = &victim == &seq;
      if (self_preempted) ++it;  // step past it before it leaves the list
      preempt(victim, batch);
      preempted = true;
      if (self_preempted) break;
    }
    if (self_preempted) continue;
    add_item(batch, seq, n);
    budget -= n;
    ++it;
  }
}

void Scheduler::schedule_waiting(Batch& batch, int& budget) {
  while (!waiting_.empty() && budget > 0 && running_.size() < std::size_t(config_.max_num_seqs)) {
    Sequence& seq = **waiting_.begin();
    if (policy_.admit && !policy_.admit(seq, view())) break;
    Admission a = admit(seq, batch, budget);
    // Kept KV is no reservation: it goes back for an admission, as vLLM V1 frees a finished
    // request's blocks (cached) for any admission to take (release_idle_kv takes the kept first).
    // Forks waiting with their parents' blocks keep them while others run, whose end frees memory;
    // with nothing running the engine would stall (or be stuck), so their KV goes back too.
    while (a == Admission::NoMemory && (running_.empty() || !kept_.empty()) && release_idle_kv())
      a = admit(seq, batch, budget);
    if (a != Admission::Admitted) break;
  }
}

// Admits the head of the waiting queue (seq) with as many of its tokens as the budget allows.
Scheduler::Admission Scheduler::admit(Sequence& seq, Batch& batch, int& budget) {
  const bool fresh = seq.kv.blocks.empty();  // a fork arrives holding its parent's blocks
  const int hit = fresh ? kv_.lookup_prefix(seq) : 0;
  const int computed = fresh ? hit : seq.num_computed_tokens;
  const int remaining = seq.num_tokens() - computed;
  if (!config_.enable_chunked_prefill && remaining > budget) return Admission::NoBudget;
  const int n = std::min(remaining, budget);
  const bool held = holds_kv(seq.kv);
  if (!kv_.allocate_slots(seq, n, hit, config_.reserve_full_prompt ? remaining : 0))
    return Admission::NoMemory;
  waiting_.erase(waiting_.begin());
  waiting_with_kv_ -= held;
  seq.num_computed_tokens = computed;
  if (seq.num_preemptions == 0 && fresh) seq.num_cached_prompt_tokens = hit;
  seq.status = SeqStatus::Running;
  running_.push_back(seq);
  add_item(batch, seq, n);
  budget -= n;
  return Admission::Admitted;
}

// Gives one idle sequence's KV back to the pool: the oldest kept sequence, else the waiting
// sequence last in the order that holds blocks (a fork). Its full blocks stay hittable, at the
// retention priority they had, until the pool reuses them; the sequence recomputes (or a fork
// from it looks up) its tokens through the prefix cache, as a preempted one does. False: none.
// On a shared pool the peers' idle KV follows this engine's own, unless this engine's ceiling is
// what limits it: more free pages would not raise what it may take, and the peers would recompute
// their KV for nothing.
bool Scheduler::release_idle_kv() {
  if (release_own_idle_kv()) return true;
  if (peers_.empty()) return false;
  const KvUsage own = kv_.usage();
  if (own.limits.max_blocks - own.used_blocks <= own.free_blocks()) return false;
  for (Scheduler* peer : peers_) {
    // Pages a peer holds below its floor would stay reserved for it: releasing them frees nothing.
    const KvUsage u = peer->kv_.usage();
    if (u.used_blocks > u.limits.min_blocks && peer->release_own_idle_kv()) return true;
  }
  return false;
}

bool Scheduler::release_own_idle_kv() {
  Sequence* seq = nullptr;
  if (!kept_.empty()) {
    seq = &kept_.front();
    kept_.pop_front();
  } else if (waiting_with_kv_ > 0) {
    for (auto it = waiting_.rbegin(); it != waiting_.rend() && !seq; ++it)
      if (holds_kv((*it)->kv)) seq = *it;
    if (!seq) throw std::logic_error("release_idle_kv: the count of waiting sequences holding KV is off");
    --waiting_with_kv_;
  }
  if (!seq) return false;
  kv_.free(*seq);
  seq->num_computed_tokens = 0;
  ++num_idle_releases_;
  return true;
}

void Scheduler::add_item(Batch& batch, Sequence& seq, int n) {
  const int end = seq.num_computed_tokens + n;
  Want want = Want::Nothing;
  if (seq.kind == SeqKind::Generate) {
    if (end == seq.num_tokens()) want = Want::Sample;
  } else {
    const auto pending = seq.unscored_positions();
    if (!pending.empty() && pending.front() < end) want = Want::Score;
  }
  duet::add_item(batch, seq, seq.num_computed_tokens, n, want);
}

void Scheduler::preempt(Sequence& victim, Batch& batch) {
  running_.erase(running_.iterator_to(victim));
  kv_.free(victim);
  victim.num_computed_tokens = 0;
  victim.status = SeqStatus::Waiting;
  ++victim.num_preemptions;
  ++num_preemptions_;
  waiting_.insert(&victim);
  batch.preempted.push_back(&victim);
}

void Scheduler::finish(Sequence& seq, bool keep_kv) {
  if (seq.status == SeqStatus::Running) {
    running_.erase(running_.iterator_to(seq));
  } else if (seq.status == SeqStatus::Waiting) {
    waiting_.erase(&seq);
    waiting_with_kv_ -= holds_kv(seq.kv);
  }
  seq.status = SeqStatus::Finished;
  if (!keep_kv) kv_.free(seq);
  else if (holds_kv(seq.kv)) kept_.push_back(seq);
}

void Scheduler::abort(Sequence& seq) {
  if (seq.status == SeqStatus::Finished) return;
  seq.finish_reason = FinishReason::Aborted;
  finish(seq);
}

void Scheduler::release(Sequence& seq) {
  if (!seq.finished()) return abort(seq);
  // A finished sequence holds KV only while it is on the kept list.
  if (holds_kv(seq.kv)) kept_.erase(kept_.iterator_to(seq));
  kv_.free(seq);
}

}  // namespace duet
