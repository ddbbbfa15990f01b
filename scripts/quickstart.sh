#!/usr/bin/env bash
# The main job: set up (installs what is missing, builds) and run the quickstart experiment, a
# beam search over MATH-500 with a generator and a PRM on one simulated H100.
# Arguments go to the script: scripts/quickstart.sh --problems 50
set -euo pipefail
cd "$(dirname "$0")/.."
# Only the program: the tests and benchmarks are scripts/test.sh's to build.
scripts/setup.sh --target duet
args=()
(($#)) && args=(-- "$@")
exec "${BUILD_DIR:-build}/cli/duet" run scripts/quickstart.lua "${args[@]}"
