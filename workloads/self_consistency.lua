-- Self-consistency (Wang et al., 2023): n sampled solutions, no verifier, and the answer given by
-- most of them wins. Each sample's answer is the right one with probability that grows with its
-- trajectory's quality; wrong answers fall on a few distractors, so that they can also agree.
local duet = require("duet")
local S = require("workloads.search")
local O = require("workloads.options")

local M = {}

local function solve(ctx, problem, o)
  local root = S.root(problem, o)
  local llm = O.engine(ctx, o, "llm")
  local samples, ids = {}, {}
  for i = 1, o.n do
    samples[i] = S.generate(ctx, problem, root, i, o, true)
    ids[i] = samples[i].llm
  end
  local results = duet.await(ids)
  local votes, order = {}, {}  -- order: the answers as they first occur
  for i, s in ipairs(samples) do
    S.step_done(s, results[i], o)
    llm:release(s.llm)
    local answer = s.correct and 0 or 1 + math.floor(duet.uniform(o.seed, "distractor", s.key) * o.distractors)
    if not votes[answer] then order[#order + 1] = answer end
    votes[answer] = (votes[answer] or 0) + 1
  end
  -- A tie goes to the answer that occurred first, as search-and-learn's majority vote breaks it; not
  -- to the right answer, which would make a vote of two as good as two tries.
  local winner, most = nil, -1
  for _, answer in ipairs(order) do
    if votes[answer] > most then winner, most = answer, votes[answer] end
  end
  return {score = most / o.n, correct = winner == 0, iterations = 1, level = problem.level}
end

function M.workload(opts)
  local no_prm = "self-consistency has no verifier"
  local o = S.options(opts, {distractors = {3, O.integer(1)}},
                      {prm = no_prm, prm_mode = no_prm, score_cache = no_prm, agg = no_prm,
                       priority_eviction = no_prm, beam_width = "self-consistency has no beams",
                       num_iterations = "self-consistency samples whole solutions",
                       filter_duplicates = "self-consistency has no beams", duplicate_rate = "self-consistency has no beams"})
  return {name = "self_consistency", options = o, problems = opts.problems,
          solve = function(ctx, problem) return solve(ctx, problem, O.seeded(o, ctx)) end}
end

return M
