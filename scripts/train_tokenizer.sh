#!/usr/bin/env bash
# Trains duet's small sentencepiece model (workloads/data/tokenizer/duet-math.model + .vocab) from
# public MIT text: the MATH-500 problems and reference solutions, and the PRM800K phase-1 test step
# texts. The committed model is the output of this script; users never need to run it.
#   scripts/train_tokenizer.sh [DATA_DIR]     train into workloads/data/tokenizer and verify
# Inputs:
#   workloads/data/math500.jsonl (shipped; MATH-500 from openai/prm800k, MIT)
#   DATA_DIR/prm800k/stepwise/phase1_test.stepwise-critic.jsonl.gz (not shipped; default DATA_DIR:
#     ../shared/data beside the repository). Its public source is xhghhh/Enhancing-PRM800K @
#     29dc428dba6a807cebf30dec727acfdf8aadbf75, phase1_test.stepwise-critic.parquet (MIT): Scott
#     Logic's prm800k-denorm "stepwise critique" conversion (MIT) of PRM800K phase1_test.jsonl.
#     Convert it to JSON lines with every field unchanged and gzip it (workloads/data/tokenizer/
#     README.md gives the sha256 of the file the committed model was trained on).
# Needs spm_train (Debian package sentencepiece) and, for the check at the end,
# python3-sentencepiece (both in scripts/setup.sh).
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."
repo="$PWD"
usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$self"; }  # the comment block above
case "${1:-}" in -h | --help) usage; exit 0 ;; esac
[ "$#" -le 1 ] || { usage >&2; exit 2; }
data="${1:-$repo/../shared/data}"
math500="$repo/workloads/data/math500.jsonl"
steps="$data/prm800k/stepwise/phase1_test.stepwise-critic.jsonl.gz"
out="$repo/workloads/data/tokenizer"
for f in "$math500" "$steps"; do
  [ -f "$f" ] || { echo "train_tokenizer: $f not found (usage: scripts/train_tokenizer.sh [DATA_DIR])" >&2; exit 1; }
done
command -v spm_train >/dev/null || { echo "train_tokenizer: spm_train not found (apt-get install sentencepiece)" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# One corpus line per non-blank line of text. spm_train reads a sentence per line, so the texts'
# own newlines split them; each distinct text goes in once, in file order, because the stepwise
# rows repeat every earlier step of a conversation and would otherwise weight early steps by the
# conversation's length. First-seen order keeps the corpus (and so the model) byte-identical.
/usr/bin/python3 - "$math500" "$steps" "$work/corpus.txt" <<'EOF'
import gzip, json, sys

math500, steps, corpus = sys.argv[1:]
seen, texts = set(), []

def add(text):
    if text and text not in seen:
        seen.add(text)
        texts.append(text)

with open(math500, encoding="utf-8") as f:
    for line in f:
        row = json.loads(line)
        add(row["problem"])
        add(row["solution"])
with gzip.open(steps, "rt", encoding="utf-8") as f:
    for line in f:
        row = json.loads(line)
        add(row["instruction"])
        for step in row["responses"]:
            add(step)
        add(row["next_response"])
lines = [l for t in texts for l in t.split("\n") if l.strip()]
with open(corpus, "w", encoding="utf-8") as f:
    f.writelines(l + "\n" for l in lines)
print(f"train_tokenizer: {len(texts)} distinct texts, {len(lines)} corpus lines", file=sys.stderr)
EOF

# Why each flag:
#  bpe, vocab 8000           a Llama-style byte-fallback BPE, small enough for a 0.7 MB corpus.
#  byte_fallback, coverage 1 any UTF-8 input encodes (unseen characters become <0xNN> bytes), so the
#                            engine never meets <unk>.
#  identity, no whitespace   decode(encode(x)) == x: NFKC would rewrite math symbols, and removing
#  removal, no dummy prefix  extra whitespace would eat newlines and double spaces; a dummy prefix
#                            would turn "\n\n" into two pieces ("▁", "\n\n").
#  user symbol "\n\n"        the beam search's step separator; a user-defined symbol is always one
#                            piece, wherever it occurs. "+" and "-" (the PRM labels) need no such
#                            help: with character coverage 1.0 every corpus character is a piece.
#  pad_id 3                  sentencepiece has no pad by default; batching code wants one.
#  1 thread, no sampling,    a byte-identical model on every run. The trainer records its input and
#  fixed seed, relative      model_prefix in the model, hence the relative names in the temp dir.
#  paths
(
  cd "$work"
  spm_train --input=corpus.txt --model_prefix=duet-math \
    --model_type=bpe --vocab_size=8000 \
    --byte_fallback=true --character_coverage=1.0 \
    --normalization_rule_name=identity --remove_extra_whitespaces=false --add_dummy_prefix=false \
    --user_defined_symbols=$'\n\n' \
    --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=3 \
    --num_threads=1 --random_seed=20231 --input_sentence_size=0 --shuffle_input_sentence=false \
    >train.log 2>&1 || { cat train.log >&2; exit 1; }
)

mkdir -p "$out"
cp "$work/duet-math.model" "$work/duet-math.vocab" "$out/"

# Check the properties the engine relies on, with the same library the C++ side links.
/usr/bin/python3 - "$out/duet-math.model" <<'EOF'
import sys
import sentencepiece as spm

sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
assert sp.get_piece_size() == 8000, sp.get_piece_size()
assert (sp.unk_id(), sp.bos_id(), sp.eos_id(), sp.pad_id()) == (0, 1, 2, 3)
sep = sp.encode("\n\n")
assert len(sep) == 1, sep
assert sp.encode("a\n\nb")[1] == sep[0]
for label in ("+", "-"):
    assert len(sp.encode(label)) == 1, label
for text in ("Let $x=3$.\nThen  \t\n\n\nso", "  two spaces", "\u65e5\u672c \u00e9 \U0001f642"):
    assert sp.decode(sp.encode(text)) == text, text
print(f"train_tokenizer: ok, vocab {sp.get_piece_size()}, '\\n\\n' = id {sep[0]}, "
      f"'+' = {sp.piece_to_id('+')}, '-' = {sp.piece_to_id('-')}", file=sys.stderr)
EOF
sha256sum "$out/duet-math.model" "$out/duet-math.vocab"
