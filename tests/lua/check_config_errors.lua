-- duet.run configuration values that are wrong in type or in combination: each is an error that
-- names the script's line and the field, never a silent default.
local duet = require("duet")

local function config(extra)
  local c = {
    progress = false, out = false,
    engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3},
               {name = "prm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3}},
    workload = {problems = {{}}, solve = function() return {score = 0} end},
  }
  for k, v in pairs(extra) do c[k] = v end
  return c
end

local function expect_error(extra, pattern)
  local ok, err = pcall(function() return duet.run(config(extra)) end)
  assert(not ok, "expected an error matching '" .. pattern .. "'")
  assert(tostring(err):find(pattern), "error '" .. tostring(err) .. "' does not match '" .. pattern .. "'")
  assert(tostring(err):find("check_config_errors.lua:%d+"), "error '" .. tostring(err) .. "' names no line")
end

expect_error({out = "other.h5"}, "duet.run: out: expected true or false, got a string")
expect_error({arbiter = "priority", arbiter_priority = "prm"}, "arbiter_priority.*expected a list of engine names")
expect_error({arbiter = "priority", arbiter_priority = {"prm", 7}}, "arbiter_priority.*entry 2 is a number")
expect_error({arbiter_priority = {"prm"}}, "arbiter_priority.*for arbiter = 'priority' only")
expect_error({arbiter = "callback"}, "arbiter.*given as a function, not a name")
expect_error({arbiter = "fifo"}, "arbiter.*unknown arbiter 'fifo'")
expect_error({arbiter = "priority", arbiter_priority = {"gen"}}, "arbiter_priority.*entry 1 names unknown engine 'gen'")
expect_error({arbiter = "priority", arbiter_priority = {}}, "arbiter_priority: names no engine")
expect_error({arbiter = "priority", arbiter_priority = {"prm", "llm", "prm"}},
             "arbiter_priority: entry 3 names engine 'prm' a second time")
-- 'workload' names the workload's attributes in the run's file (workload.n): no engine may take it.
expect_error({engines = {{name = "workload", model = "llama-3.2-1b", gpu_memory_utilization = 0.3}}},
             "engines%[1%].name: 'workload' names the workload's attributes in the run's file")
-- A workload's options: a table, and names without a NUL byte.
expect_error({workload = {problems = {{}}, solve = function() return {score = 0} end, options = 5}},
             "duet.run.workload.options: expected a table, got a number")
expect_error({workload = {problems = {{}}, solve = function() return {score = 0} end, options = {["a\0b"] = 1}}},
             "duet.run.workload.options: an option's name holds a NUL byte")
-- Unknown names and impossible values name the field (and, through expect_error, the line).
expect_error({gpu = "h1000"}, "duet.run.gpu: unknown GPU 'h1000'")
expect_error({backend = "gpu"}, "duet.run.backend: unknown backend 'gpu' %(valid: sim, cpu")  -- cuda where built
expect_error({cost_model = "magic"}, "duet.run.cost_model: unknown cost model 'magic'")
expect_error({concurrency = 0}, "duet.run.concurrency: problems in flight must be at least 1, got 0")
expect_error({min_batch = 0}, "duet.run.min_batch: must be in %[1, concurrency = 64%], got 0")
expect_error({concurrency = 4, min_batch = 5}, "duet.run.min_batch: must be in %[1, concurrency = 4%], got 5")
expect_error({batching = "fixed", min_batch = 2}, "duet.run.min_batch: applies to batching = 'continuous' only")
local function engine(extra)
  local e = {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3}
  for k, v in pairs(extra) do e[k] = v end
  return {e}
end
expect_error({engines = engine{model = "llama-9"}}, "engines%[1%].model: unknown model 'llama%-9'")
expect_error({engines = engine{allocator = "buddy"}}, "engines%[1%].allocator: unknown allocator 'buddy'")
expect_error({engines = engine{fork_kv = "copy"}}, "engines%[1%].fork_kv: unknown fork_kv .copy. %(valid: share, prefix_cache%)")
expect_error({engines = engine{scheduler_reserve_full_isl = "yes"}},
             "engines%[1%].scheduler_reserve_full_isl: expected true or false, got string")
expect_error({engines = engine{cost_model = "operator:"}}, "engines%[1%].cost_model: unknown cost model 'operator:'")
expect_error({engines = engine{load_format = "ckpt/dumy"}}, "engines%[1%].load_format: 'ckpt/dumy' is neither 'dummy' nor a checkpoint that exists")
expect_error({engines = engine{budget_gib = 8}}, "engines%[1%].budget_gib: give either budget_gib or gpu_memory_utilization")
expect_error({engines = {{name = "llm", model = "llama-3.2-1b", budget_gib = -1}}}, "engines%[1%].budget_gib: must be a positive number of GiB below 2%^33, got %-1")
-- Beyond int64's bytes: an error with the value given, never a wrapped count.
expect_error({engines = {{name = "llm", model = "llama-3.2-1b", budget_gib = 1e30}}}, "engines%[1%].budget_gib: must be a positive number of GiB below 2%^33, got 1000000000000000019884624838656")
expect_error({engines = {llm = {model = "llama-3.2-1b"}}}, "duet.run.engines: expected a list of engine tables")
-- Lists with something beside or a hole in them: a problem or engine there was silently never run.
local e1 = {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3}
expect_error({engines = {e1, x = 1}}, "duet.run.engines: has key 'x' in or beside its list of 1 engine tables")
local solve = function() return {score = 0} end
expect_error({workload = {problems = {{}, x = {}}, solve = solve}},
             "duet.run.workload: problems has key 'x' in or beside its list 1..1")
expect_error({workload = {problems = {{}, [5] = {}}, solve = solve}},
             "duet.run.workload: problems has index 5 in or beside its list 1..1")
local holed = {{}, {}, {}}
holed[2] = nil
expect_error({workload = {problems = holed, solve = solve}}, "duet.run.workload: problems has .* in or beside its list")
-- Checked as the run is put together (core's checks, for every front end): the line of duet.run.
expect_error({engines = engine{gpu_memory_utilization = 1.5}},
             "duet.run: engine 'llm': gpu_memory_utilization must be in %(0, 1%], got 1.5")
expect_error({engines = engine{max_num_seqs = 0}}, "duet.run: engine 'llm': max_num_seqs must be positive, got 0")
expect_error({engines = engine{max_num_batched_tokens = 64}},
             "duet.run: engine 'llm': max_num_batched_tokens %(64%) must be at least max_num_seqs %(256%)")
expect_error({engines = engine{max_num_batched_tokens = 64, max_num_seqs = 64, enable_chunked_prefill = false}},
             "duet.run: engine 'llm': without chunked prefill, max_num_batched_tokens %(64%) must be at least max_model_len")
-- An override beyond the whole GPU (its bookkeeping alone once took gigabytes of host memory).
expect_error({engines = engine{num_gpu_blocks_override = 10000000}},
             "duet.run: engine 'llm': num_gpu_blocks_override: 10000000 blocks of 524288 bytes hold 4882.81 GiB of KV, " ..
             "more than all of H100%-SXM's 79.65 GiB")
expect_error({kv_pool = "shared", kv_pool_blocks = 2 ^ 31 - 1},
             "duet.run: kv_pool_blocks: 2147483647 blocks of 524288 bytes hold .* of KV, more than all of H100%-SXM's")
expect_error({engines = engine{max_model_len = 200000}},
             "engines%[1%].max_model_len: engine 'llm': max_model_len 200000 exceeds llama%-3.2%-1b's " ..
             "max_position_embeddings %(131072%)")

-- duet.sweep's thread count and duet.synthetic's vocabulary.
local function expect_call_error(f, pattern)
  local ok, err = pcall(f)
  assert(not ok, "expected an error matching '" .. pattern .. "'")
  assert(tostring(err):find(pattern), "error '" .. tostring(err) .. "' does not match '" .. pattern .. "'")
end
expect_call_error(function() return duet.sweep{grid = {x = {1}}, run = function() return config{} end, threads = -1} end,
                  "duet.sweep.*threads.*must be 0 %(as duet run %-%-threads%) or more, got %-1")
expect_call_error(function() return duet.synthetic(4, 1, 0) end, "vocabulary size out of range")

-- A submit's values: out of range or of the wrong type is an error naming the line and the key.
local submit_errors = {
  {{temperature = -1}, "temperature.*must be a finite number >= 0, got %-1"},
  {{temperature = 0/0}, "temperature.*expected a finite number"},
  {{top_p = 0}, "top_p.*must be in %(0, 1%]"},
  {{top_p = 1.5}, "top_p.*must be in %(0, 1%]"},
  {{stop = {"eos", true}}, "stop.*entry 2 is a boolean"},
  {{stop = {-3}}, "stop.*token id %-3 is outside the vocabulary"},
  {{stop_at = -1}, "stop_at.*must be an output index >= 0"},
  {{stop_at = 3, stop_with = {}}, "stop_with.*expected a token name"},
  {{stop_with = "eos"}, "stop_with.*needs stop_at"},
  {{scores = {0.5, "high"}}, "scores.*entry 2 is a string, not a number"},
  {{scores = {1/0}}, "scores.*entry 1 must be finite"},
  {{scores = {1e39}}, "scores.*entry 1 must be finite in single precision"},
  {{score_positions = {1.5}}, "score_positions.*entry 1 must be an integer"},
  {{score_positions = {0/0}}, "score_positions.*entry 1 must be an integer"},
  {{priority = 1}, "unknown key 'priority'"},
  {{scores = {0.5}}, "scores.*needs kind = 'score'"},
  {{score_positions = {3}}, "score_positions.*needs kind = 'score'"},
}
local checked = 0
duet.run(config{workload = {problems = {{}}, solve = function(ctx)
  local llm = ctx.engines.llm
  for _, case in ipairs(submit_errors) do
    local spec = {prompt = 8, max_tokens = 2}
    for k, v in pairs(case[1]) do spec[k] = v end
    local ok, err = pcall(function() return llm:submit(spec) end)
    assert(not ok, "submit accepted a bad value; expected '" .. case[2] .. "'")
    assert(tostring(err):find(case[2]), "error '" .. tostring(err) .. "' does not match '" .. case[2] .. "'")
    assert(tostring(err):find("check_config_errors.lua:%d+"), "error '" .. tostring(err) .. "' names no line")
    checked = checked + 1
  end
  -- Integral floats are integers, as for every integer field.
  duet.await(llm:submit{prompt = 8, max_tokens = 2, stop = {2.0}, stop_at = 1, stop_with = 3.0})
  duet.await(llm:submit{kind = "score", prompt = 8, score_positions = {3.0, 7}})
  local ok, err = pcall(function() llm:set_priority(1, 8) end)
  assert(not ok and tostring(err):find("retention priority must be in %[0, 7%]"), tostring(err))
  return {score = 0}
end}})
assert(checked == #submit_errors)

-- And the valid forms run: priority with and without its list.
assert(duet.run(config{arbiter = "priority", arbiter_priority = {"prm", "llm"}}))
assert(duet.run(config{arbiter = "priority"}))
assert(duet.run(config{out = false}))
-- max_model_len defaults to 8192, or to a model's shorter limit (Qwen2.5-Math's 4096; it was an error).
local limits = {}
duet.run{gpu = "h100", out = false, progress = false,
         engines = {{name = "short", model = "tests/cli/data/short-context-qwen2-config.json", gpu_memory_utilization = 0.3},
                    {name = "long", model = "llama-3.2-1b", gpu_memory_utilization = 0.3}},
         workload = {problems = {{}}, solve = function(ctx)
           limits.short, limits.long = ctx.engines.short.max_model_len, ctx.engines.long.max_model_len
         end}}
assert(limits.short == 4096 and limits.long == 8192, string.format("max_model_len %s and %s", limits.short, limits.long))
print("configuration errors: ok")
