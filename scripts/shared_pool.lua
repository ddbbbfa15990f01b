-- What one KV pool for both models is worth: the thesis's beam search on one GPU, with
--   * a static split swept (the generator's gpu_memory_utilization, the PRM the rest of `total`),
--     its best point and the thesis's 0.3;
--   * a shared pool over the same memory (kv_pool = "shared"), without floors and with floors of
--     10% of the pages per model (set by a memory_policy on its first call), each at both block
--     size pairings with equal bytes: LLM 64 / PRM 16 and LLM 16 / PRM 4.
-- Each case is a search size n and a number of problems in flight where memory binds. The run
-- file holds every run's timeline (kv_blocks_used per engine per step: KV use per model over time).
--   duet run scripts/shared_pool.lua [-- --problems 256 --gpu h100 --cost-model auto]
local duet = require("duet")
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")

local args = duet.args{problems = 256, gpu = "h100", total = 0.9, prm_mode = "full", score_cache = true, seed = 0,
                       cost_model = "auto", thesis_split = 0.3}
local problems = math500.load{limit = args.problems}

local cases = {{n = 16, concurrency = 256}, {n = 16, concurrency = 500}, {n = 64, concurrency = 256}}
local splits = {0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5}
local setups = {}
for _, s in ipairs(splits) do setups[#setups + 1] = {kind = "static", llm_util = s} end
for _, floors in ipairs{false, true} do
  for _, bs in ipairs{{64, 16}, {16, 4}} do
    setups[#setups + 1] = {kind = "shared", floors = floors, llm_block = bs[1], prm_block = bs[2]}
  end
end

-- Floors of 10% of the pool per model, set once the pool's size is known.
local function ten_percent_floors(info)
  local floor = math.floor(info.pages / 10)
  if info.engines.llm.min_blocks == floor then return nil end
  return {llm = {min_blocks = floor}, prm = {min_blocks = floor}}
end

local results = duet.sweep{
  label = "shared_pool",
  grid = {case = {1, 2, 3}, setup = (function()
    local idx = {}
    for i = 1, #setups do idx[i] = i end
    return idx
  end)()},
  run = function(point)
    local c, s = cases[point.case], setups[point.setup]
    local shared = s.kind == "shared"
    local llm_util = shared and args.total / 2 or s.llm_util  -- shared: only the sum matters
    return {
      gpu = args.gpu,
      cost_model = args.cost_model,
      kv_pool = s.kind,
      memory_policy = (shared and s.floors) and ten_percent_floors or nil,
      engines = {
        {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = llm_util,
         block_size = shared and s.llm_block or nil},
        {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = args.total - llm_util,
         block_size = shared and s.prm_block or nil},
      },
      workload = beam_search.workload{problems = problems, n = c.n, beam_width = 4, prm_mode = args.prm_mode,
                                      score_cache = args.score_cache, seed = args.seed},
      concurrency = c.concurrency,
      seed = args.seed,
      record = "steps",
    }
  end,
}

local function label(s)
  if s.kind == "static" then return string.format("static %.2f", s.llm_util) end
  return string.format("shared%s %d/%d", s.floors and "+floors" or "", s.llm_block, s.prm_block)
end

print(string.format("shared KV pool vs static split: %d problems, %s, total %.2f, cost model %s", #problems,
                    args.gpu, args.total, args.cost_model))
print(string.format("%4s %5s  %-20s %10s %9s %9s %9s %9s %9s", "n", "conc", "setup", "problems/s", "llm pre",
                    "prm evict", "llm kv%", "prm kv%", "prm hit%"))
local by_case = {}
for _, r in ipairs(results) do
  local c, s = cases[r.point.case], setups[r.point.setup]
  local llm, prm = r.result.engines.llm, r.result.engines.prm
  by_case[r.point.case] = by_case[r.point.case] or {}
  by_case[r.point.case][r.point.setup] = r.result.problems_per_s
  print(string.format("%4d %5d  %-20s %10.3f %9d %9d %9.1f %9.1f %9.1f", c.n, c.concurrency, label(s),
                      r.result.problems_per_s, llm.preemptions, prm.evictions, 100 * llm.mean_kv_utilisation,
                      100 * prm.mean_kv_utilisation, 100 * prm.prefix_hit_rate))
end

print()
print(string.format("%4s %5s %-12s %9s %9s %9s %9s %9s %9s", "n", "conc", "best static", "best p/s", "0.3 p/s",
                    "shared", "vs best", "vs 0.3", "floors"))
for ci, c in ipairs(cases) do
  local best, best_split, thesis, shared, floors = 0, nil, nil, 0, 0
  for si, s in ipairs(setups) do
    local p = by_case[ci][si]
    if s.kind == "static" then
      if p > best then best, best_split = p, s.llm_util end
      if math.abs(s.llm_util - args.thesis_split) < 1e-9 then thesis = p end
    elseif s.llm_block == 64 then  -- the default pairing
      if s.floors then floors = p else shared = p end
    end
  end
  print(string.format("%4d %5d %-12.2f %9.3f %9.3f %9.3f %8.1f%% %8.1f%% %9.3f", c.n, c.concurrency, best_split,
                      best, thesis, shared, 100 * (shared / best - 1), 100 * (shared / thesis - 1), floors))
end
print(string.format("run file: %s", duet.out))
return results
