-- Every workload module runs end to end on the simulator.
local math500 = require("workloads.math500")
local problems = math500.load{limit = 4}
local engines = {
  {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3},
  {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.6},
}
local function run(workload, e)
  return duet.run{gpu = "h100", engines = e or engines, workload = workload, out = false, progress = false}
end
for _, name in ipairs{"beam_search", "best_of_n", "dvts", "self_consistency"} do
  local w = require("workloads." .. name)
  local beams = (name == "beam_search" or name == "dvts") and 4 or nil
  local r = run(w.workload{problems = problems, n = 8, beam_width = beams})
  assert(r.problems == #problems, name)
  assert(r.problems_per_s > 0, name)
  print(string.format("%-18s %8.3f problems/s, accuracy %.2f", name, r.problems_per_s, r.accuracy))
end

-- A solution generated to its end in one request holds all its remaining steps: its answer is
-- judged. (It used to count as one step, so that best-of-N, self-consistency and a beam search cut
-- short by num_iterations judged no answer: accuracy 0.)
local judged = math500.load{limit = 32}
local function accuracy_of(w)
  local r = run(w)
  assert(r.accuracy, "no problem's answer was judged")
  return r.accuracy
end
local bon = accuracy_of(require("workloads.best_of_n").workload{problems = judged, n = 8})
local sc = accuracy_of(require("workloads.self_consistency").workload{problems = judged, n = 8})
local short = accuracy_of(require("workloads.beam_search").workload{problems = judged, n = 8, num_iterations = 1})
assert(bon > 0.2 and sc > 0.2 and short > 0.1, string.format("accuracy: best-of-n %.2f, self-consistency %.2f, " ..
                                                              "one-iteration beam %.2f", bon, sc, short))
print(string.format("accuracy at n = 8: best-of-n %.2f, self-consistency %.2f, one-iteration beam search %.2f",
                    bon, sc, short))
-- Best-of-N's PRM scores every step of a sample, so its aggregation matters: a sample's min is at
-- most its last score, and its product at most its min (all three were the last score once).
local function bon_score(agg)
  return run(require("workloads.best_of_n").workload{problems = judged, n = 8, agg = agg}).mean_score
end
local last, least, prod = bon_score("last"), bon_score("min"), bon_score("prod")
assert(least < last and prod < least, string.format("best-of-N mean score: last %.3f, min %.3f, prod %.3f",
                                                    last, least, prod))
-- A self-consistency vote that ties goes to the answer given first (search-and-learn's majority
-- vote), not to the right one: a vote of two is then as good as its first sample, not as two tries.
local sc_of = function(n)
  return accuracy_of(require("workloads.self_consistency").workload{problems = judged, n = n, seed = 3})
end
local sc1, sc2 = sc_of(1), sc_of(2)
assert(sc2 == sc1, string.format("self-consistency: n = 2 %.3f, n = 1 %.3f", sc2, sc1))

-- Beam search, seen from S.expand_and_score (the one place every iteration passes through).
local S = require("workloads.search")
local expand = S.expand_and_score
local function watch(opts, see)
  S.expand_and_score = function(ctx, problem, specs, o, to_end)
    local children = expand(ctx, problem, specs, o, to_end)
    see(specs, children, to_end)
    return children
  end
  local ok, err = pcall(run, require("workloads.beam_search").workload(opts))
  S.expand_and_score = expand
  assert(ok, err)
end
-- A duplicate repeats an earlier candidate of its parent, also when the candidates alternate between
-- beams (every iteration after the first), and its identical step scores as its twin's.
local later, unequal = 0, 0
watch({problems = judged, n = 8, beam_width = 4, duplicate_rate = 0.5, seed = 1}, function(specs, children)
  local by_key = {}
  for i, c in ipairs(children) do
    by_key[c.key] = c
    if specs[i].same_as then
      if c.parent.key:find("%.") then later = later + 1 end
      local twin = by_key[c.step_key]
      if twin.scores[#twin.scores] ~= c.scores[#c.scores] then unequal = unequal + 1 end
    end
  end
end)
assert(later > 0 and unequal == 0, string.format("duplicates after the first iteration %d, scored unlike their twin %d",
                                                later, unequal))
-- The last iteration, cut short by num_iterations, generates every remaining step in one request:
-- the PRM scores each of them, as it splits a solution at every step.
local checked = 0
watch({problems = judged, n = 4, num_iterations = 2, agg = "min", prm_mode = "incremental", seed = 1},
      function(_, children, to_end)
  for _, c in ipairs(children) do
    if to_end and c.done and c.steps == c.target then
      assert(#c.scores == c.steps and #c.ends == c.steps, string.format("%d steps, %d scores", c.steps, #c.scores))
      checked = checked + 1
    end
  end
end)
assert(checked > 0, "no trajectory ended at the last iteration")
-- duet.run's seed draws the samples of a workload that names no seed of its own; one that does
-- keeps its samples whatever the run's seed.
local beam = require("workloads.beam_search")
local function tokens(run_seed, opts)
  opts.problems, opts.n, opts.num_iterations = problems, 4, 3
  return duet.run{gpu = "h100", engines = engines, seed = run_seed, out = false, progress = false,
                  workload = beam.workload(opts)}.engines.llm.generated_tokens
end
assert(tokens(0, {}) ~= tokens(1, {}), "the run's seed changed no sample")
assert(tokens(0, {seed = 7}) == tokens(1, {seed = 7}), "the workload's own seed did not pin its samples")
assert(tokens(0, {}) == tokens(9, {seed = 0}), "seed 0 given and the run's seed 0 differ")

-- No problem says whether it was right: no accuracy, rather than 0.
assert(run{problems = {{}}, solve = function() return {score = 0} end}.accuracy == nil)
local spec = require("workloads.speculative")
local r = run(spec.workload{problems = problems, gamma = 4, alpha = 0.7, output_tokens = 64},
              {{name = "draft", model = "llama-3.2-1b", gpu_memory_utilization = 0.2},
               {name = "target", model = "llama-3.1-8b", gpu_memory_utilization = 0.7}})
assert(r.problems == #problems and r.engines.draft.generated_tokens > 0 and r.engines.target.requests > 0)
print(string.format("%-18s %8.3f problems/s", "speculative", r.problems_per_s))
local chat = require("workloads.chat")
local w = chat.workload{trace = "traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv", max_requests = 50}
local c = duet.run{gpu = "h100", engines = {{name = "llm", model = "llama-3.1-8b"}}, workload = w, concurrency = 50,
                   out = false, progress = false}
assert(c.problems == 50 and c.engines.llm.requests == 50)
assert(c.makespan_s > 10, "arrivals follow the trace's timestamps")
print(string.format("%-18s %8d requests over %.1f s", "chat", c.engines.llm.requests, c.makespan_s))
-- Fewer problems in flight than requests that overlap: a request would start after its arrival,
-- and its latencies would count from then. An error, not a replay slower than the trace.
require("tests.lua.support").expect_error(function()
  duet.run{gpu = "h100", engines = {{name = "llm", model = "llama-3.1-8b"}}, out = false, progress = false,
           workload = chat.workload{trace = "traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
                                    max_requests = 5, rate_scale = 1000},
           concurrency = 1}
end, "chat: request 2 starts .* s after its arrival .*give concurrency at least the requests in flight")
-- A request longer than the engine's max_model_len: an error that names it and the option, or with
-- on_too_long = "skip" one that finishes at once, submitting nothing.
local azure = "traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
local short = {{name = "llm", model = "llama-3.1-8b", max_model_len = 1024}}
local fits = 0
for _, q in ipairs(duet.trace(azure, {max_requests = 50})) do
  if q.input_tokens + math.max(1, q.output_tokens) <= 1024 then fits = fits + 1 end
end
assert(fits > 0 and fits < 50, "the first 50 requests hold some longer than 1024 tokens: " .. fits)
require("tests.lua.support").expect_error(function()
  duet.run{gpu = "h100", engines = short, out = false, progress = false, concurrency = 50,
           workload = chat.workload{trace = azure, max_requests = 50}}
end, "chat: request %d+ has %d+ tokens %(prompt %d+ %+ output %d+%), more than engine 'llm''s max_model_len " ..
     "1024; raise max_model_len or skip such requests with chat's on_too_long = \"skip\"")
local skipped = duet.run{gpu = "h100", engines = short, out = false, progress = false, concurrency = 50,
                         workload = chat.workload{trace = azure, max_requests = 50, on_too_long = "skip"}}
assert(skipped.problems == 50 and skipped.engines.llm.requests == fits,
       "skipped: " .. skipped.engines.llm.requests .. " requests served, " .. fits .. " fit")

-- A bad option is an error at the line that built the workload, naming the option: never an empty
-- search, a NaN score or an endless wait at the end of a run.
local expect = require("tests.lua.support").expect_error
local function expect_error(build, pattern) expect(build, "check_workloads.lua:%d+: .*" .. pattern) end
expect_error(function() beam.workload{problems = problems, n = 0} end, "search option n: expected an integer >= 1, got 0")
expect_error(function() beam.workload{problems = problems, beam_width = 2.5} end, "option beam_width: expected an integer >= 1, got 2.5")
expect_error(function() beam.workload{problems = problems, num_iterations = math.huge} end, "option num_iterations: expected an integer")
expect_error(function() beam.workload{problems = problems, top_p = 0} end, "option top_p: expected a finite number in %(0, 1%], got 0")
expect_error(function() beam.workload{problems = problems, temperature = 0 / 0} end, "option temperature: expected a finite number")
expect_error(function() beam.workload{problems = problems, duplicate_rate = 1.5} end, "option duplicate_rate: expected a finite number in %[0, 1%]")
expect_error(function() beam.workload{problems = problems, agg = "mean"} end, "option agg: expected one of last, min, prod, got 'mean'")
expect_error(function() beam.workload{problems = problems, score_cache = 1} end, "option score_cache: expected true or false, got 1")
expect_error(function() beam.workload{problems = problems, prm = 2} end, "option prm: expected a non%-empty string, got 2")
expect_error(function() beam.workload{problems = problems, beams = 4} end, "unknown search option 'beams' %(valid: agg, beam_width")
expect_error(function() beam.workload("n = 4") end, "search: expected a table of options, got a string")
expect_error(function() require("workloads.self_consistency").workload{problems = problems, distractors = 0} end,
             "option distractors: expected an integer >= 1, got 0")
expect_error(function() spec.workload{problems = problems, output_tokens = 0} end,
             "speculative option output_tokens: expected an integer >= 1, got 0")
expect_error(function() spec.workload{problems = problems, alpha = -0.1} end, "speculative option alpha: expected a finite number in %[0, 1%]")
expect_error(function() spec.workload{problems = problems, gama = 4} end, "unknown speculative option 'gama'")
expect_error(function() chat.workload{max_requests = 5} end, "chat option trace: missing")
expect_error(function() chat.workload{trace = "t.csv", rate_scale = 0} end, "chat option rate_scale: expected a finite number in %(0, inf%), got 0")
expect_error(function() chat.workload{trace = "t.csv", max_request = 5} end, "unknown chat option 'max_request'")
assert(#chat.workload{trace = "traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv", max_requests = 0}.problems > 50,
       "max_requests = 0 is the whole trace, as for duet.trace")
-- Options a workload would ignore, and beams that do not divide n, are errors too.
expect_error(function() require("workloads.best_of_n").workload{problems = problems, prm_mode = "incremental"} end,
             "search option prm_mode: best%-of%-N scores each whole solution once")
expect_error(function() require("workloads.self_consistency").workload{problems = problems, score_cache = true} end,
             "search option score_cache: self%-consistency has no verifier")
expect_error(function() beam.workload{problems = problems, n = 16, beam_width = 5} end,
             "search options n = 16 and beam_width = 5: n must be a multiple of beam_width")
expect_error(function() require("workloads.dvts").workload{problems = problems, n = 4, beam_width = 8} end,
             "n must be a multiple of beam_width")
expect_error(function() require("workloads.dvts").workload{problems = problems, duplicate_rate = 0.2} end,
             "search option duplicate_rate: DVTS models no duplicate candidates")
expect_error(function() math500.load{limit = 0} end, "math500.load option limit: expected an integer >= 1, got 0")
expect_error(function() math500.load{limt = 3} end, "unknown math500.load option 'limt'")
expect_error(function() math500.load{levels = {6}} end, "math500.load option levels: expected a non%-empty list of levels 1 to 5")
-- A row without its problem text, or with a level MATH does not have, names the file and the row.
local bad_rows = os.tmpname()
local f = assert(io.open(bad_rows, "w"))
f:write('{"problem": "a", "level": 1, "answer": "1"}\n{"level": 2, "answer": "2"}\n')
f:close()
expect_error(function() math500.load{path = bad_rows} end, "math500.load: " .. bad_rows:gsub("%p", "%%%0") .. ", row 2: no 'problem' text")
f = assert(io.open(bad_rows, "w"))
f:write('{"problem": "a", "level": 9, "answer": "1"}\n')
f:close()
expect_error(function() math500.load{path = bad_rows} end, "row 1: 'level' must be 1 to 5, got 9")
os.remove(bad_rows)
-- A run's ctx.engines knows its engines: another name is an error at the line that used it.
local ok, err = pcall(duet.run, {out = false, progress = false, engines = {{name = "gen", model = "llama-3.2-1b"}},
                                 workload = {problems = {{}}, solve = function(ctx) return ctx.engines.llm:submit{prompt = 4} end}})
assert(not ok and tostring(err):find("check_workloads.lua:%d+: unknown engine 'llm' %(engines: gen%)"), tostring(err))
-- ipairs reaches the engines through a C function: the error names the Lua line that called it.
ok, err = pcall(duet.run, {out = false, progress = false, engines = {{name = "gen", model = "llama-3.2-1b"}},
                           workload = {problems = {{}}, solve = function(ctx)
                             for _ in ipairs(ctx.engines) do end
                             return {score = 0}
                           end}})
assert(not ok and tostring(err):find("check_workloads.lua:%d+: engines are named by strings %(engines: gen%), not by a number"),
       tostring(err))
-- chat's prompts follow its own seed (drawn when it is built).
local trace = "traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
local p0, p1 = chat.workload{trace = trace, max_requests = 1}.problems[1].prompt,
               chat.workload{trace = trace, max_requests = 1, seed = 1}.problems[1].prompt
local differ = 0
for i = 1, #p0 do if p0:get(i) ~= p1:get(i) then differ = differ + 1 end end
assert(#p0 == #p1 and differ > 0, "chat's seed draws other prompt tokens")
ok, err = pcall(function()
  return duet.run{out = false, progress = false, engines = {{name = "gen", model = "llama-3.2-1b"}},
                  workload = {problems = {{}}, solve = function() return {score = 0} end, concurrency = 4}}
end)
assert(not ok and tostring(err):find("check_workloads.lua:%d+: duet.run.workload: unknown key 'concurrency'"), tostring(err))
ok, err = pcall(function()
  return duet.run{out = false, progress = false, engines = {{name = "gen", model = "llama-3.2-1b"}},
                  workload = {problems = {}, solve = function() return {score = 0} end}}
end)
assert(not ok and tostring(err):find("check_workloads.lua:%d+: duet.run.workload: problems is empty: nothing to run"), tostring(err))
-- A workload's own options in the older form {name = default}: checked against the default's type.
local function my_workload(opts)  -- as a workload module's M.workload calls it
  local o = S.options(opts, {depth = 2})
  return o
end
assert(my_workload{problems = problems, depth = 3}.depth == 3)
expect_error(function() my_workload{problems = problems, depth = "deep"} end, "search option depth: expected a number")
-- Integral floats are integers (a sweep's n = 2^k is a float).
assert(beam.workload{problems = problems, n = 4.0, seed = "a"})
-- Engines not named as the workload's options expect: the error says which option to set.
expect(function()
  run(beam.workload{problems = problems}, {{name = "gen", model = "llama-3.2-1b", gpu_memory_utilization = 0.3},
                                           {name = "ver", model = "llama-3.1-8b", gpu_memory_utilization = 0.6}})
end, "unknown engine 'llm' %(engines: gen, ver%): the workload's option llm = 'llm' names it; name an engine so, " ..
     "or pass llm = NAME to the workload")
assert(run(beam.workload{problems = problems, llm = "gen", prm = "ver"},
           {{name = "gen", model = "llama-3.2-1b", gpu_memory_utilization = 0.3},
            {name = "ver", model = "llama-3.1-8b", gpu_memory_utilization = 0.6}}).problems == #problems)
print("workloads ok")
