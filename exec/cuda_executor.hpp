#pragma once
// The CUDA engine's executor: the Llama forward pass of CpuExecutor on one GPU, in bfloat16
// (float32 accumulation), over the same paged KV layout (core/kv_layout.hpp), with the same
// semantics: block copies first, every item's K/V of a layer written before any attention of that
// layer reads, logits only for the rows that need them, sampling keyed by (seed, output index),
// and scripted outputs when a sequence's OutputScript says `force`.
//
// This header includes no CUDA header (the state lives behind a pimpl); only kernels/ does.
//
// A step: copy-on-write block copies, then one upload of the step's metadata (tokens, positions,
// KV slots, query starts, context lengths, block tables, logits rows, sampling parameters) in one
// staged copy, then embedding -> per layer [add_]rmsnorm, fused QKV GEMM, RoPE, KV write,
// attention (the decode kernel for decode-only batches, the prefill kernel otherwise, which also
// serves mixed batches), O GEMM, add_rmsnorm, fused gate/up GEMM, SiLU*up, down GEMM -> final
// norm -> gather of the logits rows -> LM head in float32 -> sampling / PRM scores. Decode-only
// batches of up to the largest graph bucket are padded to a bucket and replayed from CUDA graphs
// (captured once per bucket, decode split count and block-table width); the rest run eagerly.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/executor.hpp"
#include "core/kv_layout.hpp"
#include "exec/cpu_executor.hpp"  // ItemLogits, the default PRM label ids
#include "exec/llama_weights.hpp"
#include "exec/weights.hpp"

namespace duet {

namespace kernels {
class DeviceBuffer;
}

// The device memory of a KV pool: one allocation, zeroed. An executor makes its own, or borrows
// the one arena of a shared pool (kv_pool = "shared") whose pages all its models' engines use.
class CudaKvArena {
 public:
  explicit CudaKvArena(std::int64_t bytes);
  ~CudaKvArena();
  CudaKvArena(const CudaKvArena&) = delete;
  CudaKvArena& operator=(const CudaKvArena&) = delete;
  void* data() const;
  std::int64_t bytes() const;

 private:
  std::unique_ptr<kernels::DeviceBuffer> buffer_;
};

struct CudaExecutorOptions {
  TokenId prm_plus_id = kDefaultPrmPlusId;  // a Score row returns p(plus) of the two-way softmax
  TokenId prm_minus_id = kDefaultPrmMinusId;
  // As CpuExecutorOptions::honour_scripts: forced scripts replace sampled tokens and scores.
  bool honour_scripts = true;
  // Decode-only batches of up to max(graph_batch_sizes) sequences replay CUDA graphs, padded to
  // the smallest bucket that holds them.
  bool use_cuda_graphs = true;
  std::vector<int> graph_batch_sizes{kCudaGraphBatchSizes.begin(), kCudaGraphBatchSizes.end()};
  // The engine's scheduler limits: device buffers are allocated for them up front (so that the
  // memory plan's activation figure is what is taken) and grow when a batch exceeds them.
  int max_num_batched_tokens = 8192;
  int max_num_seqs = 256;
  int max_model_len = 8192;
  // Copy each step's float32 logits rows back to the host (last_logits()): for tests.
  bool keep_logits = false;
  // A shared pool's arena (exactly KvLayout::total_elems() bf16): borrowed, not allocated.
  std::shared_ptr<CudaKvArena> kv_arena = nullptr;
};

struct CudaExecutorStats {
  std::int64_t steps = 0;              // execute() calls with at least one item
  std::int64_t graph_steps = 0;        // of which replayed a CUDA graph
  std::int64_t split_graph_steps = 0;  // of which decoded attention in more than one split (split-KV)
  std::int64_t eager_steps = 0;        // of which ran kernel by kernel (a graph's first step included)
  std::int64_t graphs_captured = 0;
  std::int64_t capture_failures = 0;  // keys that fell back to eager execution
  std::int64_t buffer_growths = 0;    // device buffers reallocated (every graph dropped then)
};

// Device bytes by purpose, as allocated.
struct CudaExecutorMemory {
  std::int64_t weights = 0;
  std::int64_t kv_pool = 0;      // num_blocks blocks, bf16 (a shared pool's arena, when borrowed)
  std::int64_t activations = 0;  // activations, logits, metadata, decode workspace
  std::int64_t gemm_workspace = 0;
  std::int64_t total() const { return weights + kv_pool + activations + gemm_workspace; }
};

class CudaExecutor final : public Executor {
 public:
  // Uploads `weights` (float32 on the host) as bf16, fusing q/k/v into one [q + 2 kv, hidden]
  // matrix and gate/up into one [2 intermediate, hidden]. The host weights are not kept: they may
  // be dropped once the constructor returns. The KV pool holds num_blocks blocks of block_size
  // tokens (the memory plan's count), bf16. Throws duet::Error on bad shapes or options, when
  // no device is usable, or when the device lacks the memory (naming the figures).
  CudaExecutor(const LlamaWeights& weights, int num_blocks, int block_size,
               const CudaExecutorOptions& options = {});
  // vLLM's load_format = "dummy": dummy_llama_weights(spec, seed) rounded to bf16, bit for bit,
  // generated on the device (kernels/ops.hpp's fill_dummy): no host copy (an 8B model's float32
  // weights are 32 GB) and no upload.
  struct DummyWeights {
    std::uint64_t seed = 0;
  };
  CudaExecutor(const ModelSpec& spec, DummyWeights dummy, int num_blocks, int block_size,
               const CudaExecutorOptions& options = {});
  ~CudaExecutor() override;
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  StepResult execute(const Batch& batch) override;

  const ModelSpec& spec() const;
  const CudaExecutorOptions& options() const;
  // The pool: the memory plan's num_blocks blocks, no more (graph padding rows write nothing).
  const KvLayout& layout() const;
  std::string device_name() const;
  CudaExecutorMemory memory() const;
  CudaExecutorStats stats() const;

  // Host time of the last execute(), in seconds, for StepRecord::cpu_s:
  //   last_prep_s(): building the step's host arrays (tokens, positions, slots, tables, rows,
  //                  sampling parameters) into the staging buffer;
  //   last_cpu_s():  all host time not spent waiting for the device: preparation, the upload
  //                  call, kernel launches or graph launch (and a graph's capture), and turning
  //                  the device's tokens and scores into the StepResult;
  //   last_wall_s(): the whole call.
  // StepResult::duration_s is device time between CUDA events on the executor's stream.
  double last_prep_s() const;
  double last_cpu_s() const;
  double last_wall_s() const;
  bool last_used_graph() const;

  // With options.keep_logits: the float32 logits of the last execute(), one entry per item, as
  // CpuExecutor::last_logits(). Empty otherwise.
  const std::vector<ItemLogits>& last_logits() const;
  // The KV pool converted to float32 in KvLayout order (layout().total_elems() values): tests.
  std::vector<float> kv_pool_to_host() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace duet
