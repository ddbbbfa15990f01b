-- docs/lua-api.md, "A first run": beam search over ten MATH-500 problems on a simulated H100.
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")

local result = duet.run{
  gpu = "h100",
  engines = {
    {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3},
    {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.6},
  },
  workload = beam_search.workload{problems = math500.load{limit = 10}, n = 4, beam_width = 4},
}
print(string.format("%.2f problems/s, LLM %.0f tokens/s, PRM hit rate %.1f%%", result.problems_per_s,
                    result.engines.llm.generated_tokens_per_s, 100 * result.engines.prm.prefix_hit_rate))
assert(result.problems == 10)
