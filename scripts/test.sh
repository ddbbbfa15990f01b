#!/usr/bin/env bash
# duet's test command: sets up what is missing, builds, runs every test with ctest, checks the
# format and lint (scripts/check-style.sh), then runs the tests again under the sanitizers:
#   - every test (core, io, sim, exec, lua, cli) in a clang AddressSanitizer + UndefinedBehavior-
#     Sanitizer build, which also holds the libFuzzer targets; each fuzzer then runs for 30 s (Eigen's
#     own headers are left uninstrumented: tests/sanitizers/uninstrumented.txt says why);
#   - the threaded tests (sweeps, the HDF5 writer thread) in a ThreadSanitizer build.
#   scripts/test.sh          everything
#   scripts/test.sh --fast   the build and ctest only: no style checks, no sanitizer builds
# Extra arguments after the options go to the first ctest (e.g. -R Scheduler, -L core).
# Environment: DUET_CMAKE_ARGS (e.g. -DDUET_WERROR=ON, as CI sets), FUZZ_SECONDS (default 30).
set -euo pipefail
cd "$(dirname "$0")/.."

full=1
if [ "${1:-}" = "--fast" ]; then full=0; shift; fi
jobs=$(nproc)

scripts/setup.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$jobs" "$@"
((full)) || exit 0

scripts/check-style.sh

# Tests too slow under a sanitizer (or that it cannot run) carry the label no_sanitizer, each with
# its reason where it is defined.
# The sanitizer builds keep line tables only (-g1, clang's -gline-tables-only; the TSan build is
# GCC's): reports still name every frame's file and line, and sim/calibrated.cpp compiles in 24.7 s
# instead of 31.7 s with full -g.

echo "== every test under AddressSanitizer + UndefinedBehaviorSanitizer (clang) ==" >&2
CC=clang-14 CXX=clang++-14 cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  "-DCMAKE_CXX_FLAGS_DEBUG=-g1 -O1" -DDUET_FUZZ=ON -DDUET_FUZZ_SECONDS="${FUZZ_SECONDS:-30}" \
  -DDUET_CUDA=OFF -DDUET_BUILD_BENCH=OFF ${DUET_CMAKE_ARGS:-} >/dev/null
cmake --build build-san -j "$jobs"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:suppressions=$PWD/tests/sanitizers/asan.supp \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-san --output-on-failure -j "$jobs" -LE "fuzz|no_sanitizer"
echo "== fuzz targets, ${FUZZ_SECONDS:-30} s each ==" >&2
ctest --test-dir build-san --output-on-failure -j "$jobs" -L fuzz
for log in build-san/tests/fuzz/found/*/fuzz.log; do  # inputs run and coverage reached, per target
  echo "$(basename "$(dirname "$log")"): $(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1)"
done

# Threads run in duet.sweep (a Lua state per worker) and in the HDF5 writer (a thread per run stream).
# This build leaves MPI out, so it is also the check that a build without MPI works: its sweeps
# shard, merge, resume and record failed points on their own.
echo "== threaded tests under ThreadSanitizer, without MPI ==" >&2
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g1 -O1" -DDUET_TSAN=ON \
  -DDUET_MPI=OFF -DDUET_CUDA=OFF -DDUET_BUILD_BENCH=OFF ${DUET_CMAKE_ARGS:-} >/dev/null
cmake --build build-tsan -j "$jobs" --target duet test_io
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  ctest --test-dir build-tsan --output-on-failure -j "$jobs" -R '^(lua\.sweep|cli\.sweep_.*|Hdf5Run\..*)$'
