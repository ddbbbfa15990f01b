// y[m, n] = x[m, k] * W^T through cuBLASLt, bf16 inputs, float32 accumulation and scaling.
//
// Layout. cuBLASLt is column-major; a row-major [r, c] matrix with leading dimension c is the
// same memory as a column-major [c, r] matrix with leading dimension c. So:
//   y row-major [m, n]  = column-major y^T [n, m], ld n          -> D (and C, with beta = 0)
//   W row-major [n, k]  = column-major W^T [k, n], ld k          -> A, with transa = T: op(A) = W [n, k]
//   x row-major [m, k]  = column-major x^T [k, m], ld k          -> B, with transb = N: op(B) = x^T [k, m]
// and D = op(A) * op(B) = W x^T = (x W^T)^T = y^T. cuBLAS's (m, n, k) are therefore (n, m, k).
// This "TN" form is the one every cuBLASLt tensor-core kernel supports.
//
// Alignment. The plans are chosen with a minimum alignment of 16 bytes for every matrix (cuBLASLt
// otherwise assumes 256 and may pick kernels that fault on a pointer into the middle of a fused
// buffer), so any call may reuse a cached plan, CUDA-graph replays included. Its requirements,
// checked before each call (duet::Error otherwise): x, W and y 16-byte aligned, and every leading
// dimension a multiple of 16 bytes: k % 8 == 0 (bf16 x and W), n % 8 == 0 for bf16 y, n % 4 == 0
// for float32 y. m is a column count in cuBLAS's view and may be anything (m = 0 is a no-op).
//
// Bias. A bf16 call may add a bias vector of n elements to every row of y through the epilogue
// (CUBLASLT_EPILOGUE_BIAS: in cuBLAS's view a bias per row of D, which is y's column); it is added
// to the float32 result before the rounding to bf16, and may be followed by a ReLU
// (CUBLASLT_EPILOGUE_RELU_BIAS; CUBLASLT_EPILOGUE_RELU without a bias). A plan is for one epilogue;
// the bias pointer is set on its descriptor at each call (a graph captures the call's pointer), and
// must be 256-byte aligned.
//
// A Gemm owns one workspace, so it must not run on two streams at once; it is not thread-safe.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "core/error.hpp"
#include "kernels/cublaslt.hpp"
#include "kernels/gemm.hpp"

namespace duet::kernels {

namespace {

void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string(call) + ": " + cublaslt().GetStatusName(status) + " (" +
                cublaslt().GetStatusString(status) + ")");
}

std::string shape(int m, int n, int k) {
  return "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

struct Gemm::Impl {
  // One cached plan per shape and output type: descriptors and the heuristic's first algorithm.
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int, int, int, int, int>;  // m, n, k, output cudaDataType, cublasLtEpilogue_t

  cublasLtHandle_t handle = nullptr;
  DeviceBuffer workspace;
  std::map<Key, Plan> plans;

  ~Impl() {
    for (auto& [key, p] : plans) destroy(p);
    if (handle) cublaslt().Destroy(handle);
  }

  static void destroy(Plan& p) {
    if (p.d) cublaslt().MatrixLayoutDestroy(p.d);
    if (p.b) cublaslt().MatrixLayoutDestroy(p.b);
    if (p.a) cublaslt().MatrixLayoutDestroy(p.a);
    if (p.op) cublaslt().MatmulDescDestroy(p.op);
  }

  static cublasLtEpilogue_t epilogue_of(bool bias, bool relu) {
    if (relu) return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }

  const Plan& plan(int m, int n, int k, cudaDataType_t out, bool bias, bool relu) {
    const cublasLtEpilogue_t epilogue = epilogue_of(bias, relu);
    const Key key{m, n, k, int(out), int(epilogue)};
    if (auto it = plans.find(key); it != plans.end()) return it->second;
    Plan p;
    try {
      check(cublaslt().MatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
      const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      check(cublaslt().MatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
            "cublasLtMatmulDescSetAttribute(TRANSA)");
      check(cublaslt().MatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
            "cublasLtMatmulDescSetAttribute(TRANSB)");
      if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        check(cublaslt().MatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                sizeof epilogue),
              "cublasLtMatmulDescSetAttribute(EPILOGUE)");
      }
      check(cublaslt().MatrixLayoutCreate(&p.a, CUDA_R_16BF, k, n, k), "cublasLtMatrixLayoutCreate(W)");
      check(cublaslt().MatrixLayoutCreate(&p.b, CUDA_R_16BF, k, m, k), "cublasLtMatrixLayoutCreate(x)");
      check(cublaslt().MatrixLayoutCreate(&p.d, out, n, m, n), "cublasLtMatrixLayoutCreate(y)");

      // Split-K partial sums in float32 only: the in-place and output-type schemes add them in the
      // output type, bf16, which costs about one bf16 ulp of the partials (cublasLt.h,
      // cublasLtReductionScheme_t) and makes results depend on the heuristic's choice. Should a
      // cuBLASLt read the mask as excluding the schemeless (no split-K) algorithms too, and so find
      // none, the query is made again without it rather than failing every GEMM.
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      for (const std::uint32_t reductions : {std::uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE),
                                             std::uint32_t(CUBLASLT_REDUCTION_SCHEME_MASK)}) {
        found = heuristic(handle, p, workspace.bytes(), reductions, result);
        if (found > 0) break;
      }
      if (found == 0)
        throw Error("Gemm: cuBLASLt has no algorithm for " + shape(m, n, k) +
                    (out == CUDA_R_16BF ? " (bf16 out" : " (float32 out") + (bias ? ", bias" : "") +
                    (relu ? ", relu)" : ")"));
      p.algo = result.algo;
    } catch (...) {
      destroy(p);
      throw;
    }
    return plans.emplace(key, p).first->second;
  }

  // cuBLASLt's best algorithm for the plan's shapes within the workspace, with split-K reductions
  // limited to `reductions` (a cublasLtReductionScheme_t mask); returns how many it found (0 or 1).
  static int heuristic(cublasLtHandle_t handle, const Plan& p, std::uint64_t workspace_bytes,
                       std::uint32_t reductions, cublasLtMatmulHeuristicResult_t& result) {
    cublasLtMatmulPreference_t pref = nullptr;
    check(cublaslt().MatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    const std::uint32_t align = 16;
    cublasStatus_t st = cublaslt().MatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof workspace_bytes);
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      if (st == CUBLAS_STATUS_SUCCESS)
        st = cublaslt().MatmulPreferenceSetAttribute(pref, attr, &align, sizeof align);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublaslt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                   &reductions, sizeof reductions);
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublaslt().MatmulAlgoGetHeuristic(handle, p.op, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
    cublaslt().MatmulPreferenceDestroy(pref);
    // No algorithm for these preferences comes back as NOT_SUPPORTED, not only as a count of 0.
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) return 0;
    check(st, "cublasLtMatmulAlgoGetHeuristic");
    return found;
  }

  static const char* call_name(cudaDataType_t out) {
    return out == CUDA_R_16BF ? "Gemm::bf16_out" : "Gemm::f32_out";
  }

  static void check_shape(int m, int n, int k, cudaDataType_t out) {
    const char* what = call_name(out);
    const int out_align = out == CUDA_R_16BF ? 8 : 4;  // elements per 16 bytes
    if (m < 0 || n <= 0 || k <= 0) throw Error(std::string(what) + ": bad shape " + shape(m, n, k));
    if (k % 8 != 0 || n % out_align != 0)
      throw Error(std::string(what) + ": " + shape(m, n, k) +
                  ": cuBLASLt's bf16 tensor-core path needs leading dimensions of a multiple of 16 bytes "
                  "(k % 8 == 0, n % " +
                  std::to_string(out_align) + " == 0)");
  }

  void run(const bf16* x, const bf16* w, void* y, int m, int n, int k, cudaDataType_t out, Stream s,
           const bf16* bias = nullptr, bool relu = false) {
    const char* what = call_name(out);
    check_shape(m, n, k, out);
    if (m == 0) return;
    if (!aligned16(x) || !aligned16(w) || !aligned16(y))
      throw Error(std::string(what) + ": x, W and y must be 16-byte aligned (" + shape(m, n, k) + ")");
    // The plan was chosen without a bias pointer, which cuBLASLt reads as fully aligned: a bias
    // must then be aligned as cudaMalloc aligns (256 bytes), as the engine's weights are.
    if (bias && reinterpret_cast<std::uintptr_t>(bias) % 256 != 0)
      throw Error(std::string(what) + ": the bias must be 256-byte aligned (" + shape(m, n, k) + ")");
    const Plan& p = plan(m, n, k, out, bias != nullptr, relu);
    if (bias)
      check(cublaslt().MatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
            "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
    const float alpha = 1.0f, beta = 0.0f;
    check(cublaslt().Matmul(handle, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.d, y, p.d, &p.algo,
                            workspace.get(), workspace.bytes(), s),
          "cublasLtMatmul");
  }
};

Gemm::Gemm(std::size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
  check(cublaslt().Create(&impl_->handle), "cublasLtCreate");
  impl_->workspace = DeviceBuffer(workspace_bytes);
}

Gemm::~Gemm() = default;

void Gemm::bf16_out(const bf16* x, const bf16* w, bf16* y, int m, int n, int k, Stream s, const bf16* bias,
                    bool relu) {
  impl_->run(x, w, y, m, n, k, CUDA_R_16BF, s, bias, relu);
}

void Gemm::f32_out(const bf16* x, const bf16* w, float* y, int m, int n, int k, Stream s) {
  impl_->run(x, w, y, m, n, k, CUDA_R_32F, s);
}

void Gemm::prepare(int m, int n, int k, bool f32_out, bool bias, bool relu) {
  const cudaDataType_t out = f32_out ? CUDA_R_32F : CUDA_R_16BF;
  Impl::check_shape(m, n, k, out);
  if ((bias || relu) && f32_out) throw Error("Gemm::prepare: a bias or ReLU is for bf16 output only");
  if (m > 0) impl_->plan(m, n, k, out, bias, relu);
}

}  // namespace duet::kernels
