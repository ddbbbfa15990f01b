-- A run's warnings name its label: in a sweep, the point they came from. (The A100's tables lack
-- Llama-3.2-1B's head_dim 64, so its attention is priced at the tables' edge, with a warning.)
duet.run{label = "point A", gpu = "a100", progress = false, out = false,
         engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = 0.3}},
         workload = {problems = {{}}, solve = function(ctx)
           duet.await(ctx.engines.llm:submit{prompt = 8, max_tokens = 4})
           return {score = 0}
         end}}
