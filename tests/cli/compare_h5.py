#!/usr/bin/python3
"""Whether two duet run files hold the same contents: every group, dataset (values, dtype, chunking,
filters) and attribute, compared by name. Left out, because they say when, how or where a file was
made rather than what a point computed: the root's created_utc, each run's command_line and its
summary's wall_s (host seconds). Exit status 0 when equal; 1 with the differences listed."""
import sys

import h5py
import numpy as np

IGNORED_ATTRS = {"created_utc", "command_line", "wall_s"}


def attrs(obj):
    return {k: v for k, v in obj.attrs.items() if k not in IGNORED_ATTRS}


def same_value(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    return a == b


def compare(a, b, path, out):
    ka, kb = attrs(a), attrs(b)
    for k in sorted(set(ka) | set(kb)):
        if k not in ka or k not in kb:
            out.append(f"{path}: attribute {k} only in {'first' if k in ka else 'second'}")
        elif not same_value(ka[k], kb[k]):
            out.append(f"{path}: attribute {k}: {ka[k]!r} != {kb[k]!r}")
    if isinstance(a, h5py.Dataset) or isinstance(b, h5py.Dataset):
        if not (isinstance(a, h5py.Dataset) and isinstance(b, h5py.Dataset)):
            out.append(f"{path}: a dataset in one file only")
        elif a.dtype != b.dtype or a.shape != b.shape or a.chunks != b.chunks or a.compression != b.compression \
                or a.shuffle != b.shuffle:
            out.append(f"{path}: dtype/shape/chunks/filters differ")
        elif not np.array_equal(a[()], b[()]):
            out.append(f"{path}: values differ")
        return
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            out.append(f"{path}/{name}: only in {'first' if name in a else 'second'}".replace("//", "/"))
        else:
            compare(a[name], b[name], f"{path}/{name}".replace("//", "/"), out)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: compare_h5.py A.h5 B.h5")
    out = []
    with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
        compare(a, b, "/", out)
    if out:
        print(f"{sys.argv[1]} and {sys.argv[2]} differ:")
        print("\n".join(out[:40]))
        sys.exit(1)
    print(f"{sys.argv[1]} and {sys.argv[2]}: same contents")


main()
