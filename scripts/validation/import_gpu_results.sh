#!/usr/bin/env bash
# Puts what scripts/validation/measure_gpu.sh measured where the repository keeps it (README,
# "Running on a GPU", step 4), from its results folder or a .tar.gz of it (measure_gpu.sh ARCHIVE=):
#   profiles/DEVICE/MODEL.{json,h5}      the profiles and their measurements: from then on the
#                                        simulator prices those models on DEVICE with them
#   bench/results/gpu-DEVICE/            the benchmarks' JSON and output, the GPU tests' output,
#                                        machine.txt, steps.tsv and the CUDA quickstart's run file
#   bench/results/validation-DEVICE/     each validation's .validate.h5 and printed output, and
#                                        tables.md: every validation file as scripts/validation/table.py prints it
# and then lists the commands that failed, ran past their time or were skipped (steps.tsv). The
# README's commands of step 3, run by hand, name their files as measure_gpu.sh does. A second import
# into the same folders replaces the files of the same name and keeps the others.
#   scripts/validation/import_gpu_results.sh RESULTS_DIR|RESULTS.tar.gz [DEVICE]
# DEVICE: the key the profiles record (h100-sxm, h200, a100-80gb, or the driver's name for another
# GPU); give it where no profile was measured, or to check that the profiles agree with it.
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0" >&2; exit 2; fi
repo="$(cd "$(dirname "$0")/../.." && pwd)"
python="${PYTHON:-/usr/bin/python3}"
src="$1"
device="${2:-}"

if [ -f "$src" ]; then
  unpacked="$(mktemp -d)"
  trap 'rm -rf "$unpacked"' EXIT
  tar -xzf "$src" -C "$unpacked" || { echo "import_gpu_results: $src is not a .tar.gz that tar can read" >&2; exit 1; }
  # measure_gpu.sh packs the results folder by its name: one folder at the top.
  src="$unpacked"
  tops=("$unpacked"/*)
  if [ ${#tops[@]} -eq 1 ] && [ -d "${tops[0]}" ]; then
    src="${tops[0]}"
  elif [ "$(find "$unpacked" -mindepth 1 -maxdepth 1 -type d | wc -l)" -gt 1 ]; then
    echo "import_gpu_results: $1 holds several folders at its top: give one results folder (unpack it)" >&2
    exit 1
  fi
elif [ ! -d "$src" ]; then
  echo "import_gpu_results: no folder or file '$src'" >&2
  exit 2
fi

# The device every profile recorded: one key, and the one given if one was.
for p in "$src"/llama-*.json; do
  [ -f "$p" ] || continue
  key="$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["device"])' "$p" 2>/dev/null)" ||
    { echo "import_gpu_results: $p is not a profile (no 'device' field)" >&2; exit 1; }
  if [ -z "$device" ]; then
    device="$key"
  elif [ "$key" != "$device" ]; then
    echo "import_gpu_results: $p was measured on '$key', not '$device'" >&2
    exit 1
  fi
done
[ -n "$device" ] || { echo "import_gpu_results: no profile in $src tells the device: give it (h100-sxm, h200, ...)" >&2; exit 2; }
case "$device" in */* | .* | '') echo "import_gpu_results: '$device' is not a device key" >&2; exit 2 ;; esac

profiles="$repo/profiles/$device"
bench="$repo/bench/results/gpu-$device"
validation="$repo/bench/results/validation-$device"
copied=0
# put DIR FILE...: copies the files that exist into DIR.
put() {
  local dir="$1" f
  shift
  for f in "$@"; do
    [ -f "$f" ] || continue
    mkdir -p "$dir"
    cp "$f" "$dir/"
    copied=$((copied + 1))
  done
}
put "$profiles" "$src"/llama-*.json "$src"/llama-*.h5
for b in decode attention prefill cpu-overhead attention-8b-block4 peer decode-peer; do
  put "$bench" "$src/$b.json" "$src/$b.txt"
done
put "$bench" "$src"/gpu-tests.txt "$src"/sanitize*.txt "$src"/machine.txt "$src"/steps.tsv \
  "$src"/quickstart-cuda.txt "$src"/quickstart-cuda.h5 "$src"/profile-*.txt
# measure_gpu.sh's validate-NAME.txt, and the README's hand-run NAME.validate.txt
put "$validation" "$src"/*.validate.h5 "$src"/*validate*.txt
[ "$copied" -gt 0 ] || { echo "import_gpu_results: $1 holds none of the files measure_gpu.sh writes" >&2; exit 1; }
echo "import_gpu_results: $copied files from $1 for device $device"

if compgen -G "$validation/*.validate.h5" >/dev/null; then
  "$python" "$repo/scripts/validation/table.py" "$validation"/*.validate.h5 >"$validation/tables.md"
  echo "import_gpu_results: wrote ${validation#"$repo"/}/tables.md (tables: $(grep -c '^#' "$validation/tables.md"))"
fi

# What did not run to its end: a status other than 0 (124, or 137 after SIGKILL: cut at its time
# limit). A command's last row counts: measure_gpu.sh appends, and a phase run again into the same
# folder may have ended well the second time. Only measure_gpu.sh keeps steps.tsv; the README's
# commands run by hand do not.
[ -f "$src/steps.tsv" ] || exit 0
awk -F'\t' '!($1 in status) {order[++commands] = $1} {status[$1] = $2}
  END {
    for (i = 1; i <= commands; i++) {
      s = status[order[i]]
      if (s == "0") continue
      why = s == "skipped" ? "skipped: no time was left" : s == "124" || s == "137" ? "cut at its time limit" : "exit status " s
      printf "  %s: %s\n", order[i], why; n++
    }
    if (n) printf "import_gpu_results: %d of %d commands did not finish (each one'"'"'s output: NAME.txt)\n", n, commands
  }' "$src/steps.tsv"
