-- Synthetic PRM scores: seeded, correlated with the problem and with the beam, so that pruning
-- decisions are reproducible and a beam's scores tell something about its answer.
--
-- A trajectory has a latent quality q. The root's q depends on the problem's difficulty; each
-- step moves q by a random step of its own (so siblings diverge and children inherit their
-- parent's quality). A step's PRM score is sigmoid(q + noise); the answer at the end is correct
-- with probability sigmoid(gain * q).
local duet = require("duet")

local M = {}

M.params = {
  level_offset = {2.0, 1.2, 0.5, -0.2, -1.0},  -- easier levels start from better trajectories
  problem_sd = 0.8,   -- spread between problems of one level
  step_sd = 0.45,     -- how far one step moves a trajectory's quality
  noise_sd = 0.6,     -- PRM noise around the quality
  gain = 1.5,         -- how strongly quality predicts a correct answer
}

local function sigmoid(x) return 1 / (1 + math.exp(-x)) end

function M.root_quality(seed, problem)
  local p = M.params
  local base = p.level_offset[problem.level or 3] or 0
  return base + p.problem_sd * duet.normal(seed, "problem", problem.index)
end

-- The quality after `steps` more steps (default 1) taken at once; `key` names them uniquely
-- (problem, path, depth). Steps move q independently, so k of them move it by sqrt(k) steps' spread.
function M.next_quality(q, seed, key, steps)
  return q + M.params.step_sd * math.sqrt(steps or 1) * duet.normal(seed, "q", key)
end

function M.step_score(q, seed, key) return sigmoid(q + M.params.noise_sd * duet.normal(seed, "s", key)) end

function M.correct(q, seed, key) return duet.uniform(seed, "correct", key) < sigmoid(M.params.gain * q) end

-- Aggregation of a trajectory's step scores (search-and-learn: last, min or prod).
function M.aggregate(scores, how)
  if #scores == 0 then return 0 end
  if how == "last" then return scores[#scores] end
  if how == "min" then
    local m = 1
    for _, s in ipairs(scores) do m = math.min(m, s) end
    return m
  end
  if how == "prod" then
    local p = 1
    for _, s in ipairs(scores) do p = p * s end
    return p
  end
  error("unknown aggregation '" .. tostring(how) .. "' (valid: last, min, prod)", 2)
end

return M
