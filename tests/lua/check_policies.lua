-- Policies written in Lua: scheduler ordering, admission, victim, arbitration. Each is called,
-- and a simulation with them is no more than 3x slower than with the built-in policies.
local math500 = require("workloads.math500")
local beam_search = require("workloads.beam_search")
local problems = math500.load{limit = 40}
local calls = {order = 0, admit = 0, arbiter = 0}

local function config(with_lua)
  local policy = with_lua and {
    order = function(id, num_tokens, problem, kind) calls.order = calls.order + 1; return problem end,
    admit = function(id, num_tokens, problem, running, waiting, kv_used) calls.admit = calls.admit + 1; return kv_used < 0.95 end,
    victim = function(candidates) return #candidates end,
  } or nil
  return {
    gpu = "h100", out = false, progress = false, concurrency = 40,
    engines = {
      {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3, policy = policy},
      {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.6, policy = policy},
    },
    arbiter = with_lua and function(engines)
      calls.arbiter = calls.arbiter + 1
      -- The PRM first whenever it has work: it unblocks the searches.
      if engines[2].has_work then return "prm" end
      return 1
    end or "alternate",
    workload = beam_search.workload{problems = problems, prm_mode = "incremental"},
  }
end

local function timed(with_lua)
  local best = math.huge
  local r
  for _ = 1, 3 do
    local t0 = os.clock()
    r = duet.run(config(with_lua))
    best = math.min(best, os.clock() - t0)
  end
  return best, r
end
local builtin_s, builtin = timed(false)
local lua_s, with_lua = timed(true)
print(string.format("built-in %.3f s, Lua policies %.3f s: %.2fx; calls: order %d, admit %d, arbiter %d",
                    builtin_s, lua_s, lua_s / builtin_s, calls.order, calls.admit, calls.arbiter))
assert(calls.order > 0 and calls.admit > 0 and calls.arbiter > 0, "every policy was called")
assert(with_lua.problems == builtin.problems)
-- On a shared pool kv_used is the share of the pages the engine may hold at most (its ceiling): an
-- engine capped at a tenth of the pool never passed 0.1 when it was the pool's share, and a
-- threshold such as 0.9 held nothing back.
local most = {llm = 0, arbiter = 0}
duet.run{
  gpu = "h100", out = false, progress = false, concurrency = 20, kv_pool = "shared", kv_pool_blocks = 3000,
  engines = {
    {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3, max_blocks = 300, policy = {
      admit = function(id, num_tokens, problem, running, waiting, kv_used)
        most.llm = math.max(most.llm, kv_used)
        return true
      end}},
    {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.6},
  },
  arbiter = function(engines)
    most.arbiter = math.max(most.arbiter, engines[1].kv_used)
    if engines[1].has_work then return 1 end
    return 2
  end,
  workload = beam_search.workload{problems = {table.unpack(problems, 1, 20)}, prm_mode = "incremental"},
}
assert(most.llm > 0.5 and most.llm <= 1 and most.arbiter > 0.5 and most.arbiter <= 1,
       string.format("kv_used of a capped engine: at most %.3f in admit, %.3f in the arbiter", most.llm, most.arbiter))
print("policies ok")

-- A policy may be a table of its own state with a __call: an admit that counts what it saw, and
-- an arbiter object; its errors name the __call's line.
local counter = setmetatable({seen = 0}, {__call = function(self, id, num_tokens, problem, running, waiting, kv_used)
  self.seen = self.seen + 1
  return true
end})
local picker = setmetatable({calls = 0}, {__call = function(self, engines)
  self.calls = self.calls + 1  -- called with itself first
  return engines[2].has_work and 2 or 1
end})
local callable_run = config(false)
callable_run.engines[1].policy = {admit = counter}
callable_run.arbiter = picker
duet.run(callable_run)
assert(counter.seen > 0, "a callable table's admit was never called")
assert(picker.calls > 0, "a callable table's arbiter was never called")
-- A __call that is not a function is no policy: refused as the run table is read.
local not_callable = config(false)
not_callable.engines[1].policy = {admit = setmetatable({}, {__call = 5})}
local refused, why = pcall(duet.run, not_callable)
assert(not refused and tostring(why):find("policy.admit: expected a function"), tostring(why))
local bad = config(false)
bad.engines[1].policy = {admit = setmetatable({}, {__call = function() return 1 end})}
local ok, err = pcall(duet.run, bad)
assert(not ok and tostring(err):find("check_policies.lua:%d+: engines.llm.policy.admit returned 1"), tostring(err))
print("callable policies ok")
