duet.run{gpu = "h100", kv_pool = "shared", kv_eviction = "fifo",
         engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.5}},
         workload = {problems = {}, solve = function() end}}
