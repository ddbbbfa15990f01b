-- The sweep that bench/sweep_scaling.sh times: 32 quickstart-sized points (scripts/quickstart.lua's
-- beam search over all 500 MATH-500 problems, n = 4, beam_width = 4, depth <= 40, on a simulated
-- H100), 8 memory splits x 4 seeds, each point recording its summary only.
local duet = require("duet")
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")

local args = duet.args{problems = 500}
local problems = math500.load{limit = args.problems}

local results = duet.sweep{
  label = "sweep_scaling",
  grid = {llm_util = {0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5}, seed = {0, 1, 2, 3}},
  run = function(point)
    return {
      gpu = "h100",
      record = "summary",
      engines = {
        {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = point.llm_util, max_num_seqs = 256},
        {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.9 - point.llm_util, max_num_seqs = 256},
      },
      workload = beam_search.workload{problems = problems, n = 4, beam_width = 4, num_iterations = 40,
                                      seed = point.seed},
      concurrency = 128,
      seed = point.seed,
    }
  end,
}
print(string.format("sweep_scaling: %d points", #results))
