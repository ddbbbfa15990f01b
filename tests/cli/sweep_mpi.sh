#!/usr/bin/env bash
# mpirun -n 2 duet run against one process: the same contents, also with a failing point and
# with two threads per rank; rank 0 reports the busy seconds of each rank.
set -uo pipefail
duet="$1" source="$2" out="$3" python="$4" mpirun="$5"
script="$source/tests/cli/small_sweep.lua"
compare="$python $source/tests/cli/compare_h5.py"
rm -rf "$out" && mkdir -p "$out" && cd "$out" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
# CI runs as root, on two cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=("$mpirun" -n 2 --oversubscribe)
"$duet" run "$script" --no-progress --threads 1 --out one.h5 >/dev/null 2>&1 || fail "one process"
timeout 120 "${mpi[@]}" "$duet" run "$script" --no-progress --threads 1 --out mpi.h5 >mpi.log 2>&1 || {
  cat mpi.log; fail "mpirun"; }
grep -Eq "busy seconds per rank: 0: [0-9.]+ s \([0-9]+ points?\) 1: [0-9.]+ s \([0-9]+ points?\)" mpi.log || {
  cat mpi.log; fail "no load balance report"; }
[ "$(grep -c '^point [0-9]: llm_util' mpi.log)" -eq 6 ] || { cat mpi.log; fail "rank 0 printed other than 6 results"; }
$compare one.h5 mpi.h5 || fail "mpirun -n 2 differs from one process"
timeout 120 "${mpi[@]}" "$duet" run "$script" --no-progress --threads 2 --out mpi2.h5 >/dev/null 2>&1 || fail "2 ranks x 2 threads"
$compare one.h5 mpi2.h5 || fail "2 ranks x 2 threads differ from one process"
"$duet" run "$script" --no-progress --threads 1 --out failed.h5 -- --fail 0.3 >/dev/null 2>&1
timeout 120 "${mpi[@]}" "$duet" run "$script" --no-progress --threads 1 --out mpi-failed.h5 -- --fail 0.3 >f.log 2>&1
status=$?
[ "$status" -eq 3 ] || { cat f.log; fail "a failing point under mpirun: exit status $status, expected 3"; }
$compare failed.h5 mpi-failed.h5 || fail "failed points under mpirun differ"
# A sweep thread of rank 1 whose copy of the script fails before it takes a point (its prelude
# fails on a second run there): the job ends with that error instead of waiting for it forever.
rm -f rank1.mark
timeout 60 "${mpi[@]}" "$duet" run "$source/tests/cli/one_request_sweep.lua" --no-progress --threads 1 --out thread.h5 \
  -- --points 4 --fail-rank-one >t.log 2>&1
status=$?
[ "$status" -ne 124 ] || { cat t.log; fail "a failed sweep thread on rank 1: the job hung"; }
if [ "$status" -eq 0 ] || ! grep -q "the prelude fails in rank 1's sweep thread" t.log; then
  cat t.log; fail "a failed sweep thread on rank 1: exit status $status without its error"
fi
# A grid that rank 1's run of the script builds otherwise than rank 0's: an error, not rank 1's
# points recorded under rank 0's numbers.
rm -f grid.mark
timeout 60 "${mpi[@]}" "$duet" run "$source/tests/cli/one_request_sweep.lua" --no-progress --threads 1 --out grid.h5 \
  -- --shifted-grid >g.log 2>&1 && { cat g.log; fail "a grid that differs on rank 1 ran"; }
grep -q "rank 1's run of the script built another grid than rank 0's" g.log ||
  { cat g.log; fail "a grid that differs on rank 1: no error"; }
# SIGTERM to rank 1 alone (as a node's own limit might): every rank exits as stopped (143, with the
# --resume hint), not rank 0 with an error of its own (exit 1); --resume then finishes the sweep.
rm -f stop.h5
"${mpi[@]}" "$duet" run "$script" --no-progress --threads 1 --out stop.h5 -- --problems 300 >s.log 2>&1 &
launcher=$!
rank1=""
for _ in $(seq 1 100); do
  for pid in $(pgrep -f "small_sweep.lua --no-progress --threads 1 --out stop.h5" || true); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then rank1=$pid; fi
  done
  [ -n "$rank1" ] && break
  sleep 0.1
done
[ -n "$rank1" ] || { kill "$launcher"; fail "no rank 1 to signal"; }
sleep 1
kill -TERM "$rank1"
wait "$launcher"
status=$?
[ "$status" -eq 143 ] || { cat s.log; fail "SIGTERM to rank 1: exit status $status, expected 143"; }
grep -q "run the same command with --resume" s.log || { cat s.log; fail "SIGTERM to rank 1: no --resume hint"; }
timeout 120 "${mpi[@]}" "$duet" run "$script" --no-progress --threads 1 --out stop.h5 --resume -- --problems 300 \
  >r.log 2>&1 || { cat r.log; fail "--resume after SIGTERM to rank 1"; }
echo "mpi ok"
