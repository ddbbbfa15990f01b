-- A duet.sweep inside a pcall: its sweep threads end their copies of the script once their points
-- are served, which the pcall must not catch (it did, and the sweep failed with "the script did
-- not reach the same sweep in a worker"); the rest of the script runs once, in the main state.
-- Points long enough that each thread serves some.
local problems = require("workloads.math500").load{limit = 4}
local beam_search = require("workloads.beam_search")
local ok, results = pcall(duet.sweep, {threads = 2, out = false, grid = {x = {1, 2, 3, 4}}, run = function(p)
  return {out = false, progress = false,
          engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3},
                     {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.6}},
          workload = beam_search.workload{problems = problems, seed = p.x}}
end})
-- (Not the error's text: in a thread that text ends the script as the thread's end does.)
if not ok then error("the sweep failed", 0) end
assert(#results == 4 and #results.failed == 0, "points failed")
-- A second pcall after the sweep, which a thread's copy of the script never reaches.
assert(pcall(function() return 1 end))
print("after the sweep")
