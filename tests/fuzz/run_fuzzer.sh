#!/usr/bin/env bash
# Runs one libFuzzer target for a fixed time: FUZZER SEED_CORPUS WORK_DIR SECONDS.
# New inputs go to WORK_DIR/corpus (the seeds stay untouched), a crashing input to WORK_DIR/crash-*.
# It prints how many inputs ran and the coverage reached; on a failure, the fuzzer's report.
set -uo pipefail
fuzzer=$1 seeds=$2 work=$3 seconds=$4
mkdir -p "$work/corpus"
log="$work/fuzz.log"
# rss_limit_mb: the sanitizers' shadow memory counts too; 4 GB leaves room and still catches a
# reader that sizes a buffer from a corrupt field.
"$fuzzer" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=20 -print_final_stats=1 \
  -artifact_prefix="$work/" "$work/corpus" "$seeds" >"$log" 2>&1
rc=$?
if ((rc != 0)); then
  tail -n 60 "$log"
  echo "fuzz: $(basename "$fuzzer") failed (exit $rc); the input is in $work/" >&2
  exit "$rc"
fi
grep -E "^#[0-9]+[[:space:]]+(INITED|DONE)|stat::number_of_executed_units|stat::peak_rss_mb" "$log"
