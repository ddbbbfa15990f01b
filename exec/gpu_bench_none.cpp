// The CUDA engine's benchmarks in a build without CUDA: each says what it needs.
#include "core/error.hpp"
#include "exec/gpu_bench.hpp"

namespace duet::gpu_bench {

namespace {

[[noreturn]] void no_cuda(const std::string& which) {
  throw Error(
      "duet bench " + which +
      " needs the CUDA engine, and this build has no CUDA (configure with -DDUET_CUDA=ON where nvcc is, "
      "or use scripts/gpu-bundle.sh)");
}

}  // namespace

int bench_decode(const GpuBenchOptions&) { no_cuda("decode"); }
int bench_attention(const GpuBenchOptions&) { no_cuda("attention"); }
int bench_prefill(const GpuBenchOptions&) { no_cuda("prefill"); }
int bench_cpu_overhead(const GpuBenchOptions&) { no_cuda("cpu-overhead"); }

}  // namespace duet::gpu_bench
