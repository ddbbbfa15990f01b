-- Best-of-N with a PRM (search-and-learn's best_of_n): n complete solutions are sampled per
-- problem, the PRM scores every step of each, and the solution with the best aggregated score is
-- the answer.
local duet = require("duet")
local S = require("workloads.search")
local O = require("workloads.options")

local M = {}

local function solve(ctx, problem, o)
  local root = S.root(problem, o)
  local specs = {}
  for i = 1, o.n do specs[i] = {parent = root, no = i} end
  local samples = S.expand_and_score(ctx, problem, specs, o, true)
  for _, s in ipairs(samples) do S.release(ctx, s, o, false) end
  local best, score = S.best(samples, o)
  return {score = score, correct = best.correct, iterations = 1, level = problem.level}
end

-- workload{problems, n = 4, agg = "last", ...}: a duet.run workload. A sample is generated in one
-- request, and one PRM request scores the whole solution at the end of each of its steps (prm_mode
-- "full"); `agg` (last, min or prod) aggregates those scores.
function M.workload(opts)
  local whole = "best-of-N scores each whole solution once"
  local o = S.options(opts, nil, {prm_mode = whole .. " (prm_mode 'full')", score_cache = whole,
                                  beam_width = "best-of-N has no beams", num_iterations = "best-of-N samples whole solutions",
                                  filter_duplicates = "best-of-N has no beams", duplicate_rate = "best-of-N has no beams",
                                  priority_eviction = "best-of-N prunes nothing"})
  o.prm_mode = "full"
  return {name = "best_of_n", options = o, problems = opts.problems,
          solve = function(ctx, problem) return solve(ctx, problem, O.seeded(o, ctx)) end}
end

return M
