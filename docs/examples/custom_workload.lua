-- docs/lua-api.md, "Writing a workload": a search is straight-line Lua in a coroutine. Here each
-- problem drafts an answer, asks the PRM for a score, and retries once if the score is low.
local math500 = require("workloads.math500")

local function solve(ctx, problem)
  local llm, prm = ctx.engines.llm, ctx.engines.prm
  local tries = 0
  local score
  repeat
    tries = tries + 1
    local draft = llm:submit{prompt = problem.prompt, max_tokens = 512, stop_at = 120, stop = {"eos"}, keep = true,
                             seed = duet.hash(problem.index, tries)}
    duet.await(draft)                                     -- yields until the generator is done
    local s = prm:submit{kind = "score", prompt = llm:tokens(draft),
                         scores = {duet.uniform(problem.index, tries)}}
    llm:release(draft)
    score = duet.await(s)[1].score                        -- yields until the PRM is done
  until score > 0.5 or tries == 2
  return {score = score, iterations = tries, level = problem.level}
end

local result = duet.run{
  gpu = "h100", out = false,
  engines = {
    {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3},
    {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.6},
  },
  workload = {problems = math500.load{limit = 20}, solve = solve},
}
print(string.format("%d problems, mean score %.3f, LLM requests %d", result.problems, result.mean_score,
                    result.engines.llm.requests))
assert(result.engines.llm.requests >= 20 and result.engines.llm.requests <= 40)
