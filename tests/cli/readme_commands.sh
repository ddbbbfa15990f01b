#!/usr/bin/env bash
# Runs the README's command block (the one after "`build/cli/duet` is the program") line by line,
# as a user would type it, in a scratch directory that sees the repository's folders. Fails on the
# first command that fails. Usage: readme_commands.sh REPO BUILD_DIR SCRATCH
set -euo pipefail
repo=$1 build=$2 scratch=$3
rm -rf "$scratch"
mkdir -p "$scratch"
for d in scripts traces models analysis workloads profiles bench; do ln -s "$repo/$d" "$scratch/$d"; done
ln -s "$build" "$scratch/build"  # the README's build/ is wherever this build is
# The block: from the line after the marker's ```sh to the closing ```, continuation lines joined.
commands=$(awk '/`build\/cli\/duet` is the program/ {found = 1} found && /^```sh$/ {inside = 1; next}
                inside && /^```$/ {exit} inside {print}' "$repo/README.md" | sed -e ':a' -e '/\\$/N; s/\\\n//; ta')
[ -n "$commands" ] || { echo "readme_commands: no command block found in README.md" >&2; exit 1; }
cd "$scratch"
n=0
while IFS= read -r line; do
  [ -z "$line" ] && continue
  n=$((n + 1))
  echo "\$ $line"
  start=$(date +%s)
  if ! bash -c "$line" >"cmd$n.log" 2>&1; then
    cat "cmd$n.log" >&2
    echo "readme_commands: command $n failed: $line" >&2
    exit 1
  fi
  echo "  ok in $(( $(date +%s) - start )) s"
done <<<"$commands"
echo "readme_commands: all $n commands ran"
