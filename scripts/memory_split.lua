-- The thesis's memory-split sweep: the generator's gpu_memory_utilization from 0.08 to 0.5, the
-- rest (up to 0.9 of the GPU) for the PRM, and beam-search throughput at each point.
--   duet run scripts/memory_split.lua [-- --problems 100 --prm-mode full --cost-model roofline]
--   duet run scripts/memory_split.lua -- --fork-kv prefix_cache    forks as vLLM V1 runs them
--   duet run scripts/memory_split.lua -- --max-num-seqs 1024 --max-num-batched-tokens 16384
--                                           recent vLLM's defaults for its LLM class on an H100
--   duet run scripts/memory_split.lua -- --llm-model qwen2.5-1.5b-instruct --prm-model qwen2.5-math-prm-7b
local duet = require("duet")
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")

-- score_cache: earlier steps' scores are reused and the PRM prefix-cache hits up to the new step,
-- which is what prefix caching gave the thesis's vLLM PRM; without it every step is re-prefilled.
-- The defaults (n = 16, 256 problems in flight) are where memory binds on an H100: with n = 4 and
-- 128 in flight both pools are larger than the search ever needs, and the curve is flat. Here the
-- LLM's pool fills at 0.08 (it evicts its kept beams' cached blocks rather than preempting: kept KV
-- is a cache, not a reservation) and the PRM's prefix cache thrashes at 0.5: throughput is flat up
-- to 0.45 and falls beyond.
local args = duet.args{problems = 256, gpu = "h100", total = 0.9, prm_mode = "full", score_cache = true, seed = 0,
                       n = 16, concurrency = 256, cost_model = "auto", fork_kv = "share", max_num_seqs = 256,
                       max_num_batched_tokens = 8192, llm_model = "llama-3.2-1b", prm_model = "llama-3.1-8b"}
local problems = math500.load{limit = args.problems}

local results = duet.sweep{
  label = "memory_split",
  grid = {llm_util = {0.08, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5}},
  run = function(point)
    return {
      gpu = args.gpu,
      cost_model = args.cost_model,
      engines = {
        {name = "llm", model = args.llm_model, gpu_memory_utilization = point.llm_util, fork_kv = args.fork_kv,
         max_num_seqs = args.max_num_seqs, max_num_batched_tokens = args.max_num_batched_tokens},
        {name = "prm", model = args.prm_model, gpu_memory_utilization = args.total - point.llm_util,
         fork_kv = args.fork_kv, max_num_seqs = args.max_num_seqs,
         max_num_batched_tokens = args.max_num_batched_tokens},
      },
      workload = beam_search.workload{problems = problems, n = args.n, beam_width = 4, prm_mode = args.prm_mode,
                                      score_cache = args.score_cache, seed = args.seed},
      concurrency = args.concurrency,
      seed = args.seed,
    }
  end,
}

print(string.format("memory split sweep: %d problems, %s PRM scoring, %s, cost model %s, fork_kv %s, "
                    .. "max_num_seqs %s, max_num_batched_tokens %s", #problems, args.prm_mode, args.gpu,
                    args.cost_model, args.fork_kv, args.max_num_seqs, args.max_num_batched_tokens))
print(string.format("%8s %8s %10s %10s %12s %10s %10s %8s", "llm", "prm", "llm blks", "prm blks", "problems/s",
                    "llm tok/s", "prm hit%", "prm evict"))
for _, r in ipairs(results) do
  local llm, prm = r.result.engines.llm, r.result.engines.prm
  print(string.format("%8.2f %8.2f %10d %10d %12.3f %10.1f %10.1f %8d", r.point.llm_util, args.total - r.point.llm_util,
                      llm.total_blocks, prm.total_blocks, r.result.problems_per_s, llm.generated_tokens_per_s,
                      100 * prm.prefix_hit_rate, prm.evictions))
end
print(string.format("open analysis/notebooks/thesis_figures.ipynb with DUET_MEMORY_SPLIT=%s", duet.out))
return results
