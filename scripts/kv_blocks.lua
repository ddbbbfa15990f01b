-- PRM KV blocks in use at every scheduling step, at LLM memory splits 0.3 and 0.5 (the thesis's
-- figure of PRM KV pressure). Prints a coarse profile; the full timelines are in the HDF5 file.
--   duet run scripts/kv_blocks.lua [-- --problems 100]
local duet = require("duet")
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")

-- The defaults are scripts/memory_split.lua's (n = 16, 256 problems in flight): where the PRM's pool
-- fills at a 0.5 split and it evicts its prefix cache; at n = 4 and 128 in flight it never fills.
local args = duet.args{problems = 256, gpu = "h100", total = 0.9, prm_mode = "full", n = 16, concurrency = 256,
                       seed = 0}
local problems = math500.load{limit = args.problems}

local out = {}
for _, split in ipairs{0.3, 0.5} do
  local r = duet.run{
    label = string.format("kv_blocks_%.1f", split),
    gpu = args.gpu,
    engines = {
      {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = split},
      {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = args.total - split},
    },
    workload = beam_search.workload{problems = problems, n = args.n, beam_width = 4, prm_mode = args.prm_mode,
                                    score_cache = true, seed = args.seed},
    concurrency = args.concurrency,
    seed = args.seed,
  }
  local tl = r.timeline("prm")
  local n = #tl.kv_blocks_used
  local peak, sum = 0, 0
  for i = 1, n do
    peak = math.max(peak, tl.kv_blocks_used[i])
    sum = sum + tl.kv_blocks_used[i]
  end
  print(string.format("LLM split %.1f: PRM pool %d blocks, %d PRM steps, peak %d used (%.1f%%), mean %.0f, evictions %d",
                      split, tl.total_blocks, n, peak, 100 * peak / tl.total_blocks, n > 0 and sum / n or 0,
                      r.engines.prm.evictions))
  -- Ten samples along the run: step index, time, blocks used.
  for k = 1, 10 do
    local i = math.max(1, (n * k) // 10)
    if n > 0 then
      print(string.format("  step %6d  t=%8.2f s  used %6d  free %6d  cached %6d", i, tl.start_s[i], tl.kv_blocks_used[i],
                          tl.kv_blocks_free[i], tl.kv_blocks_cached[i]))
    end
  end
  out[#out + 1] = {split = split, peak = peak, steps = n, total = tl.total_blocks, result = r}
end
print(string.format("open analysis/notebooks/thesis_figures.ipynb with DUET_KV_BLOCKS=%s", duet.out))
return out
