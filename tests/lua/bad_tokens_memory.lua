-- duet.tokens on a text whose encoding would take more memory than the script may hold: refused
-- (sentencepiece works outside the Lua state's account).
local duet = require("duet")
duet.tokens(string.rep("The answer is 42. ", 20000))
