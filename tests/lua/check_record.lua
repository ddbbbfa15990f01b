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
print("record ok")
