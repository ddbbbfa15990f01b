"""The fidelity tables of bench/results/validation-*.md from duet validate's HDF5 files.

Usage: /usr/bin/python3 scripts/validation/table.py DIR | FILE.h5 ...
A directory stands for its *.h5 files, in name order (measure_cpu.sh writes MODEL.beam.h5,
MODEL.azure.h5 and GENERATOR+PRM.pool.h5, measure_gpu.sh beam-SWEEP.validate.h5 and azure-MODEL.validate.h5; the layout is in
analysis/README.md). Each file prints as markdown: a script's validation as one row per point and
the summaries that the targets are stated in, a trace's as throughput and latency percentiles."""
import glob
import os
import sys

import h5py


def median(values):
    """duet validate's median (core/metrics.hpp, quantile): the sorted sample's element at rank
    round((n - 1) / 2), rounding halves up, so that an even count gives the upper middle value, a
    measured one, and both print the same figure."""
    ordered = sorted(values)
    return ordered[int((len(ordered) - 1) / 2 + 0.5)]


def pct(x):
    return f"{100 * x:+.1f}%"


def title(path, unit):
    stem = os.path.basename(path)
    for suffix in (".h5", ".validate", ".beam", ".azure", ".pool"):
        if stem.endswith(suffix):
            kind = {".beam": ": beam search", ".azure": ": Azure conversation trace slice",
                    ".pool": ": one KV pool against static splits"}.get(suffix, "")
            stem = stem[: -len(suffix)] + kind
    return f"{stem} ({unit})"


def noise_of(a):
    """The real engine against itself, or None from a single run (duet validate prints "-")."""
    return a["validation.noise"] if "validation.repeat_throughput_2" in a else None


def noise_text(n):
    return "-" if n is None else f"{100 * n:.1f}%"


def script_table(path, points):
    rows = []
    for name in sorted(points):
        a = points[name].attrs
        steps = max(abs(a[k]) for k in a if k.endswith(".step_error_median"))
        rows.append((a["validation.label"], a["validation.predicted_throughput"], a["validation.measured_throughput"],
                     a["validation.throughput_error"], noise_of(a), steps,
                     a["validation.measured_outside_steps_s"] / a["validation.measured_makespan_s"]))
    print(f"\n### {title(path, 'problems/s')}\n")
    print("| point | predicted | measured | error | noise | median step error | outside steps |")
    print("|---|---|---|---|---|---|---|")
    for label, p, m, e, n, s, o in rows:
        print(f"| {label} | {p:.4g} | {m:.4g} | {pct(e)} | {noise_text(n)} | {100 * s:.1f}% | {100 * o:.1f}% |")
    errors = [abs(r[3]) for r in rows]
    noise = [r[4] for r in rows if r[4] is not None]
    against_itself = (f"; the real engine against itself (noise): median {100 * median(noise):.1f}%, "
                      f"max {100 * max(noise):.1f}%" if noise else "; one run per point, so no noise figure")
    print(f"\n{len(rows)} points: median |error| {100 * median(errors):.1f}%, "
          f"max {100 * max(errors):.1f}%{against_itself}.")


def trace_table(path, point):
    a = point.attrs
    requests = f"{a['validation.items']:.0f} requests"
    print(f"\n### {title(path, requests)}\n")
    engine = sorted(point["measured/engines"])[0]
    # The real engine's own latency noise: written by duet validate with --repeats 2 or more.
    noisy = f"validation.{engine}.ttft_p50_noise" in a
    print("| figure | predicted | measured | error |" + (" noise |" if noisy else ""))
    print("|---|---|---|---|" + ("---|" if noisy else ""))
    print(f"| requests/s | {a['validation.predicted_throughput']:.4g} | "
          f"{a['validation.measured_throughput']:.4g} | {pct(a['validation.throughput_error'])} |"
          + (f" {noise_text(noise_of(a))} |" if noisy else ""))
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E")):
        for q in ("p50", "p90"):
            p = point[f"predicted/engines/{engine}"].attrs[f"{key}_{q}"]
            m = point[f"measured/engines/{engine}"].attrs[f"{key}_{q}"]
            noise = (f" {100 * a[f'validation.{engine}.{key[:-2]}_{q}_noise']:.1f}% |" if noisy else "")
            print(f"| {label} {q} (s) | {p:.4f} | {m:.4f} | {pct(p / m - 1)} |{noise}")
    pairs = f"validation.{engine}.ttft_request_error_pairs"
    if pairs in a:
        unpaired = a[f"validation.{engine}.requests_unpaired"]
        print(f"\nEach request against itself ({a[pairs]:.0f} paired, {unpaired:.0f} unpaired):\n")
        print("| latency | median error | median \\|error\\| | p90 \\|error\\| |")
        print("|---|---|---|---|")
        for key, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "E2E")):
            k = f"validation.{engine}.{key}_request_error_"
            print(f"| {label} | {pct(a[k + 'median'])} | {100 * a[k + 'median_abs']:.1f}% | "
                  f"{100 * a[k + 'p90_abs']:.1f}% |")
    print(f"\nnoise (the real engine against itself): {noise_text(noise_of(a))}; "
          f"measured time outside steps: "
          f"{100 * a['validation.measured_outside_steps_s'] / a['validation.measured_makespan_s']:.1f}%.")


def main(args):
    paths = []
    for arg in args:
        paths += sorted(glob.glob(os.path.join(arg, "*.h5"))) if os.path.isdir(arg) else [arg]
    for path in paths:
        with h5py.File(path, "r") as f:
            if "validate/points" not in f:
                sys.exit(f"table.py: {path} is not a duet validate file (no /validate/points)")
            points = f["validate/points"]
            if points[sorted(points)[0]].attrs["validation.unit"] == "requests/s":
                trace_table(path, points[sorted(points)[0]])
            else:
                script_table(path, points)


if __name__ == "__main__":
    main(sys.argv[1:] or ["validation-cpu"])
