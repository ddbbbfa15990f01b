-- A small sweep for the shard, merge, resume, MPI and failed-point tests (tests/cli/sweep_*.sh):
-- a beam search over a few MATH-500 problems at 6 points. --fail X makes the points with
-- llm_util == X raise an error; --problems sets each point's cost.
local duet = require("duet")
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")

local args = duet.args{problems = 4, fail = -1}
local problems = math500.load{limit = args.problems}

local results = duet.sweep{
  label = "small",
  grid = {llm_util = {0.1, 0.2, 0.3}, max_num_seqs = {64, 256}},
  run = function(point)
    if point.llm_util == args.fail then error("llm_util " .. point.llm_util .. " fails on purpose") end
    return {
      gpu = "h100",
      engines = {
        {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = point.llm_util, max_num_seqs = point.max_num_seqs},
        {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.5},
      },
      workload = beam_search.workload{problems = problems, n = 4, beam_width = 4},
    }
  end,
}

for _, r in ipairs(results) do
  print(string.format("point %d: llm_util %.1f max_num_seqs %3d: %.3f problems/s, %d problems, accuracy %s, " ..
                      "mean score %.6f", r.index, r.point.llm_util, r.point.max_num_seqs, r.result.problems_per_s,
                      r.result.problems, tostring(r.result.accuracy), r.result.mean_score))
end
for _, f in ipairs(results.failed) do print(string.format("point %d failed: %s", f.index, f.error)) end
