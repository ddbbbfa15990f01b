#!/usr/bin/env bash
# Builds the CUDA engine on this machine (nvcc is enough: no GPU is needed to compile) and packs a
# self-contained bundle to copy to a GPU machine:
#   bundle/bin/duet         Release build, -static-libstdc++ -static-libgcc, static CUDA runtime,
#                           RUNPATH $ORIGIN/../lib:/usr/local/cuda/lib64
#   bundle/bin/test_kernels the GPU tests (kernels and CudaExecutor against the CPU reference)
#   bundle/duet, bundle/test_kernels   what to run: they start bin/'s with the machine's glibc, or
#                           with the bundle's own (glibc/) where the machine's is older than the
#                           bundle needs; DUET_HOME defaults to the bundle
#   bundle/lib/             every shared library they need except glibc's, the driver's libcuda
#                           and cuBLAS/cuBLASLt (those come from the GPU machine's CUDA 13 toolkit)
#   bundle/glibc/           this machine's glibc (loader, libc, libm ...), used only where the GPU
#                           machine's is older
#   bundle/run-tests.sh     runs the GPU tests
#   bundle/{workloads,scripts,models,traces,profiles,docs/examples}   the data duet reads at run time
#   bundle.tar.gz           the bundle as one file, to copy (about 40% of the folder's size)
# On the GPU machine:  DUET_HOME=bundle bundle/duet run bundle/scripts/quickstart.lua --backend cuda
#                      bundle/run-tests.sh
#                      bundle/duet bench decode --json decode.json
#
#   scripts/gpu-bundle.sh [BUNDLE_DIR]      default: bundle (gitignored), and BUNDLE_DIR.tar.gz
# Environment: BUILD_DIR (default build-gpu), JOBS (default nproc), CUDA_ARCHS (default "80;90"),
# DUET_CMAKE_ARGS (extra configure arguments).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

build_dir="${BUILD_DIR:-build-gpu}"
bundle="${1:-${BUNDLE_DIR:-bundle}}"
jobs="${JOBS:-$(nproc)}"
archs="${CUDA_ARCHS:-80;90}"
limit_mib=40  # the archive's: with a checkout of the repository (~11 MiB) it stays under 64 MiB

if ! command -v patchelf >/dev/null; then
  echo "gpu-bundle: patchelf is missing (scripts/setup.sh --deps-only installs it)" >&2
  exit 1
fi
if [ ! -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  echo "gpu-bundle: no nvcc (CUDA 13 at /usr/local/cuda): cannot build the CUDA engine" >&2
  exit 1
fi

# --- Build ---------------------------------------------------------------------------------------
# The binary's RUNPATH is set at link time (CMake's install RPATH used for the build tree,
# DT_RUNPATH through --enable-new-dtags); patchelf sets the bundled libraries' below. cudart is linked statically by kernels/; cuBLASLt
# stays dynamic (the toolkit here ships no static cuBLAS): duet loads it at its first GEMM (kernels/cublaslt.hpp),
# through the RUNPATH's /usr/local/cuda/lib64 or the system's paths.
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release \
  -DDUET_CUDA=ON \
  -DDUET_BUILD_BENCH=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="$archs" \
  -DCMAKE_CUDA_RUNTIME_LIBRARY=Static \
  -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc -Wl,--enable-new-dtags" \
  -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
  -DCMAKE_INSTALL_RPATH='$ORIGIN/../lib;/usr/local/cuda/lib64' \
  ${DUET_CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j "$jobs" --target duet test_kernels

bins=("$build_dir/cli/duet" "$build_dir/tests/kernels/test_kernels")
for b in "${bins[@]}"; do
  runpath="$(readelf -d "$b" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')"
  if [ "$runpath" != '$ORIGIN/../lib:/usr/local/cuda/lib64' ]; then
    echo "gpu-bundle: $b has RUNPATH '$runpath', expected \$ORIGIN/../lib:/usr/local/cuda/lib64" >&2
    exit 1
  fi
  if readelf -d "$b" | grep -q 'NEEDED.*libcudart'; then
    echo "gpu-bundle: $b links the shared CUDA runtime; expected cudart_static" >&2
    exit 1
  fi
done

# --- Bundle --------------------------------------------------------------------------------------
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/glibc"
for b in "${bins[@]}"; do
  cp "$b" "$bundle/bin/"
  strip --strip-unneeded "$bundle/bin/$(basename "$b")"
done

# Shared libraries: what ldd resolves here, minus glibc (it must be the GPU machine's own, and its
# pieces must match each other), the driver's libcuda and the toolkit's cuBLAS.
is_system_lib() {
  case "$1" in
    linux-vdso.so* | ld-linux*.so* | libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | \
      libresolv.so* | libutil.so* | libanl.so* | libnsl.so* | libnss_*.so* | libmvec.so* | libthread_db.so* | \
      libBrokenLocale.so* | libcuda.so* | libnvidia-*.so* | libcublas.so* | libcublasLt.so*)
      return 0 ;;
  esac
  return 1
}
missing=0
while read -r name path; do
  is_system_lib "$name" && continue
  if [ "$path" = "not" ] || [ ! -e "$path" ]; then
    echo "gpu-bundle: $name is not found here" >&2
    missing=1
    continue
  fi
  cp -L "$path" "$bundle/lib/$name"
done < <(for b in "${bins[@]}"; do ldd "$b"; done | awk '/=>/ {print $1, $3}' | sort -u)
[ "$missing" = 0 ] || exit 1
# DT_RUNPATH is not inherited: the binary's $ORIGIN/../lib finds its direct dependencies only, so
# each bundled library gets RUNPATH $ORIGIN for its own (libhdf5 -> libcurl -> libssl ...).
for lib in "$bundle"/lib/*.so*; do
  strip --strip-unneeded "$lib" 2>/dev/null || true
  patchelf --set-rpath '$ORIGIN' "$lib"
done
# Every dependency of the bundle must now resolve inside it, glibc and the CUDA libraries aside.
leaks="$(for b in "$bundle"/bin/*; do ldd "$b"; done | awk '/=>/ {print $1, $3}' | sort -u |
  while read -r name path; do
    is_system_lib "$name" && continue
    # libgcc_s is bundled for the bundled C++ libraries, but cuBLASLt (not bundled) asks for it
    # too and finds the machine's own, which every Linux has.
    case "$name" in libgcc_s.so*) continue ;; esac
    case "$(readlink -f "$path")" in "$(cd "$bundle" && pwd -P)"/lib/*) ;; *) echo "$name => $path" ;; esac
  done)"
if [ -n "$leaks" ]; then
  echo "gpu-bundle: libraries resolved outside the bundle:" >&2
  echo "$leaks" >&2
  exit 1
fi

# glibc: the binaries and libraries above were linked against this machine's (Debian 12: 2.36; its
# libstdc++ and libevent call arc4random, new in 2.36). A GPU machine with an older glibc cannot
# load them, so the bundle carries this one's pieces too, and the wrappers below start the program
# with glibc/'s loader there. The pieces must come from one build, so all are copied from here.
glibc_needs="$(for f in "$bundle"/bin/* "$bundle"/lib/*.so*; do objdump -T "$f"; done |
  grep -o 'GLIBC_2\.[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)"
loader="$(readlink -f /lib64/ld-linux-x86-64.so.2)"
cp -L "$loader" "$bundle/glibc/ld-linux-x86-64.so.2"
for name in libc.so.6 libm.so.6 libmvec.so.1 libdl.so.2 librt.so.1 libpthread.so.0 libresolv.so.2 \
  libutil.so.1 libanl.so.1; do
  cp -L "$(dirname "$loader")/$name" "$bundle/glibc/$name"
done

# bundle/NAME runs bin/NAME. ld.so's --library-path replaces LD_LIBRARY_PATH (cuda-env.sh's
# cuBLASLt), so that is appended; --argv0 keeps argv[0] the wrapper, which gtest's threadsafe
# death tests re-run.
for name in duet test_kernels; do
  cat >"$bundle/$name" <<EOF
#!/bin/sh
# Runs bin/$name with this machine's glibc if it is $glibc_needs or newer, else with the bundle's
# (glibc/). DUET_BUNDLED_GLIBC=1 or 0 forces the choice. Written by scripts/gpu-bundle.sh.
here="\$(cd "\$(dirname "\$(readlink -f "\$0")")" && pwd)"
: "\${DUET_HOME:=\$here}"
export DUET_HOME
use="\${DUET_BUNDLED_GLIBC:-}"
if [ -z "\$use" ]; then
  have="\$(getconf GNU_LIBC_VERSION 2>/dev/null | sed -n 's/^glibc //p')"
  [ -n "\$have" ] || have="\$(ldd --version 2>/dev/null | sed -n '1s/.* \\([0-9][0-9.]*\\)\$/\\1/p')"
  if [ -n "\$have" ] && [ "\$(printf '%s\\n%s\\n' "$glibc_needs" "\$have" | sort -V | head -1)" = "$glibc_needs" ]; then
    use=0
  else
    use=1
    echo "$name: this machine's glibc (\${have:-unknown}) is older than $glibc_needs: running with the bundle's" >&2
  fi
fi
if [ "\$use" = 1 ]; then
  exec "\$here/glibc/ld-linux-x86-64.so.2" --library-path "\$here/glibc\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" \\
    --argv0 "\$here/$name" "\$here/bin/$name" "\$@"
fi
exec "\$here/bin/$name" "\$@"
EOF
  chmod +x "$bundle/$name"
done

# Run-time data: Lua workloads and their data, experiment scripts, model configs, the cost
# profiles and operator priors (duet validate's simulator reads them; duet profile adds to them),
# the small traces, the documented examples.
cp -r workloads scripts models profiles "$bundle/"
mkdir -p "$bundle/docs"
[ -d docs/examples ] && cp -r docs/examples "$bundle/docs/"
[ -f docs/lua-api.md ] && cp docs/lua-api.md "$bundle/docs/"
while IFS= read -r -d '' f; do
  mkdir -p "$bundle/$(dirname "$f")"
  cp "$f" "$bundle/$f"
done < <(find traces -type f -size -8M -print0)
find "$bundle" -name __pycache__ -prune -exec rm -rf {} +

cat >"$bundle/cuda-env.sh" <<'EOF'
# Sourced (". bundle/cuda-env.sh") before running duet: cuBLASLt comes from the machine's CUDA 13,
# and duet loads it at its first GEMM from LD_LIBRARY_PATH, its RUNPATH (/usr/local/cuda/lib64) or
# the system's paths. Where it is elsewhere, this puts the first of the usual places that holds it
# on LD_LIBRARY_PATH: the toolkit's other folders, then pip's wheels (nvidia-cublas; CUDA 13's
# wheels keep it in nvidia/cu13/lib) of every python3 on PATH and of a PyTorch virtualenv.
if [ ! -e /usr/local/cuda/lib64/libcublasLt.so.13 ] && ! ldconfig -p 2>/dev/null | grep -q 'libcublasLt.so.13 '; then
  duet_cublas_dirs=(/usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64 /usr/lib/x86_64-linux-gnu)
  for duet_py in python3 /opt/torch/.venv/bin/python3; do
    command -v "$duet_py" >/dev/null 2>&1 || continue
    while IFS= read -r duet_d; do
      duet_cublas_dirs+=("$duet_d"/*/lib)
    done < <("$duet_py" -c 'import nvidia; print(*nvidia.__path__, sep="\n")' 2>/dev/null)
  done
  for duet_d in "${duet_cublas_dirs[@]}"; do
    if [ -e "$duet_d/libcublasLt.so.13" ]; then
      export LD_LIBRARY_PATH="$duet_d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      echo "cuda-env: cuBLASLt from $duet_d" >&2
      break
    fi
  done
  unset duet_cublas_dirs duet_py duet_d
fi
EOF

cat >"$bundle/run-tests.sh" <<'EOF'
#!/usr/bin/env bash
# The GPU tests of this bundle: kernels and the CUDA executor against the CPU reference
# (test_kernels; gtest arguments pass through, e.g. --gtest_filter='CudaExecutor*').
set -euo pipefail
here="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
export DUET_HOME="$here"
# This runs on a GPU machine: a device that does not start fails the tests, not skips them.
export DUET_REQUIRE_GPU=1
. "$here/cuda-env.sh"
command -v nvidia-smi >/dev/null && nvidia-smi -L || true
exec "$here/test_kernels" "$@"
EOF
chmod +x "$bundle/run-tests.sh"

cat >"$bundle/README.txt" <<EOF
duet GPU bundle, built $(date -u +%Y-%m-%dT%H:%MZ) from $(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
for CUDA architectures $archs. Needs: x86-64 Linux (its glibc if $glibc_needs or newer, else the
bundle's glibc/), an NVIDIA driver for CUDA 13, and CUDA 13's cuBLAS (in /usr/local/cuda/lib64, or
where ". $(basename "$bundle")/cuda-env.sh" finds it: the toolkit's other folders, pip's nvidia-cublas).
  . $(basename "$bundle")/cuda-env.sh
  $(basename "$bundle")/duet run $(basename "$bundle")/scripts/quickstart.lua --backend cuda
  $(basename "$bundle")/run-tests.sh
  $(basename "$bundle")/duet bench decode --json decode.json     (also: attention, prefill, cpu-overhead)
EOF

# One file to copy: gzip, which every machine unpacks (xz saves a third more, and takes 4x the time).
archive="${bundle%/}.tar.gz"
tar -czf "$archive" -C "$(dirname "$bundle")" "$(basename "$bundle")"
size_kib="$(du -sk "$bundle" | cut -f1)"
archive_kib="$(du -k "$archive" | cut -f1)"
echo "gpu-bundle: $bundle is $((size_kib / 1024)) MiB ($(ls "$bundle/lib" | wc -l) libraries), $archive $((archive_kib / 1024)) MiB"
if [ "$archive_kib" -gt $((limit_mib * 1024)) ]; then
  echo "gpu-bundle: $archive exceeds $limit_mib MiB, the size it is meant to stay under (du -sh $bundle/* shows what grew)" >&2
  exit 1
fi
