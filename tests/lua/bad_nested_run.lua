local engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3}}
duet.run{gpu = "h100", engines = engines, out = false, workload = {problems = {1}, solve = function()
  duet.run{gpu = "h100", engines = engines, out = false, workload = {problems = {}, solve = function() end}}
end}}
