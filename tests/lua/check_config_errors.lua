-- duet.run configuration values that are wrong in type or in combination: each is an error that
-- names the script's line and the field, never a silent default.
local duet = require("duet")

local function config(extra)
  local c = {
    progress = false, out = false,
    engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3},
               {name = "prm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3}},
    workload = {problems = {}, solve = function() end},
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

-- duet.sweep's thread count and duet.synthetic's vocabulary.
local function expect_call_error(f, pattern)
  local ok, err = pcall(f)
  assert(not ok, "expected an error matching '" .. pattern .. "'")
  assert(tostring(err):find(pattern), "error '" .. tostring(err) .. "' does not match '" .. pattern .. "'")
end
expect_call_error(function() return duet.sweep{grid = {x = {1}}, run = function() return config{} end, threads = -1} end,
                  "duet.sweep.*threads.*must be at least 1, got %-1")
expect_call_error(function() return duet.synthetic(4, 1, 0) end, "vocabulary size out of range")

-- And the valid forms run: priority with and without its list.
assert(duet.run(config{arbiter = "priority", arbiter_priority = {"prm", "llm"}}))
assert(duet.run(config{arbiter = "priority"}))
assert(duet.run(config{out = false}))
print("configuration errors: ok")
