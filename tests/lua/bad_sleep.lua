-- duet.sleep_until(NaN) must be an error naming the call, not a run that waits forever.
local duet = require("duet")
local math500 = require("workloads.math500")
local problems = math500.load{limit = 1}
duet.run{
  engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3}},
  workload = {problems = problems, solve = function(ctx, problem) duet.sleep_until(0 / 0) end},
  out = false,
}
