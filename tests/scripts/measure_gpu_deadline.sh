#!/usr/bin/env bash
# scripts/validation/measure_gpu.sh under DEADLINE: a command that would run past it is cut before
# the deadline less RESERVE, the commands after it are listed as skipped, and ARCHIVE packs the
# folder. The commands are a stand-in duet (quick for the 1B model's profile, else it sleeps), so no
# GPU is needed.
# Usage: measure_gpu_deadline.sh REPO SCRATCH
set -uo pipefail
repo="$1" scratch="$2"
rm -rf "$scratch" && mkdir -p "$scratch" || exit 1
fail() { echo "FAIL: $*" >&2; exit 1; }

printf '#!/bin/sh\ncase "$*" in *llama-3.2-1b*) exit 0 ;; esac\nsleep 60\n' >"$scratch/sleepy-duet"
chmod +x "$scratch/sleepy-duet"
start="$(date +%s)"
DEADLINE=12 RESERVE=2 MIN_STEP=6 DUET="$scratch/sleepy-duet" GPU=h200 ARCHIVE="$scratch/results.tar.gz" \
  "$repo/scripts/validation/measure_gpu.sh" "$scratch/results" profile memory >"$scratch/log" 2>&1
took=$(($(date +%s) - start))
cat "$scratch/results/steps.tsv"
[ "$took" -le 12 ] || fail "took ${took}s, past DEADLINE=12"
# The 1B profile runs; the 8B one is cut 5 s in (DEADLINE less RESERVE, less the kill's grace of
# 5 s); memory is skipped.
awk -F'\t' 'NR == 1 && $1 == "profile-llama-3-2-1b" && $2 == 0 {ok++}
            NR == 2 && $1 == "profile-llama-3-1-8b" && $2 == 124 && $3 >= 4 && $3 <= 7 {ok++}
            NR == 3 && $1 == "validate-beam-memory" && $2 == "skipped" {ok++}
            END {exit ok == 3 ? 0 : 1}' "$scratch/results/steps.tsv" || fail "steps.tsv is not as expected"
# The listing first: grep -q would stop reading early and fail tar (and, under pipefail, the test).
listing="$(tar -tzf "$scratch/results.tar.gz")" || fail "the archive cannot be read"
grep -qx 'results/steps.tsv' <<<"$listing" || fail "the archive lacks results/steps.tsv"

out="$(DEADLINE=soon "$repo/scripts/validation/measure_gpu.sh" "$scratch/r2" tests 2>&1)"
[ $? -eq 2 ] || fail "DEADLINE=soon: expected exit status 2"
grep -q "DEADLINE must be a whole number of seconds, got 'soon'" <<<"$out" || fail "DEADLINE=soon: $out"
# A limit of 0 would be none (timeout 0 waits forever), and bash reads 08 as a bad octal number.
for bad in "STEP_TIMEOUT=0|STEP_TIMEOUT must be at least 1 second" \
  "DEADLINE=08|DEADLINE must be a whole number of seconds, got '08'" \
  "ARCHIVE=$scratch/nowhere/r.tar.gz|ARCHIVE=$scratch/nowhere/r.tar.gz: no folder"; do
  out="$(env "${bad%%|*}" "$repo/scripts/validation/measure_gpu.sh" "$scratch/r3" tests 2>&1)"
  if [ $? -ne 2 ] || ! grep -qF "${bad#*|}" <<<"$out"; then fail "${bad%%|*}: $out"; fi
done
echo "measure_gpu deadline: ok"
