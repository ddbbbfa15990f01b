-- search-and-learn's serving architecture against duet's best configuration, on the same cost
-- model, in problems per hour:
--   baseline: one problem at a time, full PRM re-scoring of every trajectory, a fixed 0.5 split,
--             no prefix caching on the PRM;
--   duet:     continuous problem batching, incremental PRM scoring with prefix caching, priority
--             eviction of pruned beams, the memory split of the best point of a small sweep.
--   duet run scripts/baseline_vs_duet.lua [-- --problems 50]
local duet = require("duet")
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")

local args = duet.args{problems = 50, gpu = "h100", seed = 0}
local problems = math500.load{limit = args.problems}

local function engines(llm_util, prm_util, prm_caching)
  return {
    {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = llm_util},
    {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = prm_util, enable_prefix_caching = prm_caching},
  }
end

local baseline = duet.run{
  label = "baseline",
  gpu = args.gpu,
  engines = engines(0.45, 0.45, false),
  workload = beam_search.workload{problems = problems, prm_mode = "full", seed = args.seed},
  concurrency = 1,
  batching = "fixed",
  seed = args.seed,
}

local splits = duet.sweep{
  label = "duet_split",
  grid = {llm_util = {0.1, 0.2, 0.3, 0.4}},
  run = function(p)
    return {gpu = args.gpu, engines = engines(p.llm_util, 0.9 - p.llm_util, true), concurrency = 128, seed = args.seed,
            workload = beam_search.workload{problems = problems, prm_mode = "incremental", priority_eviction = true,
                                            seed = args.seed}}
  end,
}
local best = splits[1]
for _, s in ipairs(splits) do
  if s.result.problems_per_s > best.result.problems_per_s then best = s end
end

print(string.format("%-40s %14s %10s %10s", "configuration", "problems/hour", "PRM hit%", "accuracy"))
print(string.format("%-40s %14.0f %10.1f %9.1f%%", "baseline (search-and-learn architecture)", baseline.problems_per_hour,
                    100 * baseline.engines.prm.prefix_hit_rate, 100 * baseline.accuracy))
print(string.format("%-40s %14.0f %10.1f %9.1f%%", string.format("duet (llm split %.1f)", best.point.llm_util),
                    best.result.problems_per_hour, 100 * best.result.engines.prm.prefix_hit_rate, 100 * best.result.accuracy))
print(string.format("speed-up: %.1fx", best.result.problems_per_hour / baseline.problems_per_hour))
return {baseline = baseline, duet = best.result, split = best.point.llm_util}
