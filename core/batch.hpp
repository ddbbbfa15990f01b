#pragma once
// What a scheduler hands an executor, and what comes back.
#include <cstdint>
#include <span>
#include <vector>

#include "core/kv_allocator.hpp"
#include "core/metrics.hpp"
#include "core/sequence.hpp"

namespace duet {

enum class Want : std::uint8_t {
  Nothing,  // a prefill chunk that does not reach the last known token
  Sample,   // sample the next token after the last new token
  Score,    // PRM scores at the sequence's score positions inside this chunk
};

struct BatchItem {
  Sequence* seq = nullptr;  // tokens, sampling params and block table (seq->kv.blocks)
  int context_len = 0;      // tokens already in the KV cache; new tokens start here
  int num_new_tokens = 0;
  Want want = Want::Nothing;
  bool is_decode = false;  // decode_shaped(num_new_tokens, context_len): not a prompt chunk
};

// One new token over a computed context runs as a decode, also where that token ends a prompt whose
// rest was cached or forked (a beam's first step after its fork), as vLLM V1 runs every one-token
// request of a batch alike: decode attention, and a CUDA graph when all are.
inline bool decode_shaped(int num_new_tokens, int context_len) {
  return num_new_tokens == 1 && context_len > 0;
}

// The features of a batch that cost models price and calibration fits.
struct BatchShape {
  int prefill_tokens = 0;
  int decode_tokens = 0;
  int prefill_seqs = 0;
  int decode_seqs = 0;
  int logit_rows = 0;  // LM-head rows: one per sample, one per scored position
  int copies = 0;      // copy-on-write block copies
  // Tokens per KV block: a copy moves its whole block. Not in the steps table (the run's block_size
  // is an attribute of its engine), so a shape read back from a record has 0 here.
  int block_size = 0;
  std::int64_t decode_context_tokens = 0;  // KV tokens the decodes read
  // The same tokens with a block that several decodes read through the same leading blocks counted
  // once: beams forked from one parent, or requests that hit one cached prefix, read the shared
  // blocks from the caches.
  std::int64_t decode_distinct_context_tokens = 0;
  std::int64_t prefill_context_tokens = 0;  // KV tokens before each prefill chunk, summed
  // Sum over prefill chunks of n*c + n*(n+1)/2 for n new tokens after c cached ones: the keys
  // that causal attention visits, so attention FLOPs = 4 * layers * heads * head_dim * this.
  double prefill_attention_keys = 0;
  double prefill_tokens_squared = 0;  // sum over prefill chunks of n*n
};

struct Batch {
  std::vector<BatchItem> items;      // in scheduling order: running first, then admissions
  std::vector<BlockCopy> copies;     // copy-on-write, to run before the forward pass
  std::vector<Sequence*> preempted;  // sent back to waiting this step (recompute)
  int block_size = 0;                // tokens per block of the items' tables (0: not paged)
  int num_prefill_tokens = 0;        // the budget's accounting; shape has the rest
  int num_decode_tokens = 0;
  // The batch's features as it runs, shape_of(*this), set once by whoever builds the batch
  // (Scheduler::schedule): a simulated step prices it, the step's record keeps it.
  BatchShape shape;

  bool empty() const { return items.empty(); }
  int num_tokens() const { return num_prefill_tokens + num_decode_tokens; }
};

// Appends `seq`'s next `num_new_tokens` after its `context_len` computed ones, a decode where
// decode_shaped() says so, and counts them in the batch's prefill or decode tokens.
void add_item(Batch& batch, Sequence& seq, int context_len, int num_new_tokens, Want want);
BatchShape shape_of(const Batch& batch);
// Context tokens of the batch's decodes that another decode reads from the same blocks, reached
// through the same leading blocks (see batch.cpp).
std::int64_t shared_decode_context(const Batch& batch);
// The steps table holds a shape's every feature: a record's batch columns, and back.
void record_shape(const BatchShape& shape, StepRecord& record);
BatchShape shape_of(const StepRecord& record);
// A shape's accounting of one item: a prefill chunk of `new_tokens` after `context` cached tokens,
// or one decoding sequence with `context` tokens before its new one, in blocks of its own (logit
// rows are the caller's).
void add_prefill_chunk(BatchShape& shape, int new_tokens, std::int64_t context);
void add_decode(BatchShape& shape, std::int64_t context);

// The score positions an item's chunk must score: unscored ones inside [context_len, end). Every
// executor returns exactly these, in order, in StepResult::scores.
std::span<const int> positions_to_score(const BatchItem& item);

struct StepResult {
  double duration_s = 0.0;      // device time of the step
  double host_s = 0.0;          // simulation only: the cost model's host share (the wall clock measures it)
  double cpu_s = 0.0;           // host time of the executor's work (real engines; 0 in simulation)
  std::vector<TokenId> tokens;  // one per batch item; kNoToken where nothing was sampled
  std::vector<float> scores;    // Score items' scores, item after item, position order
};

}  // namespace duet
