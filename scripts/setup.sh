#!/usr/bin/env bash
# Installs duet's Debian 12 packages (non-interactive, idempotent: a no-op when all are present)
# and configures and builds duet in ./build.
#   scripts/setup.sh              install what is missing, configure, build everything
#   scripts/setup.sh --deps-only  install what is missing, nothing else
#   scripts/setup.sh --target T   install what is missing, configure, build target T only (duet)
# Environment: BUILD_DIR (default build), BUILD_TYPE (default RelWithDebInfo), DUET_CMAKE_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config ccache git
  libboost-dev libboost-program-options-dev   # Boost 1.74, Debian 12's default
  libeigen3-dev liblua5.4-dev libhdf5-dev nlohmann-json3-dev
  zlib1g-dev  # io/ reads gzip'd traces and kernel tables (libhdf5-dev pulls it in too)
  libsentencepiece-dev sentencepiece
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-h5py python3-pandas python3-numpy  # analysis/ reads the HDF5 files with these
  python3-matplotlib jupyter-nbconvert python3-ipykernel python3-nbformat  # analysis/notebooks, scripts/figures.sh
  python3-sentencepiece  # scripts/train_tokenizer.sh and scripts/fit_step_model.py
  clang-14 libclang-rt-14-dev libfuzzer-14-dev  # scripts/test.sh: the sanitizer build and the fuzz targets
  clang-format-14 clang-tidy-14                  # scripts/check-style.sh
  libopenmpi-dev openmpi-bin  # mpirun -n N duet run: a sweep's points over MPI ranks (optional: DUET_MPI)
  patchelf  # scripts/gpu-bundle.sh: RUNPATH $ORIGIN on bundled libraries (DT_RUNPATH is not inherited)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
[ "${1:-}" = "--deps-only" ] && exit 0
target=()
[ "${1:-}" = "--target" ] && target=(--target "${2:?--target needs a name}")

build_dir="${BUILD_DIR:-build}"
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" ${DUET_CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j "$(nproc)" "${target[@]}"
