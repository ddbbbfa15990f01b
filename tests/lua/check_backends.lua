-- The simulator and the CPU engine run the same scheduler and allocator on the same token
-- streams (forced outputs), so a small beam search is scheduled identically, step by step.
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")
local problems = math500.load{limit = 3}

-- With a pool per engine (static split), with one pool of pages that both engines share
-- (kv_pool = "shared": one host arena on the CPU), small enough that pages change hands, and with
-- a shared pool of two models whose pages cost differently to lose (kv_eviction = "cost": the
-- 4-layer PRM's 4-token pages against the 2-layer generator's 16-token ones, equal bytes).
local setups = {
  static = {kv_pool = "static", prm = "models/tiny-llama/config.json"},
  shared = {kv_pool = "shared", prm = "models/tiny-llama/config.json"},
  qwen2 = {kv_pool = "static", prm = "models/tiny-qwen2/config.json"},  -- q, k and v biases
  qwen3 = {kv_pool = "static", prm = "models/tiny-qwen3/config.json"},  -- q and k head norms
  ["qwen2 prm"] = {kv_pool = "static", prm = "models/tiny-qwen2-prm/config.json"},  -- a classifier head
  ["value prm"] = {kv_pool = "static", prm = "models/tiny-qwen2-value-prm/config.json"},  -- a value head
  ["shared cost"] = {kv_pool = "shared", kv_eviction = "cost", prm = "models/small-llama/config.json",
                     llm_block = 16, prm_block = 4},
}
local function run(backend, setup)
  local s = setups[setup]
  local shared = s.kv_pool == "shared"
  local blocks = not shared and 512 or nil
  return duet.run{
    backend = backend, gpu = "h100", out = false, progress = false, concurrency = 3,
    kv_pool = s.kv_pool, kv_pool_blocks = shared and 160 or nil, kv_eviction = s.kv_eviction,
    engines = {
      {name = "llm", model = "models/tiny-llama/config.json", gpu_memory_utilization = 0.4, num_gpu_blocks_override = blocks, max_num_batched_tokens = 256, block_size = s.llm_block},
      {name = "prm", model = s.prm, gpu_memory_utilization = 0.4, num_gpu_blocks_override = blocks, max_num_batched_tokens = 256, block_size = s.prm_block},
    },
    workload = beam_search.workload{problems = problems, n = 4, beam_width = 2, num_iterations = 6,
                                    prm_mode = "incremental"},
  }
end

for _, kv_pool in ipairs{"static", "shared", "shared cost", "qwen2", "qwen3", "qwen2 prm", "value prm"} do
local sim, cpu = run("sim", kv_pool), run("cpu", kv_pool)
for _, name in ipairs{"llm", "prm"} do
  local a, b = sim.timeline(name), cpu.timeline(name)
  assert(#a.start_s == #b.start_s, string.format("%s: %d steps simulated, %d executed", name, #a.start_s, #b.start_s))
  for i = 1, #a.start_s do
    for _, col in ipairs{"prefill_tokens", "decode_tokens", "num_seqs", "kv_blocks_used", "kv_blocks_free",
                         "prefix_hit_tokens", "cow_copies", "evictions", "preemptions"} do
      assert(a[col][i] == b[col][i], string.format("%s step %d: %s %d simulated, %d executed", name, i, col,
                                                   a[col][i], b[col][i]))
    end
  end
  print(string.format("%s pool, %s: %d identical steps", kv_pool, name, #a.start_s))
end
assert(sim.mean_score == cpu.mean_score)
local evictions = cpu.engines.llm.evictions + cpu.engines.prm.evictions
print(string.format("%s pool: %d evictions", kv_pool, evictions))
assert(setups[kv_pool].kv_pool == "static" or evictions > 0, kv_pool .. ": no page changed hands")
end
-- The oldest-ready arbiter, where an idle engine gets work from another engine's finished step:
-- on the virtual clock the two became ready at one instant and the first declared steps first; on
-- the wall clock the submit came microseconds after the step's end, and the engine that had just
-- stepped won instead (7 steps simulated, 6 executed). duet.backend names each run's own backend.
local tie_problems = {}
for i = 1, 4 do tie_problems[i] = {} end
local seen_backend = {}
local function tie(backend)
  return duet.run{
    backend = backend, gpu = "h100", out = false, progress = false, concurrency = 4, arbiter = "oldest",
    engines = {
      {name = "llm", model = "models/tiny-llama/config.json", gpu_memory_utilization = 0.4,
       num_gpu_blocks_override = 64, max_num_batched_tokens = 64, max_num_seqs = 4},
      {name = "prm", model = "models/tiny-llama/config.json", gpu_memory_utilization = 0.4,
       num_gpu_blocks_override = 64, max_num_batched_tokens = 64, max_num_seqs = 4},
    },
    workload = {problems = tie_problems, solve = function(ctx)
      seen_backend[backend] = duet.backend
      duet.await(ctx.engines.prm:submit{kind = "score", prompt = 64, scores = {0.5}})
      duet.await(ctx.engines.llm:submit{prompt = 16, max_tokens = 4, stop_at = 3})
      return {score = 1}
    end},
  }
end
local tie_sim, tie_cpu = tie("sim"), tie("cpu")
for _, name in ipairs{"llm", "prm"} do
  local a, b = tie_sim.timeline(name), tie_cpu.timeline(name)
  assert(#a.start_s == #b.start_s, string.format("oldest arbiter, %s: %d steps simulated, %d executed", name,
                                                 #a.start_s, #b.start_s))
  for i = 1, #a.start_s do
    assert(a.prefill_tokens[i] == b.prefill_tokens[i] and a.num_seqs[i] == b.num_seqs[i],
           string.format("oldest arbiter, %s step %d differs", name, i))
  end
end
-- A sleep until a time already reached wakes in the instant being handled, before the next step, on
-- both clocks: at the start (problem 2's first submit joins problem 1's in step 1) and after an
-- await (its second submit joins the step after). On the wall clock it came a step later (decode
-- only where the simulator had the prefill too), and at the start on both.
local function sleeper(backend)
  return duet.run{
    backend = backend, gpu = "h100", out = false, progress = false, concurrency = 2,
    engines = {{name = "llm", model = "models/tiny-llama/config.json", gpu_memory_utilization = 0.4,
                num_gpu_blocks_override = 64}},
    workload = {problems = {{}, {}}, solve = function(ctx)
      local llm = ctx.engines.llm
      if ctx.index == 1 then
        duet.await(llm:submit{prompt = 16, max_tokens = 12, stop_at = 11})
      else
        duet.sleep_until(duet.now())
        duet.await(llm:submit{prompt = 16, max_tokens = 2, stop_at = 1})
        duet.sleep_until(duet.now())
        duet.await(llm:submit{prompt = 16, max_tokens = 2, stop_at = 1})
      end
      return {score = 1}
    end},
  }
end
local slept_sim, slept_cpu = sleeper("sim").timeline("llm"), sleeper("cpu").timeline("llm")
assert(slept_sim.prefill_tokens[1] == 32, "a sleep at the start missed step 1: " .. slept_sim.prefill_tokens[1])
assert(#slept_sim.start_s == #slept_cpu.start_s,
       string.format("sleep until now: %d steps simulated, %d executed", #slept_sim.start_s, #slept_cpu.start_s))
for i = 1, #slept_sim.start_s do
  assert(slept_sim.prefill_tokens[i] == slept_cpu.prefill_tokens[i] and
         slept_sim.decode_tokens[i] == slept_cpu.decode_tokens[i],
         string.format("sleep until now: step %d: prefill %d decode %d simulated, %d %d executed", i,
                       slept_sim.prefill_tokens[i], slept_sim.decode_tokens[i], slept_cpu.prefill_tokens[i],
                       slept_cpu.decode_tokens[i]))
end
assert(seen_backend.sim == "sim" and seen_backend.cpu == "cpu",
       string.format("duet.backend inside the runs: %s and %s", seen_backend.sim, seen_backend.cpu))
assert(duet.backend == "sim", "duet.backend after the runs: " .. duet.backend)
print("backends ok")
