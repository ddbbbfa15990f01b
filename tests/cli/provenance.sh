#!/usr/bin/env bash
# What a run file records of its inputs, so that a result can be traced to what made it: the
# version, each model's whole config, the fingerprints of the cost model's file and of the
# requests replayed, and the run's warnings. Each changed input changes the record; the same
# inputs give the same record.
#   provenance.sh DUET SOURCE_DIR OUT_DIR PYTHON
set -euo pipefail
duet=$1 source=$2 out=$3 py=$4
rm -rf "$out" && mkdir -p "$out" && cd "$out"
fail() { echo "provenance: $*" >&2; exit 1; }

"$duet" --version >version.txt
grep -Eq "^duet [0-9]+\.[0-9]+\.[0-9]+ \(revision ([0-9a-f]{12}(-dirty\.[0-9a-f]{8})?|unknown); data from $source\)$" version.txt ||
  fail "duet --version printed: $(cat version.txt)"

attr() {  # FILE NAME: the root attribute's text
  "$py" -c 'import sys, h5py; v = h5py.File(sys.argv[1])[ "/" ].attrs[sys.argv[2]]; print(v.decode() if isinstance(v, bytes) else v)' "$1" "$2"
}
azure=$source/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv
sim() { "$duet" simulate "$@" >/dev/null 2>&1 || fail "duet simulate $* failed"; }

# The requests replayed: another slice of the trace is another fingerprint, the same slice the same.
sim --trace "$azure" --max-requests 100 --model llama-3.2-1b --out a.h5
sim --trace "$azure" --max-requests 100 --model llama-3.2-1b --out b.h5
sim --trace "$azure" --max-requests 200 --model llama-3.2-1b --out c.h5
[[ $(attr a.h5 trace_fingerprint) == fnv1a64:* ]] || fail "no trace_fingerprint"
[[ $(attr a.h5 trace_fingerprint) == "$(attr b.h5 trace_fingerprint)" ]] || fail "one slice, two fingerprints"
[[ $(attr a.h5 trace_fingerprint) != "$(attr c.h5 trace_fingerprint)" ]] || fail "two slices, one fingerprint"
[[ $(attr a.h5 duet_version) =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "duet_version: $(attr a.h5 duet_version)"
# The operator prior the steps were priced with, by its file's fingerprint.
[[ $(attr a.h5 llm.cost_model) == *"prior fnv1a64:"* ]] || fail "cost_model: $(attr a.h5 llm.cost_model)"

# Two config.json files of one _name_or_path: the same name, different models, told apart.
mkdir -p tied untied
cp "$source/models/small-llama/config.json" tied/
sed 's/"tie_word_embeddings": true/"tie_word_embeddings": false/' tied/config.json >untied/config.json
cmp -s tied/config.json untied/config.json && fail "the config edit did not apply"
sim --synthetic 20 --model tied/config.json --out tied.h5
sim --synthetic 20 --model untied/config.json --out untied.h5
[[ $(attr tied.h5 llm.model) == "$(attr untied.h5 llm.model)" ]] || fail "the two configs' names differ"
"$py" - tied.h5 untied.h5 <<'PY' || fail "model_config does not tell the two configs apart"
import json, sys, h5py
tied, untied = (json.loads(h5py.File(p)["/"].attrs["llm.model_config"]) for p in sys.argv[1:])
assert tied["tie_word_embeddings"] is True and untied["tie_word_embeddings"] is False, (tied, untied)
assert tied["num_hidden_layers"] == 4 and tied["architectures"] == ["LlamaForCausalLM"], tied
PY

# A run priced beyond its cost model's measurements says so in its file, not only on stderr.
sim --synthetic 100 --model llama-3.2-1b --gpu "$source/docs/examples/gpus/l40s.json" --out l40s.h5
[[ $(attr l40s.h5 warnings) == *"beyond the operator prior's tables"* ]] || fail "no warnings attribute"
echo "provenance ok"
