#!/usr/bin/env bash
# SIGINT and SIGTERM in the middle of one run: duet simulate keeps what it recorded, marked
# incomplete with the signal (beside an earlier file of the same name, which it leaves as it was),
# and duet run ends its duet.run; both exit 128 + the signal. The signal is sent once the run is
# under way (its file exists), whatever the machine's speed.
set -uo pipefail
duet="$1" source="$2" out="$3" python="$4"
rm -rf "$out" && mkdir -p "$out" && cd "$out" || exit 1
failed=0
fail() { echo "FAIL: $*"; cat log.txt; failed=1; }
# stopped WANT SIGNAL WAIT_FOR COMMAND...: runs it, sends SIGNAL once the file WAIT_FOR exists (and
# a moment more), and checks the exit status.
stopped() {
  local want="$1" signal="$2" wait_for="$3"
  shift 3
  "$duet" "$@" >log.txt 2>&1 &
  local pid=$!
  for _ in $(seq 300); do [ -e "$wait_for" ] && break; sleep 0.1; done
  sleep 0.5
  kill -s "$signal" "$pid"
  wait "$pid"
  local got=$?
  [ "$got" -eq "$want" ] || fail "duet $* after SIG$signal exited $got, expected $want"
}
# 100,000 requests at 50 per second: minutes of work, stopped well before its end.
long=(simulate --synthetic 100000 --input-tokens 32 --output-tokens 32 --request-rate 50 --model llama-3.2-1b)
stopped 130 INT "$out/int.h5.running" "${long[@]}" --out "$out/int.h5"
grep -q "stopped by signal 2; $out/int.h5 holds what was recorded" log.txt || fail "simulate's message"
"$python" - "$out/int.h5" <<'PY' || failed=1
import sys
import h5py
with h5py.File(sys.argv[1], "r") as f:
    why = f.attrs.get("incomplete")
    why = why.decode() if isinstance(why, bytes) else why
    steps = len(f["engines/llm/steps"])
    if why != "stopped by signal 2" or steps == 0:
        sys.exit(f"FAIL: {sys.argv[1]}: incomplete = {why!r}, {steps} steps")
    # What was replayed is written when the run starts: a stopped run tells it too.
    for key in ("trace", "trace_fingerprint", "cost_model", "synthetic_requests", "request_rate"):
        if key not in f.attrs:
            sys.exit(f"FAIL: {sys.argv[1]}: no attribute {key} in a stopped run")
    if f.attrs["synthetic_requests"] != 100000 or f.attrs["request_rate"] != 50:
        sys.exit(f"FAIL: {sys.argv[1]}: the synthetic trace's options are not the ones given")
PY
# Over an earlier file: that stays as it was, and what was recorded goes beside it.
cp "$out/int.h5" "$out/earlier.h5" && cp "$out/int.h5" "$out/kept.h5"
stopped 143 TERM "$out/kept.h5.running" "${long[@]}" --out "$out/kept.h5"
grep -q "$out/kept.h5.incomplete holds what was recorded before it ($out/kept.h5 is unchanged)" log.txt ||
  fail "simulate's message over an earlier file"
cmp -s "$out/kept.h5" "$out/earlier.h5" || fail "a stopped run changed the earlier kept.h5"
[ -e "$out/kept.h5.running" ] && fail "kept.h5.running was left behind"
# A duet.run: ended at once (it once ran to its end), exit 143.
stopped 143 TERM "$out/log.txt" run "$source/scripts/quickstart.lua" --no-progress --out "$out/run.h5" -- --problems 500
grep -q "duet run: stopped by signal 15" log.txt || fail "run's message"
[ "$failed" = 0 ] && echo "stop signals ok"
exit $failed
