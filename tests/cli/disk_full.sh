#!/usr/bin/env bash
# A disk that fills during duet simulate's HDF5 write (RLIMIT_FSIZE, with SIGXFSZ ignored so that
# writes fail with EFBIG as on a full disk): a clear error and exit status 2, no crash, and the
# output either opens and holds what was recorded or is gone.
set -uo pipefail
duet="$1" trace="$2" out="$3" python="$4"
mkdir -p "$out"
for limit_kb in 1000 3000 6000; do
  file="$out/full-$limit_kb.h5"
  rm -f "$file"
  ( trap '' XFSZ; ulimit -f "$limit_kb"
    "$duet" simulate --trace "$trace" --model llama-3.1-8b --gpu h100 --out "$file" >"$out/full.log" 2>&1 )
  status=$?
  if [ "$status" -ne 2 ]; then echo "limit ${limit_kb} KB: exit status $status, expected 2"; cat "$out/full.log"; exit 1; fi
  if ! grep -q "^duet simulate: error: .*File too large" "$out/full.log"; then echo "limit ${limit_kb} KB: no clear error"; cat "$out/full.log"; exit 1; fi
  if [ -e "$file" ] && ! "$python" -c "import h5py, sys; h5py.File(sys.argv[1], 'r')" "$file" 2>/dev/null; then
    echo "limit ${limit_kb} KB: left an unreadable $file"; exit 1
  fi
  echo "limit ${limit_kb} KB: exit 2, $( [ -e "$file" ] && echo "file kept" || echo "file removed" )"
done
