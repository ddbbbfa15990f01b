-- Diverse verifier tree search (search-and-learn's dvts): the n beams are split into
-- n / beam_width independent subtrees; every iteration each subtree expands its beam into
-- beam_width candidates and keeps the best one, so subtrees never collapse onto one trajectory.
-- The answer is the best completed leaf over all subtrees.
local S = require("workloads.search")
local O = require("workloads.options")

local M = {}

local function solve(ctx, problem, o)
  local root = S.root(problem, o)
  local trees = {}
  for t = 1, math.max(1, o.n // o.beam_width) do trees[t] = {beam = root, done = nil} end
  local iterations = 0
  for it = 1, o.num_iterations do
    iterations = it
    local specs, owner = {}, {}
    for t, tree in ipairs(trees) do
      if not tree.done then
        for k = 1, o.beam_width do
          specs[#specs + 1] = {parent = tree.beam, no = t * 1000 + k}
          owner[#specs] = t
        end
      end
    end
    if #specs == 0 then break end
    local children = S.expand_and_score(ctx, problem, specs, o, it == o.num_iterations)
    local best = {}
    for i, c in ipairs(children) do
      local t = owner[i]
      if not best[t] or S.aggregate(c, o) > S.aggregate(best[t], o) then best[t] = c end
    end
    for t, tree in ipairs(trees) do
      if best[t] then
        if tree.beam ~= root then S.release(ctx, tree.beam, o, false) end
        tree.beam = best[t]
        if best[t].done then tree.done = best[t] end
      end
    end
    for i, c in ipairs(children) do
      if best[owner[i]] ~= c then S.release(ctx, c, o, true) end
    end
  end
  local leaves = {}
  for _, tree in ipairs(trees) do
    leaves[#leaves + 1] = tree.done or tree.beam
    S.release(ctx, tree.beam, o, false)
  end
  local best, score = S.best(leaves, o)
  return {score = score, correct = best.correct or false, iterations = iterations, level = problem.level}
end

function M.workload(opts)
  local o = S.options(opts, nil, {filter_duplicates = "search-and-learn's DVTS has no duplicate filter",
                                  duplicate_rate = "DVTS models no duplicate candidates"})
  S.check_beams(o, 2)
  return {name = "dvts", options = o, problems = opts.problems,
          solve = function(ctx, problem) return solve(ctx, problem, O.seeded(o, ctx)) end}
end

return M
