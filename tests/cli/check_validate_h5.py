"""Checks a duet validate file against analysis/README.md: per point, the comparison as attributes
and the predicted and measured runs beside it. Usage: check_validate_h5.py SCRIPT.h5 N TRACE.h5"""
import sys

import h5py

KEYS = ["validation.label", "validation.predicted_throughput", "validation.measured_throughput",
        "validation.throughput_error", "validation.predicted_makespan_s", "validation.measured_makespan_s",
        "validation.batches_identical", "validation.measured_outside_steps_s"]


NOISE = [f"validation.llm.{latency}_{q}_noise" for latency in ("ttft", "tpot", "e2e") for q in ("p50", "p90")]


def check(path, points, identical, repeats, lua):
    with h5py.File(path, "r") as f:
        names = sorted(f["validate/points"].keys())
        assert len(names) == points, f"{path}: {len(names)} points, expected {points}"
        for name in names:
            g = f["validate/points"][name]
            for key in KEYS:
                assert key in g.attrs, f"{path}:{name}: no attribute {key}"
            for run in ("predicted", "measured"):
                assert "duet_schema_version" in g[run].attrs, f"{path}:{name}/{run} is not a run"
                assert "steps" in g[run]["engines"]["llm"], f"{path}:{name}/{run}: no llm steps"
                # A script's runs carry what a duet run file's do: the script, its settings, the
                # problems' count and rate.
                for key in ("script", "concurrency", "problems", "problems_per_s", "mean_score") if lua else ():
                    assert key in g[run].attrs, f"{path}:{name}/{run}: no attribute {key}"
            p, m = g.attrs["validation.predicted_throughput"], g.attrs["validation.measured_throughput"]
            err = g.attrs["validation.throughput_error"]
            assert abs((p / m - 1) - err) < 1e-12, f"{path}:{name}: error {err} is not {p}/{m} - 1"
            assert g.attrs["validation.batches_identical"] == identical
            # The real engine's latency noise: only from two or more measured runs.
            for key in NOISE:
                if repeats > 1:
                    assert key in g.attrs and g.attrs[key] >= 0, f"{path}:{name}: no {key} of {repeats} runs"
                else:
                    assert key not in g.attrs, f"{path}:{name}: {key} from a single run"
            assert g["predicted"].attrs["backend"] == "sim" and g["measured"].attrs["backend"] == "cpu"
            # The command that made the file, as typed: validate's own, not a `duet run` one.
            command = g["measured"].attrs["command_line"]
            command = command.decode() if isinstance(command, bytes) else str(command)
            assert command.startswith("duet validate "), f"{path}:{name}: command_line {command!r}"
    print(f"{path}: {points} point(s) ok")


check(sys.argv[1], int(sys.argv[2]), 1.0, 1, True)
check(sys.argv[3], 1, 0.0, 2, False)
