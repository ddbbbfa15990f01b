-- A duet.sweep inside a pcall or a coroutine: its sweep threads end their copies of the script once
-- their points are served, which the pcall must not catch (it did, and the sweep failed with "the
-- script did not reach the same sweep in a worker"), nor the coroutine's resumer (it ran the rest
-- of the script in every thread). The lines after each sweep are written with io.stdout:write,
-- which threads do not silence, so a second copy of one fails the test (CMakeLists.txt).
-- Points long enough that each thread serves some.
local problems = require("workloads.math500").load{limit = 4}
local beam_search = require("workloads.beam_search")
local function sweep()
  return duet.sweep{threads = 2, out = false, grid = {x = {1, 2, 3, 4}}, run = function(p)
    return {out = false, progress = false,
            engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3},
                       {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.6}},
            workload = beam_search.workload{problems = problems, seed = p.x}}
  end}
end
-- One sweep a run (-- --via pcall or coroutine): a second sweep's threads would run the first one's
-- lines again, as they re-run the script up to their sweep.
local via = duet.args{via = "pcall"}.via
local ok, results
if via == "pcall" then
  ok, results = pcall(sweep)
else
  ok, results = coroutine.resume(coroutine.create(sweep))
end
-- (Not the error's text: in a thread that text ends the script as the thread's end does.)
if not ok then error("the sweep in a " .. via .. " failed", 0) end
assert(#results == 4 and #results.failed == 0, "points failed")
io.stdout:write("after the sweep in a " .. via .. "\n")
