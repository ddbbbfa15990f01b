-- Fidelity on the CPU engine: a beam search (generator + PRM, both the same small model on the
-- CPU backend) over sweeps that `duet profile`'s synthetic grid never saw. Run it with
--   duet validate scripts/validation/beam_cpu.lua --backend cpu [-- --model models/small-llama/config.json]
-- Two sweeps:
--   memory   the split of a pool of 768 blocks between the two engines: at 0.25 the generator
--            preempts (16 times) and evicts, at 0.5 both evict, at 0.75 the PRM evicts (254 blocks)
--   batching max_num_seqs x max_num_batched_tokens, 3 x 3
local duet = require("duet")
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")

local args = duet.args{model = "models/tiny-llama/config.json", problems = 6, concurrency = 6, n = 4, beam_width = 2,
                       iterations = 6, pool = 768, sweeps = "memory,batching", seed = 0}
local problems = math500.load{limit = args.problems}

local function config(label, llm_blocks, prm_blocks, seqs, tokens)
  local function engine(name, blocks)
    return {name = name, model = args.model, gpu_memory_utilization = 0.4, num_gpu_blocks_override = blocks, max_num_seqs = seqs,
            max_num_batched_tokens = tokens, max_model_len = 4096}
  end
  return {label = label, gpu = "h100", concurrency = args.concurrency, seed = args.seed, progress = false,
          engines = {engine("llm", llm_blocks), engine("prm", prm_blocks)},
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
