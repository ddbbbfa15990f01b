duet.run{gpu = "h100", engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilisation = 0.5}},
         workload = {problems = {}, solve = function() end}}
