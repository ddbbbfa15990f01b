-- A sweep point's configuration is checked as duet.run's: out names no file of its own.
local r = duet.sweep{grid = {x = {1}}, run = function()
  return {engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3}},
          out = "other.h5", workload = {problems = {}, solve = function() end}}
end}
for _, f in ipairs(r.failed) do print("point " .. f.index .. " failed: " .. f.error) end
