"""duet_h5.load_run without a group: a file's only run, whatever its group (duet run files keep it
at /runs/0000, duet simulate's at /), and for a file of several an error that lists them.

    check_load_run.py DUET OUT_DIR
"""
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
source = os.path.dirname(os.path.dirname(here))
sys.path.insert(0, os.path.join(source, "analysis"))
try:
    import duet_h5
except ImportError as error:  # h5py or pandas missing
    print(f"SKIP: duet_h5 needs h5py and pandas ({error})")
    sys.exit(0)

duet, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
one, sweep = os.path.join(out, "one.h5"), os.path.join(out, "sweep.h5")
run = lambda *args: subprocess.run([duet, *args], check=True, stdout=subprocess.DEVNULL, cwd=source)
run("run", "scripts/quickstart.lua", "--no-progress", "--out", one, "--", "--problems", "2")
run("run", "tests/cli/one_request_sweep.lua", "--no-progress", "--out", sweep)

r = duet_h5.load_run(one)
assert r["group"] == "/runs/0000" and set(r["engines"]) == {"llm", "prm"}, (r["group"], list(r["engines"]))
# The file's own attributes too: which script and options wrote it.
assert r["file_attrs"]["duet_run.args"] == '["--problems","2"]', r["file_attrs"]
assert r["file_attrs"]["duet_run.library_hash"].startswith("fnv1a64:"), r["file_attrs"]
assert r["attrs"]["duet_version"] and r["attrs"]["llm.model_config"].startswith("{"), r["attrs"]
try:
    duet_h5.load_run(sweep)
    sys.exit("load_run chose one of a sweep's runs")
except KeyError as error:
    assert "pass group=" in str(error) and "/sweeps/0000/points/0000" in str(error), error
groups = duet_h5.list_runs(sweep)
assert duet_h5.load_run(sweep, groups[1], tables=False)["group"] == groups[1]
# sweep_table keeps the settings that are texts (a sweep over models differs in them), not the script.
table = duet_h5.sweep_table(sweep)
assert table["llm.model_shape"].str.startswith("L16 h2048").all() and "script" not in table, list(table)

# A sweep that stopped before its last point (a kill) is told: unfinished_sweeps, and a warning
# from sweep_table; a finished one is not.
import shutil
import warnings
assert duet_h5.unfinished_sweeps(sweep) == {}, duet_h5.unfinished_sweeps(sweep)
cut = os.path.join(out, "cut.h5")
shutil.copy(sweep, cut)
with duet_h5.h5py.File(cut, "a") as f:
    held = len(f["sweeps/0000/points"])
    del f["sweeps/0000/points/0001"]
assert duet_h5.unfinished_sweeps(cut) == {"/sweeps/0000": (held - 1, held)}, duet_h5.unfinished_sweeps(cut)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    assert len(duet_h5.sweep_table(cut)) == held - 1
assert any(f"/sweeps/0000 holds {held - 1} of its {held} points" in str(w.message) for w in caught), caught

# A sweep point that failed has no run: load_run says so, with the point's error.
failing = os.path.join(out, "failing.lua")
with open(failing, "w") as f:
    f.write("""duet.sweep{grid = {util = {0.2, 0.3}}, run = function(p)
  if p.util > 0.25 then error("point refused on purpose") end
  return {progress = false, engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = p.util}},
          workload = {problems = {{}}, solve = function(ctx) return {score = 0} end}}
end}
""")
failed_h5 = os.path.join(out, "failed.h5")
assert subprocess.run([duet, "run", failing, "--no-progress", "--out", failed_h5], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL, cwd=source).returncode == 3
(failed_group,) = duet_h5.failed_points(failed_h5)
try:
    duet_h5.load_run(failed_h5, failed_group)
    sys.exit("load_run read a failed point")
except ValueError as error:
    assert "the sweep point failed" in str(error) and "point refused on purpose" in str(error), error

# A run that stopped before it finished: the error gives the reason it recorded.
stopped = os.path.join(out, "stopped.h5")
subprocess.run([duet, "simulate", "--trace", "traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
                "--max-model-len", "2048", "--on-too-long", "error", "--out", stopped],
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=source)
assert list(duet_h5.incomplete_runs(stopped)) == ["/"], duet_h5.incomplete_runs(stopped)
for group in (None, "/"):
    try:
        duet_h5.load_run(stopped, group)
        sys.exit("load_run read a run that stopped before it finished")
    except ValueError as error:
        assert stopped in str(error) and "stopped before it finished" in str(error) and "2048" in str(error), error
# A truncated file: the error names it.
truncated = os.path.join(out, "truncated.h5")
with open(one, "rb") as src, open(truncated, "wb") as dst:
    dst.write(src.read()[:6000])
for read in (duet_h5.load_run, duet_h5.list_runs, duet_h5.validation_table):
    try:
        read(truncated)
        sys.exit(f"{read.__name__} read a truncated file")
    except OSError as error:
        assert str(error).startswith(truncated + ": cannot be read as HDF5"), error
# A file that opens but holds an object h5py cannot read (its header's signature overwritten): the
# error names the file and the object, and list_runs no longer skips it as if it were not there.
with duet_h5.h5py.File(one, "r") as f:
    address = duet_h5.h5py.h5o.get_info(f["/runs/0000/engines/llm"].id).addr
damaged = os.path.join(out, "damaged.h5")
with open(one, "rb") as src:
    data = bytearray(src.read())
assert data[address:address + 4] == b"OHDR", data[address:address + 4]
data[address:address + 4] = b"XHDR"
with open(damaged, "wb") as dst:
    dst.write(data)
for read in (duet_h5.load_run, duet_h5.list_runs):
    try:
        read(damaged)
        sys.exit(f"{read.__name__} read a damaged file")
    except OSError as error:
        assert str(error).startswith(damaged + ": /runs/0000/engines/llm: damaged, cannot be read"), error
print("load_run: ok")
