#!/usr/bin/env bash
# Points per minute for a sweep of 32 quickstart-sized points (bench/sweep_points.lua) with one
# process, with 2 MPI ranks (one thread each) and with 2 threads in one process, and their ratios;
# then one quickstart-sized point alone: its seconds and peak memory (/usr/bin/time).
#   bench/sweep_scaling.sh [BUILD_DIR]      (default build; needs a build with MPI for the ranks)
set -euo pipefail
cd "$(dirname "$0")/.."
duet="${1:-build}/cli/duet"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # CI and containers run as root

seconds() {  # NAME COMMAND...: wall seconds of the command
  local name="$1" start end
  shift
  start=$(date +%s.%N)
  "$@" >"$out/$name.log" 2>&1 || { cat "$out/$name.log" >&2; exit 1; }
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { print b - a }'
}
one=$(seconds one "$duet" run bench/sweep_points.lua --no-progress --threads 1 --out "$out/one.h5")
ranks=$(seconds ranks mpirun -n 2 --oversubscribe "$duet" run bench/sweep_points.lua --no-progress --threads 1 \
  --out "$out/ranks.h5")
threads=$(seconds threads "$duet" run bench/sweep_points.lua --no-progress --threads 2 --out "$out/threads.h5")
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
printf "%-26s %8s %14s %8s\n" "32 quickstart-sized points" "wall s" "points/min" "ratio"
for row in "1 process:$one" "2 MPI ranks x 1 thread:$ranks" "1 process x 2 threads:$threads"; do
  name="${row%%:*}" s="${row##*:}"
  printf "%-26s %8.1f %14.1f %7.2fx\n" "$name" "$s" "$(awk -v s="$s" 'BEGIN { print 32 * 60 / s }')" "$(awk -v a="$one" -v s="$s" 'BEGIN { print a / s }')"
done
grep -h "busy seconds per rank" "$out/ranks.log" || true
/usr/bin/time -f "one quickstart-sized point (duet run scripts/quickstart.lua, record steps): %e s wall, %M KB max RSS" \
  "$duet" run scripts/quickstart.lua --no-progress --out "$out/point.h5" >/dev/null
