#!/usr/bin/python3
"""Fits duet's per-level step model (workloads/data/step_model.json) from PRM800K phase-1 test.

The simulator and the Lua workloads need, per MATH difficulty level, how long a reasoning step is
(in tokens of duet's tokenizer), how many steps a solution takes, and how long the final answer step
is. PRM800K's human-labelled trajectories are the public source of real step-by-step solutions to
MATH problems, so we fit those three quantities to them.

  /usr/bin/python3 scripts/fit_step_model.py [DATA_DIR] [--out workloads/data/step_model.json]

Needs numpy and python3-sentencepiece (scripts/setup.sh installs both). The output is committed, so
users never need to run this; it documents how the file was made and rebuilds it.

Inputs:
  * DATA_DIR/prm800k/stepwise/phase1_test.stepwise-critic.jsonl.gz (default DATA_DIR: ../shared/data
    beside the repository). It is not shipped. Its public source: xhghhh/Enhancing-PRM800K @
    29dc428dba6a807cebf30dec727acfdf8aadbf75, phase1_test.stepwise-critic.parquet (MIT), which is
    Scott Logic's prm800k-denorm "stepwise critique" conversion (MIT) of PRM800K phase1_test.jsonl
    (openai/prm800k, MIT). Convert the parquet file to JSON lines, one row per line with every field
    unchanged, and gzip it. The committed fit read a file with sha256
    72f1f461abf0c96f1f3cee00e4992b84b4c1d9887b4471fe4168f3319d811836 (the output records the
    sha256 of what it read); a conversion of your own may differ in bytes and still give the same fit.
  * workloads/data/math500.jsonl (MATH-500, shipped) for each problem's level.
  * workloads/data/tokenizer/duet-math.model (shipped) to count tokens.

Method (also written into the JSON and workloads/data/README.md):
  * Trajectories: the stepwise file has one row per candidate step; the row the labeller chose has
    is_preferred_response. Rows repeat (547 exact duplicates), so we keep distinct rows, then follow
    preferred rows from the empty history to a preferred row that no preferred row extends.
  * Level: each trajectory's instruction is matched exactly to a MATH-500 problem text.
  * Tokens: steps are encoded alone with workloads/data/tokenizer/duet-math.model; the "\\n\\n"
    separator between steps (one token) is not counted in the step.
  * The answer step: the stepwise conversion splits PRM800K's final step "<text>\\n\\n# Answer\\n\\n<answer>"
    into next_response and answer; we put it back together, because that is what a generator emits.
  * Per level: step length (every non-final step) and answer-step length as lognormals of tokens;
    steps-to-answer (steps of a trajectory that ends in an answer, the answer step included) as a
    lognormal too, because 10-30 trajectories per level are too few for a useful empirical
    histogram; the observed counts are kept beside it. Each lognormal has mu and sigma (the
    maximum-likelihood mean and standard deviation of log x) and a clip [min, max] at the 1st and
    99th percentiles of the data, so that sampling never leaves the observed range.
  * Pooling: a level with fewer than MIN_TRAJECTORIES answered trajectories is fitted on itself plus
    its neighbours (inner neighbour first), and its entry says which levels it pooled.
"""
import argparse
import gzip
import hashlib
import json
import math
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import sentencepiece as spm

MIN_TRAJECTORIES = 15
LEVELS = (1, 2, 3, 4, 5)
ANSWER_FORMAT = "{text}\n\n# Answer\n\n{answer}"

REPO = Path(__file__).resolve().parent.parent
STEPWISE = "prm800k/stepwise/phase1_test.stepwise-critic.jsonl.gz"  # under the data folder
MATH500 = "workloads/data/math500.jsonl"
TOKENIZER = "workloads/data/tokenizer/duet-math.model"
STEPWISE_SOURCE = ("xhghhh/Enhancing-PRM800K @ 29dc428dba6a807cebf30dec727acfdf8aadbf75: "
                   "phase1_test.stepwise-critic.parquet, as JSON lines")


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_trajectories(stepwise_path):
    """Returns [(instruction, [step texts], answer or None)], one per distinct preferred path."""
    rows = set()
    instructions = set()
    with gzip.open(stepwise_path, "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            instructions.add(r["instruction"])
            if r["is_preferred_response"]:
                rows.add((r["instruction"], tuple(r["responses"]), r["next_response"], r["answer"]))
    chosen = defaultdict(list)  # (instruction, history) -> preferred rows continuing it
    for ins, hist, nxt, ans in rows:
        chosen[(ins, hist)].append((nxt, ans))
    trajectories = []
    for (ins, hist), nexts in sorted(chosen.items()):
        if hist:
            continue
        # Depth-first from each start; a history with two different preferred continuations would
        # fork the path (PRM800K has none, but the walk does not assume it).
        stack = [(hist + (nxt,), ans) for nxt, ans in nexts]
        while stack:
            steps, ans = stack.pop()
            more = chosen.get((ins, steps))
            if more:
                stack.extend((steps + (nxt,), a) for nxt, a in more)
            else:
                trajectories.append((ins, list(steps), ans))
    return trajectories, len(rows), instructions


def lognormal(values):
    x = np.asarray(values, dtype=float)
    logs = np.log(x)
    mu, sigma = float(logs.mean()), float(logs.std())
    return {
        "dist": "lognormal",
        "mu": round(mu, 4),
        "sigma": round(sigma, 4),
        "min": int(math.floor(np.percentile(x, 1))),
        "max": int(math.ceil(np.percentile(x, 99))),
        "n": int(x.size),
        "mean": round(float(x.mean()), 2),
        "p50": float(np.percentile(x, 50)),
    }


def pool_for(level, solved_per_level):
    """The levels whose data a level's fit uses: itself, widened until it has enough trajectories."""
    lo = hi = level
    while sum(solved_per_level[l] for l in range(lo, hi + 1)) < MIN_TRAJECTORIES:
        # Prefer the neighbour towards the middle level, whose difficulty is nearer the average.
        inner_up = level < 3
        if inner_up and hi < LEVELS[-1]:
            hi += 1
        elif not inner_up and lo > LEVELS[0]:
            lo -= 1
        elif hi < LEVELS[-1]:
            hi += 1
        elif lo > LEVELS[0]:
            lo -= 1
        else:
            break
    return list(range(lo, hi + 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog=f"Reads DATA_DIR/{STEPWISE}, {MATH500} and {TOKENIZER}.")
    default_data = REPO.parent / "shared" / "data"
    ap.add_argument("data_dir", nargs="?", default=str(default_data), metavar="DATA_DIR",
                    help=f"the folder that holds {STEPWISE} (default: {default_data})")
    ap.add_argument("--shared", dest="data_dir_option", metavar="DATA_DIR", help=argparse.SUPPRESS)  # old name
    ap.add_argument("--out", default=str(REPO / "workloads" / "data" / "step_model.json"),
                    help="where to write the step model (default: %(default)s)")
    args = ap.parse_args()
    data = Path(args.data_dir_option or args.data_dir)
    stepwise_path, math500_path, tok_path = data / STEPWISE, REPO / MATH500, REPO / TOKENIZER
    for p in (stepwise_path, math500_path, tok_path):
        if not p.is_file():
            hint = " (pass the data folder: fit_step_model.py DATA_DIR; see --help)" if p == stepwise_path else ""
            sys.exit(f"fit_step_model: {p} not found{hint}")

    sp = spm.SentencePieceProcessor(model_file=str(tok_path))
    ntok = lambda text: len(sp.encode(text))

    level_of = {}
    with open(math500_path, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            level_of[r["problem"]] = int(r["level"])

    trajectories, distinct_rows, instructions = load_trajectories(stepwise_path)
    problems = len({t[0] for t in trajectories})
    problems_matched = sum(1 for i in instructions if i in level_of)
    print(f"fit_step_model: {problems_matched} of the {len(instructions)} problems in the stepwise file "
          "match a MATH-500 problem text exactly", file=sys.stderr)
    matched = [t for t in trajectories if t[0] in level_of]
    print(f"fit_step_model: {distinct_rows} distinct preferred rows over {problems} problems, "
          f"{len(trajectories)} trajectories, {len(matched)} matched to a MATH-500 problem "
          f"({len({t[0] for t in matched})} distinct problems)", file=sys.stderr)
    if len(matched) != len(trajectories):
        print(f"fit_step_model: {len(trajectories) - len(matched)} trajectories have no MATH-500 match "
              "and are left out", file=sys.stderr)

    # Per level: token lengths of non-final steps, of answer steps, and step counts of answered runs.
    steps = defaultdict(list)
    answers = defaultdict(list)
    counts = defaultdict(list)
    gave_up = defaultdict(int)
    for ins, texts, answer in matched:
        level = level_of[ins]
        if answer is None:
            # Given up or cut short: its steps are real steps, but it never reached an answer.
            steps[level].extend(ntok(t) for t in texts)
            gave_up[level] += 1
            continue
        steps[level].extend(ntok(t) for t in texts[:-1])
        answers[level].append(ntok(ANSWER_FORMAT.format(text=texts[-1], answer=answer)))
        counts[level].append(len(texts))

    solved = {l: len(counts[l]) for l in LEVELS}
    levels = []
    for level in LEVELS:
        pool = pool_for(level, solved)
        if pool != [level]:
            print(f"fit_step_model: level {level} has {solved[level]} answered trajectories "
                  f"(< {MIN_TRAJECTORIES}); pooled with levels {pool}", file=sys.stderr)
        pick = lambda d: [v for l in pool for v in d[l]]
        entry = {
            "level": level,
            "pooled_levels": pool,
            "trajectories": solved[level] + gave_up[level],
            "answered_trajectories": solved[level],
            "fit_trajectories": sum(solved[l] + gave_up[l] for l in pool),
            "step_tokens": lognormal(pick(steps)),
            "steps_to_answer": lognormal(pick(counts)),
            "answer_step_tokens": lognormal(pick(answers)),
        }
        entry["steps_to_answer"]["observed"] = sorted(pick(counts))
        levels.append(entry)
        s, c, a = entry["step_tokens"], entry["steps_to_answer"], entry["answer_step_tokens"]
        print(f"  level {level} pool {pool}: step tokens mu {s['mu']} sigma {s['sigma']} "
              f"[{s['min']}, {s['max']}] (n {s['n']}, mean {s['mean']}); steps mu {c['mu']} sigma {c['sigma']} "
              f"[{c['min']}, {c['max']}] (n {c['n']}, mean {c['mean']}); answer step mu {a['mu']} "
              f"sigma {a['sigma']} [{a['min']}, {a['max']}] (mean {a['mean']})", file=sys.stderr)

    model = {
        "source": {
            "stepwise": f"{STEPWISE} ({STEPWISE_SOURCE}): PRM800K phase-1 test (Lightman et al. 2023, MIT, "
                        "(c) 2023 OpenAI) in Scott Logic's stepwise-critique format (MIT)",
            "stepwise_sha256": sha256(stepwise_path),
            "levels_from": "workloads/data/math500.jsonl (MATH-500, problems from MATH, Hendrycks et al. "
                           "2021, MIT), matched on the exact problem text",
            "math500_sha256": sha256(math500_path),
        },
        "tokenizer": TOKENIZER,
        "tokenizer_sha256": sha256(tok_path),
        "fitted_by": "scripts/fit_step_model.py",
        "method": {
            "trajectories": "distinct preferred rows followed from the empty history to a row no "
                            "preferred row extends",
            "step_tokens": "tokens of each non-final step encoded alone; the one-token \"\\n\\n\" "
                           "separator between steps is not included",
            "answer_step_tokens": "tokens of the final step written as PRM800K's generator wrote it: "
                                  + json.dumps(ANSWER_FORMAT),
            "steps_to_answer": "steps in a trajectory that ends in an answer, the answer step "
                               "included; trajectories that gave up count for step_tokens only",
            "lognormal": "x = clamp(exp(mu + sigma * N(0,1)), min, max), rounded to an integer for "
                         "counts; mu and sigma are the mean and (population) standard deviation of "
                         "log x; min and max are the 1st and 99th percentiles of the data",
            "pooling": f"a level with fewer than {MIN_TRAJECTORIES} answered trajectories is fitted "
                       "together with its neighbours (towards level 3 first); see pooled_levels",
        },
        "counts": {
            "problems_in_stepwise_file": len(instructions),
            "problems_matched_to_math500": problems_matched,
            "problems_with_a_trajectory": problems,
            "distinct_preferred_rows": distinct_rows,
            "trajectories": len(trajectories),
            "matched_to_math500": len(matched),
            "answered_trajectories": sum(solved.values()),
            "per_level_trajectories": {str(l): solved[l] + gave_up[l] for l in LEVELS},
            "per_level_answered": {str(l): solved[l] for l in LEVELS},
        },
        "levels": levels,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # One line per list of numbers keeps the file short enough to read in a diff.
    text = json.dumps(model, indent=1, ensure_ascii=False)
    text = re.sub(r"\[\s*([-0-9.,\s]+?)\s*\]", lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]", text)
    out.write_text(text + "\n", encoding="utf-8")
    print(f"fit_step_model: wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
