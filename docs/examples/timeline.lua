-- docs/lua-api.md, "The per-step timeline": the PRM's KV blocks step by step.
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")

local result = duet.run{
  gpu = "h100", out = false,
  engines = {
    {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3},
    {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.6},
  },
  workload = beam_search.workload{problems = math500.load{limit = 5}},
}
local tl = result.timeline("prm")
for i = 1, math.min(5, #tl.start_s) do
  print(string.format("t=%.3f s  prefill %d  decode %d  blocks used %d of %d", tl.start_s[i], tl.prefill_tokens[i],
                      tl.decode_tokens[i], tl.kv_blocks_used[i], tl.total_blocks))
end
assert(#tl.start_s == result.engines.prm.steps)
