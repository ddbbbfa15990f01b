-- Tables whose metamethods raise (or lie), wherever duet reads a script's table: each raise is a
-- clean error naming the field, and no C++ object is skipped on the way out (the sanitizer build
-- runs this script with LeakSanitizer on). Metamethods that work are honoured, as in Lua itself.
local duet = require("duet")

-- A table whose every read raises; `n` entries long to `#` when given.
local function raising(what, n)
  return setmetatable({}, {__index = function(_, k) error(what .. " raised reading " .. tostring(k)) end,
                           __len = n and function() return n end})
end

local support = require("tests.lua.support")
local config, expect_error = support.config, support.expect_error

-- duet.run's own table, its engines, an engine, the arbiter's list, the workload.
expect_error(function() return duet.run(raising("the config")) end,
             "duet.run.out: .*the config raised reading out")
local c = config{}
setmetatable(c, {__index = function(_, k) if k == "gpu" then error("no gpu here") end end})
expect_error(function() return duet.run(c) end, "duet.run.gpu: reading it raised an error: .*no gpu here")
expect_error(function()
  return duet.run(config{engines = setmetatable({}, {__len = function() error("length refused") end})})
end, "duet.run.engines: .*length refused")
expect_error(function() return duet.run(config{engines = {raising("engine 1")}}) end,
             "engines%[1%].name: reading it raised an error: .*engine 1 raised reading name")
expect_error(function()
  return duet.run(config{arbiter = "priority", arbiter_priority = raising("the priority list", 2)})
end, "duet.run.arbiter_priority: .*the priority list raised reading 1")
expect_error(function() return duet.run(config{workload = raising("the workload")}) end,
             "workload: field 'solve': reading it raised an error: .*the workload raised reading solve")
expect_error(function()
  return duet.run(config{workload = {problems = raising("the problems", 1), solve = function() end}})
end, "workload: problems%[1%]: reading it raised an error: .*the problems raised reading 1")
expect_error(function()
  return duet.run(config{engines = setmetatable({}, {__len = function() return "many" end})})
end, "duet.run.engines: .*object length is not an integer")
expect_error(function()
  return duet.run(config{engines = setmetatable({}, {__len = function() return 2 ^ 40 end, __index = rawlen})})
end, "duet.run.engines: .*a list's length %(its __len%) is 1099511627776, outside 0 to 2%^31 %- 1")

-- solve()'s result: a raising table, and fields of the wrong type.
local function solve_returns(value)
  return config{workload = {problems = {{}}, solve = function() return value end}}
end
local result = "problem 1: solve%(%)'s result"
expect_error(function() return duet.run(solve_returns(raising("the result"))) end,
             result .. ".score: reading it raised an error: .*the result raised reading score")
expect_error(function() return duet.run(solve_returns({score = "high"})) end,
             result .. ".score: expected a number, got string")
expect_error(function() return duet.run(solve_returns({score = 0 / 0})) end, result .. ".score: expected a finite number")
expect_error(function() return duet.run(solve_returns({correct = 1})) end,
             result .. ".correct: expected true or false, got number")
expect_error(function() return duet.run(solve_returns({iterations = 2.5})) end,
             result .. ".iterations: expected an integer, got 2.5")
expect_error(function() return duet.run(solve_returns({level = -1})) end, result .. ".level: must be >= 0, got %-1")
expect_error(function() return duet.run(solve_returns({scroe = 5})) end, result .. ": unknown key 'scroe'")
expect_error(function() return duet.run(solve_returns("done")) end, result .. " is a string, not a table")
assert(duet.run(solve_returns({score = 1, correct = true, iterations = 4 / 2, level = 3})).problems == 1)

-- Inside solve(): a submit's table and its lists, and duet.await's list.
local inside = 0
duet.run(config{workload = {problems = {{}}, solve = function(ctx)
  local llm = ctx.engines.llm
  local cases = {
    {raising("the spec"), "llm:submit.seed: reading it raised an error: .*the spec raised reading seed"},
    {{prompt = 8, stop = setmetatable({}, {__len = function() error("stop length") end})},
     "llm:submit.stop: .*stop length"},
    {{prompt = 8, stop = raising("the stop list", 1)}, "llm:submit.stop: .*the stop list raised reading 1"},
    {{kind = "score", prompt = 8, scores = setmetatable({}, {__len = function() return 2 ^ 62 end})},
     "llm:submit.scores: .*outside 0 to 2%^31 %- 1"},
  }
  for _, case in ipairs(cases) do
    local ok, err = pcall(function() return llm:submit(case[1]) end)
    assert(not ok and tostring(err):find(case[2]), "error '" .. tostring(err) .. "' does not match '" .. case[2] .. "'")
    inside = inside + 1
  end
  local id = llm:submit{prompt = 8, max_tokens = 2}
  local ok, err = pcall(duet.await, setmetatable({}, {__len = function() error("await length") end}))
  assert(not ok and tostring(err):find("duet.await: reading argument 1 raised an error: .*await length"), tostring(err))
  duet.await(id)
  inside = inside + 1
  return {score = 0}
end}})
assert(inside == 5)

-- duet.sweep's grid, and duet.args' defaults.
expect_error(function()
  return duet.sweep{grid = {x = raising("the values", 2)}, run = function() return config{} end}
end, "duet.sweep: .*the values raised reading 1")
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

assert(support.checked == 20, "checked " .. support.checked)
print("metamethods: ok")
