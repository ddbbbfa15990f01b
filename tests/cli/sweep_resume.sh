#!/usr/bin/env bash
# A sweep killed with SIGTERM (then one with SIGINT) leaves a valid HDF5 file holding the points
# that finished; the same command with --resume completes it, and the file equals an uninterrupted
# run's: complete, no point twice. Resuming with another script, an edited workload module or other
# options, or a truncated file, is an error that leaves the file alone.
set -uo pipefail
duet="$1" source="$2" out="$3" python="$4"
script="$source/tests/cli/small_sweep.lua"
compare="$python $source/tests/cli/compare_h5.py"
rm -rf "$out" && mkdir -p "$out" && cd "$out" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
# ~0.3 s a point: a kill lands mid-sweep.
args=(--no-progress -- --problems 100)
"$duet" run "$script" --threads 1 --out whole.h5 "${args[@]}" >/dev/null 2>&1 || fail "uninterrupted run"

kill_and_resume() {  # SIGNAL THREADS
  local signal="$1" threads="$2" file="killed-$1.h5"
  rm -f "$file"
  "$duet" run "$script" --threads "$threads" --out "$file" "${args[@]}" >"$signal.log" 2>&1 &
  local pid=$!
  # Kill once two points' worth of tables (~0.7 MB) reached the file: points are flushed as they end.
  for _ in $(seq 1 600); do
    [ "$(stat -c %s "$file" 2>/dev/null || echo 0)" -gt 700000 ] && break
    sleep 0.02
  done
  kill "-$signal" "$pid"
  wait "$pid"
  local status=$?
  [ "$status" -eq $((128 + $(kill -l "$signal"))) ] || { cat "$signal.log"; fail "SIG$signal: exit status $status"; }
  grep -q "run the same command with --resume" "$signal.log" || fail "SIG$signal: no advice to resume"
  local kept
  kept=$("$python" - "$file" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:  # a valid HDF5 file, every point in it a whole run
    points = f["sweeps/0000/points"]
    for name in points:
        assert points[name].attrs["duet_schema_version"] == 3, name
        assert "summary" in points[name] and "engines" in points[name], name
    print(len(points))
PY
) || fail "SIG$signal: the killed sweep's file does not open with h5py"
  [ "$kept" -ge 1 ] && [ "$kept" -lt 6 ] || fail "SIG$signal: $kept points kept (expected 1 to 5)"
  "$duet" run "$script" --threads "$threads" --out "$file" --resume "${args[@]}" >resume.log 2>&1 || {
    cat resume.log; fail "SIG$signal: --resume"; }
  grep -q "$kept kept from the file (--resume)" resume.log || { cat resume.log; fail "SIG$signal: kept points not reused"; }
  $compare whole.h5 "$file" || fail "SIG$signal: the resumed file differs from the uninterrupted run's"
  echo "SIG$signal with $threads thread(s): $kept points kept, resumed to the uninterrupted run's contents"
}
kill_and_resume TERM 1
kill_and_resume INT 2

# A sweep recorded at the "summary" level has no problems table: its points read back by --resume
# still return their problems, accuracy and mean score (they returned 0, nil and 0).
"$duet" run "$script" --threads 1 --record summary --out summary.h5 --no-progress >summary.log 2>&1 || fail "summary run"
"$duet" run "$script" --threads 1 --record summary --out summary.h5 --resume --no-progress >resumed.log 2>&1 ||
  fail "summary --resume"
grep -q "6 kept from the file (--resume)" resumed.log || { cat resumed.log; fail "summary: points not kept"; }
diff <(grep "^point" summary.log) <(grep "^point" resumed.log) || fail "a resumed summary-level point's result differs"
grep -q "^point 1: .* 4 problems, accuracy 1.0" resumed.log || { cat resumed.log; fail "summary: no problems"; }
echo "summary level: the resumed points return the problems' answers"
# A file written before accuracy and mean_score were attributes: they come from its problems table.
cp whole.h5 new.h5 && cp whole.h5 old.h5
"$python" - old.h5 <<'PY' || fail "cannot strip old.h5"
import sys, h5py
with h5py.File(sys.argv[1], "a") as f:
    for point in f["sweeps/0000/points"].values():
        del point.attrs["accuracy"], point.attrs["mean_score"]
PY
"$duet" run "$script" --threads 1 --out new.h5 --resume "${args[@]}" >new.log 2>&1 || fail "resume new.h5"
"$duet" run "$script" --threads 1 --out old.h5 --resume "${args[@]}" >old.log 2>&1 || fail "resume old.h5"
diff <(grep "^point" new.log) <(grep "^point" old.log) || fail "an older file's resumed points lost their answers"
echo "an older file: the resumed points' answers come from its problems table"

cp whole.h5 edited.h5
expect_error() {  # REGEX COMMAND...
  local regex="$1"; shift
  if "$@" >err 2>&1; then fail "$* succeeded"; fi
  grep -Eq -e "$regex" err || { cat err; fail "$*: no message matching '$regex'"; }
  echo "rejected as expected: $(grep -E -e "$regex" err | head -1)"
}
expect_error "--resume: edited.h5: attribute duet_run.args is .*refusing to mix two sweeps" \
  "$duet" run "$script" --out edited.h5 --resume --no-progress -- --problems 50
expect_error "--resume: edited.h5: attribute duet_run.backend is 'sim', expected 'cpu'" \
  "$duet" run "$script" --out edited.h5 --resume --backend cpu --no-progress -- --problems 100
sed 's/problems = 4,/problems = 4, extra = 1,/' "$script" >edited.lua
expect_error "--resume: edited.h5: attribute duet_run.script_hash .*the script's text differs" \
  "$duet" run edited.lua --out edited.h5 --resume --no-progress -- --problems 100
# An edited module of the workload library (here in a copy of it, as DUET_HOME) is refused too:
# the points it would run could differ from those the file holds.
mkdir -p home
cp -r "$source/workloads" home/
for d in models traces profiles scripts; do ln -sfn "$source/$d" "home/$d"; done
echo "-- edited" >>home/workloads/beam_search.lua
expect_error "--resume: edited.h5: attribute duet_run.library_hash .*a file under workloads/, a module or its data, differs" \
  env DUET_HOME="$out/home" "$duet" run "$script" --out edited.h5 --resume --no-progress -- --problems 100
# So is an edited data file the workloads read (here the step-length model): it changes the runs
# as much as a module does.
rm -rf home/workloads
cp -r "$source/workloads" home/
sed -i 's/"mu"/"mu" /' home/workloads/data/step_model.json
grep -q '"mu" ' home/workloads/data/step_model.json || fail "the data edit did not apply"
expect_error "--resume: edited.h5: attribute duet_run.library_hash .*a file under workloads/, a module or its data, differs" \
  env DUET_HOME="$out/home" "$duet" run "$script" --out edited.h5 --resume --no-progress -- --problems 100
$compare whole.h5 edited.h5 >/dev/null || fail "a refused --resume changed the file"
head -c 300000 whole.h5 >truncated.h5
expect_error "--resume: truncated.h5: .*cannot continue this file" \
  "$duet" run "$script" --out truncated.h5 --resume --no-progress -- --problems 100
echo "resume ok"
