#pragma once
// Each subcommand takes its own argv (argv[0] is the command name) and returns the exit status:
// 0 success, 1 a failed run, 2 bad usage or input.
namespace duet::cli {

int simulate(int argc, char** argv);
int fit(int argc, char** argv);
int fit_ops(int argc, char** argv);
int cost(int argc, char** argv);
int bench(int argc, char** argv);
int run(int argc, char** argv);
int merge(int argc, char** argv);
int profile(int argc, char** argv);
int validate(int argc, char** argv);

}  // namespace duet::cli
