#include "kernels/cublaslt.hpp"

#include <dlfcn.h>

#include <string>

#include "core/error.hpp"

namespace duet::kernels {
namespace {

// The soname of CUDA 13's cuBLASLt: the major version is the ABI.
constexpr const char* kLibrary = "libcublasLt.so.13";

template <class Fn>
void resolve(void* library, const char* name, Fn& fn) {
  void* symbol = dlsym(library, name);
  if (!symbol)
    throw Error(std::string(kLibrary) + ": no entry point " + name + " (a cuBLASLt older than CUDA 13?)");
  fn = reinterpret_cast<Fn>(symbol);
}

CublasLt load() {
  void* library = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
#ifdef DUET_CUDA_LIBRARY_DIR
  // The toolkit this was built against, where the usual search does not reach it (a build tree).
  if (!library) library = dlopen(DUET_CUDA_LIBRARY_DIR "/libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
#endif
  if (!library) {
    const char* why = dlerror();
    throw Error(std::string("cannot load ") + kLibrary +
                " (CUDA 13's cuBLAS, needed by the CUDA engine): " + (why ? why : "not found") +
                "; install the CUDA 13 toolkit's cuBLAS or add its lib directory to LD_LIBRARY_PATH");
  }
  CublasLt api{};
  resolve(library, "cublasLtCreate", api.Create);
  resolve(library, "cublasLtDestroy", api.Destroy);
  resolve(library, "cublasLtGetStatusName", api.GetStatusName);
  resolve(library, "cublasLtGetStatusString", api.GetStatusString);
  resolve(library, "cublasLtMatmul", api.Matmul);
  resolve(library, "cublasLtMatmulAlgoGetHeuristic", api.MatmulAlgoGetHeuristic);
  resolve(library, "cublasLtMatmulDescCreate", api.MatmulDescCreate);
  resolve(library, "cublasLtMatmulDescDestroy", api.MatmulDescDestroy);
  resolve(library, "cublasLtMatmulDescSetAttribute", api.MatmulDescSetAttribute);
  resolve(library, "cublasLtMatmulPreferenceCreate", api.MatmulPreferenceCreate);
  resolve(library, "cublasLtMatmulPreferenceDestroy", api.MatmulPreferenceDestroy);
  resolve(library, "cublasLtMatmulPreferenceSetAttribute", api.MatmulPreferenceSetAttribute);
  resolve(library, "cublasLtMatrixLayoutCreate", api.MatrixLayoutCreate);
  resolve(library, "cublasLtMatrixLayoutDestroy", api.MatrixLayoutDestroy);
  return api;
}

}  // namespace

const CublasLt& cublaslt() {
  // The process's one copy of the library's entry points: dlopen's handle is per process anyway,
  // and the table never changes once loaded. A failed load throws and is tried again next call.
  static const CublasLt api = load();
  return api;
}

}  // namespace duet::kernels
