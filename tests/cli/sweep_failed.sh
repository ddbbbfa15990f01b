#!/usr/bin/env bash
# A failing point among good ones: the others go on, the failed ones are recorded with their
# parameters and message under /sweeps/NNNN/failed, the exit status is 3 and the summary counts
# them; the good points equal a run without failures. In the shards and merge too.
set -uo pipefail
duet="$1" source="$2" out="$3" python="$4"
script="$source/tests/cli/small_sweep.lua"
rm -rf "$out" && mkdir -p "$out" && cd "$out" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
"$duet" run "$script" --no-progress --threads 1 --out good.h5 >/dev/null 2>&1 || fail "the run without failures"
"$duet" run "$script" --no-progress --threads 2 --out failed.h5 -- --fail 0.2 >run.log 2>&1
status=$?
[ "$status" -eq 3 ] || { cat run.log; fail "exit status $status, expected 3"; }
grep -q "6 points: 4 ran, 2 failed" run.log || { cat run.log; fail "no summary"; }
grep -q "duet run: 2 sweep points failed" run.log || fail "no count of failed points"
# The failures' messages on stderr too, each distinct one once (both points fail alike).
[ "$(grep -c '^  point 3 failed: .*llm_util 0.2 fails on purpose' run.log)" -eq 1 ] || fail "no failure message"
[ "$(grep -c '^  point [0-9]* failed' run.log)" -eq 1 ] || fail "a repeated failure message"
grep -q "^    and 1 more point alike: 4$" run.log || { cat run.log; fail "the other point failing alike is not named"; }
grep -q "^point 3 failed: .*small_sweep.lua:.*: llm_util 0.2 fails on purpose" run.log || fail "results.failed"
[ "$(grep -c '^point [0-9]: llm_util' run.log)" -eq 4 ] || fail "the good points are not the results"
"$python" - good.h5 failed.h5 <<'PY' || fail "the file's failed points"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as good, h5py.File(sys.argv[2], "r") as f:
    failed = f["sweeps/0000/failed"]
    assert sorted(failed) == ["0002", "0003"], list(failed)
    for name, seqs in (("0002", 64), ("0003", 256)):
        a = failed[name].attrs
        assert "llm_util 0.2 fails on purpose" in a["error"], a["error"]
        assert a["point.llm_util"] == 0.2 and a["point.max_num_seqs"] == seqs and a["sweep"] == "small"
    assert sorted(f["sweeps/0000/points"]) == ["0000", "0001", "0004", "0005"]
    for name in f["sweeps/0000/points"]:
        for engine in ("llm", "prm"):
            path = f"sweeps/0000/points/{name}/engines/{engine}/steps"
            assert np.array_equal(good[path][()], f[path][()]), path
print("failed points recorded")
PY
# duet_h5.sweep_table: a row per point, in order, the failed ones with their error and no numbers.
PYTHONPATH="$source/analysis" "$python" - failed.h5 <<'PY' || fail "sweep_table's failed points"
import sys, duet_h5
t = duet_h5.sweep_table(sys.argv[1])
assert len(t) == 6 and int(t["failed"].sum()) == 2, t[["group", "failed"]]
# In the sweep's order, the failed points in their places.
assert list(t["failed"]) == [False, False, True, True, False, False], t[["group", "failed"]]
bad = t[t["failed"]]
assert sorted(bad["point.max_num_seqs"]) == [64, 256] and all(bad["point.llm_util"] == 0.2), bad
assert all("fails on purpose" in e for e in bad["error"]) and bad["problems_per_s"].isna().all(), bad
PY
for i in 1 2; do
  "$duet" run "$script" --no-progress --shard "$i/2" --out "part$i.h5" -- --fail 0.2 >/dev/null 2>&1
  [ $? -eq 3 ] || fail "shard $i/2: exit status"
done
"$duet" merge merged.h5 part1.h5 part2.h5 >/dev/null || fail "merge with failed points"
"$python" "$source/tests/cli/compare_h5.py" failed.h5 merged.h5 || fail "merged failed points differ"
# A grid that a sweep thread's run of the script builds otherwise than the main run: an error naming
# both, not other points recorded under the main grid's numbers.
rm -f grid.mark
"$duet" run "$source/tests/cli/one_request_sweep.lua" --no-progress --threads 2 --out shifted.h5 -- --shifted-grid \
  >shifted.log 2>&1 && fail "a grid that differs in a sweep thread ran"
grep -q "a sweep thread's run of the script built the grid .*0.3.*, the main one .*0.2" shifted.log ||
  { cat shifted.log; fail "a grid that differs in a sweep thread: no error naming both"; }
echo "failed points ok"
