#!/usr/bin/env bash
# An output file that another program holds open (a notebook reading it with h5py): duet run, which
# replaces the file in place, refuses it before its work and leaves it as it was (HDF5 truncated it
# before its own lock test failed); duet simulate, which writes beside it and renames, replaces it
# while the reader keeps the old one. Usage: open_elsewhere.sh DUET SOURCE OUT PYTHON
set -uo pipefail
unset HDF5_USE_FILE_LOCKING  # the reader must take HDF5's lock, as it does by default
duet="$1" source="$2" out="$3" python="$4"
rm -rf "$out" && mkdir -p "$out" && cd "$out" || exit 1
quick="$source/scripts/quickstart.lua"
fail() { echo "FAIL: $*"; cat log.txt 2>/dev/null; exit 1; }
"$duet" run "$quick" --no-progress --out held.h5 -- --problems 2 >log.txt 2>&1 || fail "the first run"
cp held.h5 before.h5
# The reader opens the file, says so, and holds it until told to stop.
"$python" -c 'import h5py, os, sys, time
f = h5py.File(sys.argv[1], "r"); open("reading", "w").close()
end = time.time() + 60  # never outlives a test that was killed
while not os.path.exists("stop") and time.time() < end: time.sleep(0.05)' held.h5 &
reader=$!
trap 'touch stop; wait $reader 2>/dev/null' EXIT
for _ in $(seq 200); do [ -e reading ] && break; sleep 0.05; done
[ -e reading ] || fail "the reader did not open held.h5"
"$duet" run "$quick" --no-progress --out held.h5 -- --problems 2 >log.txt 2>&1
status=$?
[ "$status" -eq 2 ] || fail "duet run on a file open elsewhere exited $status, expected 2"
grep -q "held.h5: open in another program" log.txt || fail "duet run's message names no reader"
cmp -s held.h5 before.h5 || fail "duet run changed the file another program holds open"
"$duet" simulate --synthetic 3 --model llama-3.2-1b --out held.h5 >log.txt 2>&1 ||
  fail "duet simulate could not replace a file a reader holds (it renames)"
touch stop
wait $reader || fail "the reader failed"
echo "open_elsewhere: refused in place, replaced by rename"
