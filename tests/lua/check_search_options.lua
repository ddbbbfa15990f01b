-- The search-serving options change what the theory says they change.
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")
local problems = math500.load{limit = 6}

local function run(opts, extra)
  local cfg = {
    gpu = "h100", out = false, progress = false, concurrency = 6, seed = 1,
    engines = {
      {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3},
      {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.6},
    },
    workload = beam_search.workload(opts),
  }
  for k, v in pairs(extra or {}) do cfg[k] = v end
  return duet.run(cfg)
end

local full = run{problems = problems, prm_mode = "full"}
local incremental = run{problems = problems, prm_mode = "incremental"}
local cached = run{problems = problems, prm_mode = "full", score_cache = true}
print(string.format("PRM hit rate: full %.3f, full + score cache %.3f, incremental %.3f",
                    full.engines.prm.prefix_hit_rate, cached.engines.prm.prefix_hit_rate,
                    incremental.engines.prm.prefix_hit_rate))
assert(incremental.engines.prm.prefix_hit_rate > full.engines.prm.prefix_hit_rate,
       "incremental scoring must hit the PRM's prefix cache more than full re-scoring")
assert(cached.engines.prm.prefix_hit_rate > full.engines.prm.prefix_hit_rate, "the score cache lets earlier steps hit")
assert(incremental.problems_per_s > full.problems_per_s, "incremental scoring is faster")
-- Same seed, same decisions: the scores and answers do not depend on the serving option.
assert(full.mean_score == cached.mean_score, "the score cache must not change the search")

-- Fixed batches of one problem are slower than continuous batching.
local one_at_a_time = run({problems = problems, prm_mode = "incremental"}, {concurrency = 1, batching = "fixed"})
assert(one_at_a_time.problems_per_s < incremental.problems_per_s)

-- A memory split chosen by a Lua function.
local split = run({problems = problems}, {memory_split = function(info)
  assert(info.engines.llm.weight_bytes > 0)
  return {llm = 0.2, prm = 0.7}
end})
assert(split.engines.llm.total_blocks < full.engines.llm.total_blocks)

-- Priority eviction runs and changes nothing about the answers.
local prio = run{problems = problems, prm_mode = "incremental", priority_eviction = true}
assert(prio.mean_score == incremental.mean_score)
print("search options ok")
