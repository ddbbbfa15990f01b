-- A solve() that yields with nothing to wait for must be an error naming the problem; it was
-- dropped silently, and the run exited 0 with fewer problems.
local duet = require("duet")
duet.run{
  out = false, progress = false,
  engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3}},
  workload = {problems = {{}, {}}, solve = function(ctx, problem) coroutine.yield() end},
}
