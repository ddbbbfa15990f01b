-- duet.args: a boolean flag alone, with a separate value, or with =value.
local duet = require("duet")
local a = duet.args{flag = true, other = false, n = 1}
print(string.format("flag=%s other=%s n=%d", tostring(a.flag), tostring(a.other), a.n))
