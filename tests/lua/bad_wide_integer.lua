-- A Lua integer too wide for its 32-bit field is an error naming it, not a silent wrap to 0.
local duet = require("duet")
duet.run{
  out = false, progress = false,
  engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3, max_num_seqs = 4294967296}},
  workload = {problems = {}, solve = function(ctx, problem) end},
}
