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
expect 2 run "$quick" --backend gpu
expect 2 run "$quick" --shard 3/2
expect 2 run "$quick" --record stepz
expect 2 run "$quick" --threads -1
expect 2 run "$quick" --lua-instruction-limit 0
expect 2 run "$quick" --out "$out/no-such-dir/x.h5"
expect 2 run "$quick" --no-such-flag
expect 2 validate --synthetic 2
expect 2 validate --synthetic 2 --backend sim
expect 2 validate --synthetic 2 --backend cpu --repeats 0
expect 2 validate "$out/no-such-script.lua" --backend cpu
expect 2 validate --synthetic 2 --backend cpu --out "$out/no-such-dir/x.validate.h5"
expect 2 simulate --synthetic 4 --model gpt-5
# A trace the command cannot read is its input's fault, the same status from both commands.
expect 2 simulate --trace "$source/tests/cli/data/bad.csv"
expect 2 validate --trace "$source/tests/cli/data/bad.csv" --backend cpu --model "$source/models/tiny-llama/config.json"
expect 2 validate --trace "$out/no-such.csv" --backend cpu --model "$source/models/tiny-llama/config.json"
expect 2 cost --model llama-3.1-8b --gpu h100 --cost-model nope
expect 1 run "$source/tests/lua/bad_runtime.lua" --no-progress --out "$out/runtime.h5"
expect 0 run "$quick" --no-progress --out "$out/quick.h5" -- --problems 2
# A script's own arguments: a finite number where the default is one, each name once (a failed run).
expect 1 run "$quick" --no-progress --out "$out/args.h5" -- --problems nan
expect 1 run "$quick" --no-progress --out "$out/args.h5" -- --problems 2 --problems 3
expect 0 run "$quick" --no-progress --out "$out/args.h5" -- --problems 2 --llm-util 0.25
# A script read from a pipe is a script too.
echo 'print("from a pipe")' | "$duet" run /dev/stdin --no-progress --out "$out/pipe.h5" >log.txt 2>&1 ||
  { echo "FAIL: duet run /dev/stdin exited $?:"; cat log.txt; failed=1; }
exit $failed
