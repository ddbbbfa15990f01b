-- The max_num_seqs x max_num_batched_tokens grid, for each model in turn (the other keeps the
-- defaults), and beam-search throughput at each point.
--   duet run scripts/batch_params.lua [-- --problems 100 --cost-model roofline]
local duet = require("duet")
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")

local args = duet.args{problems = 100, gpu = "h100", llm_util = 0.3, prm_util = 0.6, prm_mode = "incremental",
                       concurrency = 128, seed = 0, cost_model = "auto"}
local problems = math500.load{limit = args.problems}

local function config(target, seqs, tokens)
  local engines = {
    {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = args.llm_util},
    {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = args.prm_util},
  }
  local e = target == "llm" and engines[1] or engines[2]
  e.max_num_seqs, e.max_num_batched_tokens = seqs, tokens
  return {gpu = args.gpu, cost_model = args.cost_model, engines = engines, concurrency = args.concurrency, seed = args.seed,
          workload = beam_search.workload{problems = problems, prm_mode = args.prm_mode, seed = args.seed}}
end

local all = {}
local seqs, tokens = {32, 64, 128, 256, 512}, {2048, 4096, 8192, 16384}
for _, target in ipairs{"llm", "prm"} do
  local results = duet.sweep{
    label = "batch_params_" .. target,
    grid = {max_num_seqs = seqs, max_num_batched_tokens = tokens},
    run = function(p) return config(target, p.max_num_seqs, p.max_num_batched_tokens) end,
  }
  -- A failed point is left out of the list (results.failed has it): find each by its grid index.
  local by_index = {}
  for _, r in ipairs(results) do by_index[r.index] = r end
  print(string.format("%s: problems/s by max_num_seqs (rows) x max_num_batched_tokens (columns)", target))
  print(string.format("%8s %10s %10s %10s %10s", "", "2048", "4096", "8192", "16384"))
  -- Grid keys vary in sorted order, the last fastest: index = (tokens index - 1) * 5 + seqs index.
  for row = 1, #seqs do
    local line = string.format("%8d", seqs[row])
    for col = 1, #tokens do
      local r = by_index[(col - 1) * #seqs + row]
      line = line .. (r and string.format(" %10.3f", r.result.problems_per_s) or string.format(" %10s", "failed"))
    end
    print(line)
  end
  all[target] = results
end
print(string.format("open analysis/notebooks/thesis_figures.ipynb with DUET_BATCH_PARAMS=%s", duet.out))
return all
