#!/usr/bin/env bash
# A fuzzing campaign: builds the libFuzzer targets (clang-14, AddressSanitizer + UBSan) in
# $FUZZ_BUILD_DIR (default build-fuzz; an existing DUET_FUZZ build such as scripts/test.sh's
# build-san is used as it is configured) and runs each for SECONDS (default 600), growing its
# corpus in $FUZZ_BUILD_DIR/campaign.
#   scripts/fuzz.sh [SECONDS] [TARGET...]     targets: trace hf_config safetensors profile tokenizer run_file
# It ends with a table: inputs executed, coverage (libFuzzer's cov: edges, ft: features), corpus
# size and the crashes found (their inputs are left in $FUZZ_BUILD_DIR/campaign/TARGET/).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(trace hf_config safetensors profile tokenizer run_file)

build=${FUZZ_BUILD_DIR:-build-fuzz}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:suppressions=$PWD/tests/sanitizers/asan.supp}
scripts/setup.sh --deps-only
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    "-DCMAKE_CXX_FLAGS_DEBUG=-g -O1" -DDUET_FUZZ=ON -DDUET_CUDA=OFF -DDUET_BUILD_BENCH=OFF >/dev/null
fi
cmake --build "$build" -j "$(nproc)" --target "${targets[@]/#/fuzz_}"

printf '| target | inputs executed | exec/s | cov | ft | corpus | crashes |\n|---|---:|---:|---:|---:|---:|---:|\n' \
  > "$build/campaign.md"
for t in "${targets[@]}"; do
  work=$build/campaign/$t
  mkdir -p "$work/corpus"
  echo "== fuzz_$t for ${seconds} s ==" >&2
  rc=0
  "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=20 -print_final_stats=1 \
    -artifact_prefix="$work/" "$work/corpus" "tests/fuzz/corpus/$t" >"$work/fuzz.log" 2>&1 || rc=$?
  done_line=$(grep -E "^#[0-9]+[[:space:]]+DONE" "$work/fuzz.log" | tail -1 || true)
  execs=$(grep -oP "stat::number_of_executed_units: \K[0-9]+" "$work/fuzz.log" || echo "?")
  rate=$(grep -oP "exec/s: \K[0-9]+" <<<"$done_line" || echo "?")
  cov=$(grep -oP "cov: \K[0-9]+" <<<"$done_line" || echo "?")
  ft=$(grep -oP "ft: \K[0-9]+" <<<"$done_line" || echo "?")
  corpus=$(find "$work/corpus" -type f | wc -l)
  crashes=$(find "$work" -maxdepth 1 -name 'crash-*' -o -maxdepth 1 -name 'leak-*' -o -maxdepth 1 -name 'timeout-*' -o -maxdepth 1 -name 'oom-*' | wc -l)
  ((rc == 0)) || tail -n 40 "$work/fuzz.log" >&2
  echo "| $t | $execs | $rate | $cov | $ft | $corpus | $crashes |" >> "$build/campaign.md"
done
cat "$build/campaign.md"
