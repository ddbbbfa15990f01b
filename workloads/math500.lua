-- MATH-500 (the PRM800K test split of MATH; workloads/data/README.md): problems with their
-- difficulty level, and the prompt a generator sees, tokenized with the repository's
-- sentencepiece model (workloads/data/tokenizer).
local duet = require("duet")
local O = require("workloads.options")

local M = {}

-- Our own instruction, in the spirit of the step-by-step prompts search-and-learn uses: steps
-- separated by a blank line, so that "\n\n" ends a step, and a boxed final answer.
M.system_prompt = "You are solving a competition math problem. Work step by step. " ..
  "Write each step as a short paragraph and separate steps with a blank line. " ..
  "Finish with the final answer in the form \\boxed{answer}.\n\n"

-- load{limit = N, levels = {1, 2}, path = ...} -> array of problems:
--   {index, id, level, subject, problem, answer, prompt = TokenList, prompt_tokens}
local levels_kind = function(v)
  if type(v) ~= "table" or #v == 0 then return "a non-empty list of levels 1 to 5" end
  for _, l in ipairs(v) do
    if math.type(l) ~= "integer" or l < 1 or l > 5 then return "a non-empty list of levels 1 to 5" end
  end
end
local kinds = {limit = O.integer(1), levels = levels_kind, path = O.string}

function M.load(opts)
  opts = O.merge("math500.load", kinds, {}, opts, 2)
  local rows = duet.read_jsonl(opts.path or "workloads/data/math500.jsonl")
  local wanted
  if opts.levels then
    wanted = {}
    for _, l in ipairs(opts.levels) do wanted[l] = true end
  end
  local path = opts.path or "workloads/data/math500.jsonl"
  local out = {}
  for i, row in ipairs(rows) do
    -- A row without a problem text, or with a level outside MATH's 1 to 5, is the file's error.
    if type(row.problem) ~= "string" then
      error(string.format("math500.load: %s, row %d: no 'problem' text", path, i), 2)
    end
    if math.type(row.level) ~= "integer" or row.level < 1 or row.level > 5 then
      error(string.format("math500.load: %s, row %d: 'level' must be 1 to 5, got %s", path, i,
                          tostring(row.level)), 2)
    end
    if not wanted or wanted[row.level] then
      local prompt = duet.tokens(M.system_prompt .. row.problem .. "\n\n", true)
      out[#out + 1] = {
        index = #out + 1, id = row.unique_id, level = row.level, subject = row.subject,
        problem = row.problem, answer = row.answer, prompt = prompt, prompt_tokens = #prompt,
      }
      if opts.limit and #out >= opts.limit then break end
    end
  end
  if #out == 0 then
    error("math500.load: no problem" .. (opts.levels and " of levels " .. table.concat(opts.levels, ", ") or "") ..
          " in " .. path, 2)
  end
  return out
end

return M
