#!/usr/bin/env bash
# duet run --shard I/N and duet merge against one process (and two threads): the same contents.
# Bad input fails with a message naming the file: a missing or repeated shard, shards of another
# sweep or of other workload data, an unfinished shard, a truncated file, --shard 3/2.
set -uo pipefail
duet="$1" source="$2" out="$3" python="$4"
script="$source/tests/cli/small_sweep.lua"
compare="$python $source/tests/cli/compare_h5.py"
rm -rf "$out" && mkdir -p "$out" && cd "$out" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
run() { "$duet" run "$script" --no-progress "$@" >>log 2>&1; }
expect_error() {  # REGEX COMMAND...: exits non-zero with a message matching REGEX
  local regex="$1"; shift
  if "$@" >err 2>&1; then fail "$* succeeded"; fi
  grep -Eq -e "$regex" err || { cat err; fail "$*: no message matching '$regex'"; }
  echo "rejected as expected: $(grep -E -e "$regex" err | head -1)"
}

run --threads 1 --out one.h5 || fail "one process"
run --threads 2 --out two.h5 || fail "two threads"
$compare one.h5 two.h5 || fail "two threads differ from one"
for i in 1 2 3; do run --threads 1 --shard "$i/3" --out "part$i.h5" || fail "shard $i/3"; done
"$duet" merge merged.h5 part3.h5 part1.h5 part2.h5 || fail "merge"
$compare one.h5 merged.h5 || fail "the merged shards differ from one process"

expect_error "shard 2/3 is missing" "$duet" merge bad.h5 part1.h5 part3.h5
expect_error "part1.h5 and .*part1.h5 are both shard 1/3" "$duet" merge bad.h5 part1.h5 part1.h5 part2.h5 part3.h5
run --threads 1 --shard 2/3 --out other2.h5 -- --problems 3 || fail "shard of another sweep"
expect_error "other2.h5: attribute duet_run.args is .*refusing to mix" "$duet" merge bad.h5 part1.h5 other2.h5 part3.h5
expect_error "one.h5 is shard 1/1 but part1.h5 is shard 1/3: not shards of one split" "$duet" merge bad.h5 part1.h5 one.h5
# A shard made from other workload data (an edited step-length model in a copy of the
# repository's data, as DUET_HOME): the merge would mix two sweeps' points.
mkdir -p home && cp -r "$source/workloads" home/
for d in models traces profiles scripts tests; do ln -sfn "$source/$d" "home/$d"; done
sed -i 's/"mu"/"mu" /' home/workloads/data/step_model.json
DUET_HOME="$out/home" "$duet" run "$script" --no-progress --threads 1 --shard 2/3 --out data2.h5 >>log 2>&1 ||
  fail "shard 2/3 from other data"
expect_error "data2.h5: attribute duet_run.library_hash .*a file under workloads/, a module or its data, differs" \
  "$duet" merge bad.h5 part1.h5 data2.h5 part3.h5
run --threads 1 --shard 1/2 --out half1.h5 || fail "shard 1/2"
"$python" - half1.h5 <<'PY' || fail "could not cut a point out of half1.h5"
import sys, h5py
with h5py.File(sys.argv[1], "a") as f:
    del f["sweeps/0000/points/0002"]
PY
run --threads 1 --shard 2/2 --out half2.h5 || fail "shard 2/2"
expect_error "half1.h5 \(shard 1/2\) lacks /sweeps/0000/points/0002: the shard did not finish" \
  "$duet" merge bad.h5 half1.h5 half2.h5
head -c 100000 part2.h5 >truncated.h5
expect_error "truncated.h5: " "$duet" merge bad.h5 part1.h5 truncated.h5 part3.h5
[ -e bad.h5 ] && fail "a failed merge left bad.h5"
# A part damaged where only the copy finds it: an earlier OUT stays as it was (it was once removed).
# The bytes damaged are in the middle of a point's steps, wherever the file's layout put them.
at=$($python -c "import h5py, sys; c = h5py.File(sys.argv[1], 'r')['sweeps/0000/points/0001/engines/llm/steps'].id.get_chunk_info(0); print(c.byte_offset + c.size // 2)" part2.h5) ||
  fail "cannot find the steps of part2.h5's point 0001"
cp part2.h5 damaged.h5 && printf '\xff\xff\xff\xff' | dd of=damaged.h5 bs=1 seek="$at" conv=notrunc 2>/dev/null
cp merged.h5 kept.h5
expect_error "damaged.h5: /sweeps/0000/points/0001/engines/llm/steps: .*kept.h5 is unchanged" "$duet" merge kept.h5 part1.h5 damaged.h5 part3.h5
cmp -s kept.h5 merged.h5 || fail "a failed merge changed the earlier kept.h5"
[ -e kept.h5.merging ] && fail "a failed merge left kept.h5.merging"
expect_error "--shard 3/2: expected I/N with 1 <= I <= N" "$duet" run "$script" --shard 3/2 --out bad.h5
expect_error "--shard 0/2: expected I/N" "$duet" run "$script" --shard 0/2 --out bad.h5
expect_error "--shard 1/x: expected I/N" "$duet" run "$script" --shard 1/x --out bad.h5
echo "shards ok"
