-- Shared by the tests' Lua scripts: a small two-engine configuration and an error check.
local duet = require("duet")

local M = {checked = 0}

-- A run of one problem on two 1B engines, with `extra`'s keys replacing the defaults.
function M.config(extra)
  local c = {
    progress = false, out = false,
    engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3},
               {name = "prm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3}},
    workload = {problems = {{}}, solve = function() return {score = 0} end},
  }
  for k, v in pairs(extra or {}) do c[k] = v end
  return c
end

-- f() must raise an error whose message matches `pattern`; M.checked counts the checks.
function M.expect_error(f, pattern)
  local ok, err = pcall(f)
  assert(not ok, "expected an error matching '" .. pattern .. "'")
  assert(tostring(err):find(pattern), "error '" .. tostring(err) .. "' does not match '" .. pattern .. "'")
  M.checked = M.checked + 1
end

assert(duet.run, "support.lua runs inside duet")
return M
