-- An endless loop in a policy must stop with an error naming the function and the line, not hang.
local duet = require("duet")
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")
local function spin(id, num_tokens, problem, kind)
  local x = 0
  while true do x = x + 1 end
end
duet.run{
  out = false, progress = false,
  engines = {
    {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3, policy = {order = spin}},
    {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.6},
  },
  workload = beam_search.workload{problems = math500.load{limit = 1}, prm_mode = "incremental"},
}
