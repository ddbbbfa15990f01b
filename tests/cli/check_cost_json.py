"""duet cost --json: the contract's keys are there, and the parts sum to step_s, for several
batches under the roofline and the operator prior. Usage: check_cost_json.py DUET."""
import json
import subprocess
import sys

LAYER_KEYS = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj", "attention",
              "norm", "rope", "act", "residual", "kv_write"]
BATCHES = [
    ["--decode-seqs", "1", "--decode-context", "512"],
    ["--decode-seqs", "64", "--decode-context", "2048"],
    ["--prefill-tokens", "4096"],
    ["--prefill-tokens", "1000", "--prefill-seqs", "3", "--prefill-context", "500", "--decode-seqs", "20",
     "--decode-context", "900"],
]

duet = sys.argv[1]
for model in ["llama-3.2-1b", "llama-3.1-8b"]:
    for cost_model in ["roofline", "operator"]:
        for batch in BATCHES:
            out = subprocess.run([duet, "cost", "--model", model, "--gpu", "h100", "--cost-model", cost_model,
                                  "--json", *batch], check=True, capture_output=True, text=True).stdout
            j = json.loads(out)
            for key in ["step_s", "layers", "lm_head_s", "host_s", "per_layer_s"]:
                assert key in j, f"{key} missing: {out}"
            assert sorted(j["per_layer_s"]) == sorted(LAYER_KEYS), j["per_layer_s"]
            parts = (j["layers"] * sum(j["per_layer_s"].values()) + j["lm_head_s"] + j["sampling_s"]
                     + j["other_s"] + j["unattributed_s"] + j["host_s"])
            assert abs(parts - j["step_s"]) <= 1e-9 * j["step_s"], (model, cost_model, batch, parts, j["step_s"])
            assert j["step_s"] > 0
            if cost_model == "operator":
                assert all(v > 0 for v in j["per_layer_s"].values()), j["per_layer_s"]
print("cost json: keys present and parts sum to step_s in", 2 * 2 * len(BATCHES), "cases")
