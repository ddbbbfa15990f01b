-- Reasoning-step lengths and steps-to-answer per MATH level, fitted from PRM800K's step-level
-- data by scripts/fit_step_model.py (workloads/data/step_model.json). Every draw is keyed, so a
-- beam's steps do not depend on how the simulation interleaves problems.
local duet = require("duet")

local M = {}
local model

local function levels()
  if not model then
    model = {}
    for _, l in ipairs(duet.read_json("workloads/data/step_model.json").levels) do model[l.level] = l end
  end
  return model
end

local function lognormal(fit, ...)
  local x = math.exp(fit.mu + fit.sigma * duet.normal(...))
  x = math.max(fit.min, math.min(fit.max, x))
  return math.floor(x + 0.5)
end

local function fit_of(level, what)
  local l = levels()[level] or levels()[3]
  return l[what]
end

-- Tokens of a reasoning step (without the "\n\n" that ends it).
function M.step_tokens(level, ...) return lognormal(fit_of(level, "step_tokens"), "step", ...) end
-- Tokens of the final, answer-giving step.
function M.answer_tokens(level, ...) return lognormal(fit_of(level, "answer_step_tokens"), "answer", ...) end
-- Steps in a solution, the answer step included.
function M.steps_to_answer(level, ...) return lognormal(fit_of(level, "steps_to_answer"), "steps", ...) end

return M
