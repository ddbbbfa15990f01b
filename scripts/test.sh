#!/usr/bin/env bash
# duet's test command: sets up what is missing, builds, runs every test with ctest, then runs the
# core tests again in an AddressSanitizer + UndefinedBehaviorSanitizer build.
#   scripts/test.sh          everything
#   scripts/test.sh --fast   skip the sanitizer build
# Extra arguments after the options go to ctest (e.g. -R Scheduler, -L core).
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=1
if [ "${1:-}" = "--fast" ]; then sanitize=0; shift; fi

scripts/setup.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"

if ((sanitize)); then
  echo "== core tests under AddressSanitizer + UndefinedBehaviorSanitizer ==" >&2
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDUET_SANITIZE=ON -DDUET_CUDA=OFF \
    -DDUET_BUILD_BENCH=OFF >/dev/null
  cmake --build build-asan -j "$(nproc)" --target test_core
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j "$(nproc)" -L core
fi
