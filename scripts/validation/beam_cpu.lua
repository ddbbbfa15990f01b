-- Fidelity on the CPU engine: a beam search (generator + PRM on the CPU backend, the same small
-- model unless --prm-model names another) over sweeps that `duet profile`'s synthetic grid never
-- saw. Run it with
--   duet validate scripts/validation/beam_cpu.lua --backend cpu [-- --model models/small-llama/config.json]
-- Three sweeps (--sweeps, default memory,batching):
--   memory   the split of a pool of 768 blocks between the two engines: at 0.25 the generator
--            preempts (16 times) and evicts, at 0.5 both evict, at 0.75 the PRM evicts (254 blocks)
--   batching max_num_seqs x max_num_batched_tokens, 3 x 3
--   pool     one KV pool for both models (kv_pool = "shared") against static splits of the same
--            pages: `pages` pages of equal bytes, the generator's blocks --llm-block tokens and the
--            PRM's as many as fill the same bytes (the tiny generator with the small PRM,
--            4x its KV bytes per token, pair as Llama-3.2-1B and Llama-3.1-8B do: 16 / 4). At 320
--            pages every setup evicts, the generator preempts at every static split and never on
--            the shared pool; from 0.6 on, the PRM's static share cannot hold one scored trajectory.
--              duet validate scripts/validation/beam_cpu.lua --backend cpu -- --sweeps pool \
--                --prm-model models/small-llama/config.json
-- --fork-kv prefix_cache forks as vLLM V1 runs a search (docs/lua-api.md, fork_kv).
local duet = require("duet")
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")

local args = duet.args{model = "models/tiny-llama/config.json", prm_model = "", problems = 6, concurrency = 6, n = 4,
                       beam_width = 2, iterations = 6, pool = 768, pages = 320, llm_block = 16,
                       sweeps = "memory,batching", seed = 0, fork_kv = "share"}
local prm_model = args.prm_model ~= "" and args.prm_model or args.model
local problems = math500.load{limit = args.problems}

-- block_sizes: {llm = tokens, prm = tokens} (the pool sweep's equal-byte blocks), or vLLM's 16.
local function config(label, llm_blocks, prm_blocks, seqs, tokens, block_sizes)
  local function engine(name, model, blocks)
    return {name = name, model = model, gpu_memory_utilization = 0.4, num_gpu_blocks_override = blocks,
            max_num_seqs = seqs, max_num_batched_tokens = tokens, max_model_len = 4096,
            block_size = block_sizes and block_sizes[name], fork_kv = args.fork_kv}
  end
  return {label = label, gpu = "h100", concurrency = args.concurrency, seed = args.seed, progress = false,
          engines = {engine("llm", args.model, llm_blocks), engine("prm", prm_model, prm_blocks)},
          workload = beam_search.workload{problems = problems, n = args.n, beam_width = args.beam_width,
                                          num_iterations = args.iterations, prm_mode = "incremental",
                                          seed = args.seed}}
end

if args.sweeps:find("memory") then
  duet.sweep{label = "memory", grid = {llm_share = {0.25, 0.4, 0.5, 0.75}},
             run = function(p)
               local llm = math.floor(args.pool * p.llm_share)
               return config(string.format("memory llm_share=%.2f", p.llm_share), llm, args.pool - llm, 64, 512)
             end}
end
if args.sweeps:find("batching") then
  duet.sweep{label = "batching", grid = {max_num_seqs = {8, 16, 64}, max_num_batched_tokens = {128, 256, 512}},
             run = function(p)
               return config(string.format("batching seqs=%d tokens=%d", p.max_num_seqs, p.max_num_batched_tokens),
                             args.pool, args.pool, p.max_num_seqs, p.max_num_batched_tokens)
             end}
end
if args.sweeps:find("pool") then
  -- Equal-byte blocks: the PRM's block holds the generator's block's bytes.
  local llm_kv, prm_kv = duet.model(args.model).kv_bytes_per_token, duet.model(prm_model).kv_bytes_per_token
  local bytes = math.tointeger(args.llm_block) * llm_kv
  assert(bytes % prm_kv == 0, "pool: the generator's block of " .. args.llm_block .. " tokens holds no whole number "
                              .. "of the PRM's tokens")
  local blocks = {llm = args.llm_block, prm = math.tointeger(bytes // prm_kv)}
  local setups = {{share = 0.25}, {share = 0.3}, {share = 0.4}, {share = 0.5}, {eviction = "lru"}, {eviction = "cost"}}
  duet.sweep{label = "pool", grid = {setup = {1, 2, 3, 4, 5, 6}},
             run = function(p)
               local s = setups[p.setup]
               if s.share then
                 local llm = math.floor(args.pages * s.share)
                 return config(string.format("pool static %.2f", s.share), llm, args.pages - llm, 64, 512, blocks)
               end
               local c = config("pool shared " .. s.eviction, nil, nil, 64, 512, blocks)
               c.kv_pool, c.kv_pool_blocks, c.kv_eviction = "shared", args.pages, s.eviction
               return c
             end}
end
