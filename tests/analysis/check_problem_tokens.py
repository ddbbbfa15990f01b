"""A problem's generated_tokens counts the tokens of the sequences it aborted too (released before
they finished: by :release, or by returning without awaiting them), as the engine's totals and the
requests table do (analysis/README.md, problems and requests tables).

    check_problem_tokens.py DUET OUT_DIR
"""
import lua_run

h5py, duet, out = lua_run.setup()
h5 = lua_run.run(duet, out, "abort", """duet.run{progress = false, concurrency = 4,
  engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3}},
  workload = {problems = {{}, {}, {}, {}, {}, {}}, solve = function(ctx)
    local llm = ctx.engines.llm
    local short = llm:submit{prompt = 16, max_tokens = 32, ignore_eos = true}
    local released = llm:submit{prompt = 16, max_tokens = 400, ignore_eos = true}
    llm:submit{prompt = 16, max_tokens = 400, ignore_eos = true}  -- never awaited
    duet.await(short)
    llm:release(released)
    return {score = 0}
  end}}
""")
with h5py.File(h5, "r") as f:
    run = f["runs/0000"]
    problems = run["problems"][()]
    requests = run["engines/llm/requests"][()]
    engine_total = int(run["engines/llm"].attrs["generated_tokens"])
aborted = requests[requests["finish_reason"] == 4]
assert len(aborted) == 12 and aborted["output_tokens"].sum() > 0, aborted
assert engine_total == int(requests["output_tokens"].sum()), (engine_total, requests["output_tokens"].sum())
assert int(problems["generated_tokens"].sum()) == engine_total, (problems["generated_tokens"], engine_total)
print(f"problem tokens: ok ({engine_total} tokens, {int(aborted['output_tokens'].sum())} of them aborted)")
