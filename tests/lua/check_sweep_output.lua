-- Sweep threads re-run the script with print and io.write silenced: the main state's lines appear
-- once (the test fails on a second "main state line"), and io.write still chains in a thread.
io.write("main state line\n")
print("main state print")
local results = duet.sweep{threads = 2, out = false, grid = {x = {1, 2, 3}}, run = function(p)
  io.write("point ", p.x, " "):write("written\n")
  return {out = false, progress = false, engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3}},
          workload = {problems = {{}}, solve = function() return {} end}}
end}
assert(#results == 3 and #results.failed == 0, "points failed")
print("sweep output ok")
