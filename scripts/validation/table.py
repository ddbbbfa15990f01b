"""The fidelity table of bench/results/validation-cpu.md from duet validate's HDF5 files.

Usage: /usr/bin/python3 scripts/validation/table.py DIR   (DIR as written by measure_cpu.sh)
Reads DIR/MODEL.beam.h5 and DIR/MODEL.azure.h5 (the layout is in analysis/README.md) and prints
markdown: one row per point, then the summaries that the targets are stated in."""
import glob
import os
import statistics
import sys

import h5py


def pct(x):
    return f"{100 * x:+.1f}%"


def beam_rows(path):
    rows = []
    with h5py.File(path, "r") as f:
        for name in sorted(f["validate/points"]):
            a = f["validate/points"][name].attrs
            steps = max(abs(a[k]) for k in a if k.endswith(".step_error_median"))
            rows.append((a["validation.label"], a["validation.predicted_throughput"],
                         a["validation.measured_throughput"], a["validation.throughput_error"],
                         a["validation.noise"], steps, a["validation.measured_outside_steps_s"] /
                         a["validation.measured_makespan_s"]))
    return rows


def main(directory):
    for beam in sorted(glob.glob(os.path.join(directory, "*.beam.h5"))):
        model = os.path.basename(beam).split(".")[0]
        rows = beam_rows(beam)
        print(f"\n### {model}: beam search (problems/s)\n")
        print("| point | predicted | measured | error | noise | median step error | outside steps |")
        print("|---|---|---|---|---|---|---|")
        for label, p, m, e, n, s, o in rows:
            print(f"| {label} | {p:.4g} | {m:.4g} | {pct(e)} | {100 * n:.1f}% | {100 * s:.1f}% | {100 * o:.1f}% |")
        errors = [abs(r[3]) for r in rows]
        noise = [r[4] for r in rows]
        print(f"\n{len(rows)} points: median |error| {100 * statistics.median(errors):.1f}%, "
              f"max {100 * max(errors):.1f}%; the real engine against itself (noise): median "
              f"{100 * statistics.median(noise):.1f}%, max {100 * max(noise):.1f}%.")
        azure = os.path.join(directory, f"{model}.azure.h5")
        if not os.path.exists(azure):
            continue
        with h5py.File(azure, "r") as f:
            a = f["validate/points/0000"].attrs
            g = f["validate/points/0000"]
            print(f"\n### {model}: Azure conversation trace slice ({a['validation.items']:.0f} requests)\n")
            print("| figure | predicted | measured | error |")
            print("|---|---|---|---|")
            print(f"| requests/s | {a['validation.predicted_throughput']:.4g} | "
                  f"{a['validation.measured_throughput']:.4g} | {pct(a['validation.throughput_error'])} |")
            for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E")):
                for q in ("p50", "p90"):
                    p = g["predicted/engines/llm"].attrs[f"{key}_{q}"]
                    m = g["measured/engines/llm"].attrs[f"{key}_{q}"]
                    print(f"| {label} {q} (s) | {p:.4f} | {m:.4f} | {pct(p / m - 1)} |")
            print(f"\nnoise (the real engine against itself): {100 * a['validation.noise']:.1f}%; "
                  f"measured time outside steps: {100 * a['validation.measured_outside_steps_s'] / a['validation.measured_makespan_s']:.1f}%.")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "validation-cpu")
