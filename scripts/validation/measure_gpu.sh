#!/usr/bin/env bash
# Measures the CUDA engine on the GPU machine, from a bundle (scripts/gpu-bundle.sh) or a build:
# the GPU tests, the benchmarks, the profiles of the two thesis models, and the fidelity table
# (bench/results/validation-h100.md on an H100). Phases, in the order they are worth running:
#   tests     bundle/run-tests.sh, then quickstart.lua on the cuda backend (both models, one GPU)
#   sanitize  the GPU tests again under compute-sanitizer: memcheck (out-of-bounds and misaligned
#             accesses, every test but the death tests) and racecheck (shared-memory hazards, the
#             attention kernels); SANITIZE_TIMEOUT s per tool (default 300)
#   bench     decode, attention (block 16, and block 4 on Llama-3.1-8B's heads), prefill,
#             cpu-overhead; HF transformers' decode (scripts/peer_hf.py) and duet's over it
#   profile   duet profile --backend cuda of Llama-3.2-1B and Llama-3.1-8B, written where the
#             simulator finds them ($DUET_HOME/profiles/DEVICE/) and copied into OUT_DIR
#   validate  duet validate --backend cuda, in four parts that are phases of their own too:
#             memory and batching (beam_gpu.lua's memory split, 10 points, and batching grid, 9,
#             with 2 passes), shape (its 2 PRM-eviction points) and azure (an Azure conversation
#             slice on Llama-3.1-8B)
#   load      beam_gpu.lua's concurrency sweep (9 points) on the real engine
#   wide      beam_gpu.lua's n = 16 sweep (4 splits, 256 problems in flight), where memory binds
#   pool      beam_gpu.lua's shared KV pool against static splits on the wide workload (5 points)
#
#   scripts/validation/measure_gpu.sh OUT_DIR PHASE...      e.g. results tests bench
# Every command's output is kept in OUT_DIR (NAME.txt beside NAME.json / .h5, the names of the
# README's commands), its exit status and seconds in OUT_DIR/steps.tsv; a failing command does
# not stop the phase. Environment: DUET (the binary; default the bundle's, else build/'s),
# DUET_HOME (default: the bundle or the repository), GPU (h100, h200, a100 or a100-40gb;
# default: from nvidia-smi), STEP_TIMEOUT (s per command, default 900), REPEATS (validation
# passes, default 2), PROBLEMS (the memory and batching sweeps' problems, default 32), PYTHON (the
# peer's interpreter, with PyTorch and transformers; default python3), PEER_ARGS (more arguments to
# scripts/peer_hf.py, e.g. "--batches 64 --contexts 1024,2048": fewer points, a shorter run).
# For a job with a time limit: DEADLINE (s from this script's start) lets a command start only while
# MIN_STEP s (default 20) are left before it, less RESERVE s (default 30) kept for what comes after,
# and cuts each command at that point; what it leaves out is in steps.tsv with the status 'skipped'.
# Name the phases in the order they are worth running. ARCHIVE=FILE.tar.gz packs OUT_DIR into one
# file at the end (the steps it ran, cut or not, included).
#   DEADLINE=540 ARCHIVE=results.tar.gz measure_gpu.sh results tests profile memory bench
set -uo pipefail
[ $# -ge 2 ] || { awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0" >&2; exit 2; }
out="$1"
shift
for p in "$@"; do
  case "$p" in
    tests | sanitize | bench | profile | validate | memory | batching | shape | azure | load | wide | pool) ;;
    *) echo "measure_gpu: unknown phase '$p' (valid: tests, sanitize, bench, profile, validate, memory," \
      "batching, shape, azure, load, wide, pool)" >&2; exit 2 ;;
  esac
done
started="$(date +%s)"
# Whole seconds, written without a leading 0 (bash reads 08 as octal); a limit of 0 would be none.
for v in DEADLINE MIN_STEP RESERVE STEP_TIMEOUT; do
  [ -z "${!v+set}" ] || [[ "${!v}" =~ ^(0|[1-9][0-9]*)$ ]] ||
    { echo "measure_gpu: $v must be a whole number of seconds, got '${!v}'" >&2; exit 2; }
done
for v in MIN_STEP STEP_TIMEOUT; do
  [ "${!v:-1}" -ge 1 ] || { echo "measure_gpu: $v must be at least 1 second" >&2; exit 2; }
done
# The archive's folder must exist before hours of measuring, not after.
if [ -n "${ARCHIVE:-}" ] && [ ! -d "$(dirname "$ARCHIVE")" ]; then
  echo "measure_gpu: ARCHIVE=$ARCHIVE: no folder $(dirname "$ARCHIVE")" >&2
  exit 2
fi
mkdir -p "$out" && out="$(cd "$out" && pwd)" || exit 2
here="$(cd "$(dirname "$0")/../.." && pwd)"
if [ -z "${DUET:-}" ]; then
  if [ -x "$here/duet" ]; then DUET="$here/duet"; else DUET="$here/${BUILD_DIR:-build}/cli/duet"; fi
fi
export DUET_HOME="${DUET_HOME:-$here}"
# Only GPU machines run this: a device that does not start fails the GPU tests instead of skipping them.
export DUET_REQUIRE_GPU=1
# A bundle's cuda-env.sh puts cuBLASLt on LD_LIBRARY_PATH where it is not in /usr/local/cuda/lib64.
# shellcheck source=/dev/null
[ -f "$here/cuda-env.sh" ] && . "$here/cuda-env.sh"
[ -x "$DUET" ] || { echo "measure_gpu: no duet binary at $DUET" >&2; exit 2; }
if [ -z "${GPU:-}" ]; then
  name="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  # As core/gpu_spec.cpp's gpu_by_device_name maps a device name to a built-in spec.
  case "$name" in
    *H200*) GPU=h200 ;; *H100*) GPU=h100 ;; *A100*40GB*) GPU=a100-40gb ;; *A100*) GPU=a100 ;;
    *) echo "measure_gpu: cannot tell the GPU from nvidia-smi ('$name'); set GPU=h100|h200|a100|a100-40gb" >&2
       exit 2 ;;
  esac
fi
repeats="${REPEATS:-2}"
reserve="${RESERVE:-30}"
problems="${PROBLEMS:-32}"
beam="$DUET_HOME/scripts/validation/beam_gpu.lua"
azure="$DUET_HOME/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"

# step NAME COMMAND...: runs it with its output in OUT_DIR/NAME.txt, and its status and time in
# steps.tsv (124, or 137 if it ignored SIGTERM: it ran past STEP_TIMEOUT or DEADLINE; skipped:
# DEADLINE left it no time).
step() {
  local name="$1" start rc limit="${STEP_TIMEOUT:-900}" left
  shift
  if [ -n "${DEADLINE:-}" ]; then
    left=$((DEADLINE - reserve - ($(date +%s) - started)))
    if [ "$left" -lt "${MIN_STEP:-20}" ]; then
      echo "== $name: skipped, ${left}s left before DEADLINE less RESERVE: $*" | tee "$out/$name.txt"
      printf '%s\tskipped\t0\n' "$name" | tee -a "$out/steps.tsv"
      return
    fi
    [ "$left" -lt "$limit" ] && limit="$left"
  fi
  echo "== $name: $*" | tee "$out/$name.txt"
  start="$(date +%s)"
  # The kill's grace (5 s, less for a short limit) counts in the limit, so that even a command that
  # ignores SIGTERM ends before DEADLINE less RESERVE.
  local grace=$((limit >= 10 ? 5 : limit / 2))
  timeout --kill-after="$grace" "$((limit - grace))" "$@" 2>&1 | tee -a "$out/$name.txt"
  rc="${PIPESTATUS[0]}"
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - start))" | tee -a "$out/steps.tsv"
}

# The GPU tests: the bundle's run-tests.sh (it finds cuBLASLt), else the build's test binary.
gpu_tests() {
  if [ -x "$here/run-tests.sh" ]; then echo "$here/run-tests.sh"
  else echo "$here/${BUILD_DIR:-build}/tests/kernels/test_kernels"; fi
}

phase_tests() {
  # The machine: its GPU and driver, and its glibc (a bundle falls back to its own below 2.36).
  { nvidia-smi; getconf GNU_LIBC_VERSION; uname -r; } >"$out/machine.txt" 2>&1
  step gpu-tests "$(gpu_tests)"
  step quickstart-cuda "$DUET" run "$DUET_HOME/scripts/quickstart.lua" --backend cuda \
    --out "$out/quickstart-cuda.h5" -- --problems 8 --gpu "$GPU"
}

# compute-sanitizer instruments every kernel (tens of times slower), so it runs the tests once
# more after a plain pass, which measures nothing here: it only looks for what a pass can miss.
phase_sanitize() {
  local tests cs
  tests="$(gpu_tests)"
  cs="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  if [ ! -x "$cs" ]; then
    echo "measure_gpu: no compute-sanitizer on PATH or in /usr/local/cuda/bin: sanitize skipped" |
      tee "$out/sanitize.txt"
    return
  fi
  STEP_TIMEOUT="${SANITIZE_TIMEOUT:-300}" step sanitize-memcheck "$cs" --tool memcheck --error-exitcode 1 \
    --target-processes all "$tests" --gtest_filter='-*DeathTest*'
  STEP_TIMEOUT="${SANITIZE_TIMEOUT:-300}" step sanitize-racecheck "$cs" --tool racecheck --error-exitcode 1 \
    --target-processes all "$tests" --gtest_filter='Attention*'
}

phase_bench() {
  local b
  for b in decode attention prefill cpu-overhead; do
    step "$b" "$DUET" bench "$b" --json "$out/$b.json"
  done
  step attention-8b-block4 "$DUET" bench attention --block-size 4 --gpu-model llama-3.1-8b \
    --json "$out/attention-8b-block4.json"
  # shellcheck disable=SC2086
  step peer "${PYTHON:-python3}" "$DUET_HOME/scripts/peer_hf.py" --out "$out/peer.json" ${PEER_ARGS:-}
  [ -s "$out/peer.json" ] && step decode-peer "$DUET" bench decode --peer "$out/peer.json" \
    --json "$out/decode-peer.json"
}

# The profiles go where validate's simulator looks for them, under the device's key.
phase_profile() {
  local m slug
  for m in llama-3.2-1b llama-3.1-8b; do
    slug="${m//./-}"
    step "profile-$slug" "$DUET" profile --backend cuda --model "$m" --gpu "$GPU" --out "$out/$slug.json"
    [ -s "$out/$slug.json" ] || continue
    local device
    device="$(sed -n 's/.*"device": *"\([^"]*\)".*/\1/p' "$out/$slug.json" | head -1)"
    mkdir -p "$DUET_HOME/profiles/$device"
    cp "$out/$slug.json" "$out/$slug.h5" "$DUET_HOME/profiles/$device/" 2>/dev/null
  done
}

# The validation's parts, each its own file (a part cut short by a time limit loses only itself).
phase_memory() { validate_beam memory "$repeats" --problems "$problems" --concurrency "$problems"; }
phase_batching() { validate_beam batching "$repeats" --problems "$problems" --concurrency "$problems"; }
# Where memory binds depends on the GPU's. On a 141 GB H200 (the operator prior's predictions,
# docs/validation.md) the PRM of the shape points evicts only with 256 of 500 problems in flight,
# the wide workload's only past a 0.65 split, and no static split of 0.9 binds the pool, so there
# these sweeps take other arguments. SWEEP_ARGS (SHAPE_ARGS, WIDE_ARGS ...; set, even empty)
# replaces a sweep's.
sweep_args() {
  local override="${1^^}_ARGS"
  if [ -n "${!override+set}" ]; then echo "${!override}"; return; fi
  [ "$GPU" = h200 ] || return 0
  case "$1" in
    shape) echo "--shape-problems 500 --shape-concurrency 256" ;;
    wide) echo "--wide-splits 0.3,0.65,0.7,0.74" ;;
    pool) echo "--total 0.5 --pool-splits 0.1,0.2,0.3" ;;
  esac
}
phase_shape() { validate_beam shape 1; }
phase_load() { validate_beam load 1; }
phase_wide() { validate_beam wide 1; }
phase_pool() { validate_beam pool 1; }
phase_azure() {
  step validate-azure-8b "$DUET" validate --trace "$azure" --backend cuda --model llama-3.1-8b --gpu "$GPU" \
    --max-model-len 8192 --max-requests 200 --repeats "$repeats" --max-error 0 \
    --out "$out/azure-llama-3-1-8b.validate.h5"
}
phase_validate() { phase_memory; phase_batching; phase_shape; phase_azure; }

# validate_beam SWEEP REPEATS [script arguments], then the sweep's own (sweep_args)
validate_beam() {
  local sweep="$1" passes="$2"
  shift 2
  # shellcheck disable=SC2046
  step "validate-beam-$sweep" "$DUET" validate "$beam" --backend cuda --repeats "$passes" --max-error 0 \
    --no-progress --out "$out/beam-$sweep.validate.h5" -- --sweeps "$sweep" --gpu "$GPU" "$@" $(sweep_args "$sweep")
}

for p in "$@"; do "phase_$p"; done
if [ -n "${ARCHIVE:-}" ]; then
  tar -czf "$ARCHIVE" -C "$(dirname "$out")" "$(basename "$out")" &&
    echo "measure_gpu: $out packed into $ARCHIVE ($(du -k "$ARCHIVE" | cut -f1) KiB)"
fi
