// shape_of's count of the KV tokens that decodes read once: shared leading blocks (beams of one
// prompt) count once, prefill chunks and tables the batch does not read count not at all.
#include <gtest/gtest.h>

#include <vector>

#include "core/batch.hpp"
#include "core/executor.hpp"

namespace duet {
namespace {

Sequence with_blocks(SeqId id, std::vector<BlockId> blocks) {
  Sequence s;
  s.id = id;
  s.kv.blocks = std::move(blocks);
  return s;
}

BatchItem decode(Sequence& s, int context) { return {&s, context, 1, Want::Sample, true}; }

TEST(BatchShape, DecodesThatShareLeadingBlocksReadThemOnce) {
  // Block size 4. Three beams of one prompt share blocks 1 and 2 (8 tokens); beams a and b also
  // share block 3 (forked later). Another request has blocks of its own.
  Sequence a = with_blocks(1, {1, 2, 3, 10}), b = with_blocks(2, {1, 2, 3, 11}),
           c = with_blocks(3, {1, 2, 12});
  Sequence other = with_blocks(4, {20, 21});
  Batch batch;
  batch.block_size = 4;
  batch.items = {decode(c, 10), decode(other, 7), decode(a, 14), decode(b, 13)};
  const BatchShape s = shape_of(batch);
  EXPECT_EQ(s.decode_context_tokens, 10 + 7 + 14 + 13);
  // Read once: blocks 1, 2 (8 tokens), block 3 (4), and each row's own last block: 10 -> 2,
  // 11 -> 1, 12 -> 2, 20/21 -> 7.
  EXPECT_EQ(s.decode_distinct_context_tokens, 8 + 4 + 2 + 1 + 2 + 7);
  EXPECT_EQ(shared_decode_context(batch), s.decode_context_tokens - s.decode_distinct_context_tokens);
}

TEST(BatchShape, OnlyTheBlocksADecodeReadsCountAndPrefillsShareNothing) {
  // b's table has a block it has not reached yet (allocated ahead): it reads only blocks 1 and 2.
  Sequence a = with_blocks(1, {1, 2, 3}), b = with_blocks(2, {1, 2, 3}), p = with_blocks(3, {1, 2, 4});
  Batch batch;
  batch.block_size = 4;
  batch.items = {decode(a, 12), decode(b, 8), {&p, 8, 4, Want::Sample, false}};
  const BatchShape s = shape_of(batch);
  EXPECT_EQ(s.decode_context_tokens, 20);
  EXPECT_EQ(s.decode_distinct_context_tokens, 12) << "b's 8 tokens are a's first 8";
  EXPECT_EQ(s.prefill_context_tokens, 8) << "the prefill chunk reads its blocks apart";

  batch.block_size = 0;  // no paged tables (the naive allocator's regions): nothing is shared
  EXPECT_EQ(shape_of(batch).decode_distinct_context_tokens, 20);
}

TEST(BatchShape, AStepRecordKeepsEveryFeatureOfTheShape) {
  BatchShape s;
  add_prefill_chunk(s, 100, 30);
  add_prefill_chunk(s, 7, 0);
  add_decode(s, 500);
  add_decode(s, 40);
  s.decode_distinct_context_tokens = 460;
  s.logit_rows = 5;
  s.copies = 3;
  StepRecord r;
  record_shape(s, r);
  const BatchShape back = shape_of(r);
  EXPECT_EQ(back.prefill_tokens, s.prefill_tokens);
  EXPECT_EQ(back.decode_tokens, s.decode_tokens);
  EXPECT_EQ(back.prefill_seqs, s.prefill_seqs);
  EXPECT_EQ(back.decode_seqs, s.decode_seqs);
  EXPECT_EQ(back.logit_rows, s.logit_rows);
  EXPECT_EQ(back.copies, s.copies);
  EXPECT_EQ(back.decode_context_tokens, s.decode_context_tokens);
  EXPECT_EQ(back.decode_distinct_context_tokens, 460);
  EXPECT_EQ(back.prefill_context_tokens, s.prefill_context_tokens);
  EXPECT_EQ(back.prefill_attention_keys, s.prefill_attention_keys);
  EXPECT_EQ(back.prefill_tokens_squared, s.prefill_tokens_squared);
}

// The CUDA engine's graph for a step: the smallest size that holds its sequences, for decode-only
// steps up to the largest; its padded shape has a row (and logits) per slot.
TEST(BatchShape, ADecodeStepReplaysTheSmallestGraphThatHoldsIt) {
  auto decode = [](int seqs) {
    return BatchShape{
        .decode_tokens = seqs, .decode_seqs = seqs, .logit_rows = seqs, .decode_context_tokens = 7};
  };
  EXPECT_EQ(cuda_graph_batch(decode(1)), 1);
  EXPECT_EQ(cuda_graph_batch(decode(3)), 4);
  EXPECT_EQ(cuda_graph_batch(decode(129)), 256);
  EXPECT_EQ(cuda_graph_batch(decode(kMaxCudaGraphBatch)), kMaxCudaGraphBatch);
  EXPECT_EQ(cuda_graph_batch(decode(kMaxCudaGraphBatch + 1)), 0);
  EXPECT_EQ(cuda_graph_batch(BatchShape{}), 0);
  BatchShape mixed = decode(3);
  mixed.prefill_tokens = mixed.prefill_seqs = 1;
  EXPECT_EQ(cuda_graph_batch(mixed), 0);
  const BatchShape padded = cuda_graph_shape(decode(3));
  EXPECT_EQ(cuda_graph_shape(decode(kMaxCudaGraphBatch + 1)).decode_seqs, kMaxCudaGraphBatch + 1)
      << "eager: as is";
  EXPECT_EQ(padded.decode_seqs, 4);
  EXPECT_EQ(padded.decode_tokens, 4);
  EXPECT_EQ(padded.logit_rows, 4);
  EXPECT_EQ(padded.decode_context_tokens, 7) << "padding rows have no cached context";
}

}  // namespace
}  // namespace duet
