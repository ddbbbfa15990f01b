#!/usr/bin/env bash
# Regenerates the figures: runs the experiment scripts, then executes every notebook in
# analysis/notebooks headless on their files, which write their figures as PNG.
#   scripts/figures.sh              full sizes (about a minute on 2 cores); PNGs to docs/figures/
#   scripts/figures.sh --small DIR  the scripts at --problems 8 (the tests' size); files and PNGs in DIR;
#                                   and two notebooks on sweeps with failed points
# Needs python3-matplotlib, jupyter-nbconvert and python3-ipykernel (scripts/setup.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! /usr/bin/python3 -c "import matplotlib, nbformat, ipykernel" 2>/dev/null || ! command -v jupyter-nbconvert >/dev/null; then
  echo "SKIP: notebooks need python3-matplotlib, jupyter-nbconvert and python3-ipykernel (scripts/setup.sh --deps-only)"
  exit 0
fi
duet=${DUET:-build/cli/duet}
[ -x "$duet" ] || cmake --build build --target duet

small=0
if [ "${1:-}" = "--small" ]; then
  small=1
  data=${2:?--small needs a directory}
  figures=$data/figures
else
  data=build/figures-data
  figures=docs/figures
fi
mkdir -p "$data" "$figures"
data=$(cd "$data" && pwd)
figures=$(cd "$figures" && pwd)

# The scripts at their defaults, or at the tests' size.
size=()
[ "$small" = 1 ] && size=(--problems 8)
run() {  # run SCRIPT OUT [script args]
  local script=$1 out=$2
  shift 2
  "$duet" run "scripts/$script.lua" --out "$data/$out.h5" --no-progress -- "${size[@]}" "$@" >"$data/$out.txt"
}
run memory_split memory_split
run kv_blocks kv_blocks
run batch_params batch_params
run paged_vs_naive paged_vs_naive
if [ "$small" = 1 ]; then
  run quickstart quickstart
  run quickstart quickstart_full --prm-mode full
  "$duet" simulate --synthetic 200 --input-tokens 400 --output-tokens 100 --request-rate 20 --model llama-3.1-8b \
    --gpu h100 --out "$data/azure.h5" >"$data/azure.txt"
  validation=bench/results/validation-cpu/tiny-llama.beam.h5
else
  run quickstart quickstart --problems 100
  run quickstart quickstart_full --problems 100 --prm-mode full
  "$duet" simulate --trace traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv --model llama-3.1-8b --gpu h100 \
    --out "$data/azure.h5" >"$data/azure.txt"
  validation=bench/results/validation-cpu/small-llama.beam.h5
fi

notebook() {  # notebook NAME[:COPY] [VAR=FILE ...]: COPY names the executed copy (default NAME)
  local name=${1%%:*} copy=${1#*:}
  shift
  env DUET_FIGURES="$figures" "$@" jupyter-nbconvert --to notebook --execute --ExecutePreprocessor.timeout=600 \
    --output-dir "$data/notebooks" --output "$copy" "analysis/notebooks/$name.ipynb" 2>"$data/$name.log" ||
    { cat "$data/$name.log" >&2; echo "figures: notebook $name failed" >&2; exit 1; }
  # A notebook shows its figures inline too (a backend forced to Agg once left every one blank).
  /usr/bin/python3 - "$data/notebooks/$copy.ipynb" <<'PY' || exit 1
import json, sys
cells = json.load(open(sys.argv[1]))["cells"]
if not any("image/png" in o.get("data", {}) for c in cells for o in c.get("outputs", [])):
    sys.exit(f"figures: {sys.argv[1]} shows no figure")
PY
  echo "executed $name.ipynb$([ "$copy" = "$name" ] || echo " as $copy")"
}
notebook thesis_figures DUET_MEMORY_SPLIT="$data/memory_split.h5" DUET_KV_BLOCKS="$data/kv_blocks.h5" \
  DUET_BATCH_PARAMS="$data/batch_params.h5"
notebook validation DUET_RUN="$PWD/$validation"
# A trace's validation has no step-by-step point: the notebook shows its requests' errors instead.
if [ "$small" = 1 ]; then
  notebook validation:validation_trace DUET_FIGURES= DUET_RUN="$PWD/bench/results/validation-cpu/tiny-llama.azure.h5"
fi
notebook trace_replay DUET_RUN="$data/azure.h5"
notebook paged_vs_naive DUET_RUN="$data/paged_vs_naive.h5"
if [ "$small" = 1 ]; then
  # Sweeps whose memory cannot hold some points (duet run exits 3): the notebooks draw the points
  # that finished and mark the failed ones.
  failing() {  # failing SCRIPT OUT [script args]
    local script=$1 out=$2 status=0
    shift 2
    "$duet" run "scripts/$script.lua" --out "$data/$out.h5" --no-progress -- "$@" >"$data/$out.txt" 2>&1 || status=$?
    [ "$status" = 3 ] || { cat "$data/$out.txt" >&2; echo "figures: $script exited $status, not 3 (failed points)" >&2; exit 1; }
  }
  failing memory_split memory_split_failed --problems 8 --total 0.55
  failing batch_params batch_params_failed --problems 8 --prm-util 0.21
  failing paged_vs_naive paged_vs_naive_failed --problems 8 --llm-util 0.04 --max-model-len 3072
  notebook thesis_figures:thesis_figures_failed DUET_FIGURES= DUET_MEMORY_SPLIT="$data/memory_split_failed.h5" \
    DUET_KV_BLOCKS="$data/kv_blocks.h5" DUET_BATCH_PARAMS="$data/batch_params_failed.h5"
  notebook paged_vs_naive:paged_vs_naive_failed DUET_FIGURES= DUET_RUN="$data/paged_vs_naive_failed.h5"
fi
notebook search DUET_RUN="$data/quickstart.h5" DUET_RUN_FULL="$data/quickstart_full.h5"
echo "figures: $(ls "$figures" | wc -l) PNGs in $figures"
