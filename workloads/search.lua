-- The pieces every search workload shares: trajectories that grow one reasoning step at a time on
-- the generator, and PRM scoring of them, either of the full trajectory each time
-- (search-and-learn's way) or incrementally (the PRM sequence is forked and only the new step is
-- prefilled).
--
-- A trajectory: {llm = kept generator sequence id (nil for the bare prompt), prm = kept PRM
-- sequence id (incremental scoring), len = tokens, steps = reasoning steps so far, ends = token
-- positions where steps end, scores = PRM score per step, q = latent quality, key = its path,
-- target = steps to its answer, done = finished (answer or truncated), correct}.
local duet = require("duet")
local steps = require("workloads.step_model")
local prm_scores = require("workloads.prm_scores")
local O = require("workloads.options")

local S = {}

S.defaults = {
  n = 4,                    -- beams (candidates per iteration)
  beam_width = 4,           -- expansions per surviving beam
  num_iterations = 40,      -- the last iteration runs to the end of the solution
  temperature = 0.8,
  top_p = 1.0,
  max_tokens = 2048,        -- per step, as search-and-learn's sampling params
  agg = "last",             -- PRM aggregation: last, min or prod
  prm_mode = "full",        -- "full" re-scoring of the trajectory, or "incremental"
  score_cache = false,      -- remember step scores; only new steps are scored
  priority_eviction = false,-- pruned beams' blocks are evicted first
  filter_duplicates = false,
  duplicate_rate = 0.0,     -- chance that a candidate repeats its sibling's step verbatim
  llm = "llm",
  prm = "prm",
  seed = nil,               -- the keyed randomness's seed; nil: duet.run's seed (O.seeded)
}

-- What each option may be (workloads/options.lua). A workload that adds options passes their kinds
-- with their defaults.
S.kinds = {
  n = O.integer(1), beam_width = O.integer(1), num_iterations = O.integer(1),
  temperature = O.number(0), top_p = O.number(0, 1, true), max_tokens = O.integer(1),
  agg = O.one_of("last", "min", "prod"), prm_mode = O.one_of("full", "incremental"),
  score_cache = O.boolean, priority_eviction = O.boolean, filter_duplicates = O.boolean,
  duplicate_rate = O.number(0, 1), llm = O.string, prm = O.string, seed = O.key,
}

-- opts with every default filled in; unknown keys and bad values are errors at the line that
-- called the workload. `extra`: a workload's own options, {name = {default, kind}}, or
-- {name = default} (then a value must have the default's type). `unused`: {name = why} for the
-- shared options this workload does not use, which are errors rather than silently ignored.
function S.options(opts, extra, unused)
  local names = {}
  for name in pairs(unused or {}) do names[#names + 1] = name end
  table.sort(names)  -- a stable first error: pairs() follows per-process string hashes
  for _, name in ipairs(names) do
    if type(opts) == "table" and opts[name] ~= nil then error("search option " .. name .. ": " .. unused[name], 3) end
  end
  local kinds, defaults = {}, {}
  for k, v in pairs(S.kinds) do kinds[k] = v end
  for k, v in pairs(S.defaults) do defaults[k] = v end
  for k, v in pairs(extra or {}) do
    if type(v) == "table" then
      defaults[k], kinds[k] = v[1], v[2]
    else
      local want = type(v)
      defaults[k], kinds[k] = v, function(x) if type(x) ~= want then return "a " .. want end end
    end
  end
  local o = O.merge("search", kinds, defaults, opts, 3, {"problems"})
  return o  -- not a tail call: the level counts this frame
end

-- Beam search and DVTS keep n / beam_width beams (or subtrees): n must be a multiple of beam_width
-- (search-and-learn checks it for DVTS only; its beam search would keep n // beam_width).
-- `level` as error()'s, seen from the caller.
function S.check_beams(o, level)
  if o.n % o.beam_width ~= 0 then
    error(string.format("search options n = %d and beam_width = %d: n must be a multiple of beam_width " ..
                        "(n / beam_width beams are kept)", o.n, o.beam_width), level + 1)
  end
end

function S.root(problem, o)
  return {llm = nil, prm = nil, len = problem.prompt_tokens, steps = 0, ends = {}, scores = {},
          q = prm_scores.root_quality(o.seed, problem), key = tostring(problem.index),
          target = steps.steps_to_answer(problem.level, o.seed, problem.index), done = false}
end

local function copy(t) return table.move(t, 1, #t, 1, {}) end

-- Submits the next step of a child of `parent` on the generator; returns the child (pending).
-- `to_end`: the last iteration runs to the end of the solution instead of stopping at "\n\n".
function S.generate(ctx, problem, parent, child_no, o, to_end, same_as)
  local llm = O.engine(ctx, o, "llm")
  local key = same_as and same_as.step_key or (parent.key .. "." .. child_no)
  local child = {parent = parent, key = parent.key .. "." .. child_no, step_key = key, steps = parent.steps,
                 ends = copy(parent.ends), scores = copy(parent.scores), target = parent.target}
  child.to_end = to_end or parent.steps + 1 >= parent.target  -- this request holds every remaining step
  local holds = child.to_end and math.max(1, parent.target - parent.steps) or 1
  child.q = prm_scores.next_quality(parent.q, o.seed, key, holds)
  local level = problem.level
  local length, stop
  if child.to_end then
    -- Its steps in order, each with the "\n\n" that ends it, then the answer.
    child.step_lengths = {}
    length = 0
    for s = parent.steps + 1, parent.target - 1 do
      child.step_lengths[#child.step_lengths + 1] = steps.step_tokens(level, o.seed, key, s) + 1
      length = length + child.step_lengths[#child.step_lengths]
    end
    child.step_lengths[#child.step_lengths + 1] = steps.answer_tokens(level, o.seed, key)
    length = length + child.step_lengths[#child.step_lengths]
    stop = {"eos"}
  else
    length = steps.step_tokens(level, o.seed, key)
    stop = {"step", "eos"}
  end
  local spec = {max_tokens = o.max_tokens, temperature = o.temperature, top_p = o.top_p, keep = true,
                stop = stop, stop_at = length, seed = duet.hash(o.seed, "tokens", key)}
  if parent.llm then spec.parent = parent.llm else spec.prompt = problem.prompt end
  child.llm = llm:submit(spec)
  return child
end

-- Records a generated step; a finished answer (or a truncated step) completes the trajectory. A
-- request generated to the end holds every remaining step, not one: each of its steps that it
-- finished ends where the PRM scores it, as search-and-learn's PRM splits a solution at every
-- "\n\n" (a best-of-N sample, a beam search's last iteration).
function S.step_done(child, result, o)
  child.len = result.num_tokens
  child.steps = child.to_end and math.max(child.target, child.steps + 1) or child.steps + 1
  child.new_ends = 1
  if child.to_end then
    local at = child.parent.len - 1
    for i = 1, #child.step_lengths - 1 do
      at = at + child.step_lengths[i]
      if at >= result.num_tokens - 1 then break end
      child.ends[#child.ends + 1] = at
      child.new_ends = child.new_ends + 1
    end
  end
  child.ends[#child.ends + 1] = result.num_tokens - 1
  child.done = result.finish ~= "stop" or child.steps >= child.target
  if child.done then
    -- A solution cut off by max_tokens has no answer.
    child.correct = result.finish == "stop" and prm_scores.correct(child.q, o.seed, child.step_key)
  end
end

-- The scores of a request's steps before its last: the trajectory's quality walks from its
-- parent's to the child's (a Brownian bridge, so the last step's quality, and with it the answer's
-- correctness and its score, are what they are when the request is scored at its end alone).
-- Keyed by the step, as the quality is: a duplicate's identical text gets its twin's scores.
local function inner_scores(child, o)
  local q, k = child.parent.q, child.new_ends
  for j = 1, k - 1 do
    local left = k - j + 1  -- steps from q to the child's quality
    q = q + (child.q - q) / left +
        prm_scores.params.step_sd * math.sqrt((left - 1) / left) * duet.normal(o.seed, "bridge", child.step_key, j)
    child.scores[#child.scores + 1] = prm_scores.step_score(q, o.seed, child.step_key .. ":" .. j)
  end
end

-- The generator's tokens from `from` (0-based; default all) as the PRM reads them: as they are, or
-- folded into a smaller PRM vocabulary (a Llama 3 or Qwen2.5 generator with a Mistral or Llama
-- PRM). duet takes the PRM to read as many tokens as the generator wrote, tokenizers aside.
local function prm_tokens(llm, prm, id, from)
  local t = llm:tokens(id, from)
  if prm.vocab_size < llm.vocab_size then t = t:fold(prm.vocab_size) end
  return t
end

-- Submits the PRM request that scores a child's new steps (one, or every step of a request
-- generated to the end); returns its id.
function S.score(ctx, problem, child, o)
  local prm, llm = O.engine(ctx, o, "prm"), O.engine(ctx, o, "llm")
  inner_scores(child, o)
  child.scores[#child.scores + 1] = prm_scores.step_score(child.q, o.seed, child.step_key)
  local positions, scores = {}, {}  -- the new steps' ends and scores
  for i = #child.ends - child.new_ends + 1, #child.ends do
    positions[#positions + 1], scores[#scores + 1] = child.ends[i], child.scores[i]
  end
  if o.prm_mode == "incremental" then
    local parent = child.parent
    local spec = {kind = "score", keep = true, score_positions = positions, scores = scores}
    if parent.prm then
      spec.parent = parent.prm
      spec.append = prm_tokens(llm, prm, child.llm, parent.len)
    else
      spec.prompt = prm_tokens(llm, prm, child.llm)
    end
    child.prm = prm:submit(spec)
    return child.prm
  end
  -- Full re-scoring: the whole trajectory, with a score at every step end, unless the score
  -- cache already holds the earlier steps' scores.
  if not o.score_cache then positions, scores = child.ends, child.scores end
  return prm:submit{kind = "score", prompt = prm_tokens(llm, prm, child.llm), score_positions = positions,
                    scores = scores}
end

function S.aggregate(t, o) return prm_scores.aggregate(t.scores, o.agg) end

-- Gives a trajectory's kept sequences back; pruned ones may go to the front of the eviction order.
function S.release(ctx, t, o, pruned)
  local llm, prm = O.engine(ctx, o, "llm"), O.engine(ctx, o, "prm")
  if pruned and o.priority_eviction then
    if t.llm then llm:set_priority(t.llm, 1) end
    if t.prm then prm:set_priority(t.prm, 1) end
  end
  if t.llm then llm:release(t.llm) end
  if t.prm then prm:release(t.prm) end
  t.llm, t.prm = nil, nil
end

-- The best of a list by aggregated score (ties: the earlier).
function S.best(list, o)
  local best, best_score
  for _, t in ipairs(list) do
    local s = S.aggregate(t, o)
    if not best or s > best_score then best, best_score = t, s end
  end
  return best, best_score
end

-- Generates a step for each child spec {parent, no, same_as} and scores them all; returns children.
function S.expand_and_score(ctx, problem, specs, o, to_end)
  local children, ids = {}, {}
  for i, s in ipairs(specs) do
    children[i] = S.generate(ctx, problem, s.parent, s.no, o, to_end, s.same_as)
    ids[i] = children[i].llm
  end
  local results = duet.await(ids)
  for i, child in ipairs(children) do S.step_done(child, results[i], o) end
  local prm_ids = {}
  for i, child in ipairs(children) do prm_ids[i] = S.score(ctx, problem, child, o) end
  duet.await(prm_ids)
  return children
end

return S
