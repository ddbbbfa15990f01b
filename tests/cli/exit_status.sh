#!/usr/bin/env bash
# docs/reliability.md's exit statuses: 0 success, 1 a failed run, 2 bad usage, from every command
# that takes the case; bad usage found after parsing (a flag's value, a missing script) included.
set -uo pipefail
duet="$1" source="$2" out="$3"
rm -rf "$out" && mkdir -p "$out" && cd "$out" || exit 1
quick="$source/scripts/quickstart.lua"
failed=0
expect() {
  local want="$1"
  shift
  "$duet" "$@" >log.txt 2>&1
  local got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL: duet $* exited $got, expected $want:"
    cat log.txt
    failed=1
  fi
}
expect 0 run --help
expect 2 run "$out/no-such-script.lua"
# The repository's scripts are found from any directory, as --model's files are (this one is not).
expect 0 run scripts/quickstart.lua --out "$out/found.h5" -- --problems 1
expect 2 run "$quick" --backend gpu
expect 2 run "$quick" --shard 3/2
expect 2 run "$quick" --record stepz
expect 2 run "$quick" --threads -1
expect 2 run "$quick" --backend cpu --threads 2
expect 2 run "$quick" --lua-instruction-limit 0
expect 2 run "$quick" --out "$out/no-such-dir/x.h5"
expect 2 run "$quick" --no-such-flag
# A forgotten value ("--out --resume") is not a file called --resume; an empty --out names no file.
expect 2 run "$quick" --out --resume
[ ! -e ./--resume ] || { echo "FAIL: --out --resume wrote a file called --resume"; failed=1; }
expect 2 run "$quick" --out ""
# A directory that root may write by access() yet cannot create files in: refused before the run.
if [ -d /sys ] && [ ! -e /sys/duet-exit-status.h5 ]; then
  expect 2 run "$quick" --out /sys/duet-exit-status.h5
  grep -Eq -- "--out /sys/duet-exit-status.h5: (cannot create it|directory /sys is not writable)" log.txt ||
    { echo "FAIL: --out in /sys:"; cat log.txt; failed=1; }
fi
expect 2 profile --backend cpu --model gpt-5 --out "$out/p.json"
expect 2 profile --backend cpu --model "$source/models/tiny-llama/config.json" --out "$out/p.h5"
# An option the benchmark does not read (it was silently ignored), and an unknown benchmark.
expect 2 bench sim-trace --json "$out/sim.json"
expect 2 bench cpu --layers 3
expect 2 bench nope
expect 2 validate --synthetic 2
expect 2 validate --synthetic 2 --backend sim
expect 2 validate --synthetic 2 --backend cpu --repeats 0
expect 2 validate "$out/no-such-script.lua" --backend cpu
expect 2 validate --synthetic 2 --backend cpu --out "$out/no-such-dir/x.validate.h5"
expect 2 simulate --synthetic 4 --model gpt-5
# A trace the command cannot read is its input's fault, the same status from both commands.
expect 2 simulate --trace "$source/tests/cli/data/bad.csv"
expect 2 validate --trace "$source/tests/cli/data/bad.csv" --backend cpu --model "$source/models/tiny-llama/config.json"
expect 2 validate --synthetic 2 --backend cpu --model "$source/models/tiny-llama/config.json" --cost-model foo
expect 2 validate --trace "$out/no-such.csv" --backend cpu --model "$source/models/tiny-llama/config.json"
expect 2 cost --model llama-3.1-8b --gpu h100 --cost-model nope
expect 1 run "$source/tests/lua/bad_runtime.lua" --no-progress --out "$out/runtime.h5"
expect 0 run "$quick" --no-progress --out "$out/quick.h5" -- --problems 2
# A script's own arguments: a finite number where the default is one, each name once (a failed run).
expect 1 run "$quick" --no-progress --out "$out/args.h5" -- --problems nan
expect 1 run "$quick" --no-progress --out "$out/args.h5" -- --problems 2 --problems 3
# An unknown one lists the script's arguments in sorted order (the table's order changed from run to run).
expect 1 run "$quick" --no-progress --out "$out/args.h5" -- --nope 1
grep -q -- "unknown script argument '--nope' (valid: --concurrency, --fork-kv, --gpu, --llm-model, --llm-util, --prm-mode, --prm-model, --prm-util, --problems, --seed, --tiny)" log.txt ||
  { echo "FAIL: the valid arguments are not listed in order:"; cat log.txt; failed=1; }
expect 0 run "$quick" --no-progress --out "$out/args.h5" -- --problems 2 --llm-util 0.25
# A script read from a pipe is a script too: it runs (it was once read twice, the second time empty).
echo 'print("from a pipe")' | "$duet" run /dev/stdin --no-progress --out "$out/pipe.h5" >log.txt 2>&1 ||
  { echo "FAIL: duet run /dev/stdin exited $?:"; cat log.txt; failed=1; }
grep -q "^from a pipe$" log.txt || { echo "FAIL: duet run /dev/stdin did not run the script:"; cat log.txt; failed=1; }
expect 1 run <(echo 'error("from a pipe")') --no-progress --out "$out/pipe_error.h5"
grep -q "from a pipe" log.txt || { echo "FAIL: the piped script's error is missing:"; cat log.txt; failed=1; }
# A device that never ends is refused, not read until memory runs out; a pipe cannot be re-read for
# a trace's format test.
expect 2 simulate --trace /dev/zero --model llama-3.2-1b
expect 2 simulate --synthetic 2 --model /dev/zero
expect 2 run /dev/zero
expect 2 simulate --trace <(head -3 "$source/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv") --model llama-3.2-1b
# Arrivals past 1e8 s of run time (a vanishing rate) are refused, not simulated as nonsense rates.
expect 2 simulate --synthetic 10 --model llama-3.2-1b --request-rate 1e-300
expect 2 simulate --trace "$source/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv" --model llama-3.2-1b --rate-scale 1e-300
grep -q "AzureLLMInferenceTrace_conv.csv: request 2 arrives at .* past 1e8 s" log.txt || { echo "FAIL: no request named:"; cat log.txt; failed=1; }
# The other workload's options would be ignored: errors.
expect 2 simulate --synthetic 4 --model llama-3.2-1b --rate-scale 2
expect 2 simulate --trace "$source/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv" --model llama-3.2-1b --request-rate 3
# A script with a UTF-8 byte-order mark and a #! line runs, as luaL_loadfile ran it.
printf '\xef\xbb\xbf#!/usr/bin/env duet\nprint("bom ok")\n' >"$out/bom.lua"
expect 0 run "$out/bom.lua" --no-progress --out "$out/bom.h5"
grep -q "^bom ok$" log.txt || { echo "FAIL: the BOM script did not run:"; cat log.txt; failed=1; }
# validate: a script sets its own engines, so the replay's options are errors, as is a script and a trace.
printf 'print("v")\n' >"$out/v.lua"
expect 2 validate "$out/v.lua" --backend cpu --cost-model roofline
expect 2 validate "$out/v.lua" --backend cpu --trace "$source/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
# A run whose every request is too long fails, and leaves an earlier file of its name as it was.
cp "$out/quick.h5" "$out/earlier_quick.h5" && cp "$out/quick.h5" "$out/kept_quick.h5"
expect 1 simulate --synthetic 5 --model llama-3.2-1b --max-model-len 10 --out "$out/kept_quick.h5"
grep -q "nothing was simulated; $out/kept_quick.h5.incomplete holds what was recorded before it ($out/kept_quick.h5 is unchanged)" log.txt ||
  { echo "FAIL: simulate's message for a run of no request:"; cat log.txt; failed=1; }
# A request too long for the engine, found while the run goes: a failed run (1), with or without a file.
azure="$source/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
expect 1 simulate --trace "$azure" --max-requests 20 --max-model-len 1024 --on-too-long error
expect 1 simulate --trace "$azure" --max-requests 20 --max-model-len 1024 --on-too-long error --out "$out/too_long.h5"
cmp -s "$out/kept_quick.h5" "$out/earlier_quick.h5" || { echo "FAIL: a run of no request replaced kept_quick.h5"; failed=1; }
# --out through a symbolic link: the link stays, the file it names is written.
mkdir -p "$out/store" && ln -sf "$out/store/r.h5" "$out/link.h5"
expect 0 simulate --synthetic 2 --model llama-3.2-1b --out "$out/link.h5"
{ [ -L "$out/link.h5" ] && [ -f "$out/store/r.h5" ]; } || { echo "FAIL: --out through a link replaced the link"; failed=1; }
# A command without positional arguments refuses a stray one (Boost's parser dropped it).
expect 2 simulate --synthetic 2 --model llama-3.2-1b stray
exit $failed
