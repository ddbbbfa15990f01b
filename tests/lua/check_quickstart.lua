-- The main job on a few problems: sane, finite figures.
local r = dofile(duet.source_dir .. "/scripts/quickstart.lua")
local n = 8
assert(r.problems == n, "problems " .. r.problems)
assert(r.problems_per_s > 0 and r.problems_per_s < math.huge, "problems/s " .. r.problems_per_s)
for _, name in ipairs{"llm", "prm"} do
  local e = r.engines[name]
  assert(e.requests > 0, name .. " served nothing")
  for _, count in ipairs{"requests", "steps", "prompt_tokens", "generated_tokens", "prefill_tokens", "total_blocks",
                        "preemptions", "evictions", "cow_copies"} do
    assert(math.type(e[count]) == "integer", name .. "." .. count .. " is a " .. tostring(math.type(e[count])))
  end
  assert(e.prefix_hit_rate >= 0 and e.prefix_hit_rate <= 1, name .. " hit rate out of range")
  assert(e.peak_kv_utilisation > 0 and e.peak_kv_utilisation <= 1, name .. " kv utilisation out of range")
  -- A simulated H100 with no measured profile is priced by the committed operator prior.
  assert(e.cost_model:find("^operator%(") and e.cost_model:find("profiles/h100%-sxm/operator%-prior.json", 1, false),
         name .. " cost model: " .. e.cost_model)
end
assert(r.engines.llm.generated_tokens_per_s > 0)
assert(r.makespan_s > 0 and r.makespan_s < math.huge)
assert(math.type(r.problems) == "integer" and math.type(r.makespan_s) == "float")
local tl = r.timeline("prm")
assert(#tl.start_s == r.engines.prm.steps, "timeline rows")
-- Every column of the run file's steps table, counts as integers, times as floats.
for _, column in ipairs{"start_s", "duration_s", "host_s", "cpu_s", "prefill_tokens", "decode_tokens", "num_seqs",
                        "decode_seqs", "decode_context_tokens", "logit_rows", "kv_blocks_used", "kv_filled_tokens",
                        "prefix_query_tokens", "prefix_hit_tokens", "evictions", "preemptions", "cow_copies"} do
  assert(tl[column] and #tl[column] == #tl.start_s, "timeline column " .. column)
end
assert(math.type(tl.decode_tokens[1]) == "integer" and math.type(tl.host_s[1]) == "float")
local scored = 0
for i = 1, #tl.logit_rows do scored = scored + tl.logit_rows[i] end
assert(scored > 0, "the PRM scored no rows")
print("quickstart ok")
