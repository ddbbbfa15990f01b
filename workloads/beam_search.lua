-- Beam search with a process reward model, with search-and-learn's semantics
-- (huggingface/search-and-learn, beam_search.py): every iteration the active beams are repeated
-- to `n` candidates, each candidate generates one reasoning step (stopping at "\n\n"; the last
-- iteration runs to the end), the PRM scores every candidate, completed candidates leave the
-- pool, and the best n / beam_width of the rest survive. The search stops when no beam is left
-- active or after num_iterations; the answer is the completed beam with the best aggregated score.
local duet = require("duet")
local S = require("workloads.search")
local O = require("workloads.options")

local M = {}

local function solve(ctx, problem, o)
  local survivors = math.max(1, o.n // o.beam_width)
  local active = {S.root(problem, o)}
  local completed = {}
  local iterations = 0
  for it = 1, o.num_iterations do
    iterations = it
    local specs, last_of = {}, {}
    for i = 1, o.n do
      local parent = active[(i - 1) % #active + 1]
      -- A duplicate repeats the previous sibling's step verbatim (same tokens, same quality, same
      -- score). Siblings are not neighbours: candidates go to the beams in turn.
      local prev = last_of[parent]
      local dup = prev and duet.uniform(o.seed, "dup", parent.key, i) < o.duplicate_rate
      local key = dup and prev.key or (parent.key .. "." .. i)
      specs[i] = {parent = parent, no = i, key = key, same_as = dup and {step_key = key} or nil}
      last_of[parent] = specs[i]
    end
    local children = S.expand_and_score(ctx, problem, specs, o, it == o.num_iterations)
    for _, parent in ipairs(active) do S.release(ctx, parent, o, false) end
    local candidates = {}
    local seen = {}
    for _, c in ipairs(children) do
      if c.done then
        completed[#completed + 1] = c
        S.release(ctx, c, o, false)
      elseif o.filter_duplicates and seen[c.step_key .. "@" .. c.parent.key] then
        S.release(ctx, c, o, true)
      else
        seen[c.step_key .. "@" .. c.parent.key] = true
        candidates[#candidates + 1] = c
      end
    end
    local agg = {}  -- each candidate's aggregate once, not once per comparison
    for _, c in ipairs(candidates) do agg[c] = S.aggregate(c, o) end
    table.sort(candidates, function(a, b) return agg[a] > agg[b] end)
    active = {}
    for i, c in ipairs(candidates) do
      if i <= survivors then active[#active + 1] = c else S.release(ctx, c, o, true) end
    end
    if #active == 0 then break end
  end
  for _, t in ipairs(active) do S.release(ctx, t, o, false) end
  local pool = #completed > 0 and completed or active
  local best, score = S.best(pool, o)
  return {score = score or 0, correct = best and best.correct or false, iterations = iterations, level = problem.level}
end

-- workload{problems = ..., n = 4, beam_width = 4, ...} -> a duet.run workload
function M.workload(opts)
  local o = S.options(opts)
  S.check_beams(o, 2)
  return {name = "beam_search", options = o, problems = opts.problems,
          solve = function(ctx, problem) return solve(ctx, problem, O.seeded(o, ctx)) end}
end

return M
