-- duet.run's `record` key: what a run keeps changes its file and its timeline, never its results.
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")
local problems = math500.load{limit = 6}
local function run(record)
  return duet.run{gpu = "h100", progress = false, record = record, label = record,
                  engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3},
                             {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.5}},
                  workload = beam_search.workload{problems = problems}}
end
local full, requests, summary = run("steps"), run("requests"), run("summary")
for _, r in ipairs({requests, summary}) do
  assert(r.makespan_s == full.makespan_s and r.problems == full.problems)
  for _, e in ipairs({"llm", "prm"}) do
    assert(r.engines[e].steps == full.engines[e].steps)
    assert(r.engines[e].prefill_tokens == full.engines[e].prefill_tokens and r.engines[e].prefill_tokens > 0)
    assert(r.engines[e].ttft_s.p99 == full.engines[e].ttft_s.p99)
  end
end
assert(#full.timeline("llm").start_s == full.engines.llm.steps)
local ok, err = pcall(summary.timeline, "llm")
assert(not ok and err:find("kept no timeline %(record = 'summary'"), err)
local bad_ok, bad = pcall(run, "everything")
assert(not bad_ok and bad:find("record") and bad:find("unknown record level 'everything'"), bad)

-- A preemption in a pass that then schedules nothing (the only running sequence gives its own KV
-- up, here the PRM's on a shared pool the generator fills) is recorded on the engine's next step:
-- the steps' preemptions add up to what the scheduler did.
local llm_id
local seen = {llm = 0, prm = 0}
local pre = duet.run{progress = false, out = false, kv_pool = "shared", kv_pool_blocks = 20,
  engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3, max_num_seqs = 4,
              max_num_batched_tokens = 4},
             {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.5, max_num_seqs = 4,
              max_num_batched_tokens = 4}},
  memory_policy = function(info)
    for _, e in ipairs({"llm", "prm"}) do seen[e] = math.max(seen[e], info.engines[e].preemptions) end
  end,
  workload = {problems = {1, 2}, solve = function(ctx, problem)
    if problem == 1 then
      llm_id = ctx.engines.llm:submit{prompt = 16, max_tokens = 150, ignore_eos = true}
      duet.await(llm_id)
    else
      while not llm_id or #ctx.engines.llm:tokens(llm_id) < 140 do duet.sleep_until(duet.now() + 0.0005) end
      duet.await(ctx.engines.prm:submit{kind = "score", prompt = 72, scores = {0.5}})
    end
    return {}
  end}}
for _, e in ipairs({"llm", "prm"}) do
  local sum = 0
  for _, n in ipairs(pre.timeline(e).preemptions) do sum = sum + n end
  assert(sum == pre.engines[e].preemptions, e .. ": steps " .. sum .. ", summary " .. pre.engines[e].preemptions)
  assert(pre.engines[e].preemptions >= seen[e], e .. ": the scheduler preempted " .. seen[e] .. " times, the file says " ..
         pre.engines[e].preemptions)
end
assert(seen.prm > 0, "the PRM preempted itself")
print("record ok")
