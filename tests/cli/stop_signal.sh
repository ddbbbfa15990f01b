#!/usr/bin/env bash
# SIGINT and SIGTERM in the middle of one run: duet simulate keeps what it recorded, marked
# incomplete with the signal (beside an earlier file of the same name, which it leaves as it was),
# and duet run ends its duet.run; both exit 128 + the signal.
set -uo pipefail
duet="$1" source="$2" out="$3"
rm -rf "$out" && mkdir -p "$out" && cd "$out" || exit 1
failed=0
# stopped WANT SIGNAL COMMAND...: runs it, sends SIGNAL a second in, and checks the exit status.
stopped() {
  local want="$1" signal="$2"
  shift 2
  "$duet" "$@" >log.txt 2>&1 &
  local pid=$!
  sleep 1
  kill -s "$signal" "$pid"
  wait "$pid"
  local got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL: duet $* after SIG$signal exited $got, expected $want:"
    cat log.txt
    failed=1
  fi
}
trace="$source/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
stopped 130 INT simulate --trace "$trace" --out "$out/int.h5"
grep -q "stopped by signal 2; $out/int.h5 holds what was recorded" log.txt ||
  { echo "FAIL: simulate's message:"; cat log.txt; failed=1; }
/usr/bin/python3 - "$out/int.h5" <<'PY' || failed=1
import sys
try:
    import h5py
except ImportError:
    sys.exit(0)
with h5py.File(sys.argv[1], "r") as f:
    why = f.attrs.get("incomplete")
    why = why.decode() if isinstance(why, bytes) else why
    if why != "stopped by signal 2" or len(f["engines/llm/steps"]) == 0:
        sys.exit(f"FAIL: {sys.argv[1]}: incomplete = {why!r}, {len(f['engines/llm/steps'])} steps")
PY
# Over an earlier file: that stays as it was, and what was recorded goes beside it.
cp "$out/int.h5" "$out/earlier.h5" && cp "$out/int.h5" "$out/kept.h5"
stopped 143 TERM simulate --trace "$trace" --out "$out/kept.h5"
grep -q "$out/kept.h5.incomplete holds what was recorded before it ($out/kept.h5 is unchanged)" log.txt ||
  { echo "FAIL: simulate's message over an earlier file:"; cat log.txt; failed=1; }
cmp -s "$out/kept.h5" "$out/earlier.h5" || { echo "FAIL: a stopped run changed the earlier kept.h5"; failed=1; }
[ -e "$out/kept.h5.running" ] && { echo "FAIL: kept.h5.running was left behind"; failed=1; }
stopped 143 TERM run "$source/scripts/quickstart.lua" --no-progress --out "$out/run.h5" -- --problems 500
grep -q "duet run: stopped by signal 15" log.txt || { echo "FAIL: run's message:"; cat log.txt; failed=1; }
exit $failed
