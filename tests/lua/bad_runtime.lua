local function inner() error("boom from the script") end
local function outer() inner() end
outer()
