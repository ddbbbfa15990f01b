-- Bad input for duet validate: the generator's lengths are not forced (force = false), so the real
-- engine samples its own stop and the two backends' token streams part ways.
local function solve(ctx, problem)
  local id = ctx.engines.llm:submit{prompt = 40, max_tokens = 64, stop_at = 5, stop = {"step"}, force = false,
                                    seed = ctx.index}
  duet.await(id)
  return {score = 0, iterations = 1}
end
duet.run{
  gpu = "h100", concurrency = 2, progress = false,
  engines = {{name = "llm", model = "models/tiny-llama/config.json", gpu_memory_utilization = 0.4,
              num_gpu_blocks_override = 256}},
  workload = {problems = {{index = 1}, {index = 2}}, solve = solve},
}
