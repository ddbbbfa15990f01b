-- Tables whose metamethods raise (or lie), wherever duet reads a script's table: each raise is a
-- clean error naming the field, and no C++ object is skipped on the way out (the sanitizer build
-- runs this script with LeakSanitizer on). Metamethods that work are honoured, as in Lua itself.
local duet = require("duet")

-- A table whose every read raises; `n` entries long to `#` when given.
local function raising(what, n)
  return setmetatable({}, {__index = function(_, k) error(what .. " raised reading " .. tostring(k)) end,
                           __len = n and function() return n end})
end

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

local checked = 0
local function expect_error(f, pattern)
  local ok, err = pcall(f)
  assert(not ok, "expected an error matching '" .. pattern .. "'")
  assert(tostring(err):find(pattern), "error '" .. tostring(err) .. "' does not match '" .. pattern .. "'")
  checked = checked + 1
end

-- duet.run's own table, its engines, an engine, the arbiter's list, the workload.
expect_error(function() return duet.run(raising("the config")) end,
             "duet.run.out: .*the config raised reading out")
local c = config{}
setmetatable(c, {__index = function(_, k) if k == "gpu" then error("no gpu here") end end})
expect_error(function() return duet.run(c) end, "duet.run.gpu: reading it raised an error: .*no gpu here")
expect_error(function()
  return duet.run(config{engines = setmetatable({}, {__len = function() error("length refused") end})})
end, "length refused")
expect_error(function() return duet.run(config{engines = {raising("engine 1")}}) end, "engine 1 raised reading")
expect_error(function()
  return duet.run(config{arbiter = "priority", arbiter_priority = raising("the priority list", 2)})
end, "the priority list raised reading 1")
expect_error(function() return duet.run(config{workload = raising("the workload")}) end,
             "the workload raised reading")
expect_error(function()
  return duet.run(config{engines = setmetatable({}, {__len = function() return "many" end})})
end, "object length is not an integer")

-- solve()'s result: a raising table, and fields of the wrong type.
local function solve_returns(value)
  return config{workload = {problems = {{}}, solve = function() return value end}}
end
expect_error(function() return duet.run(solve_returns(raising("the result"))) end,
             "the result raised reading score")
expect_error(function() return duet.run(solve_returns({score = "high"})) end,
             "problem 1: solve%(%) returned score = a string, expected a number")
expect_error(function() return duet.run(solve_returns({correct = 1})) end,
             "problem 1: solve%(%) returned correct = a number, expected true or false")
expect_error(function() return duet.run(solve_returns({iterations = 2.5})) end,
             "problem 1: solve%(%) returned iterations = a number, expected an integer >= 0")
expect_error(function() return duet.run(solve_returns({level = -1})) end,
             "problem 1: solve%(%) returned level = a number, expected an integer >= 0")
expect_error(function() return duet.run(solve_returns("done")) end,
             "problem 1: solve%(%) returned a string, not a table")

-- Inside solve(): a submit's table and its lists, and duet.await's list.
local inside = 0
duet.run(config{workload = {problems = {{}}, solve = function(ctx)
  local llm = ctx.engines.llm
  local cases = {
    {raising("the spec"), "llm:submit.seed: reading it raised an error: .*the spec raised reading seed"},
    {{prompt = 8, stop = setmetatable({}, {__len = function() error("stop length") end})}, "stop length"},
    {{prompt = 8, stop = raising("the stop list", 1)}, "the stop list raised reading 1"},
    {{kind = "score", prompt = 8, scores = setmetatable({}, {__len = function() return 2 ^ 62 end})},
     "scores.*entry 1 is a nil, not a number"},
  }
  for _, case in ipairs(cases) do
    local ok, err = pcall(function() return llm:submit(case[1]) end)
    assert(not ok and tostring(err):find(case[2]), "error '" .. tostring(err) .. "' does not match '" .. case[2] .. "'")
    inside = inside + 1
  end
  local id = llm:submit{prompt = 8, max_tokens = 2}
  local ok, err = pcall(duet.await, setmetatable({}, {__len = function() error("await length") end}))
  assert(not ok and tostring(err):find("await length"), tostring(err))
  duet.await(id)
  inside = inside + 1
  return {score = 0}
end}})
assert(inside == 5)

-- duet.sweep's grid, and duet.args' defaults.
expect_error(function()
  return duet.sweep{grid = {x = raising("the values", 2)}, run = function() return config{} end}
end, "the values raised reading")
expect_error(function() return duet.args{"positional"} end, "duet.args: the defaults' keys must be argument names")
expect_error(function() return duet.args{problems = {}} end,
             "duet.args: default 'problems' must be a number, boolean or string, got a table")

-- Working metamethods are honoured: a configuration that inherits its fields from another.
local base = config{}
local derived = setmetatable({label = "derived"}, {__index = base})
local r = duet.run(derived)
assert(r.problems == 1 and r.engines.prm, "an inherited configuration ran")
local proxied = setmetatable({}, {__index = {"llm", "prm"}, __len = function() return 2 end})
assert(duet.run(config{arbiter = "priority", arbiter_priority = proxied}))

assert(checked == 16, "checked " .. checked)
print("metamethods: ok")
