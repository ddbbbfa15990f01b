-- Every workload module runs end to end on the simulator.
local math500 = require("workloads.math500")
local problems = math500.load{limit = 4}
local engines = {
  {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3},
  {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.6},
}
local function run(workload, e)
  return duet.run{gpu = "h100", engines = e or engines, workload = workload, out = false, progress = false}
end
for _, name in ipairs{"beam_search", "best_of_n", "dvts", "self_consistency"} do
  local w = require("workloads." .. name)
  local r = run(w.workload{problems = problems, n = 8, beam_width = 4})
  assert(r.problems == #problems, name)
  assert(r.problems_per_s > 0, name)
  print(string.format("%-18s %8.3f problems/s, accuracy %.2f", name, r.problems_per_s, r.accuracy))
end
local spec = require("workloads.speculative")
local r = run(spec.workload{problems = problems, gamma = 4, alpha = 0.7, output_tokens = 64},
              {{name = "draft", model = "llama-3.2-1b", gpu_memory_utilization = 0.2},
               {name = "target", model = "llama-3.1-8b", gpu_memory_utilization = 0.7}})
assert(r.problems == #problems and r.engines.draft.generated_tokens > 0 and r.engines.target.requests > 0)
print(string.format("%-18s %8.3f problems/s", "speculative", r.problems_per_s))
local chat = require("workloads.chat")
local w = chat.workload{trace = "traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv", max_requests = 50}
local c = duet.run{gpu = "h100", engines = {{name = "llm", model = "llama-3.1-8b"}}, workload = w, concurrency = 50,
                   out = false, progress = false}
assert(c.problems == 50 and c.engines.llm.requests == 50)
assert(c.makespan_s > 10, "arrivals follow the trace's timestamps")
print(string.format("%-18s %8d requests over %.1f s", "chat", c.engines.llm.requests, c.makespan_s))
print("workloads ok")
