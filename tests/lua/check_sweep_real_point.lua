-- A sweep of several threads on the simulator whose point asks for a real engine (duet.run's
-- backend key): that point fails, naming the key and the fix, as the engine measures alone.
duet.sweep{grid = {x = {1, 2}}, threads = 2, out = false, run = function()
  return {backend = "cpu", out = false, progress = false,
          engines = {{name = "llm", model = "models/tiny-llama/config.json", gpu_memory_utilization = 0.5}},
          workload = {problems = {{}}, solve = function() return {} end}}
end}
