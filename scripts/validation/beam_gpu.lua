-- Fidelity on a GPU: the thesis's workload, a Llama-3.2-1B generator and a Llama-3.1-8B PRM on one
-- GPU, beam search with n = 4 and beam_width = 4 over MATH-500 problems, with forced step lengths
-- (workloads/step_model.lua) and synthetic PRM scores, so the simulator and the real engine see
-- identical token streams. Run it with
--   duet validate scripts/validation/beam_gpu.lua --backend cuda [-- --problems 32 --sweeps memory,batching]
-- Sweeps (`--sweeps`, comma-separated):
--   memory    the generator's gpu_memory_utilization at 10 points from 0.08 to 0.5, the PRM the
--             rest of `total` (the thesis's split, its Figures 6.2 and 6.3 at 0.3 and 0.5)
--   batching  max_num_seqs x max_num_batched_tokens, 3 x 3, at the split `split`
--   shape     the splits 0.3 and 0.5 on `shape_problems` problems, enough that the PRM evicts
--             from its prefix cache (the thesis's Figures 6.2 and 6.3: the PRM's KV blocks per
--             step). validate requires the same blocks in use at every step on both sides, so
--             per step the curves agree by construction; over time they differ by the step errors.
--             On a 141 GB H200 the PRM evicts only with more in flight: --shape-problems 500
--             --shape-concurrency 256
--   load      problems in flight (concurrency 8, 32, 128) at the splits 0.1, 0.3 and 0.5 on
--             `load_problems` problems: where throughput peaks, and whether the simulator puts
--             the peak in the same place
--   wide      n = 16 (`wide_n`) with `wide_problems` problems in flight at the splits
--             `wide_splits` (0.08, 0.3, 0.45 and 0.5): where memory binds on an 80 GB GPU
--             (scripts/memory_split.lua's workload; with n = 4 every split leaves both models more
--             KV than the search uses). On a 141 GB H200 the PRM's prefix cache starts to thrash
--             only past 0.65 (predicted: flat to 0.65, -23% at 0.7, -30% at 0.74): there pass
--             --wide-splits 0.3,0.65,0.7,0.74
--   pool      the wide workload on one KV pool for both models (kv_pool = "shared", evicting the
--             least recently freed page or the cheapest to recompute) against static splits
--             `pool_splits` (0.1, 0.3 and 0.5) of the same memory (at 0.5 the PRM evicts), all at
--             equal-byte blocks (generator 16 tokens, PRM 4): scripts/shared_pool.lua's
--             comparison, measured. On an H200 no static split of 0.9 binds: pass --total 0.5
--             --pool-splits 0.1,0.2,0.3 (at 0.3 the PRM evicts)
-- `duet validate` predicts with the profiles measured on the device; `duet run` of the same script
-- with `--cost-model operator` (or `roofline`) predicts the same points with the other cost models,
-- for the measured makespans to be compared with.
local duet = require("duet")
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")

local args = duet.args{problems = 32, concurrency = 32, n = 4, beam_width = 4, gpu = "h100", total = 0.9,
                       split = 0.3, prm_mode = "full", score_cache = true, sweeps = "memory,batching", seed = 0,
                       shape_problems = 200, shape_concurrency = 64, load_problems = 128, wide_n = 16,
                       wide_problems = 256, wide_splits = "0.08,0.3,0.45,0.5",
                       pool_splits = "0.1,0.3,0.5",
                       llm = "llama-3.2-1b", prm = "llama-3.1-8b", cost_model = "auto"}
local problems = math500.load{limit = args.problems}

-- "0.1,0.3" -> {0.1, 0.3}: generator shares, each leaving the PRM some of `total`.
local function shares(text, option)
  local list = {}
  for item in text:gmatch("[^,]+") do
    local share = tonumber(item)
    if not share or share <= 0 or share >= args.total then
      error(string.format("--%s: '%s' is not a share of the GPU's memory between 0 and --total (%g)", option, item,
                          args.total))
    end
    for _, earlier in ipairs(list) do
      if earlier == share then error(string.format("--%s: the share %g is given twice in '%s'", option, share, text)) end
    end
    list[#list + 1] = share
  end
  if #list == 0 then error(string.format("--%s: no share in '%s'", option, text)) end
  return list
end

local function config(label, llm_util, o)
  o = o or {}
  local list = o.problems or problems
  local function engine(name, model, util)
    return {name = name, model = model, gpu_memory_utilization = util, max_num_seqs = o.seqs or 256,
            max_num_batched_tokens = o.tokens or 8192, block_size = o.blocks and o.blocks[name]}
  end
  return {label = label, gpu = args.gpu, cost_model = args.cost_model, concurrency = o.concurrency or args.concurrency, seed = args.seed,
          progress = false,
          engines = {engine("llm", args.llm, llm_util), engine("prm", args.prm, args.total - llm_util)},
          workload = beam_search.workload{problems = list, n = o.n or args.n, beam_width = args.beam_width,
                                          prm_mode = args.prm_mode, score_cache = args.score_cache,
                                          seed = args.seed}}
end

if args.sweeps:find("memory") then
  duet.sweep{label = "memory", grid = {llm_util = {0.08, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5}},
             run = function(p)
               return config(string.format("memory llm_util=%.2f", p.llm_util), p.llm_util)
             end}
end
if args.sweeps:find("batching") then
  duet.sweep{label = "batching", grid = {max_num_seqs = {32, 64, 256}, max_num_batched_tokens = {1024, 2048, 8192}},
             run = function(p)
               return config(string.format("batching seqs=%d tokens=%d", p.max_num_seqs, p.max_num_batched_tokens),
                             args.split, {seqs = p.max_num_seqs, tokens = p.max_num_batched_tokens})
             end}
end
if args.sweeps:find("shape") then
  local many = math500.load{limit = args.shape_problems}
  duet.sweep{label = "shape", grid = {llm_util = {0.3, 0.5}},
             run = function(p)
               return config(string.format("shape llm_util=%.2f", p.llm_util), p.llm_util,
                             {problems = many, concurrency = args.shape_concurrency})
             end}
end
if args.sweeps:find("load") then
  local many = math500.load{limit = args.load_problems}
  duet.sweep{label = "load", grid = {llm_util = {0.1, 0.3, 0.5}, concurrency = {8, 32, 128}},
             run = function(p)
               return config(string.format("load llm_util=%.2f concurrency=%d", p.llm_util, p.concurrency),
                             p.llm_util, {problems = many, concurrency = p.concurrency})
             end}
end
if args.sweeps:find("wide") then
  local many = math500.load{limit = args.wide_problems}
  duet.sweep{label = "wide", grid = {llm_util = shares(args.wide_splits, "wide-splits")},
             run = function(p)
               return config(string.format("wide n=%d llm_util=%.2f", args.wide_n, p.llm_util), p.llm_util,
                             {problems = many, concurrency = args.wide_problems, n = args.wide_n})
             end}
end
if args.sweeps:find("pool") then
  local many = math500.load{limit = args.wide_problems}
  -- Equal bytes per block: Llama-3.1-8B's 128 KiB of KV per token is 4x Llama-3.2-1B's 32 KiB.
  local blocks = {llm = 16, prm = 4}
  local setups = {}
  for _, share in ipairs(shares(args.pool_splits, "pool-splits")) do setups[#setups + 1] = {share = share} end
  setups[#setups + 1] = {eviction = "lru"}
  setups[#setups + 1] = {eviction = "cost"}
  local indices = {}
  for i = 1, #setups do indices[i] = i end
  duet.sweep{label = "pool", grid = {setup = indices},
             run = function(p)
               local s = setups[p.setup]
               local o = {problems = many, concurrency = args.wide_problems, n = args.wide_n, blocks = blocks}
               if s.share then
                 return config(string.format("pool n=%d static %.2f", args.wide_n, s.share), s.share, o)
               end
               local c = config(string.format("pool n=%d shared %s", args.wide_n, s.eviction), args.total / 2, o)
               c.kv_pool, c.kv_eviction = "shared", s.eviction
               return c
             end}
end
