-- Chat serving: a public trace replayed through the Lua API. Each request is a "problem" whose
-- solve() sleeps until the request's arrival time and then generates exactly its output length
-- (vLLM's ignore_eos + max_tokens), with the trace's prompt tokens (Mooncake's block hashes give
-- the prefix sharing the trace recorded).
local duet = require("duet")
local O = require("workloads.options")

local M = {}

local kinds = {trace = O.string, max_requests = O.integer(0), rate_scale = O.number(0, nil, true),
               engine = O.string, vocab_size = O.integer(1), seed = O.integer(0),
               on_too_long = O.one_of("error", "skip")}

-- workload{trace = path, max_requests = N (0: all), rate_scale = 1, engine = "llm", vocab_size = V,
-- seed = 0, on_too_long = "error"}. The prompts are drawn when the workload is built, before any
-- run: from its own seed (where the trace has no token ids to follow), not the run's. A request
-- longer than the engine's max_model_len (prompt + output) stops the run with an error, or with
-- on_too_long = "skip" (duet simulate's --on-too-long default) finishes at once with iterations = 0
-- and submits nothing: a whole public trace holds a few such requests.
function M.workload(opts)
  opts = O.merge("chat", kinds, {rate_scale = 1, engine = "llm", seed = 0, on_too_long = "error"}, opts, 2)
  if opts.trace == nil then error("chat option trace: missing (a trace file's path)", 2) end
  local requests = duet.trace(opts.trace, {max_requests = opts.max_requests, vocab_size = opts.vocab_size,
                                           seed = opts.seed})
  local scale, engine, skip_too_long = opts.rate_scale, opts.engine, opts.on_too_long == "skip"
  return {
    name = "chat",
    options = opts,
    problems = requests,
    solve = function(ctx, r)
      local due = r.arrival_s / scale
      -- An open-loop replay: each request starts at its arrival. One that starts later was held
      -- back by duet.run's concurrency (problems in flight: here requests, sleeping ones too), and
      -- its latencies would count from the late start. 1 ms leaves a real engine's clock its jitter.
      if duet.now() > due + 1e-3 then
        error(string.format("chat: request %d starts %.3f s after its arrival (%.3f s): duet.run's " ..
                            "concurrency (problems in flight, each request one, waiting ones too) holds " ..
                            "back this open-loop replay; give concurrency at least the requests in flight " ..
                            "at once (max_requests always is)", ctx.index, duet.now() - due, due))
      end
      local max_tokens = math.max(1, r.output_tokens)
      local llm = O.engine(ctx, opts, "engine")
      local limit = llm.max_model_len
      if r.input_tokens + max_tokens > limit then
        if skip_too_long then return {iterations = 0} end
        error(string.format("chat: request %d has %d tokens (prompt %d + output %d), more than engine '%s''s " ..
                            "max_model_len %d; raise max_model_len or skip such requests with chat's " ..
                            "on_too_long = \"skip\"", ctx.index, r.input_tokens + max_tokens, r.input_tokens,
                            max_tokens, engine, limit))
      end
      duet.sleep_until(due)
      local id = llm:submit{prompt = r.prompt, max_tokens = max_tokens, ignore_eos = true}
      local res = duet.await(id)[1]
      return {score = res.output_tokens, iterations = 1}
    end,
  }
end

return M
