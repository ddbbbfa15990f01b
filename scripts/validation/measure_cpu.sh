#!/usr/bin/env bash
# Re-measures bench/results/validation-cpu.md: profiles of the two CPU models from duet profile's
# synthetic grid, then duet validate on workloads the fit never saw (a beam search's memory split
# and batching grid, and a slice of the Azure conversation trace: AZURE_REQUESTS requests, default 100),
# each real run three times (the small model's twice); then one KV pool for both models against
# static splits of the same pages, with the tiny model generating and the small one scoring (twice).
# The engine runs pinned to one core (taskset); run it on an otherwise idle machine.
#   scripts/validation/measure_cpu.sh [OUT_DIR]     (default: validation-cpu/ where it is run)
# It writes the profiles where the simulator finds them, profiles/DEVICE/duet-{tiny,small}-llama.json
# (replacing the repository's for this machine's DEVICE), and into OUT_DIR each command's output
# (NAME.txt), its errors (NAME.err) and files (NAME.h5); scripts/validation/table.py OUT_DIR prints
# the tables of bench/results/validation-cpu.md.
set -euo pipefail
out="${1:-validation-cpu}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"  # before the cd below: relative to where it is run
cd "$(dirname "$0")/../.."
duet="${BUILD_DIR:-build}/cli/duet"
pin=(taskset -c "$(($(nproc) - 1))")
azure=traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv
device="$("$duet" profile --help >/dev/null && "${pin[@]}" "$duet" profile --backend cpu \
  --model models/tiny-llama/config.json --out "$out/probe.json" --max-num-seqs 1 --max-num-batched-tokens 2 \
  --max-model-len 4 --repeats 1 | sed -n 's/^profile: .* on \([^ ]*\) .*/\1/p')"
rm -f "$out"/probe.*
echo "device: $device" | tee "$out/device.txt"

# rate-scale: the tiny model serves the trace slice near saturation at twice the trace's rate, the
# small one (about 6x the work per token) at 0.35 of it.
# The small model's beam search runs on 3 problems and twice (it takes ~6x the tiny one's time).
for spec in "tiny-llama duet-tiny-llama 2 6 3" "small-llama duet-small-llama 0.35 3 2"; do
  # shellcheck disable=SC2086 # the spec is split into its five words on purpose
  set -- $spec
  model="models/$1/config.json"
  profile="profiles/$device/$2.json"
  mkdir -p "profiles/$device"
  "${pin[@]}" "$duet" profile --backend cpu --model "$model" --out "$profile" --max-num-seqs 64 \
    --max-num-batched-tokens 512 --max-model-len 4096 --repeats 5 | tee "$out/$1.profile.txt"
  "${pin[@]}" "$duet" validate scripts/validation/beam_cpu.lua --backend cpu --repeats "$5" --max-error 0 \
    --no-progress --out "$out/$1.beam.h5" -- --model "$model" --problems "$4" --concurrency "$4" \
    2>"$out/$1.beam.err" | tee "$out/$1.beam.txt"
  "${pin[@]}" "$duet" validate --trace "$azure" --backend cpu --model "$model" --max-requests "${AZURE_REQUESTS:-100}" \
    --rate-scale "$3" --max-model-len 8192 --num-gpu-blocks-override 2048 --max-num-batched-tokens 512 \
    --max-num-seqs 64 --repeats "$5" --max-error 0 --out "$out/$1.azure.h5" 2>"$out/$1.azure.err" | tee "$out/$1.azure.txt"
done

# The two models together, each priced by its own profile above: the small PRM holds 4x the tiny
# generator's KV bytes per token, so their equal-byte blocks are 16 and 4 tokens, as
# Llama-3.2-1B's and Llama-3.1-8B's are on a shared pool.
"${pin[@]}" "$duet" validate scripts/validation/beam_cpu.lua --backend cpu --repeats 2 --max-error 0 --no-progress \
  --out "$out/tiny-llama+small-llama.pool.h5" -- --sweeps pool --prm-model models/small-llama/config.json \
  2>"$out/tiny-llama+small-llama.pool.err" | tee "$out/tiny-llama+small-llama.pool.txt"
