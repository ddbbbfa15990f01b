#include "core/engine.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/error.hpp"

namespace duet {

Engine::Engine(std::string name, const SchedulerConfig& config, std::unique_ptr<KvAllocator> kv,
               Executor& executor, SchedulerPolicy policy, ForkKv fork_kv, std::string scores_only)
    : name_(std::move(name)),
      fork_kv_(fork_kv),
      scores_only_(std::move(scores_only)),
      kv_(std::move(kv)),
      scheduler_(config, *kv_, std::move(policy)),
      executor_(executor) {}

Sequence& Engine::add(Sequence seq, double now) {
  if (seqs_.count(seq.id))
    throw Error("engine '" + name_ + "': sequence id " + std::to_string(seq.id) + " is in use");
  check_kind(seq);
  if (seq.kind == SeqKind::Generate && seq.sampling.max_tokens <= 0)
    throw Error("engine '" + name_ + "': max_tokens must be positive, got " +
                std::to_string(seq.sampling.max_tokens));
  seq.arrival_time = now;
  seq.kv = KvState{};
  seq.num_computed_tokens = 0;
  auto owned = std::make_unique<Sequence>(std::move(seq));
  Sequence& ref = *owned;
  seqs_.emplace(ref.id, std::move(owned));
  admit_or_forget(ref);
  return ref;
}

void Engine::check_kind(const Sequence& seq) const {
  if (seq.kind == SeqKind::Generate && !scores_only_.empty())
    throw Error("engine '" + name_ + "': sequence " + std::to_string(seq.id) + " asks to generate, but " +
                scores_only_);
}

// The scheduler's checks (max_model_len, score positions, the order policy) may refuse a sequence
// after it holds KV (a fork's copy-on-write blocks): forget it entirely, so that a caller that
// catches the error has lost nothing, and rethrow.
void Engine::admit_or_forget(Sequence& seq) {
  try {
    scheduler_.add(seq);
  } catch (...) {
    kv_->free(seq);
    seqs_.erase(seq.id);
    throw;
  }
}

Sequence& Engine::fork(SeqId src_id, Sequence child, double now) {
  Sequence* src = find(src_id);
  if (!src) throw Error("engine '" + name_ + "': fork of unknown sequence " + std::to_string(src_id));
  const bool shares = fork_kv_ == ForkKv::Share;
  if (shares && src->kv.blocks.empty() && src->num_computed_tokens > 0)
    throw Error("engine '" + name_ + "': sequence " + std::to_string(src_id) + " no longer holds its KV");
  if (seqs_.count(child.id))
    throw Error("engine '" + name_ + "': sequence id " + std::to_string(child.id) + " is in use");
  check_kind(child);
  std::vector<TokenId> tokens = src->tokens;
  tokens.insert(tokens.end(), child.tokens.begin(), child.tokens.end());
  child.tokens = std::move(tokens);
  child.num_prompt_tokens = child.num_tokens();
  child.num_computed_tokens = src->num_computed_tokens;
  child.arrival_time = now;
  child.kv = KvState{};
  auto dst = std::make_unique<Sequence>(std::move(child));
  // A child that needs logits its parent has computed past (it appends nothing, so its last
  // token's; or it scores a position inside its parent) cannot take the parent's table: it starts
  // afresh, and the prefix cache serves what it may. Likewise with no memory to copy into, and
  // always under ForkKv::PrefixCache.
  const bool recomputes = !shares || dst->num_computed_tokens > dst->max_prefix_hit_tokens();
  if (recomputes || !kv_->fork(*src, *dst)) dst->num_computed_tokens = 0;
  Sequence& ref = *dst;
  seqs_.emplace(ref.id, std::move(dst));
  admit_or_forget(ref);
  return ref;
}

void Engine::release(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  scheduler_.release(*it->second);
  seqs_.erase(it);
}

Sequence* Engine::find(SeqId id) {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

StepOutcome Engine::step(double now, const Clock* clock) {
  StepOutcome outcome;
  outcome.batch = scheduler_.schedule();
  if (outcome.batch.empty()) return outcome;
  outcome.kv_scheduled = kv_->usage();
  outcome.result = executor_.execute(outcome.batch);
  // A token is out when the step is: after the host's share too (it was left out, so that a
  // simulated TTFT missed the host time of the step that made the token).
  const double busy = outcome.result.duration_s + outcome.result.host_s;
  postprocess(outcome, now, clock ? clock->step_end(now, busy) : now + busy);
  return outcome;
}

void Engine::set_priority(SeqId id, int priority, bool shared) {
  if (Sequence* s = find(id)) kv_->set_priority(*s, priority, shared);
}

bool Engine::should_stop(const Sequence& seq, TokenId token) const {
  if (seq.sampling.ignore_eos) return false;
  const auto& stops = seq.sampling.stop_token_ids;
  return std::find(stops.begin(), stops.end(), token) != stops.end();
}

void Engine::postprocess(StepOutcome& outcome, double start, double done) {
  const StepResult& r = outcome.result;
  std::size_t next_score = 0;
  for (std::size_t i = 0; i < outcome.batch.items.size(); ++i) {
    const BatchItem& item = outcome.batch.items[i];
    Sequence& seq = *item.seq;
    if (std::isnan(seq.first_scheduled_time)) seq.first_scheduled_time = start;
    seq.num_computed_tokens += item.num_new_tokens;
    FinishReason reason = FinishReason::None;
    if (item.want == Want::Sample) {
      const TokenId token = r.tokens.at(i);
      seq.tokens.push_back(token);
      if (std::isnan(seq.first_token_time)) seq.first_token_time = done;
      if (should_stop(seq, token)) reason = FinishReason::Stop;
      else if (seq.num_output_tokens() >= seq.sampling.max_tokens) reason = FinishReason::Length;
    } else if (item.want == Want::Score) {
      const std::size_t n = positions_to_score(item).size();
      for (std::size_t k = 0; k < n; ++k) seq.scores.push_back(r.scores.at(next_score++));
    }
    if (seq.kind == SeqKind::Score && seq.num_computed_tokens == seq.num_tokens()) {
      reason = FinishReason::Scored;
      if (std::isnan(seq.first_token_time)) seq.first_token_time = done;
    }
    if (reason != FinishReason::None) {
      seq.finish_reason = reason;
      seq.finish_time = done;
      scheduler_.finish(seq, seq.keep_kv && fork_kv_ == ForkKv::Share);
      outcome.finished.push_back(&seq);
    }
  }
}

}  // namespace duet
