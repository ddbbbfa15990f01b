#pragma once
// One sequence of tokens that an engine serves: a generation request, a beam, or a PRM scoring
// request. Plain data: the scheduler, the KV allocator and the executors read and update it.
#include <algorithm>
#include <boost/intrusive/list_hook.hpp>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "core/block_pool.hpp"
#include "core/types.hpp"

namespace duet {

enum class SeqStatus : std::uint8_t { Waiting, Running, Finished };

// What the sequence wants when its last known token has been computed.
enum class SeqKind : std::uint8_t {
  Generate,  // sample next tokens until a stop condition
  Score,     // a PRM request: one forward pass, then scores at score_positions
};

enum class FinishReason : std::uint8_t { None, Stop, Length, Scored, Aborted };

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;
  std::uint64_t seed = 0;  // per-request sampling stream
  int max_tokens = 16;     // generated tokens; with ignore_eos, exactly this many
  bool ignore_eos = false;
  std::vector<TokenId> stop_token_ids;
};

// What a synthetic executor answers for this sequence: the simulator always, the real engines when
// `force` is set, so that both backends see identical token streams (vLLM's ignore_eos +
// max_tokens gives equal lengths; forcing gives equal tokens, and so equal prefix-cache hits).
struct OutputScript {
  int stop_at = -1;  // output index (0-based) at which stop_token is emitted; -1: never
  TokenId stop_token = kNoToken;
  std::uint64_t seed = 0;     // the other tokens are a hash of (seed, output index)
  bool force = false;         // real executors emit the scripted tokens instead of sampling
  std::vector<float> scores;  // Score: returned in position order; missing ones are a hash in (0, 1)
};

// The KV allocator's per-sequence state, kept with the sequence so that lookups are O(1).
struct KvState {
  std::vector<BlockId> blocks;     // the block table
  std::vector<BlockHash> hashes;   // chained hashes of the full blocks of `tokens` (a memo)
  int num_slots = 0;               // token slots the table covers
  int num_cached_blocks = 0;       // leading blocks registered in (or hit from) the prefix cache
  BlockRef last_cached;            // the content of the last of those, a child's parent
  std::int32_t naive_region = -1;  // NaiveAllocator's reservation
  // The hits (block, content) of the last prefix lookup while it waits: a waiting head that memory
  // keeps out is looked up again every step, and the hits that still stand need no hashing.
  std::vector<std::pair<BlockId, BlockRef>> prefix_memo;
};

inline constexpr double kNotYet = std::numeric_limits<double>::quiet_NaN();

struct Sequence {
  SeqId id = 0;
  SeqKind kind = SeqKind::Generate;
  std::vector<TokenId> tokens;  // prompt followed by generated tokens
  int num_prompt_tokens = 0;
  int num_computed_tokens = 0;  // tokens whose KV is in the cache
  SamplingParams sampling;
  OutputScript script;
  bool keep_kv = false;              // a finished sequence keeps its blocks until released (to fork),
                                     // or until the pool runs short (they stay cached, see Scheduler)
  std::vector<int> score_positions;  // Score: token positions whose next-token distribution is scored
  std::vector<float> scores;         // Score: one per score position, as they are computed

  SeqStatus status = SeqStatus::Waiting;
  FinishReason finish_reason = FinishReason::None;
  int num_preemptions = 0;
  int num_cached_prompt_tokens = 0;  // prefix-cache hits at first admission
  double sort_key = 0.0;             // scheduler ordering key (lower first), fixed at arrival
  std::uint64_t arrival_order = 0;   // set by the scheduler: ties and FCFS
  std::uint64_t owner = 0;           // the workload's handle, opaque to the engine

  double arrival_time = 0.0;
  double first_scheduled_time = kNotYet;
  double first_token_time = kNotYet;
  double finish_time = kNotYet;

  KvState kv;
  // The scheduler's running list: O(1) removal in admission order. Normal (unchecked) links, so
  // that neither a scheduler nor a sequence has to outlive the other on destruction.
  using RunningHook =
      boost::intrusive::list_member_hook<boost::intrusive::link_mode<boost::intrusive::normal_link>>;
  RunningHook running_hook;

  int num_tokens() const { return static_cast<int>(tokens.size()); }
  int num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  bool finished() const { return status == SeqStatus::Finished; }

  // Score positions not scored yet (a recomputed sequence is not scored twice).
  std::span<const int> unscored_positions() const {
    return std::span<const int>(score_positions).subspan(std::min(scores.size(), score_positions.size()));
  }
  // The most tokens a prefix-cache hit may cover: every token whose logits are still needed must
  // be computed, so a hit stops before the first unscored position (Score) or the last token.
  int max_prefix_hit_tokens() const {
    const auto pending = unscored_positions();
    return kind == SeqKind::Score && !pending.empty() ? pending.front() : num_tokens() - 1;
  }
};

}  // namespace duet
