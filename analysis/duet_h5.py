"""Reads duet's HDF5 run files into pandas. The schema is in analysis/README.md.

    import duet_h5
    run = duet_h5.load_run("run.h5")
    run["engines"]["llm"]["steps"]         # DataFrame, one row per engine step
    run["engines"]["llm"]["attrs"]         # the engine's summary (ttft_s_p50, ...)
    duet_h5.list_runs("sweep.h5")          # ["/sweeps/0000/points/0000", ...]
    duet_h5.sweep_table("sweep.h5")        # DataFrame, one row per sweep point
    duet_h5.validation_table("v.h5")       # DataFrame, one row per validated point

    python3 analysis/duet_h5.py run.h5     # prints a summary of every run in the file

Needs only h5py, numpy and pandas (Debian: python3-h5py python3-pandas).
"""
import contextlib
import json
import os
import sys
import warnings

import h5py
import numpy as np
import pandas as pd

SCHEMA_VERSION = 3
VERSION_ATTR = "duet_schema_version"


def _plain(value):
    # numpy scalars and bytes as plain Python values, so that attrs print and compare simply.
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.generic):
        return value.item()
    return value


def _attrs(obj):
    return {name: _plain(value) for name, value in obj.attrs.items()}


def _open(path):
    """h5py.File(path, "r"), naming the path when the file cannot be read (h5py's message does not)."""
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise OSError(f"{path}: cannot be read as HDF5 ({e})") from e


@contextlib.contextmanager
def _reading(path, where):
    """What h5py raises for an object it cannot read (a damaged header: KeyError, OSError, ...) as
    OSError naming the file and the object; this module's own errors, which name the file, pass."""
    try:
        yield
    except (KeyError, ValueError, OSError, RuntimeError, TypeError) as e:
        if e.args and isinstance(e.args[0], str) and e.args[0].startswith(f"{path}: "):
            raise
        raise OSError(f"{path}: {where}: damaged, cannot be read ({e})") from e


def _groups_with(path, attr):
    """(name, group attribute value) of every group with `attr`, depth first in name order."""
    found = []

    def visit(group, name):
        with _reading(path, name):
            if attr in group.attrs:
                found.append((name, _plain(group.attrs[attr])))
            children = sorted(group)
        for child in children:
            where = name.rstrip("/") + "/" + child
            with _reading(path, where):
                obj = group[child]  # not get(): it answers None for an object it cannot open
            if isinstance(obj, h5py.Group):
                visit(obj, where)

    with _open(path) as f:
        visit(f, "/")
    return found


def list_runs(path):
    """Every group of the file that holds a run, depth first in name order ("/" for one run)."""
    return [name for name, _ in _groups_with(path, VERSION_ATTR)]


def failed_points(path):
    """{group: attributes} of every sweep point that failed (/sweeps/NNNN/failed/MMMM): its
    `error`, the sweep's label (`sweep`) and the point's parameters (point.NAME)."""
    failed = {}
    with _open(path) as f, _reading(path, "/sweeps"):
        for sweep in sorted(f["sweeps"]) if "sweeps" in f else []:
            group = f["sweeps"][sweep]
            for name in sorted(group["failed"]) if "failed" in group else []:
                where = f"/sweeps/{sweep}/failed/{name}"
                with _reading(path, where):
                    failed[where] = _attrs(f[where])
    return failed


def unfinished_sweeps(path):
    """{sweep group: (points held, points expected)} for every sweep of the file that stopped
    before its last point (a signal, or a job's time limit): finished and failed points count as
    held, and a shard's file (duet_run.shard I/N) expects only its own points. `duet run ...
    --resume` completes such a sweep."""
    runs = set(list_runs(path))
    failed = failed_points(path)
    out = {}
    with _open(path) as f, _reading(path, "/sweeps"):
        shard, shards = 1, 1
        if "duet_run.shard" in f.attrs:
            shard, shards = (int(x) for x in _attrs(f)["duet_run.shard"].split("/"))
        for sweep in sorted(f["sweeps"]) if "sweeps" in f else []:
            where = f"/sweeps/{sweep}"
            if "points" not in f[where].attrs:
                raise KeyError(f"{path}: {where} has no 'points' attribute (the grid's size): not a duet sweep")
            expected = len(range(shard - 1, int(f[where].attrs["points"]), shards))
            held = sum(1 for g in runs | set(failed) if g.startswith(where + "/"))
            if held < expected:
                out[where] = (held, expected)
    return out


def incomplete_runs(path):
    """{group: why} for every run of the file that stopped before it finished (an error or a
    signal): its tables hold the rows recorded until then, and it has no summary."""
    return dict(_groups_with(path, "incomplete"))


def _engine(engine, tables, where, record_level):
    # A run recorded below "steps" (its record_level attribute) lacks the tables it left out: they
    # come back as None. A run that recorded them always has them, if only empty.
    present = [table for table in ("steps", "requests") if table in engine]
    expected = {"steps": ["steps", "requests"], "requests": ["requests"]}.get(record_level, [])
    missing = [table for table in expected if table not in present]
    if missing:
        raise ValueError(f"{where}: no '{missing[0]}' table, which a run recorded at level "
                         f"'{record_level}' always has (a damaged file)")
    out = {"attrs": _attrs(engine), "steps": None, "requests": None}
    out["units"] = {table: json.loads(engine[table].attrs["units"]) for table in present}
    if tables:
        for table in present:
            out[table] = pd.DataFrame(engine[table][()])
            out[table].attrs["units"] = out["units"][table]  # column -> unit, from the file
    out["enums"] = json.loads(engine["requests"].attrs["enums"]) if "requests" in engine else None
    return out


def load_run(path, group=None, tables=True):
    """One run as a dict (group: the run's group; None: the file's only run, "/" for duet simulate's
    files, /runs/0000 for a duet run of one duet.run):

    attrs    the run group's attributes: configuration, duet_schema_version (and created_utc at /);
             record_level ("requests" or "summary") when the run left tables out
    file_attrs  the file's own (root) attributes: created_utc, and for a duet run file which script
             and options wrote it (duet_run.script_hash, .library_hash, .args, .backend, .record,
             .shard); the same as attrs for duet simulate's files, whose run is the root
    summary  makespan_s, wall_s
    engines  {name: {"attrs": summary attributes, "steps": DataFrame, "requests": DataFrame (None
                     when not recorded),
                     "units": {"steps": {...}, "requests": {...}}, "enums": {...}}}

    tables=False skips the DataFrames (quick when only summaries of a large sweep are needed).
    """
    if group is None:
        runs = list_runs(path)
        stopped = incomplete_runs(path)
        if not runs and stopped:
            name, why = next(iter(stopped.items()))
            raise ValueError(f"{path}: holds no finished run: {name} stopped before it finished ({why}); "
                             f"its tables hold what was recorded until then (read them with h5py)")
        if len(runs) != 1:
            shown = ", ".join(runs[:4]) + (", ..." if len(runs) > 4 else "")
            raise KeyError(f"{path}: holds {len(runs)} runs ({shown or 'none'}): pass group= (list_runs, "
                           f"find_run or sweep_table find them)")
        group = runs[0]
    if not isinstance(group, str):
        raise TypeError(f"{path}: group must be a string such as '/runs/0000', not {type(group).__name__}")
    with _open(path) as f, _reading(path, group):
        if group not in f or not isinstance(f[group], h5py.Group):
            raise KeyError(f"{path}: {group}: no such group")
        run = f[group]
        version = run.attrs.get(VERSION_ATTR)
        if "/failed/" in group and "error" in run.attrs:
            raise ValueError(f"{path}: {group}: the sweep point failed, so it has no run: "
                             f"{_plain(run.attrs['error'])}")
        if "incomplete" in run.attrs:
            raise ValueError(f"{path}: {group}: the run stopped before it finished "
                             f"({_plain(run.attrs['incomplete'])}); its tables hold what was recorded until then")
        if version != SCHEMA_VERSION:
            raise ValueError(f"{path}: {group}: not a duet run of schema version {SCHEMA_VERSION} "
                             f"({VERSION_ATTR} = {version})")
        for part in ("summary", "engines"):
            if part not in run:
                raise ValueError(f"{path}: {group}: no '{part}' group, which every finished run has (a damaged file)")
        level = _plain(run.attrs.get("record_level", "steps"))
        engines = {name: _engine(engine, tables, f"{path}: {group.rstrip('/')}/engines/{name}", level)
                   for name, engine in run["engines"].items()}
        return {
            "path": path,
            "group": group,
            "attrs": _attrs(run),
            "file_attrs": _attrs(f["/"]),
            "summary": _attrs(run["summary"]),
            "engines": engines,
            # Search workloads (duet run) add one row per problem.
            "problems": pd.DataFrame(run["problems"][()]) if tables and "problems" in run else None,
        }


def input_path(env, default, root):
    """A notebook's input file: the environment variable `env`, else `default` in the repository
    `root`. A relative value is taken from the notebook's own folder (the kernel's working
    directory) when it is there, else from the root, where the README's commands run."""
    value = os.environ.get(env)
    if not value:
        return os.path.join(root, default)
    if os.path.isabs(value) or os.path.exists(value):
        return value
    return os.path.join(root, value)


def with_enum_names(requests, enums):
    """A copy of a requests DataFrame with kind and finish_reason as names ("Generate", "Stop")."""
    out = requests.copy()
    for column, names in enums.items():
        out[column] = out[column].map({int(code): name for code, name in names.items()}).astype("category")
    return out


def summary_table(run):
    """The engines' summary attributes, one column per engine."""
    engines = run["engines"]
    # From a list of dicts, pandas keeps the attributes in the order the file gives them.
    return pd.DataFrame([engine["attrs"] for engine in engines.values()], index=list(engines)).T


def _prefixed(prefix, attrs):
    return {f"{prefix}.{name}": value for name, value in attrs.items() if not isinstance(value, str) or name == "model"}


_LONG_TEXTS = {"script", "config_json", "command_line", "grid_json"}


def sweep_table(path, sweep=None):
    """Every sweep point of a file (or of the sweep labelled `sweep`), one row each: the point's
    parameters (point.NAME), the run's numbers (problems_per_s, makespan_s, ...), and each engine's
    summary attributes as ENGINE.NAME (llm.generated_tokens_per_s, prm.evictions, ...), and the
    run's settings, texts included (llm.model_shape, prm.fork_kv, ...). A point
    that failed is a row too, in its place, with its `error` and no numbers (NaN); `failed` tells
    them apart."""
    rows = []
    for group in list_runs(path):
        if "/sweeps/" not in group:
            continue
        run = load_run(path, group, tables=False)
        if sweep is not None and run["attrs"].get("sweep") != sweep:
            continue
        row = {"group": group, "sweep": run["attrs"].get("sweep", ""), **run["summary"]}
        # Numbers and settings, texts too (each engine's model, model_shape, fork_kv, cost_model: a
        # sweep over models differs in them); not the long texts (the script, its command line).
        row.update({k: v for k, v in run["attrs"].items() if k not in _LONG_TEXTS})
        for name, engine in run["engines"].items():
            row.update(_prefixed(name, engine["attrs"]))
        rows.append({**row, "failed": False})
    for group, attrs in failed_points(path).items():
        if sweep is None or attrs.get("sweep") == sweep:
            rows.append({"group": group, "sweep": attrs.get("sweep", ""), "failed": True, **attrs})
    if not rows:
        raise KeyError(f"{path}: no sweep points" + (f" labelled {sweep!r}" if sweep else ""))
    unfinished = unfinished_sweeps(path)
    with _open(path) as f:
        labels = {where: _attrs(f[where]).get("sweep") for where in unfinished}
    for where, (held, expected) in unfinished.items():
        if sweep is not None and labels[where] != sweep:
            continue
        warnings.warn(f"{path}: {where} holds {held} of its {expected} points: the sweep stopped before "
                      "it finished (the same duet run command with --resume completes it)", stacklevel=2)
    # In the sweep's own order: a point's number is the same under points/ and failed/.
    rows.sort(key=lambda row: (row["group"].split("/")[2], int(row["group"].rsplit("/", 1)[1])))
    return pd.DataFrame(rows)


def find_run(path, label):
    """The group of the run labelled `label` (a duet.run{label = ...}); KeyError when none is."""
    groups = list_runs(path)
    with _open(path) as f, _reading(path, "/"):
        for group in groups:
            if _plain(f[group].attrs.get("label", "")) == label:
                return group
    raise KeyError(f"{path}: no run labelled {label!r}")


def validation_table(path):
    """Every point of a `duet validate` file, one row each: its validation.* attributes (without
    the prefix) and the groups of its predicted and measured runs."""
    rows = []
    with _open(path) as f, _reading(path, "/validate/points"):
        if "validate/points" not in f:
            raise KeyError(f"{path}: no /validate/points (not a duet validate file)")
        for name in sorted(f["validate/points"]):
            point = f["validate/points"][name]
            row = {k[len("validation."):]: _plain(v) for k, v in point.attrs.items() if k.startswith("validation.")}
            row["predicted_group"] = f"/validate/points/{name}/predicted"
            row["measured_group"] = f"/validate/points/{name}/measured"
            rows.append(row)
    return pd.DataFrame(rows)


def _print_run(run):
    summary = run["summary"]
    print(f"run {run['group']}: makespan {summary['makespan_s']:.6g} s, wall {summary['wall_s']:.6g} s")
    for name, value in run["attrs"].items():
        # Long texts (the Lua script, config_json, model_config) would drown the table; a cost model
        # with its file's fingerprint, a model's shape and a warning fit.
        if not isinstance(value, str) or (len(value) <= 200 and "\n" not in value and not value.startswith("{")):
            print(f"  {name} = {value}")
    if run["engines"]:
        with pd.option_context("display.max_rows", None, "display.width", 200):
            print(summary_table(run).to_string())
    print()


def main(argv):
    usage = f"usage: {argv[0]} RUN.h5: the summary of every run in a duet HDF5 file"
    if len(argv) == 2 and argv[1] in ("-h", "--help"):
        print(usage)
        return 0
    if len(argv) != 2 or argv[1].startswith("-"):
        print(usage, file=sys.stderr)
        return 2
    try:
        runs = list_runs(argv[1])
        for group, why in incomplete_runs(argv[1]).items():
            print(f"{argv[1]}: {group}: stopped before it finished: {why}", file=sys.stderr)
        for group, attrs in failed_points(argv[1]).items():
            print(f"{argv[1]}: {group}: failed: {attrs.get('error', '')}", file=sys.stderr)
        if not runs:
            print(f"{argv[1]}: holds no finished duet run", file=sys.stderr)
            return 1
        for group in runs:
            _print_run(load_run(argv[1], group, tables=False))
    except (OSError, KeyError, ValueError) as error:
        # The messages name the file already (KeyError's repr quotes it: print its argument).
        print(error.args[0] if error.args else error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
