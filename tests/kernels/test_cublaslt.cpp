// cuBLASLt is loaded at the first GEMM, not at start-up: no GPU is needed to check that.
#include "kernels/cublaslt.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace duet::kernels {
namespace {

bool mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(library) != std::string::npos) return true;
  return false;
}

// In a fresh process (the threadsafe style re-runs this binary for this test alone), so that no GEMM
// test has loaded the library before.
TEST(CublasLtDeathTest, NotMappedUntilFirstUse) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto check = [] {
    const bool before = mapped("libcublasLt.so");
    cublaslt();
    std::_Exit(!before && mapped("libcublasLt.so.13") ? 0 : 1);
  };
  EXPECT_EXIT(check(), ::testing::ExitedWithCode(0), "");
}

TEST(CublasLt, LoadsEveryEntryPoint) {
  const CublasLt& lt = cublaslt();
  EXPECT_TRUE(mapped("libcublasLt.so.13"));
  EXPECT_STREQ(lt.GetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  for (const void* fn : {(const void*)lt.Create, (const void*)lt.Destroy, (const void*)lt.Matmul,
                         (const void*)lt.MatmulAlgoGetHeuristic, (const void*)lt.MatmulDescCreate,
                         (const void*)lt.MatmulDescDestroy, (const void*)lt.MatmulDescSetAttribute,
                         (const void*)lt.MatmulPreferenceCreate, (const void*)lt.MatmulPreferenceDestroy,
                         (const void*)lt.MatmulPreferenceSetAttribute, (const void*)lt.MatrixLayoutCreate,
                         (const void*)lt.MatrixLayoutDestroy, (const void*)lt.GetStatusString})
    EXPECT_NE(fn, nullptr);
  EXPECT_EQ(&cublaslt(), &lt) << "loaded once";
}

}  // namespace
}  // namespace duet::kernels
