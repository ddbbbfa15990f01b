-- An endless loop in the script's main chunk: stopped at a small --lua-instruction-limit exactly.
local x = 0
while true do x = x + 1 end
