#pragma once
// A GPU test's first line: DUET_REQUIRE_GPU(). Without a usable CUDA device the test is skipped,
// as on the CPU-only machines that build and run the whole suite, unless the environment sets
// DUET_REQUIRE_GPU (the GPU bundle's run-tests.sh does): there a device that does not start (a
// driver older than the toolkit, say) fails every test instead of passing them all as skipped.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kernels/device.hpp"

#define DUET_REQUIRE_GPU()                                                                  \
  do {                                                                                      \
    std::string why_;                                                                       \
    if (!::duet::kernels::device_available(&why_)) {                                        \
      if (std::getenv("DUET_REQUIRE_GPU") != nullptr) FAIL() << "no CUDA device: " << why_; \
      GTEST_SKIP() << "no CUDA device: " << why_;                                           \
    }                                                                                       \
  } while (false)
