#!/usr/bin/env bash
# scripts/validation/import_gpu_results.sh on a results folder made here from CPU files (a profile
# and a validation file of the CPU engine under the names measure_gpu.sh gives a GPU's), packed as
# measure_gpu.sh's ARCHIVE packs it: each file lands where the README says, tables.md is written,
# and the commands that did not finish are listed; a profile of another device is refused.
# Usage: import_gpu_results.sh REPO SCRATCH
set -uo pipefail
repo="$1" scratch="$2"
rm -rf "$scratch" && mkdir -p "$scratch/results" "$scratch/repo/scripts/validation" || exit 1
fail() { echo "FAIL: $*" >&2; exit 1; }
cp "$repo/scripts/validation/import_gpu_results.sh" "$repo/scripts/validation/table.py" "$scratch/repo/scripts/validation/"
r="$scratch/results"
cp "$repo/profiles/cpu-amd-epyc/duet-tiny-llama.json" "$r/llama-3-2-1b.json"
cp "$repo/profiles/cpu-amd-epyc/duet-tiny-llama.h5" "$r/llama-3-2-1b.h5"
cp "$repo/bench/results/validation-cpu/tiny-llama.beam.h5" "$r/beam-memory.validate.h5"
echo '{"benchmark": "decode"}' >"$r/decode.json"
echo "passed" >"$r/gpu-tests.txt"
echo "azure table" >"$r/azure-llama-3-1-8b.validate.txt"  # the README's hand-run name
# The batching phase was skipped, then run again into the same folder: its last row counts.
printf 'gpu-tests\t0\t40\nprofile-llama-3-2-1b\t0\t30\nprofile-llama-3-1-8b\t124\t200\nvalidate-beam-memory\t0\t90\nvalidate-beam-batching\tskipped\t0\nvalidate-beam-shape\tskipped\t0\nvalidate-beam-shape\t0\t70\n' \
  >"$r/steps.tsv"
tar -czf "$scratch/results.tar.gz" -C "$scratch" results || exit 1

out="$("$scratch/repo/scripts/validation/import_gpu_results.sh" "$scratch/results.tar.gz" 2>&1)" || fail "import: $out"
echo "$out"
d="$scratch/repo"
for f in profiles/cpu-amd-epyc/llama-3-2-1b.json profiles/cpu-amd-epyc/llama-3-2-1b.h5 \
  bench/results/gpu-cpu-amd-epyc/decode.json bench/results/gpu-cpu-amd-epyc/gpu-tests.txt \
  bench/results/gpu-cpu-amd-epyc/steps.tsv bench/results/validation-cpu-amd-epyc/beam-memory.validate.h5 \
  bench/results/validation-cpu-amd-epyc/azure-llama-3-1-8b.validate.txt; do
  [ -f "$d/$f" ] || fail "no $f"
done
grep -q '^| memory' "$d/bench/results/validation-cpu-amd-epyc/tables.md" || fail "tables.md has no memory rows"
grep -q 'profile-llama-3-1-8b: cut at its time limit' <<<"$out" || fail "the cut profile is not listed"
grep -q 'validate-beam-batching: skipped' <<<"$out" || fail "the skipped validation is not listed"
grep -q '2 of 6 commands did not finish' <<<"$out" || fail "no count of the unfinished commands"
grep -q 'validate-beam-shape' <<<"$out" && fail "the shape phase that ended well the second time is listed"

out="$("$scratch/repo/scripts/validation/import_gpu_results.sh" "$r" h200 2>&1)"
[ $? -eq 1 ] || fail "a profile of another device: expected exit status 1"
grep -q "was measured on 'cpu-amd-epyc', not 'h200'" <<<"$out" || fail "another device: $out"
echo "import_gpu_results: ok"
