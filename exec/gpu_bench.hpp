#pragma once
// `duet bench decode|attention|prefill|cpu-overhead`: the CUDA engine's benchmarks. Each prints its
// figures, their ratio to the target, and with --json FILE writes them for bench/results/.
// Timings are device time between CUDA events on the executor's stream. In builds without CUDA
// each says so (exec/gpu_bench_none.cpp); this header names no CUDA type.
#include <string>

namespace duet::gpu_bench {

struct GpuBenchOptions {
  std::string gpu;         // a built-in GpuSpec name; empty: detect from the device name
  std::string model;       // empty: the benchmark's default
  int layers = 4;          // prefill: decoder layers run (0: all)
  int prefill_seq = 1024;  // prefill: tokens per sequence (0: one sequence per step)
  int iters = 20;
  int block_size = 16;  // KV block size in tokens (a shared pool's PRM uses 4)
  std::string json;
  std::string peer;  // decode: scripts/peer_hf.py's JSON, for duet / HF transformers ratios
};

int bench_decode(const GpuBenchOptions& options);
int bench_attention(const GpuBenchOptions& options);
int bench_prefill(const GpuBenchOptions& options);
int bench_cpu_overhead(const GpuBenchOptions& options);

}  // namespace duet::gpu_bench
