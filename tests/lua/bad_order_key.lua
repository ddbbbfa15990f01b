-- A policy's order key of NaN must be an error naming the engine, the policy and the problem:
-- unchecked, it broke the waiting queue's order and problems were dropped with exit status 0.
local duet = require("duet")
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")
duet.run{
  out = false, progress = false,
  engines = {
    {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3,
     policy = {order = function(id, num_tokens, problem, kind) return problem == 2 and 0 / 0 or problem end}},
    {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.6},
  },
  workload = beam_search.workload{problems = math500.load{limit = 3}, prm_mode = "incremental"},
}
