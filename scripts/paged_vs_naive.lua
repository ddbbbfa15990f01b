-- The paged allocator against the naive one (a contiguous max_model_len reservation per sequence,
-- as before PagedAttention) across problem batch sizes, on the same memory: best-of-N sampling
-- (no kept sequences, so a full naive pool only delays admissions), with the concurrent sequences
-- each allocator fits, its KV utilisation and the throughput.
--   duet run scripts/paged_vs_naive.lua [-- --problems 64]
local duet = require("duet")
local math500 = require("workloads.math500")
local best_of_n = require("workloads.best_of_n")

local args = duet.args{problems = 64, gpu = "h100", llm_util = 0.06, prm_util = 0.6, max_model_len = 2048,
                       n = 8, seed = 0}
local problems = math500.load{limit = args.problems}

local results = duet.sweep{
  label = "paged_vs_naive",
  grid = {allocator = {"paged", "naive"}, concurrency = {4, 8, 16, 32, 64}},
  run = function(p)
    return {
      gpu = args.gpu,
      engines = {
        {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = args.llm_util, allocator = p.allocator,
         max_model_len = args.max_model_len, max_num_batched_tokens = args.max_model_len},
        {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = args.prm_util, max_model_len = args.max_model_len},
      },
      workload = best_of_n.workload{problems = problems, n = args.n, max_tokens = args.max_model_len // 2,
                                    seed = args.seed},
      concurrency = p.concurrency,
      seed = args.seed,
    }
  end,
}

print(string.format("%8s %12s %10s %14s %14s %14s %12s", "alloc", "problems", "llm blocks", "max llm seqs",
                    "kv reserved%", "token util%", "problems/s"))
local summary = {}
for _, r in ipairs(results) do
  local tl = r.result.timeline("llm")
  local peak_running, filled, reserved = 0, 0, 0
  for i = 1, #tl.num_running do
    peak_running = math.max(peak_running, tl.num_running[i])
    filled = filled + tl.kv_filled_tokens[i]
    reserved = reserved + tl.kv_blocks_used[i] * tl.block_size
  end
  local llm = r.result.engines.llm
  -- token util: the share of reserved KV slots that hold a token (internal fragmentation).
  print(string.format("%8s %12d %10d %14d %14.1f %14.1f %12.3f", r.point.allocator, r.point.concurrency,
                      llm.total_blocks, peak_running, 100 * llm.mean_kv_utilisation,
                      reserved > 0 and 100 * filled / reserved or 0, r.result.problems_per_s))
  summary[#summary + 1] = {allocator = r.point.allocator, concurrency = r.point.concurrency,
                           peak_running = peak_running, problems_per_s = r.result.problems_per_s,
                           token_utilisation = reserved > 0 and filled / reserved or 0}
end
print(string.format("open analysis/notebooks/paged_vs_naive.ipynb with DUET_RUN=%s", duet.out))
return summary
