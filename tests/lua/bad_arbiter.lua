-- An arbiter that picks an engine with no work is an error naming that engine as the script does.
local duet = require("duet")
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")
duet.run{
  out = false, progress = false,
  engines = {
    {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3},
    {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.6},
  },
  arbiter = function(engines) return 2 end,
  workload = beam_search.workload{problems = math500.load{limit = 1}, prm_mode = "incremental"},
}
