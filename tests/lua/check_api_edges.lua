-- Every duet.* function and engine method called with edge arguments (zero, negative, huge, NaN,
-- infinities, wrong types) under pcall: each call returns or raises a Lua error; none may end the
-- process (duet.synthetic(n, key, 0) once did, with SIGFPE) or hang.
local duet = require("duet")
local weird = {0, -1, 1, 2^31, 2^53, -2^63, 0/0, 1/0, -1/0, 0.5, "", "x", true, {}, {1, 2}, function() end}
local calls = 0
local function try(f, ...)
  pcall(f, ...)
  calls = calls + 1
end

for _, name in ipairs{"synthetic", "token_list", "tokens", "tokenizer", "read_json", "read_jsonl", "model",
                      "gpu", "models", "gpus", "args", "uniform", "normal", "hash", "trace", "now"} do
  local f = duet[name]
  try(f)
  for _, a in ipairs(weird) do
    try(f, a)
    for _, b in ipairs(weird) do
      try(f, a, b)
      try(f, 4, a, b)
    end
  end
end
local list = duet.synthetic(8, 1)
for _, a in ipairs(weird) do
  try(function() return list:get(a) end)
  try(function() return list .. a end)
  try(function() return a .. list end)
  for _, b in ipairs(weird) do try(function() return list:get(a, b) end) end
end

local keys = {"prompt", "parent", "append", "kind", "max_tokens", "ignore_eos", "temperature", "top_p", "seed",
              "stop", "stop_at", "stop_with", "score_positions", "scores", "keep", "force"}
local accepted = 0
local function solve(ctx)
  local e = ctx.engines.llm
  for _, k in ipairs(keys) do
    for _, v in ipairs(weird) do
      local spec = {prompt = 8, max_tokens = 2}
      spec[k] = v
      local ok, id = pcall(function() return e:submit(spec) end)
      calls = calls + 1
      if ok then
        accepted = accepted + 1
        try(function() duet.await(id) end)
      end
    end
  end
  for _, a in ipairs(weird) do
    try(function() e:release(a) end)
    try(function() return e:tokens(a) end)
    try(function() return e:tokens(1, a) end)
    try(function() e:set_priority(a, 1) end)
    try(function() e:set_priority(1, a) end)
    try(function() duet.await(a) end)
    try(function() duet.sleep_until(a) end)
  end
  local kept = e:submit{prompt = 8, max_tokens = 2, keep = true}
  duet.await(kept)
  for _, a in ipairs(weird) do
    try(function() duet.await(e:submit{parent = kept, append = a, max_tokens = 1}) end)
    try(function() duet.await(e:submit{parent = kept, kind = "score", score_positions = {a}}) end)
  end
  return {score = 0}
end
local r = duet.run{out = false, progress = false,
                   engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.5}},
                   workload = {problems = {{}}, solve = solve}}
assert(r.problems == 1, "the workload did not finish")
assert(accepted > 0 and accepted < #keys * #weird, "every or no submit was accepted: the probe tests nothing")
-- duet.model says whether a model's q, k and v projections carry biases (Qwen2's do).
local qwen, llama = duet.model("qwen2.5-7b-instruct"), duet.model("llama-3.1-8b")
assert(qwen.qkv_bias == true and llama.qkv_bias == false, "duet.model's qkv_bias")
-- and whether each head of q and k is normalised (Qwen3's are): Qwen/Qwen3-8B's 8.19B parameters.
local qwen3 = duet.model("qwen3-8b")
assert(qwen3.qk_norm == true and qwen3.qkv_bias == false and qwen.qk_norm == false, "duet.model's qk_norm")
assert(qwen3.num_parameters == 8190735360, "Qwen3-8B's parameters: " .. qwen3.num_parameters)
assert(math.type(qwen.num_layers) == "integer" and qwen.max_position_embeddings == 32768 and qwen.rope_theta == 1e6
       and qwen.dtype == "bfloat16" and qwen.tie_word_embeddings == false and qwen.num_parameters == 7615616512,
       "duet.model's fields")
-- and whether its head is a PRM's classifier (Qwen2.5-Math-PRM: two labels, no LM head).
local math_prm = duet.model("qwen2.5-math-prm-7b")
assert(math_prm.score_labels == 2 and qwen.score_labels == 0 and math_prm.max_position_embeddings == 4096
       and math_prm.num_parameters == 7615616512 - 152064 * 3584 + 3584 * 3584 + 3584 + 2 * 3584 + 2,
       "duet.model's score_labels")
-- TokenList:fold(n) maps ids at or above n into [0, n); a search hands the PRM its generator's tokens
-- so, where the PRM's vocabulary is smaller (Qwen2.5's 151,936 against Llama 3's 128,256: each
-- PRM request failed with a token outside the PRM's vocabulary).
local folded = duet.token_list{5, 130000, 31999}:fold(32000)
assert(#folded == 3 and folded:get(1) == 5 and folded:get(2) == 130000 % 32000 and folded:get(3) == 31999)
assert(not pcall(function() return folded:fold(0) end), "fold(0) must be an error")
local beam_search = require("workloads.beam_search")
local mixed = duet.run{gpu = "h100", out = false, progress = false,
  engines = {{name = "llm", model = "qwen2.5-1.5b-instruct", gpu_memory_utilization = 0.3},
             {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.6}},
  workload = beam_search.workload{problems = require("workloads.math500").load{limit = 40}, n = 4, beam_width = 4}}
assert(mixed.problems == 40, "a Qwen2.5 generator with a Llama 3 PRM")
print(string.format("API edges: %d calls, %d of %d odd submits accepted, the process survived", calls, accepted,
                    #keys * #weird))

-- pairs(ctx.engines) visits the engines in the order duet.run declared them, in every process:
-- Lua seeds its string hashes afresh each time, so a plain table's order would change from run to
-- run, and a workload that submits in that order would not reproduce its own file.
local declared = {"zeta", "alpha", "mid", "beta", "omega", "kappa"}
local engines = {}
for _, name in ipairs(declared) do
  engines[#engines + 1] = {name = name, model = "models/tiny-llama/config.json", gpu_memory_utilization = 0.1}
end
local seen
duet.run{out = false, progress = false, engines = engines, workload = {problems = {{}}, solve = function(ctx)
  seen = {}
  for name, engine in pairs(ctx.engines) do
    assert(engine.name == name, "pairs gave engine " .. engine.name .. " under the key " .. name)
    seen[#seen + 1] = name
  end
end}}
assert(table.concat(seen, ",") == table.concat(declared, ","), "pairs(ctx.engines) order: " .. table.concat(seen, ","))

-- On a shared pool a model's evictions count the pages the other model evicts after its last
-- step: the PRM scores first and stops; the generator then reuses the PRM's cached pages. The
-- summary counted only what the PRM's own steps booked (0).
local policy_view
local shared = duet.run{out = false, progress = false, concurrency = 1, kv_pool = "shared", kv_pool_blocks = 40,
  engines = {{name = "llm", model = "models/tiny-llama/config.json", gpu_memory_utilization = 0.4,
              max_num_batched_tokens = 512},
             {name = "prm", model = "models/tiny-llama/config.json", gpu_memory_utilization = 0.4,
              max_num_batched_tokens = 512}},
  memory_policy = function(info)
    policy_view = info.engines.prm.evictions
    assert(info.engines.prm.block_size == 16, "memory_policy's block_size: " .. tostring(info.engines.prm.block_size))
  end,
  workload = {problems = {{}}, solve = function(ctx)
    local ids = {}
    for i = 1, 4 do ids[i] = ctx.engines.prm:submit{kind = "score", prompt = 120 + i, scores = {0.5}} end
    duet.await(ids)
    for i = 1, 4 do ids[i] = ctx.engines.llm:submit{prompt = 100 + i, max_tokens = 30, ignore_eos = true} end
    duet.await(ids)
    return {}
  end}}
assert(policy_view > 0, "the generator evicted none of the PRM's pages")
assert(shared.engines.prm.evictions == policy_view,
       string.format("the PRM's evictions: %d in the summary, %d seen by the memory policy",
                     shared.engines.prm.evictions, policy_view))

-- score_positions must ascend: each scripted score pairs with the position at its index, and
-- positions sorted behind the script's back gave position 5 the score meant for 39.
-- A position given twice (two scores of one token) is refused too.
local function score_at(positions, scores)
  return pcall(duet.run, {out = false, progress = false,
    engines = {{name = "prm", model = "models/tiny-llama/config.json", gpu_memory_utilization = 0.4}},
    workload = {problems = {{}}, solve = function(ctx)
      duet.await(ctx.engines.prm:submit{kind = "score", prompt = 40, score_positions = positions, scores = scores})
    end}})
end
local ok, err = score_at({39, 5, 17}, {0.39, 0.05, 0.17})
assert(not ok and tostring(err):find("score_positions must ascend, each once %(39 before 5%)"), tostring(err))
ok, err = score_at({5, 10, 10}, {0.05, 0.1, 0.2})
assert(not ok and tostring(err):find("score_positions must ascend, each once %(10 before 10%)"), tostring(err))
-- A score request's sampling settings would change nothing: refused, not ignored.
ok, err = pcall(duet.run, {out = false, progress = false,
  engines = {{name = "prm", model = "models/tiny-llama/config.json", gpu_memory_utilization = 0.4}},
  workload = {problems = {{}}, solve = function(ctx)
    duet.await(ctx.engines.prm:submit{kind = "score", prompt = 40, max_tokens = 8})
  end}})
assert(not ok and tostring(err):find("prm:submit.max_tokens: sets how tokens are generated: a kind = 'score' " ..
                                     "request generates none"), tostring(err))

-- duet.backend names the run's backend while it runs, and afterwards is what it was, nil too.
local saved_backend = duet.backend
duet.backend = nil
local inside_backend
duet.run{out = false, progress = false,
  engines = {{name = "llm", model = "models/tiny-llama/config.json", gpu_memory_utilization = 0.4}},
  workload = {problems = {{}}, solve = function() inside_backend = duet.backend end}}
assert(inside_backend == "sim" and duet.backend == nil,
       string.format("duet.backend: %s inside, %s after", tostring(inside_backend), tostring(duet.backend)))
duet.backend = saved_backend
