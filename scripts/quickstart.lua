-- The main job: beam search (n = 4, beam_width = 4, depth 40) over MATH-500, with
-- Llama-3.2-1B generating and the Llama-3.1-8B PRM scoring, both on one simulated H100.
--   duet run scripts/quickstart.lua                    all 500 problems
--   duet run scripts/quickstart.lua -- --problems 8    a quick look
--   duet run scripts/quickstart.lua -- --fork-kv prefix_cache    forks as vLLM V1 runs them
--   duet run scripts/quickstart.lua -- --llm-model qwen2.5-1.5b-instruct --prm-model qwen2.5-7b-instruct
--                                                      other models (a built-in name or a config.json)
local duet = require("duet")
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")

local args = duet.args{problems = 500, gpu = "h100", llm_util = 0.3, prm_util = 0.6, tiny = false,
                       prm_mode = "incremental", concurrency = 128, seed = 0, fork_kv = "share",
                       llm_model = "llama-3.2-1b", prm_model = "llama-3.1-8b"}

local llm_model, prm_model = args.llm_model, args.prm_model
-- The tiny model (models/tiny-llama) runs on the CPU backend with dummy weights; its pools are
-- sized in blocks, since host memory is not an H100's.
local blocks
if args.tiny then
  if llm_model ~= "llama-3.2-1b" or prm_model ~= "llama-3.1-8b" then
    error("--tiny runs the tiny model as both; leave out --llm-model and --prm-model")
  end
  llm_model, prm_model = "models/tiny-llama/config.json", "models/tiny-llama/config.json"
  blocks = 4096
end

local problems = math500.load{limit = args.problems}
local result = duet.run{
  label = "quickstart",
  gpu = args.gpu,
  engines = {
    {name = "llm", model = llm_model, gpu_memory_utilization = args.llm_util, max_num_seqs = 256,
     num_gpu_blocks_override = blocks, fork_kv = args.fork_kv},
    {name = "prm", model = prm_model, gpu_memory_utilization = args.prm_util, max_num_seqs = 256,
     num_gpu_blocks_override = blocks, fork_kv = args.fork_kv},
  },
  workload = beam_search.workload{problems = problems, n = 4, beam_width = 4, num_iterations = 40,
                                  prm_mode = args.prm_mode, seed = args.seed},
  concurrency = args.concurrency,
  seed = args.seed,
}

local llm, prm = result.engines.llm, result.engines.prm
print(string.format("quickstart: %d MATH-500 problems, beam search n=4 beam_width=4 depth<=40, %s on %s",
                    result.problems, args.prm_mode .. " PRM scoring", args.gpu))
print(string.format("%-28s %s + %s", "generator + PRM", llm_model, prm_model))
print(string.format("%-28s %12s", duet.backend == "sim" and "simulated time (s)" or "device time (s)", string.format("%.1f", result.makespan_s)))
print(string.format("%-28s %12s", "wall time (s)", string.format("%.2f", result.wall_s)))
print(string.format("%-28s %12.3f", "problems/s", result.problems_per_s))
print(string.format("%-28s %12.1f", "LLM generated tokens/s", llm.generated_tokens_per_s))
print(string.format("%-28s %12.1f", "PRM prefill tokens/s", prm.prefill_tokens_per_s))
print(string.format("%-28s %11.1f%%", "LLM prefix hit rate", 100 * llm.prefix_hit_rate))
print(string.format("%-28s %11.1f%%", "PRM prefix hit rate", 100 * prm.prefix_hit_rate))
print(string.format("%-28s %12d", "LLM / PRM KV blocks", llm.total_blocks) .. string.format(" / %d", prm.total_blocks))
print(string.format("%-28s %12d", "PRM evictions", prm.evictions))
print(string.format("%-28s %12d", "preemptions (LLM + PRM)", llm.preemptions + prm.preemptions))
print(string.format("%-28s %11.1f%%", "accuracy (synthetic)", 100 * result.accuracy))
print("LLM priced by  " .. llm.cost_model)
print("PRM priced by  " .. prm.cost_model)
-- The notebook compares this run with one of full PRM scoring (`-- --prm-mode full`).
print(string.format("open analysis/notebooks/search.ipynb with %s=%s", args.prm_mode == "full" and "DUET_RUN_FULL" or "DUET_RUN",
                    duet.out))
return result
