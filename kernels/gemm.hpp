#pragma once
// GEMMs through cuBLASLt: bf16 inputs, float32 compute. y[m, n] = x[m, k] * W^T, with W stored as
// HuggingFace stores a Linear's weight, [n, k] row-major.
#include <cstdint>
#include <memory>

#include "kernels/device.hpp"

namespace duet::kernels {

class Gemm {
 public:
  explicit Gemm(std::size_t workspace_bytes = 32u << 20);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  // y (bf16) = x * W^T (+ bias [n] on every row, added in float32 before the rounding: cuBLASLt's
  // bias epilogue; then max(0, .) with `relu`); ldy = n.
  void bf16_out(const bf16* x, const bf16* w, bf16* y, int m, int n, int k, Stream s,
                const bf16* bias = nullptr, bool relu = false);
  // y (float32) = x * W^T: logits.
  void f32_out(const bf16* x, const bf16* w, float* y, int m, int n, int k, Stream s);
  // Chooses and caches the algorithm of that call now (cuBLASLt's heuristic is host work): a caller
  // that times its device work prepares its GEMMs before its start event, so that a step of a new
  // shape does not leave the GPU idle inside the timed span. Shapes are checked as by the calls.
  void prepare(int m, int n, int k, bool f32_out, bool bias = false, bool relu = false);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace duet::kernels
