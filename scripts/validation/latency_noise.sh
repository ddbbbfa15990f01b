#!/usr/bin/env bash
# How far the CPU engine's latency percentiles move between repeats of one trace slice, and how
# the simulator's errors compare with that (bench/results/validation-cpu.md, "The real engine
# against itself, latency by latency"). On the tiny model, pinned to one core:
#   1. duet profile (the synthetic grid), then duet validate of the first 100 requests of the Azure
#      conversation trace at twice its rate (near saturation) and at its own rate, 3 runs each;
#   2. duet fit of the measured run at its own rate, and duet validate at twice the rate again,
#      priced by that profile: a profile fitted on one load's served steps, checked on another.
#   scripts/validation/latency_noise.sh [OUT_DIR]     (default: latency-noise/ where it is run)
# scripts/validation/table.py OUT_DIR prints the tables. About 7 minutes; run it on an idle machine.
set -euo pipefail
out="${1:-latency-noise}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$(dirname "$0")/../.."
duet="${BUILD_DIR:-build}/cli/duet"
pin=(taskset -c "$(($(nproc) - 1))")
model=models/tiny-llama/config.json
slice=(--trace traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv --backend cpu --model "$model"
  --max-requests 100 --max-model-len 8192 --num-gpu-blocks-override 2048 --max-num-batched-tokens 512
  --max-num-seqs 64 --repeats 3 --max-error 0)
"${pin[@]}" "$duet" profile --backend cpu --model "$model" --max-num-seqs 64 --max-num-batched-tokens 512 \
  --max-model-len 4096 --repeats 5 --out "$out/tiny.json" >"$out/profile.txt"
"${pin[@]}" "$duet" validate "${slice[@]}" --rate-scale 2 --profile "$out/tiny.json" --out "$out/rate2.h5" |
  tee "$out/rate2.txt"
"${pin[@]}" "$duet" validate "${slice[@]}" --rate-scale 1 --profile "$out/tiny.json" --out "$out/rate1.h5" |
  tee "$out/rate1.txt"
"$duet" fit --run "$out/rate1.h5" --group validate/points/0000/measured --model "$model" \
  --out "$out/served-rate1.json" >"$out/served-rate1.txt"
"${pin[@]}" "$duet" validate "${slice[@]}" --rate-scale 2 --profile "$out/served-rate1.json" \
  --out "$out/rate2-served-profile.h5" | tee "$out/rate2-served-profile.txt"
