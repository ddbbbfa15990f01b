#pragma once
// cuBLASLt, loaded the first time a GEMM needs it. Linking it would make every duet process, a
// simulation too, map and relocate the library at start-up: a program that only links
// libcublasLt.so.13 (CUDA 13.0) peaks at 153 MB resident against 1.3 MB without it (measured
// with /proc/self/status). The library is found as the dynamic linker finds it (LD_LIBRARY_PATH,
// then the program's RUNPATH, then the system's paths).
#include <cublasLt.h>

namespace duet::kernels {

// The entry points duet uses, named as cuBLASLt names them without the prefix.
struct CublasLt {
  decltype(&cublasLtCreate) Create;
  decltype(&cublasLtDestroy) Destroy;
  decltype(&cublasLtGetStatusName) GetStatusName;
  decltype(&cublasLtGetStatusString) GetStatusString;
  decltype(&cublasLtMatmul) Matmul;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
};

// Loads the library on the first call (thread-safe) and returns its entry points; the library
// stays loaded for the life of the process. Throws duet::Error naming the library and what the
// dynamic linker said when it cannot be loaded or lacks an entry point.
const CublasLt& cublaslt();

}  // namespace duet::kernels
