-- Speculative decoding (Leviathan et al., 2023; Chen et al., 2023) with a draft and a target model
-- on one GPU. Each round the draft proposes gamma tokens (gamma decode steps), the target
-- verifies them in one forward pass over gamma tokens, and the accepted prefix plus the target's
-- own next token is kept. Acceptance: each drafted token is accepted with probability alpha,
-- independently, until the first rejection.
--
-- Approximation: real engines roll rejected tokens' KV back in place; here the draft and target
-- sequences keep them (their KV is a little larger than the accepted text), while the compute per
-- round, gamma draft decodes and one gamma-token verification, is exact.
local duet = require("duet")
local O = require("workloads.options")

local M = {}

M.defaults = {gamma = 4, alpha = 0.7, output_tokens = 256, draft = "draft", target = "target"}  -- seed: O.seeded

local function solve(ctx, problem, o)
  local draft, target = O.engine(ctx, o, "draft"), O.engine(ctx, o, "target")
  local d = draft:submit{prompt = problem.prompt, max_tokens = 1, ignore_eos = true, keep = true,
                         seed = duet.hash(o.seed, problem.index, "d0")}
  local t = target:submit{kind = "score", prompt = problem.prompt, keep = true}
  duet.await(d, t)
  local accepted, rounds, drafted = 0, 0, 0
  while accepted < o.output_tokens do
    rounds = rounds + 1
    local len_before = #draft:tokens(d)
    local proposal = draft:submit{parent = d, max_tokens = o.gamma, ignore_eos = true, keep = true,
                                  seed = duet.hash(o.seed, problem.index, rounds)}
    duet.await(proposal)
    draft:release(d)
    d = proposal
    local verify = target:submit{kind = "score", parent = t, append = draft:tokens(d, len_before), keep = true}
    duet.await(verify)
    target:release(t)
    t = verify
    local k = 0
    while k < o.gamma and duet.uniform(o.seed, problem.index, rounds, k) < o.alpha do k = k + 1 end
    accepted = accepted + k + 1
    drafted = drafted + o.gamma
  end
  draft:release(d)
  target:release(t)
  return {score = (accepted - rounds) / drafted, iterations = rounds, level = problem.level}
end

local kinds = {gamma = O.integer(1), alpha = O.number(0, 1), output_tokens = O.integer(1), draft = O.string,
               target = O.string, seed = O.key}

function M.workload(opts)
  local o = O.merge("speculative", kinds, M.defaults, opts, 2, {"problems"})
  return {name = "speculative", options = o, problems = opts.problems,
          solve = function(ctx, problem) return solve(ctx, problem, O.seeded(o, ctx)) end}
end

return M
