-- A workload's options: every key known and every value of its kind, checked when the workload is
-- built. A bad option is an error at the script's line that named it, never a silent default, an
-- empty search or a NaN at the end of the run (n = 0 would search nothing, rate_scale = 0 would
-- divide every arrival time by zero).
--
-- A kind is a function of the value that returns nil when the value fits, or else what the value
-- should be ("an integer >= 1").
local O = {}

local function is_finite(v) return type(v) == "number" and v == v and v > -math.huge and v < math.huge end
local function is_integer(v) return math.type(v) == "integer" or (is_finite(v) and v == math.floor(v)) end

-- An integer in [lo, hi]; either bound may be nil.
function O.integer(lo, hi)
  local want = "an integer" .. (lo and hi and (" in [" .. lo .. ", " .. hi .. "]") or lo and (" >= " .. lo) or
                                 hi and (" <= " .. hi) or "")
  return function(v)
    if type(v) ~= "number" or not is_integer(v) or (lo and v < lo) or (hi and v > hi) then return want end
  end
end

-- A finite number in [lo, hi], or in (lo, hi] when lo_open.
function O.number(lo, hi, lo_open)
  local low = lo and ((lo_open and "(" or "[") .. lo) or "(-inf"
  local want = "a finite number in " .. low .. ", " .. (hi and (hi .. "]") or "inf)")
  return function(v)
    if not is_finite(v) then return want end
    if lo and (v < lo or (lo_open and v == lo)) then return want end
    if hi and v > hi then return want end
  end
end

function O.one_of(...)
  local valid = {...}
  local want = "one of " .. table.concat(valid, ", ")
  return function(v)
    for _, x in ipairs(valid) do
      if v == x then return nil end
    end
    return want
  end
end

function O.boolean(v) if type(v) ~= "boolean" then return "true or false" end end
function O.string(v) if type(v) ~= "string" or v == "" then return "a non-empty string" end end
-- duet.hash and duet.uniform keys: seeds.
function O.key(v)
  if math.type(v) ~= "integer" and type(v) ~= "string" then return "an integer or a string" end
end

local function describe(v)
  if type(v) == "string" then return "'" .. v .. "'" end
  return tostring(v) .. (type(v) == "number" and "" or " (a " .. type(v) .. ")")
end

-- The options `opts` over `defaults`, each checked against `kinds` (which names every option;
-- `passed` lists keys taken but not checked here, such as `problems`). `what` names the workload
-- in errors, and `level` is error()'s level as seen by the caller of merge.
function O.merge(what, kinds, defaults, opts, level, passed)
  level = (level or 1) + 1
  if opts ~= nil and type(opts) ~= "table" then error(what .. ": expected a table of options, got a " .. type(opts), level) end
  local skip = {}
  for _, k in ipairs(passed or {}) do skip[k] = true end
  local o = {}
  for k, v in pairs(defaults) do o[k] = v end
  local unknown = {}
  for k, v in pairs(opts or {}) do
    if kinds[k] == nil and not skip[k] then unknown[#unknown + 1] = tostring(k) end
    o[k] = v
  end
  if #unknown > 0 then
    -- All of them, sorted: pairs() follows string hashes that Lua seeds afresh in each process.
    table.sort(unknown)
    local valid = {}
    for name in pairs(kinds) do valid[#valid + 1] = name end
    table.sort(valid)
    error("unknown " .. what .. " option" .. (#unknown > 1 and "s '" or " '") .. table.concat(unknown, "', '") ..
          "' (valid: " .. table.concat(valid, ", ") .. ")", level)
  end
  local names = {}
  for name in pairs(kinds) do names[#names + 1] = name end
  table.sort(names)  -- the first bad option in a stable order
  for _, name in ipairs(names) do
    local v = o[name]
    local want = v ~= nil and kinds[name](v)
    if want then error(what .. " option " .. name .. ": expected " .. want .. ", got " .. describe(v), level) end
  end
  return o
end

-- o for one problem: its `seed` option, or when none was given duet.run's `seed` (ctx.run_seed),
-- so that a sweep over run seeds draws new samples while a workload's own seed still pins them.
function O.seeded(o, ctx)
  if o.seed ~= nil then return o end
  return setmetatable({seed = ctx.run_seed}, {__index = o})
end

-- The engine that a workload's option names (`o[option]`, e.g. llm = "llm"). A run without an engine
-- of that name gets an error that also says which option to set, not only "unknown engine".
function O.engine(ctx, o, option)
  local engine = rawget(ctx.engines, o[option])  -- the common case, without a pcall per request
  if engine ~= nil then return engine end
  local ok
  ok, engine = pcall(function() return ctx.engines[o[option]] end)
  if ok then return engine end
  error(string.format("%s: the workload's option %s = '%s' names it; name an engine so, or pass %s = NAME " ..
                      "to the workload", tostring(engine):gsub("^[^\n]-:%d+: ", ""), option, tostring(o[option]),
                      option), 2)
end

return O
