-- duet.sweep: grid order, one result per point, the same results whatever the thread count.
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")
local problems = math500.load{limit = 4}
local function sweep(threads)
  return duet.sweep{
    threads = threads, out = false,
    grid = {llm_util = {0.1, 0.3}, max_num_seqs = {64, 256}},
    run = function(p)
      return {gpu = "h100", out = false, progress = false,
              engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = p.llm_util, max_num_seqs = p.max_num_seqs},
                         {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.5}},
              workload = beam_search.workload{problems = problems}}
    end,
  }
end
-- A refused sweep (caught) takes no number: threads find the sweeps before theirs by number, and
-- the second threaded sweep after one stopped with "a sweep thread reached a sweep the script had
-- not run".
assert(not pcall(duet.sweep, {grid = {x = {1}}, runn = function() end}))
local one, two = sweep(1), sweep(2)
assert(#sweep(2) == 4)
assert(#one == 4 and #two == 4)
assert(one[1].point.llm_util == 0.1 and one[1].point.max_num_seqs == 64 and one[2].point.max_num_seqs == 256)
for i = 1, 4 do
  assert(one[i].result.makespan_s == two[i].result.makespan_s, "deterministic across thread counts")
  assert(one[i].result.engines.llm.total_blocks == two[i].result.engines.llm.total_blocks)
end
-- A key the grid does not have is an error at the line that reads it, in run(point) (a misspelt
-- key was nil, and the run took the setting's default) and in the results.
-- (Checked inside run(): a point runs in a Lua state of its own, and a failed point fails duet run.)
local typo = duet.sweep{grid = {llm_util = {0.05}}, out = false, threads = 1, run = function(p)
  local bad, why = pcall(function() return p.llm_utl end)
  assert(not bad and tostring(why):find("check_sweep.lua:%d+: the sweep point has no key 'llm_utl' %(the grid's keys: llm_util%)"),
         tostring(why))
  return {out = false, progress = false, engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = p.llm_util}},
          workload = {problems = {{}}, solve = function() return {} end}}
end}
assert(#typo == 1 and #typo.failed == 0)
local ok, err = pcall(function() return one[1].point.llm_utl end)
assert(not ok and tostring(err):find("check_sweep.lua:%d+: the sweep point has no key 'llm_utl' %(the grid's keys: llm_util, max_num_seqs%)"),
       tostring(err))
print("sweep ok")
