-- A GPU that is not built in: duet.run's gpu as a description (a .json file, or a table of the
-- fields duet.gpu returns), and every mistake in one an error naming the script's line and the field.
local duet = require("duet")
local support = require("tests.lua.support")

local function run(gpu)
  return duet.run(support.config{gpu = gpu, engines = {
    {name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3},
    {name = "prm", model = "llama-3.1-8b", gpu_memory_utilization = 0.6},
  }})
end

-- duet.gpu gives the figures back as a table that duet.run takes: the same GPU, the same run.
local h100 = duet.gpu("h100")
assert(math.type(h100.hbm_bytes) == "integer" and h100.kernel_launch_s > 0 and h100.efficiency_of == nil)
local built_in, described = run("h100"), run(h100)
assert(described.engines.prm.total_blocks == built_in.engines.prm.total_blocks)
assert(described.engines.prm.cost_model == built_in.engines.prm.cost_model, described.engines.prm.cost_model)

-- An H100 with half its memory keeps its name, so its operator prior: fewer blocks, the same pricing.
local half = duet.gpu("h100")
half.hbm_bytes = h100.hbm_bytes // 2
local r = run(half)
assert(r.engines.prm.total_blocks < built_in.engines.prm.total_blocks / 2, r.engines.prm.total_blocks)
assert(r.engines.prm.cost_model == built_in.engines.prm.cost_model)

-- Integer fields take integral floats, as every other integer field does.
local floats = duet.gpu("h100")
floats.sm_count, floats.hbm_bytes = 2 ^ 7 + 4, 2 ^ 36
assert(run(floats).engines.prm.total_blocks < built_in.engines.prm.total_blocks)

-- The 40 GB A100 borrows the 80 GB part's efficiencies, and its table says so.
local a100_40 = duet.gpu("a100-40gb")
assert(a100_40.efficiency_of == "A100-80GB", tostring(a100_40.efficiency_of))
assert(run(a100_40).engines.prm.cost_model:find("operator prior of a100%-80gb"), run(a100_40).engines.prm.cost_model)

-- A description from a file, found relative to the repository as a model's config.json is.
local l40s = run("docs/examples/gpus/l40s.json")
assert(l40s.engines.prm.cost_model:find("its kernel efficiencies at L40S's peak figures"), l40s.engines.prm.cost_model)
assert(duet.gpu("docs/examples/gpus/l40s.json").sm_count == 142)

-- Mistakes, each at this file's line.
local function expect_error(gpu, pattern)
  support.expect_error(function() return run(gpu) end, "check_gpus.lua:%d+: duet.run.gpu: " .. pattern)
end
local bad = duet.gpu("h100")
bad.hbm_bandwidth = 3.35
expect_error(bad, "table: GPU 'H100%-SXM': hbm_bandwidth is in bytes/s %(3.35 TB/s is 3.35e12%), got 3.350000")
expect_error({name = "x", hbm_bytes = 2^40}, "table: missing field 'hbm_bandwidth'")
expect_error({name = "x", hbm_bytes = 2^40, hbm_bandwidth = 1e12, bf16_flops = 1e14, sm_count = 10, memory = 1},
             "table: unknown field 'memory'")
expect_error({name = "x", hbm_bytes = 1/0}, "field 'hbm_bytes' is not finite")
expect_error({name = "x", hbm_bytes = {}}, "field 'hbm_bytes' is a table")
expect_error({[1] = "x"}, "expected a table of named fields, got a number key")
expect_error("no-such-gpu.json", "no%-such%-gpu.json: cannot open GPU description")
expect_error("tpu", "unknown GPU 'tpu'")
local lender = duet.gpu("h100")
lender.efficiency_of = "v100"
expect_error(lender, "table: field 'efficiency_of': unknown GPU 'v100'")
print("gpus ok")
