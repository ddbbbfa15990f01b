#!/usr/bin/env bash
# A disk that fills during an HDF5 write (RLIMIT_FSIZE, with SIGXFSZ ignored so that writes fail
# with EFBIG as on a full disk), for duet simulate (streamed) and duet run (a Lua sweep): a clear
# error and exit status 1 (a failed run), no crash, and the output either opens with h5py and holds
# what was recorded, or, damaged, is set aside as OUT.damaged where its finished runs still read, or
# is gone when none does.
set -uo pipefail
duet="$1" source="$2" out="$3" python="$4"
mkdir -p "$out"
check() {  # NAME LIMIT_KB STATUS COMMAND...
  local name="$1" limit_kb="$2" want="$3"
  shift 3
  local file="$out/$name-$limit_kb.h5"
  rm -f "$file" "$file.damaged"
  ( trap '' XFSZ; ulimit -f "$limit_kb"; "$duet" "$1" --out "$file" "${@:2}" >"$out/full.log" 2>&1 )
  local status=$?
  if [ "$status" -ne "$want" ]; then echo "$name at ${limit_kb} KB: exit status $status, expected $want"; cat "$out/full.log"; exit 1; fi
  if ! grep -q "^duet .*error: .*File too large" "$out/full.log"; then echo "$name at ${limit_kb} KB: no clear error"; cat "$out/full.log"; exit 1; fi
  if [ -e "$file" ] && ! "$python" "$source/analysis/duet_h5.py" "$file" >/dev/null 2>&1 &&
    ! grep -q "holds what was recorded" "$out/full.log"; then
    echo "$name at ${limit_kb} KB: left an unreadable $file"; exit 1
  fi
  for left in "$file.running" "$file.merging"; do
    if [ -e "$left" ]; then echo "$name at ${limit_kb} KB: left $left behind"; exit 1; fi
  done
  # A file the failed write left damaged moves aside, where the runs it finished still read.
  if [ -e "$file.damaged" ]; then
    grep -q "to $file.damaged, where [0-9]* finished runs* still read" "$out/full.log" ||
      { echo "$name at ${limit_kb} KB: $file.damaged is not named"; cat "$out/full.log"; exit 1; }
    # Debian's python reads it where h5py and pandas are installed (scripts/setup.sh).
    if /usr/bin/python3 -c "import h5py, pandas" 2>/dev/null; then
      /usr/bin/python3 - "$source" "$file.damaged" <<'PY' || { echo "$name at ${limit_kb} KB: $file.damaged: no run reads"; exit 1; }
import sys
sys.path.insert(0, sys.argv[1] + "/analysis")
import duet_h5
duet_h5.load_run(sys.argv[2], "/sweeps/0000/points/0000")
PY
    fi
  fi
  local kept="file removed"
  if [ -e "$file" ]; then kept="file kept"; elif [ -e "$file.damaged" ]; then kept="damaged file set aside"; fi
  echo "$name at ${limit_kb} KB: exit $status, $kept"
}
# 1 KB fails the file's first run group (a crash at exit, once: the file was closed twice); the last
# limit fails the run's last writes (its summary and last chunks, once a crash at exit).
full_kb=$("$duet" simulate --trace "$source/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv" --model llama-3.1-8b \
  --gpu h100 --out "$out/full.h5" >/dev/null 2>&1 && echo $(($(stat -c %s "$out/full.h5") / 1024)))
for limit_kb in 1 1000 3000 6000 $((full_kb - 100)); do
  check simulate "$limit_kb" 1 simulate --trace "$source/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv" \
    --model llama-3.1-8b --gpu h100
done
for limit_kb in 100 300 1500; do
  check run "$limit_kb" 1 run "$source/scripts/memory_split.lua" --no-progress --threads 1 -- --problems 20
done
# At 1500 KB six points have finished when the seventh's write fails: they must not be lost.
if [ ! -e "$out/run-1500.h5" ] && [ ! -e "$out/run-1500.h5.damaged" ]; then
  echo "run at 1500 KB: the finished points were removed with the file"; exit 1
fi
