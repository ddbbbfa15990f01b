-- Run with --backend cpu: a sweep on a real engine runs one point at a time (its step times are
-- what it measures), so asking for more threads is an error naming the field and the line.
local duet = require("duet")
local ok, err = pcall(function()
  return duet.sweep{grid = {x = {1, 2}}, threads = 2, run = function() return {} end}
end)
assert(not ok, "duet.sweep{threads = 2} on --backend cpu ran")
local pattern = "check_real_engine_sweep.lua:%d+.*threads.*a sweep on a real engine %(%-%-backend cpu%) " ..
                "runs one point at a time, got 2"
assert(tostring(err):find(pattern), "error '" .. tostring(err) .. "' does not match '" .. pattern .. "'")
print("real engine sweep: one point at a time")
