-- Misuse of the API that once crashed duet or was silently taken: each is now an error naming what
-- was wrong, and the process lives on. (Found by a review of the bindings; each case is the
-- smallest script that showed it.)
local duet = require("duet")

local support = require("tests.lua.support")
local config, expect_error = support.config, support.expect_error

-- duet.await with the same id twice (a crash: the second lookup missed).
-- A TokenList outside the engine's vocabulary, and :tokens from a negative index.
local inside = 0
duet.run(config{workload = {problems = {{}}, solve = function(ctx)
  local llm = ctx.engines.llm
  local id = llm:submit{prompt = 8, max_tokens = 2, keep = true}
  expect_error(function() return duet.await({id, id}) end, "duet.await: sequence " .. id .. " is awaited twice")
  duet.await(id)
  expect_error(function() return llm:tokens(id, -1) end, "the first token's index must be in 0 to 2%^31 %- 1")
  assert(#llm:tokens(id, 0) == 10)
  expect_error(function() return llm:submit{prompt = duet.token_list{1, 2, 128256}} end,
               "llm:submit.prompt: token 3 %(id 128256%) is outside llm's vocabulary of 128256")
  local running = llm:submit{prompt = 8, max_tokens = 4, keep = true}
  expect_error(function() return llm:submit{parent = running, max_tokens = 2} end,
               "llm:submit.parent: sequence " .. running .. " is still running: await it before forking it")
  duet.await(running)
  llm:release(running)
  expect_error(function() return ctx.engines.prm:submit{kind = "score", prompt = 8, scores = {0.5, 0.2, 0.3}} end,
               "prm:submit.scores: 3 scores for 1 score position")
  expect_error(function() return ctx.engines.prm:release(id) end, "prm:release: sequence " .. id .. " is llm's, not prm's")
  llm:release(id)
  expect_error(function() return llm:release(id) end, "llm:release: sequence " .. id .. " is not this problem's on llm")
  expect_error(function() return llm:release(424242) end, "llm:release: sequence 424242 is not this problem's")
  inside = inside + 1
  return {score = 0}
end}})
assert(inside == 1)

-- The engine's own refusals of a request (here max_model_len) are errors of the submit, at its line.
local short = config{workload = {problems = {{}}, solve = function(ctx)
  expect_error(function() return ctx.engines.llm:submit{prompt = 8, max_tokens = 200} end,
               "check_misuse.lua:%d+: llm:submit: sequence %d+ needs 208 tokens %(prompt %+ max_tokens%), more than max_model_len 100")
  inside = inside + 1
  return {score = 0}
end}}
short.engines[1].max_model_len = 100
duet.run(short)
assert(inside == 2)

-- What a Lua callback returns is checked, and an error names where the callback is defined.
expect_error(function() return duet.run(config{memory_split = function() end}) end,
             "check_misuse.lua:%d+: duet.run: memory_split must return a table")
-- A share out of range names memory_split's own line (it named duet.run's, and printed -0.100000).
local split_line
local bad_split = config{memory_split = function()
  split_line = debug.getinfo(1, "S").linedefined
  return {llm = -0.1}
end}
expect_error(function() return duet.run(bad_split) end,
             "memory_split%(%)%.llm: a share of the GPU's memory %(gpu_memory_utilization%) must be in %(0, 1%], got %-0%.1$")
local ok, err = pcall(duet.run, bad_split)
assert(not ok and tostring(err):find("check_misuse.lua:" .. split_line .. ":", 1, true), tostring(err))
local preempting = config{workload = {problems = {{}}, solve = function(ctx)
  local ids = {}
  for i = 1, 3 do ids[i] = ctx.engines.llm:submit{prompt = 8, max_tokens = 40, ignore_eos = true} end
  duet.await(ids)
  return {score = 0}
end}}
preempting.engines[1].num_gpu_blocks_override = 5
preempting.engines[1].policy = {victim = function() return 0 end}
expect_error(function() return duet.run(preempting) end,
             "check_misuse.lua:%d+: engines.llm.policy.victim returned 0, not the index of a candidate %(1 to %d+%)")

-- An engine that cannot schedule its work names every limit that may hold it back, an admit
-- policy first when no page is in use.
local refusing = config{workload = {problems = {{}}, solve = function(ctx)
  duet.await(ctx.engines.llm:submit{prompt = 8, max_tokens = 2})
  return {score = 0}
end}}
refusing.engines[1].policy = {admit = function() return false end}
expect_error(function() return duet.run(refusing) end,
             "engine 'llm' is stuck with 1 waiting and 0 running sequences that cannot be scheduled: its admit " ..
             "policy refuses them, or its KV pool %(%d+ blocks of 16 tokens, 0 in use%) is too small for them")

-- A policy's return value is checked and its error names the policy's line: an admit that returns
-- nothing refused every admission, silently, until the engine was stuck; an order key that was not a
-- number was reported at the workload's submit, not at the policy.
local forgetful = config{workload = refusing.workload}
forgetful.engines[1].policy = {admit = function() end}
expect_error(function() return duet.run(forgetful) end,
             "check_misuse.lua:%d+: engines.llm.policy.admit returned nil for sequence %d+; it must return true " ..
             "%(admit%) or false %(not yet%)")
local wordy = config{workload = refusing.workload}
wordy.engines[1].policy = {order = function() return "first" end}
expect_error(function() return duet.run(wordy) end,
             "check_misuse.lua:%d+: engines.llm.policy.order returned 'first' for sequence %d+ of problem 1")
-- Keys are compared as doubles: integers past 2^53 would round into ties, and "lower runs first"
-- would silently not hold.
local huge = config{workload = refusing.workload}
huge.engines[1].policy = {order = function(id) return (1 << 60) - id end}
expect_error(function() return duet.run(huge) end,
             "check_misuse.lua:%d+: engines.llm.policy.order returned the integer %d+ for sequence %d+, beyond 2%^53")

-- duet.token_list: ids are non-negative 32-bit integers.
expect_error(function() return duet.token_list{1, -5} end, "entry 2 is not a token id")
expect_error(function() return duet.token_list{2 ^ 40} end, "entry 1 is not a token id")
expect_error(function() return duet.token_list{1.5} end, "entry 1 is not a token id")
assert(#duet.token_list{0, 7, 3.0} == 3)

-- A TokenList's metatable is out of reach: its __gc called twice was a double free.
local list = duet.token_list{1, 2, 3}
assert(getmetatable(list) == "duet.TokenList", tostring(getmetatable(list)))
expect_error(function() return setmetatable(list, {}) end, "bad argument #1 to 'setmetatable' %(table expected")
assert(#list == 3)
-- The debug library still reaches it; a second __gc then does nothing (it was a double free).
local gc = debug.getmetatable(list).__gc
gc(list)
gc(list)
assert(#list == 0)

-- A sweep whose run() rewrites the grid it was given (a crash: each point re-read the grid).
local grid = {x = {1, 2}, flag = {true, false}}
local seen = {}
local results = duet.sweep{grid = grid, threads = 1, run = function(p)
  grid.x = 12345
  grid.flag = "gone"
  seen[#seen + 1] = p
  return config{}
end}
assert(#results == 4 and #seen == 4)
assert(type(seen[1].flag) == "boolean" and math.type(seen[1].x) == "integer", "points keep their types")
-- One type per grid key: {true, 0.5} made point 2 a boolean.
-- A grid too large to hold is refused before it is built (ten lists of ten once took all of a
-- machine's memory), and so is a value that is not a finite number.
local huge = {}
for _, k in ipairs{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} do huge[k] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10} end
expect_error(function() return duet.sweep{grid = huge, run = function() return config{} end} end,
             "duet.sweep: grid has 10000000000 points %(the product of its lists' lengths%), more than 100000")
expect_error(function() return duet.sweep{grid = {u = {1, 0 / 0}}, run = function() return config{} end} end,
             "duet.sweep: grid.u value 2 is not a finite number")
expect_error(function() return duet.sweep{grid = {x = {true, 0.5}}, run = function() return config{} end} end,
             "duet.sweep: grid.x mixes booleans and numbers %(value 2%)")
expect_error(function() return duet.sweep{grid = {x = {1, 2, 2}}, run = function() return config{} end} end,
             "duet.sweep: grid.x holds 2 twice %(values 2 and 3%)")

-- JSON: nesting beyond any real file (a stack overflow), and integers beyond int64.
local path = os.tmpname()
local f = assert(io.open(path, "w"))
f:write(string.rep("[", 100000) .. string.rep("]", 100000))
f:close()
expect_error(function() return duet.read_json(path) end, "JSON nested deeper than 256 levels")
f = assert(io.open(path, "w"))
f:write('{"big": 18446744073709551615, "small": 9223372036854775807}')
f:close()
local j = duet.read_json(path)
assert(math.type(j.big) == "float" and j.big > 1.8e19, tostring(j.big))
assert(math.type(j.small) == "integer" and j.small == math.maxinteger)
expect_error(function() return duet.read_jsonl(path, -1) end, "must not be negative")
-- A key given twice: the parser alone would keep the second value silently.
f = assert(io.open(path, "w"))
f:write('{"level": 1}\n{"level": 2, "problem": "x", "level": 3}\n')
f:close()
expect_error(function() return duet.read_jsonl(path) end, ':2: key "level" appears twice in one object')
f = assert(io.open(path, "w"))
f:write('{"": 1, "a": [{"": 2}], "": 3}')  -- "" is a key too; keys in an array's objects are their own
f:close()
expect_error(function() return duet.read_json(path) end, 'key "" appears twice in one object')
os.remove(path)

-- duet.trace's options.
local trace = duet.source_dir .. "/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
expect_error(function() return duet.trace(trace, 5) end, "duet.trace: options must be a table")
expect_error(function() return duet.trace(trace, {max_requests = -1}) end,
             "duet.trace.max_requests: must be >= 0 %(0: every request%)")
expect_error(function() return duet.trace(trace, {vocab_size = 0}) end,
             "check_misuse.lua:%d+: duet.trace.vocab_size: must be a positive number of token ids, got 0")
assert(#duet.trace(trace, {max_requests = 3}) == 3)

-- An arbiter's answer that is no engine: wrapped into range once, now an error.
local function arbiter_returning(v)
  return config{arbiter = function() return v end, workload = {problems = {{}}, solve = function(ctx)
    duet.await(ctx.engines.llm:submit{prompt = 8, max_tokens = 2})
    return {score = 0}
  end}}
end
expect_error(function() return duet.run(arbiter_returning(2 ^ 32 + 1)) end,
             "the arbiter returned 4294967297, not an engine's name or its index %(1 to 2%)")
expect_error(function() return duet.run(arbiter_returning("gen")) end, "check_misuse.lua:%d+: the arbiter returned 'gen'")
expect_error(function() return duet.run(arbiter_returning(nil)) end, "the arbiter returned nil")
assert(duet.run(arbiter_returning(1.0)).problems == 1)
-- A value that is no index is shown as it is, and a C function as the policy names the line that
-- gave it.
expect_error(function() return duet.run(arbiter_returning(1.5)) end, "the arbiter returned 1.5, not an engine's name")
expect_error(function() return duet.run(arbiter_returning(0 / 0)) end, "the arbiter returned NaN, not an engine's name")
local printing = config{arbiter = print, workload = {problems = {{}}, solve = function(ctx)
  duet.await(ctx.engines.llm:submit{prompt = 8, max_tokens = 2})
  return {score = 0}
end}}
expect_error(function() return duet.run(printing) end, "^[^%[]*check_misuse.lua:%d+: the arbiter returned nil")

-- A wrongly typed name is one message, not one wrapped in another.
support.expect_error(function() return duet.run(config{gpu = 5}) end,
                     "duet.run.gpu: expected a GPU's name, a .json description or a table of its figures, got a number$")
local ok, err = pcall(duet.run, config{gpu = 5})
assert(select(2, tostring(err):gsub("duet%.run%.gpu", "")) == 1, err)

-- An error in solve()'s result names where solve() is defined.
local function solve() return {score = "high"} end
local line = debug.getinfo(solve, "S").linedefined
expect_error(function() return duet.run(config{workload = {problems = {{}}, solve = solve}}) end,
             "check_misuse.lua:" .. line .. ": problem 1: solve%(%)'s result.score: expected a number")
local function five() return 5 end
expect_error(function() return duet.run(config{workload = {problems = {{}}, solve = five}}) end,
             "check_misuse.lua:" .. debug.getinfo(five, "S").linedefined .. ": problem 1: solve%(%)'s result is a number")
expect_error(function() return duet.run(config{workload = {problems = {{}}}}) end,
             "check_misuse.lua:%d+: duet.run.workload: field 'solve' must be a function")

-- Problems that finish without waiting: each used to start the next one a level deeper on the C
-- stack (20,000 ended duet with SIGSEGV).
local many = {}
for i = 1, 50000 do many[i] = {} end
local r = duet.run(config{concurrency = 1, workload = {problems = many, solve = function() return {score = 1} end}})
assert(r.problems == 50000, r.problems)

-- A memory policy's limits are checked where its error can name the policy's definition.
local function policy_returning(limits)
  return config{kv_pool = "shared", memory_policy = function() return {llm = limits} end,
                   workload = {problems = {{}}, solve = function(ctx)
                     duet.await(ctx.engines.llm:submit{prompt = 8, max_tokens = 2})
                     return {score = 0}
                   end}}
end
expect_error(function() return duet.run(policy_returning{max_blocks = -5}) end,
             "check_misuse.lua:%d+: memory_policy%(%).llm.max_blocks: %-5 is below min_blocks %(0%)")
expect_error(function() return duet.run(policy_returning{min_blocks = -1}) end,
             "check_misuse.lua:%d+: memory_policy%(%).llm.min_blocks: must not be negative, got %-1")
expect_error(function() return duet.run(policy_returning{min_blocks = 2 ^ 30}) end,
             "check_misuse.lua:%d+: memory_policy%(%): the engines' min_blocks sum to 1073741824 pages, more than the pool's %d+")
assert(duet.run(policy_returning{min_blocks = 4, max_blocks = 100}).problems == 1)
-- A floor moved from one engine to the other in one answer fits (the pool once refused it: it
-- checked the new floor against the other's old one).
local calls = 0
local moving = config{kv_pool = "shared", kv_pool_blocks = 1000, memory_policy = function()
  calls = calls + 1
  if calls == 1 then return {prm = {min_blocks = 600}} end
  return {llm = {min_blocks = 600}, prm = {min_blocks = 0}}
end, workload = {problems = {{}}, solve = function(ctx)
  duet.await(ctx.engines.llm:submit{prompt = 8, max_tokens = 4})
  return {score = 0}
end}}
assert(duet.run(moving).problems == 1 and calls > 1)

-- Sleeping: a date for a run time, and a loop that sleeps and never submits, are errors (the second
-- ran until killed, as each wake-up is a new call from duet with a fresh instruction budget).
local function sleeping(solve) return config{workload = {problems = {{}}, solve = solve}} end
expect_error(function() return duet.run(sleeping(function() duet.sleep_until(1.7e9) end)) end,
             "check_misuse.lua:%d+: duet.sleep_until%(t%): t = 1.7e%+09 s is past 1e8 s")
local polls = 0
expect_error(function() return duet.run(sleeping(function()
  while true do
    polls = polls + 1
    duet.sleep_until(duet.now() + 0.1)
  end
end)) end, "check_misuse.lua:%d+: problem 1: duet.sleep_until woke the run 1000000 times in a row with no sequence " ..
           "running and none submitted")
assert(polls == 1000000, polls)
-- A time already reached yields: what else is due at this instant runs first (problem 2 starts and
-- sets the flag). It used to return at once, and a loop of it spun to the instruction limit (27 s).
local flag, seen = false, nil
assert(duet.run(config{concurrency = 2, workload = {problems = {{}, {}}, solve = function(ctx)
  if ctx.index == 1 then
    duet.sleep_until(duet.now())
    seen = flag
  else
    flag = true
  end
  return {score = 0}
end}}).problems == 2 and seen == true)
local spins = 0
expect_error(function() return duet.run(config{concurrency = 2, workload = {problems = {{}, {}}, solve = function(ctx)
  if ctx.index == 1 then
    while true do
      spins = spins + 1
      duet.sleep_until(duet.now())
    end
  end
  duet.await(ctx.engines.llm:submit{prompt = 8, max_tokens = 2})
end}}) end, "problem 1: [^ ]*check_misuse.lua:%d+: duet.sleep_until slept 1000000 times in a row until a time " ..
           "already reached %(t = 0.000000 s%): time cannot move on while it sleeps until now; sleep until a later time")
assert(spins == 1000000, spins)
-- Counted per problem: three problems that each sleep 400,000 times at one instant while a fourth's
-- request runs, and then once until later, are no loop (together they are 1.2 million).
local sleepers = 0
assert(duet.run(config{concurrency = 4, workload = {problems = {{}, {}, {}, {}}, solve = function(ctx)
  if ctx.index == 4 then
    duet.await(ctx.engines.llm:submit{prompt = 8, max_tokens = 2})
    return {score = 0}
  end
  for _ = 1, 400000 do duet.sleep_until(duet.now()) end
  duet.sleep_until(1.0)
  sleepers = sleepers + 1
  return {score = 0}
end}}).problems == 4 and sleepers == 3)
-- Not a loop: a problem polls while another sleeps toward a later time (it is what the poller
-- waits for), and a poller whose wait is broken by a submit now and then.
local woke = false
local monitored = duet.run(config{concurrency = 2, workload = {problems = {{}, {}}, solve = function(ctx)
  if ctx.index == 1 then
    duet.sleep_until(1500)
    woke = true
    duet.await(ctx.engines.llm:submit{prompt = 8, max_tokens = 2})
  else
    while not woke do duet.sleep_until(duet.now() + 0.001) end
  end
  return {score = 0}
end}})
assert(monitored.problems == 2 and woke)
local pokes = 0
assert(duet.run(config{workload = {problems = {{}}, solve = function(ctx)
  for i = 1, 1500000 do
    duet.sleep_until(duet.now() + 0.001)
    if i % 600000 == 0 then
      pokes = pokes + 1
      duet.await(ctx.engines.llm:submit{prompt = 8, max_tokens = 2})
    end
  end
  return {score = 0}
end}}).problems == 1 and pokes == 2)
-- Sleeping between submits is progress: a paced workload runs to its end.
local paced = duet.run(config{workload = {problems = {{}}, solve = function(ctx)
  for i = 1, 3 do
    duet.sleep_until(duet.now() + 1)
    duet.await(ctx.engines.llm:submit{prompt = 8, max_tokens = 2})
  end
  return {score = 0}
end}})
assert(paced.problems == 1)

-- duet.sweep inside a run is refused at once (each point's duet.run would fail as nested), and a
-- misspelt key is named before the key it replaces is missed.
duet.run(config{workload = {problems = {{}}, solve = function()
  expect_error(function() return duet.sweep{grid = {x = {1}}, run = function() return config{} end} end,
               "check_misuse.lua:%d+: duet.sweep: cannot sweep inside a run's workload")
  return {score = 0}
end}})
-- A run started from another run's memory_split is refused too (it took the outer run's place in
-- the file, and the outer run's result was lost), and a run after it runs.
local nested_in_split = config{}
nested_in_split.memory_split = function()
  duet.run(config{})
  return {llm = 0.3}
end
expect_error(function() return duet.run(nested_in_split) end,
             "duet.run: cannot run inside another run's workload or callbacks")
assert(duet.run(config{workload = {problems = {{}}, solve = function() return {score = 0} end}}).problems == 1)
expect_error(function() return duet.sweep{grid = {x = {1}}, runn = function() return config{} end} end,
             "check_misuse.lua:%d+: duet.sweep: unknown key 'runn' %(valid keys: grid, label, out, run, threads%)")

-- The workload's calls outside a run name themselves and the line.
expect_error(function() return duet.sleep_until(5) end,
             "check_misuse.lua:%d+: duet.sleep_until: only inside a workload's solve%(%) during duet.run")

-- os.exit would end duet without its file (and with status 0): it is an error naming the line.
expect_error(function() os.exit(0) end, "check_misuse.lua:%d+: os.exit is not available in a duet script")

assert(support.checked == 52, "checked " .. support.checked)
print("misuse: ok")
