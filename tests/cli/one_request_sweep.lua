-- A sweep of cheap points, one request each, for the tests that need a sweep's file and not its
-- numbers (tests/analysis/check_load_run.py, tests/cli/sweep_mpi.sh):
--   --points N        the first N of the splits 0.2, 0.3, 0.4, 0.5 (default 2)
--   --fail-rank-one   the script fails when rank 1 of an MPI job runs it a second time (in its sweep
--                     thread), before that thread takes a point; rank1.mark in the working directory
--                     remembers the first time
--   --shifted-grid    a grid that differs from run to run of the script: under MPI, the splits from
--                     the second on rank 1; without, from the second once grid.mark in the working
--                     directory exists (the first run creates it: a sweep thread's run sees it)
local duet = require("duet")
local args = duet.args{points = 2, fail_rank_one = false, shifted_grid = false}
if args.fail_rank_one and os.getenv("OMPI_COMM_WORLD_RANK") == "1" then
  if io.open("rank1.mark") then error("the prelude fails in rank 1's sweep thread") end
  io.open("rank1.mark", "w"):close()
end
local first = 1
if args.shifted_grid then
  local rank = os.getenv("OMPI_COMM_WORLD_RANK")
  if rank then
    first = rank == "1" and 2 or 1
  else
    if io.open("grid.mark") then first = 2 end
    io.open("grid.mark", "w"):close()
  end
end
duet.sweep{grid = {util = {table.unpack({0.1, 0.2, 0.3, 0.4, 0.5}, first + 1, first + args.points)}}, run = function(p)
  return {progress = false, engines = {{name = "llm", model = "llama-3.2-1b", gpu_memory_utilization = p.util}},
          workload = {problems = {{}}, solve = function(ctx)
            duet.await(ctx.engines.llm:submit{prompt = 8, max_tokens = 4})
            return {score = 0}
          end}}
end}
