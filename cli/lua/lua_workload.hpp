#pragma once
// A search workload written in Lua: one coroutine per problem. A coroutine calls
// engine:submit{...} to queue sequences and duet.await(ids) to yield until they finish; the
// runtime resumes it from on_finished. The workload keeps `concurrency` problems in flight
// (continuous problem batching) or runs them in fixed batches.
#include <lua.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/metrics.hpp"
#include "core/runtime.hpp"
#include "io/hdf5_run.hpp"

namespace duet::lua {

// What Lua may know about an engine's vocabulary.
struct EngineVocab {
  std::string name;
  int vocab_size = 0;
  TokenId step_id = kNoToken;  // the reasoning-step separator "\n\n"
  TokenId eos_id = kNoToken;
};

enum class ProblemBatching { Continuous, Fixed };

struct LuaWorkloadOptions {
  int concurrency = 64;  // problems in flight
  ProblemBatching batching = ProblemBatching::Continuous;
  int min_batch = 1;  // continuous: refill when fewer than this are in flight
  std::uint64_t seed = 0;
};

class LuaWorkload final : public Workload {
 public:
  // The workload table is at `index` on L's stack: {problems = {...}, solve = function}.
  LuaWorkload(lua_State* L, int index, std::vector<EngineVocab> engines, LuaWorkloadOptions options);
  ~LuaWorkload() override;

  void start(Runtime& rt) override;
  void on_finished(Runtime& rt, int engine, Sequence& seq) override;
  void on_wakeup(Runtime& rt, std::uint64_t tag) override;

  std::size_t total() const { return total_; }
  std::size_t done() const { return results_.size(); }
  const std::vector<ProblemRecord>& results() const { return results_; }

  // Called from the Lua bindings (lua_api.cpp, lua_engine_handle.cpp).
  // The workload under way; outside one an error naming `what` ("duet.await") and the caller's line.
  static LuaWorkload& from(lua_State* L, const char* what);
  lua_Integer lua_submit(lua_State* co, int engine, int spec_index);  // the new sequence's id
  int lua_await(lua_State* co);
  int lua_sleep_until(lua_State* co, double t);  // -1: the caller yields
  int lua_release(lua_State* co, int engine, SeqId id);
  int lua_tokens(lua_State* co, int engine, SeqId id, int from);
  int lua_set_priority(lua_State* co, int engine, SeqId id, int priority, bool shared);
  const std::vector<EngineVocab>& engines() const { return engines_; }
  Runtime& runtime() { return *rt_; }

 private:
  struct Finished {
    int engine;
    int prompt_tokens, output_tokens, num_tokens;
    FinishReason reason;
    std::vector<float> scores;
  };
  struct Task {
    lua_State* co = nullptr;
    int thread_ref = LUA_NOREF;
    std::size_t problem = 0;
    double start_s = 0;
    std::int64_t requests = 0, generated = 0;
    std::unordered_map<SeqId, int> live;           // submitted, not yet finished: id -> engine
    std::unordered_map<SeqId, Finished> finished;  // finished, not yet awaited
    std::vector<std::pair<int, SeqId>> kept;       // finished with keep: released at the end
    std::vector<SeqId> awaiting;                   // what the coroutine waits for
    bool suspended = false;
    bool waits = false;  // set by duet.await and duet.sleep_until as they yield: something will resume it
    std::string sleep_where;     // "file:line: " of its last duet.sleep_until
    std::uint64_t woke_in = 0;   // the idle stretch it last woke in (LuaWorkload::idle_stretch_)
    double same_instant_s = -1;  // its sleeps until a time reached, in a row at one instant
    std::int64_t same_instant_sleeps = 0;
  };

  void launch(std::size_t problem);
  void resume(Task& task, int nargs);
  void push_results(Task& task, lua_State* co);
  void complete(Task& task);
  // A live sequence released before it finished (aborted): what it generated counts for its problem,
  // as in its engine's totals.
  void count_aborted(Task& task, int engine, SeqId id);
  void read_solution(lua_State* co, ProblemRecord& r);
  void fill();
  Task& task_of(lua_State* co);

  lua_State* L_;
  int workload_ref_ = LUA_NOREF;
  int solve_ref_ = LUA_NOREF;
  int problems_ref_ = LUA_NOREF;
  int engines_meta_ref_ = LUA_NOREF;  // ctx.engines' metatable: an unknown name is an error
  std::vector<EngineVocab> engines_;
  LuaWorkloadOptions opt_;
  Runtime* rt_ = nullptr;
  std::size_t total_ = 0;
  std::size_t next_problem_ = 0;
  bool filling_ = false;     // fill() is launching problems
  std::string solve_where_;  // "file:line: " where solve() is defined, for errors in its result
  std::unordered_map<lua_State*, std::unique_ptr<Task>> tasks_;
  std::unordered_map<SeqId, Task*> owner_;                  // live sequence -> its task
  std::unordered_map<std::uint64_t, lua_State*> sleepers_;  // wake-up tag -> sleeping coroutine
  // Wake-ups in a row with no sequence running and nothing submitted or finished: a solve() that
  // sleeps in a loop waiting for what never comes (the instruction limit counts one resume only).
  // An idle stretch is numbered (idle_stretch_); a problem records the last one it woke in.
  std::int64_t idle_wakeups_ = 0;
  std::uint64_t idle_stretch_ = 1;
  void progress() {
    idle_wakeups_ = 0;
    ++idle_stretch_;
  }
  void check_idle_wakeup(Task& task);
  void check_same_instant(Task& task);
  std::uint64_t next_tag_ = 1;
  std::vector<ProblemRecord> results_;
};

// What the workload table at `index` says of itself, for the run's attributes: `workload` (its
// name) and `workload.KEY` for each number, boolean (1 or 0) or string among its options.
RunMetadata describe_workload(lua_State* L, int index);

}  // namespace duet::lua
