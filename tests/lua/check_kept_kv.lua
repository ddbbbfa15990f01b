-- Kept sequences' KV is a cache, not a reservation: a beam search whose kept beams outgrow a pool
-- of a few blocks completes (it used to stop with "engine 'llm' is stuck"), with the same tokens,
-- scores and answers as on a large pool (forced lengths), and recomputes what the small pool evicted.
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")
local problems = math500.load{limit = 4}

-- Every finished sequence of every problem, in the order the problem awaited them: engine,
-- lengths, finish reason, scores and a checksum of the tokens. Problems interleave differently on
-- the two pools; each problem's own sequence of results must not.
local current = {}  -- coroutine -> {ctx, log}
local longest = 0   -- tokens of the longest sequence
local await = duet.await
duet.await = function(...)
  local results = await(...)
  local c = current[coroutine.running()]
  if c then
    for _, r in ipairs(results) do
      longest = math.max(longest, r.num_tokens)
      local tokens = c.ctx.engines[r.engine]:tokens(r.id)
      local sum = 0
      for i = 1, #tokens do sum = (sum * 31 + tokens:get(i)) % 1000000007 end
      local scores = {}
      for i, s in ipairs(r.scores or {}) do scores[i] = string.format("%.6f", s) end
      c.log[#c.log + 1] = string.format("%s %d+%d %s %d [%s]", r.engine, r.prompt_tokens, r.output_tokens, r.finish,
                                        sum, table.concat(scores, " "))
    end
  end
  return results
end

local function run(blocks, backend, fork_kv)
  local logs = {}
  local workload = beam_search.workload{problems = problems, n = 4, beam_width = 2, num_iterations = 5, max_tokens = 512,
                                        prm_mode = "incremental"}
  local solve = workload.solve
  workload.solve = function(ctx, problem)
    local log = {}
    logs[problem.index] = log
    current[coroutine.running()] = {ctx = ctx, log = log}
    local result = solve(ctx, problem)
    current[coroutine.running()] = nil
    log[#log + 1] = string.format("result %.17g %s %d", result.score, tostring(result.correct), result.iterations)
    return result
  end
  local engine = {model = "models/tiny-llama/config.json", gpu_memory_utilization = 0.4, num_gpu_blocks_override = blocks,
                  max_num_batched_tokens = 256, max_model_len = 2048, fork_kv = fork_kv}
  local llm, prm = {name = "llm"}, {name = "prm"}
  for k, v in pairs(engine) do llm[k], prm[k] = v, v end
  local result = duet.run{backend = backend or "sim", gpu = "h100", out = false, progress = false, concurrency = 4,
                          engines = {llm, prm}, workload = workload}
  return result, logs
end

local large, large_logs = run(1024)
-- 40 blocks of 16 tokens: the longest sequence (594 tokens, 38 blocks) and 2 more, where the
-- search keeps several times that alive (4 problems, each with up to 2 kept beams and 4 kept
-- candidates on each engine).
local small, small_logs = run(40)
assert(longest <= 40 * 16, "the small pool must hold the longest sequence, " .. longest .. " tokens")

assert(small.problems == #problems and large.problems == #problems)
for i, log in pairs(large_logs) do
  local other = small_logs[i]
  assert(other and #other == #log, string.format("problem %d: %d results on the large pool, %d on the small one", i, #log,
                                                 other and #other or 0))
  for k = 1, #log do
    assert(log[k] == other[k], string.format("problem %d result %d: %s on the large pool, %s on the small one", i, k,
                                             log[k], other[k]))
  end
end
assert(small.accuracy == large.accuracy)
for _, name in ipairs{"llm", "prm"} do
  local s, l = small.engines[name], large.engines[name]
  assert(s.generated_tokens == l.generated_tokens, name .. ": generated tokens differ")
  print(string.format("%s: %d blocks: %d tokens prefilled, %d evictions, %d preemptions; %d blocks: %d prefilled",
                      name, s.total_blocks, s.prefill_tokens, s.evictions, s.preemptions, l.total_blocks, l.prefill_tokens))
end
assert(small.engines.llm.prefill_tokens > large.engines.llm.prefill_tokens,
       "the small pool recomputes what it evicted from kept beams")
-- The CPU engine runs the same scheduler on the same token streams: step for step the same batches
-- on the small pool (no simulator-only path), and the same results.
local function same_steps(sim, sim_logs, backend_run, backend_logs, what)
  for _, name in ipairs{"llm", "prm"} do
    local a, b = sim.timeline(name), backend_run.timeline(name)
    assert(#a.start_s == #b.start_s, string.format("%s %s: %d steps simulated, %d executed", what, name, #a.start_s,
                                                   #b.start_s))
    for i = 1, #a.start_s do
      for _, col in ipairs{"prefill_tokens", "decode_tokens", "num_seqs", "kv_blocks_used", "prefix_hit_tokens",
                           "evictions", "preemptions", "cow_copies"} do
        assert(a[col][i] == b[col][i], string.format("%s %s step %d: %s %d simulated, %d executed", what, name, i, col,
                                                     a[col][i], b[col][i]))
      end
    end
    print(string.format("%s %s: %d identical steps on the CPU engine", what, name, #a.start_s))
  end
  for i, log in pairs(sim_logs) do
    for k = 1, #log do
      assert(log[k] == backend_logs[i][k], string.format("%s: problem %d result %d differs on the CPU engine", what, i, k))
    end
  end
end
local cpu, cpu_logs = run(40, "cpu")
same_steps(small, small_logs, cpu, cpu_logs, "share")

-- vLLM V1's way (fork_kv = "prefix_cache"): no kept KV and no copy-on-write; a fork is a new
-- request that the prefix cache serves in whole blocks. The same results, with no copies and more
-- prefill (each fork's partly filled last block, and what was evicted once its parent finished).
local function same_results(a_logs, b_logs, what)
  for i, log in pairs(a_logs) do
    for k = 1, #log do
      assert(log[k] == b_logs[i][k], string.format("problem %d result %d: %s shared, %s %s", i, k, log[k], b_logs[i][k],
                                                   what))
    end
  end
end
for _, blocks in ipairs{1024, 40} do
  local v1, v1_logs = run(blocks, "sim", "prefix_cache")
  local shared, shared_logs = blocks == 40 and small or large, blocks == 40 and small_logs or large_logs
  same_results(shared_logs, v1_logs, "through the prefix cache on " .. blocks .. " blocks")
  for _, name in ipairs{"llm", "prm"} do
    local v, s = v1.engines[name], shared.engines[name]
    assert(v.cow_copies == 0, name .. ": a fork through the prefix cache copies nothing")
    assert(v.prefill_tokens > s.prefill_tokens, name .. ": forks through the prefix cache prefill more")
    print(string.format("%s, %d blocks: fork_kv share %d tokens prefilled, %d copies; prefix_cache %d prefilled, %d%% hits",
                        name, blocks, s.prefill_tokens, s.cow_copies, v.prefill_tokens, math.floor(100 * v.prefix_hit_rate)))
  end
  if blocks == 40 then
    local cpu_v1, cpu_v1_logs = run(40, "cpu", "prefix_cache")
    same_steps(v1, v1_logs, cpu_v1, cpu_v1_logs, "prefix_cache")
  end
end
print("kept kv ok")
