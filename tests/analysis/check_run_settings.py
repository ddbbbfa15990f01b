"""A run's file records the settings that change its results beside the engines' (analysis/README.md,
run attributes): the arbiter and its engine order, a Lua run's problem batching, the script's own
policies (where each is defined) and the workload's name and options. Two runs that differ only
there must be told apart by their attributes.

    check_run_settings.py DUET OUT_DIR
"""
import lua_run

h5py, duet, out = lua_run.setup()
h5 = lua_run.run(duet, out, "settings", """local function run(extra)
  local cfg = {progress = false, concurrency = 2,
    engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3},
               {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.5}},
    workload = {problems = {{}, {}, {}}, solve = function(ctx)
      duet.await(ctx.engines.llm:submit{prompt = 8, max_tokens = 4})
      duet.await(ctx.engines.prm:submit{prompt = 12, max_tokens = 1})
      return {score = 0}
    end}}
  for k, v in pairs(extra) do cfg[k] = v end
  return cfg
end
local Fifo = setmetatable({}, {__call = function(self, id) return id end})
duet.sweep{grid = {setup = {"defaults", "ordered", "partly", "policies"}}, run = function(p)
  if p.setup == "defaults" then return run{} end
  if p.setup == "policies" then
    local cfg = run{arbiter = function(engines) return engines[1].has_work and 1 or 2 end}
    cfg.engines[1].policy = {order = Fifo, admit = function() return true end}
    cfg.workload.name = "mine"
    cfg.workload.options = {n = 3, mode = "x", flag = true, problems = {{}}, solve = print, seed = math.maxinteger}
    return cfg
  end
  if p.setup == "partly" then return run{arbiter = "priority", arbiter_priority = {"prm"}, min_batch = 1} end
  return run{arbiter = "priority", arbiter_priority = {"prm", "llm"}, batching = "fixed"}
end}
""")
with h5py.File(h5, "r") as f:
    points = f["sweeps/0000/points"]
    defaults, ordered, partly, policies = (points[name].attrs for name in sorted(points))
    text = lambda a, k: a[k].decode() if isinstance(a[k], bytes) else a[k]
    assert text(defaults, "arbiter") == "alternate" and "arbiter_priority" not in defaults, dict(defaults)
    assert text(defaults, "batching") == "continuous" and defaults["min_batch"] == 2, dict(defaults)
    assert text(ordered, "arbiter") == "priority" and text(ordered, "arbiter_priority") == "prm,llm", dict(ordered)
    assert text(ordered, "batching") == "fixed" and ordered["min_batch"] == 2, dict(ordered)
    assert text(partly, "batching") == "continuous" and partly["min_batch"] == 1, dict(partly)
    assert defaults["concurrency"] == ordered["concurrency"] == 2
    # The effective order: the engines the list leaves out follow in their declared order.
    assert text(partly, "arbiter_priority") == "prm,llm", dict(partly)
    # The script's policies by where they are defined (a callable table by its __call); none for
    # the defaults. The workload's name and its options' numbers, booleans and strings.
    for key in ("llm.order", "llm.admit", "llm.victim", "prm.order", "arbiter_function", "workload"):
        assert key not in defaults, (key, dict(defaults))
    assert text(policies, "arbiter") == "callback", dict(policies)
    assert text(policies, "llm.order").endswith("/settings.lua:13"), dict(policies)
    assert text(policies, "llm.admit").endswith("/settings.lua:18"), dict(policies)
    assert text(policies, "arbiter_function").endswith("/settings.lua:17"), dict(policies)
    assert "llm.victim" not in policies and "prm.order" not in policies, dict(policies)
    assert text(policies, "workload") == "mine" and text(policies, "workload.mode") == "x", dict(policies)
    assert policies["workload.n"] == 3 and policies["workload.flag"] == 1, dict(policies)
    assert "workload.problems" not in policies and "workload.solve" not in policies, dict(policies)
    # An integer a double does not hold exactly is text: math.maxinteger and its neighbour differ.
    assert text(policies, "workload.seed") == "9223372036854775807", dict(policies)
print("run settings: ok")
