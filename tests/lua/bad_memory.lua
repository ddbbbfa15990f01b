-- Lua memory that grows without end, in the main chunk or in a problem's solve(): stopped at
-- --lua-memory-limit with an error naming the limit (in solve(), with the line in its traceback).
local duet = require("duet")
local a = duet.args{in_solve = false, tables = false}
local function grow()
  local s = string.rep("x", 1 << 20)
  while true do s = s .. s end
end
-- Many small allocations: the state ends at its limit exactly, where the traceback is built.
local function grow_tables()
  G = {}
  while true do G[#G + 1] = {} end
end
if not a.in_solve then grow() end
duet.run{
  out = false, progress = false,
  engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3}},
  workload = {problems = {{}}, solve = function(ctx, problem) if a.tables then grow_tables() else grow() end end},
}
