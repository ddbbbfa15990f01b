-- What one KV pool for both models is worth: the thesis's beam search on one GPU, with
--   * a static split swept (the generator's gpu_memory_utilization, the PRM the rest of `total`),
--     at vLLM's block size for both models (16/16) and at the shared pool's sizes (LLM 16, PRM 4),
--     so that what the block size is worth and what sharing is worth show apart;
--   * a shared pool over the same memory (kv_pool = "shared") at both pairings of equal block
--     bytes, LLM 64 / PRM 16 and LLM 16 / PRM 4, evicting the least recently freed page
--     (kv_eviction = "lru") or the page whose recompute costs least (kv_eviction = "cost"), the
--     latter also with floors of 10% of the pages per model (set by a memory_policy).
-- Each case is a search size n and a number of problems in flight where memory binds; the last
-- one shifts demand from the generator to the PRM during the run: its first half of problems is
-- beam search with n = 64 scored in full (the generator's beams hold the memory), its second half
-- n = 16 scored incrementally (the PRM keeps a sequence per beam, 4x the generator's bytes per
-- token). Pruned beams' blocks are evicted first (priority_eviction): on a shared pool they would
-- otherwise crowd out the PRM's cache. The run file holds every run's timeline (kv_blocks_used per
-- engine per step).
-- Splits whose budgets cannot hold a model's weights fail (on a small GPU) and are left out.
--   duet run scripts/shared_pool.lua [-- --problems 256 --gpu h100 --cost-model auto]
local duet = require("duet")
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")

local args = duet.args{problems = 256, gpu = "h100", total = 0.9, score_cache = true, priority_eviction = true,
                       seed = 0, cost_model = "auto", thesis_split = 0.3}
local all = math500.load{limit = math.min(500, 2 * args.problems)}
local function first(k)
  local out = {}
  for i = 1, math.min(k, #all) do out[i] = all[i] end
  return out
end

local function search(problems, n, prm_mode)
  return beam_search.workload{problems = problems, n = n, beam_width = 4, prm_mode = prm_mode,
                              score_cache = args.score_cache, priority_eviction = args.priority_eviction,
                              seed = args.seed}
end

-- Generator-heavy problems first, PRM-heavy ones after: problems start in order, so the mix in
-- flight moves from one to the other.
local function demand_shift(problems)
  local half = #problems // 2
  local llm_heavy, prm_heavy = search(problems, 64, "full"), search(problems, 16, "incremental")
  return {problems = problems, solve = function(ctx, problem)
    return (problem.index <= half and llm_heavy or prm_heavy).solve(ctx, problem)
  end}
end

local cases = {
  {name = "n=16", concurrency = args.problems, problems = first(args.problems), n = 16},
  {name = "n=16", concurrency = #all, problems = all, n = 16},
  {name = "n=64", concurrency = args.problems, problems = first(args.problems), n = 64},
  {name = "shift", concurrency = args.problems // 2, problems = first(args.problems), shift = true},
}
local splits = {0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5}
local setups = {}
for _, bs in ipairs{{16, 16}, {16, 4}} do
  for _, s in ipairs(splits) do setups[#setups + 1] = {kind = "static", llm_util = s, llm_block = bs[1], prm_block = bs[2]} end
end
setups[#setups + 1] = {kind = "shared", llm_block = 64, prm_block = 16, eviction = "lru"}
setups[#setups + 1] = {kind = "shared", llm_block = 16, prm_block = 4, eviction = "lru"}
setups[#setups + 1] = {kind = "shared", llm_block = 16, prm_block = 4, eviction = "cost"}
setups[#setups + 1] = {kind = "shared", llm_block = 16, prm_block = 4, eviction = "cost", floors = true}

-- Floors of 10% of the pool per model, set once the pool's size is known.
local function ten_percent_floors(info)
  local floor = math.floor(info.pages / 10)
  if info.engines.llm.min_blocks == floor then return nil end
  return {llm = {min_blocks = floor}, prm = {min_blocks = floor}}
end

local function indices(t)
  local idx = {}
  for i = 1, #t do idx[i] = i end
  return idx
end

local results = duet.sweep{
  label = "shared_pool",
  grid = {case = indices(cases), setup = indices(setups)},
  run = function(point)
    local c, s = cases[point.case], setups[point.setup]
    local shared = s.kind == "shared"
    local llm_util = shared and args.total / 2 or s.llm_util  -- shared: only the sum matters
    return {
      gpu = args.gpu,
      cost_model = args.cost_model,
      kv_pool = s.kind,
      kv_eviction = s.eviction,
      memory_policy = s.floors and ten_percent_floors or nil,
      engines = {
        {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = llm_util, block_size = s.llm_block},
        {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = args.total - llm_util,
         block_size = s.prm_block},
      },
      workload = c.shift and demand_shift(c.problems) or search(c.problems, c.n, "full"),
      concurrency = c.concurrency,
      seed = args.seed,
      record = "steps",
    }
  end,
}

local function label(s)
  local blocks = string.format("%d/%d", s.llm_block, s.prm_block)
  if s.kind == "static" then return string.format("static %.2f %s", s.llm_util, blocks) end
  return string.format("shared %s %s%s", blocks, s.eviction, s.floors and "+floors" or "")
end

-- KV bytes per token: Llama-3.2-1B 16 layers x 8 KV heads x 64 x K,V x bf16 = 32 KiB; Llama-3.1-8B
-- 32 x 8 x 128 x 2 x 2 = 128 KiB (their config.json files).
local kv_bytes_per_token = {llm = 32768, prm = 131072}
-- A share of an engine's blocks as a share of the KV memory of both models (a static pool's blocks
-- are its own; a shared pool's pages are everyone's).
local function kv_share(result, s, name, blocks_share)
  if s.kind == "shared" then return blocks_share end
  local function bytes(e) return result.engines[e].total_blocks * s[e .. "_block"] * kv_bytes_per_token[e] end
  return blocks_share * bytes(name) / (bytes("llm") + bytes("prm"))
end

print(string.format("shared KV pool vs static split: %s, total %.2f, cost model %s", args.gpu, args.total,
                    args.cost_model))
print(string.format("%-6s %5s %5s  %-19s %10s %8s %9s %8s %8s %8s", "case", "probs", "conc", "setup", "problems/s",
                    "preempt", "prm evict", "llm kv%", "prm kv%", "prm hit%"))
local by_case, runs = {}, {}
for _, r in ipairs(results) do
  local c, s = cases[r.point.case], setups[r.point.setup]
  local llm, prm = r.result.engines.llm, r.result.engines.prm
  by_case[r.point.case] = by_case[r.point.case] or {}
  by_case[r.point.case][r.point.setup] = r.result.problems_per_s
  runs[r.point.case] = runs[r.point.case] or {}
  runs[r.point.case][r.point.setup] = r.result
  print(string.format("%-6s %5d %5d  %-19s %10.3f %8d %9d %8.1f %8.1f %8.1f", c.name, #c.problems, c.concurrency,
                      label(s), r.result.problems_per_s, llm.preemptions + prm.preemptions, prm.evictions,
                      100 * kv_share(r.result, s, "llm", llm.mean_kv_utilisation),
                      100 * kv_share(r.result, s, "prm", prm.mean_kv_utilisation), 100 * prm.prefix_hit_rate))
end

-- The best static split of one block pairing: its split and throughput.
local function best_static(ci, llm_block, prm_block)
  local best, split = 0, nil
  for si, s in ipairs(setups) do
    local p = by_case[ci][si]
    if s.kind == "static" and s.llm_block == llm_block and s.prm_block == prm_block and p and p > best then
      best, split = p, s.llm_util
    end
  end
  return best, split
end
local function find(pred)
  for si, s in ipairs(setups) do if pred(s) then return si end end
end
local thesis = find(function(s) return s.kind == "static" and s.prm_block == 16 and math.abs(s.llm_util - args.thesis_split) < 1e-9 end)
local shared_64 = find(function(s) return s.kind == "shared" and s.llm_block == 64 end)
local shared_lru = find(function(s) return s.kind == "shared" and s.llm_block == 16 and s.eviction == "lru" end)
local shared_16 = find(function(s) return s.kind == "shared" and s.eviction == "cost" and not s.floors end)
local floors_16 = find(function(s) return s.kind == "shared" and s.floors end)

print()
print("problems/s; static at its best split (in brackets); shared vs the best static split of the same blocks,")
print("and vs the thesis's split at vLLM's blocks")
print(string.format("%-6s %5s %13s %13s %7s %9s %9s %8s %9s %8s %8s %9s", "case", "conc", "static 16/16",
                    "static 16/4", "0.3", "sh 64/16", "16/4 lru", "vs best", "16/4 cost", "vs best", "vs 0.3",
                    "+floors"))
local function pct(a, b) return (a and b) and string.format("%7.1f%%", 100 * (a / b - 1)) or "       -" end
local function num(a) return a and string.format("%.3f", a) or "-" end
for ci, c in ipairs(cases) do
  local b16, s16 = best_static(ci, 16, 16)
  local b4, s4 = best_static(ci, 16, 4)
  local p = by_case[ci]
  print(string.format("%-6s %5d %7.3f(%.2f) %7.3f(%.2f) %7s %9s %9s %s %9s %s %s %9s", c.name, c.concurrency, b16,
                      s16 or 0, b4, s4 or 0, num(p[thesis]), num(p[shared_64]), num(p[shared_lru]),
                      pct(p[shared_lru], b4), num(p[shared_16]), pct(p[shared_16], b4), pct(p[shared_16], p[thesis]),
                      num(p[floors_16])))
end

-- KV use per model over the demand-shift run: pages in use in each tenth of its makespan, as a
-- share of the KV memory of both, for the best static split (16/4 blocks) and the shared pool.
local shift = #cases
local _, s4 = best_static(shift, 16, 4)
local best_static_16_4 = find(function(s) return s.kind == "static" and s.prm_block == 4 and s.llm_util == s4 end)
print()
print(string.format("demand shift: KV in use per model, %% of both models' KV memory, by tenth of the run"))
for _, si in ipairs{best_static_16_4, shared_16} do
  local r = runs[shift][si]
  for _, name in ipairs{"llm", "prm"} do
    local tl = r.timeline(name)
    local sum, count = {}, {}
    for d = 1, 10 do sum[d], count[d] = 0, 0 end
    for i = 1, #tl.start_s do
      local d = math.min(10, 1 + math.floor(10 * tl.start_s[i] / r.makespan_s))
      sum[d], count[d] = sum[d] + tl.kv_blocks_used[i], count[d] + 1
    end
    local cells = {}
    for d = 1, 10 do
      local used = count[d] > 0 and sum[d] / count[d] / tl.total_blocks or 0
      cells[d] = string.format("%5.1f", 100 * kv_share(r, setups[si], name, used))
    end
    print(string.format("  %-19s %-4s %s", label(setups[si]), name, table.concat(cells, " ")))
  end
end
print(string.format("run file: %s", duet.out))
return results
