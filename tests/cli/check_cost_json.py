"""duet cost --json: the contract's keys are there, and the parts sum to step_s, for several
batches under the roofline and the operator prior. Usage: check_cost_json.py DUET."""
import json
import subprocess
import sys

LAYER_KEYS = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj", "attention",
              "norm", "rope", "act", "kv_write"]
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

# Both Hopper priors price prefill attention with the curve fitted on the H100's table at the H100's
# peaks (the H200's table is refused): the H200, the same chip with more bandwidth, is never slower.
# Fitted at the H200's peaks instead, the curve priced prefill after cached context up to 38% slower.
def attention_s(gpu, batch):
    out = subprocess.run([duet, "cost", "--model", "llama-3.1-8b", "--gpu", gpu, "--json", *batch],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["per_layer_s"]["attention"]


cases = 0
for tokens, seqs in [(4096, 8), (800, 16), (64, 1)]:
    for context in [0, 512, 2048, 8192]:
        batch = ["--prefill-tokens", str(tokens), "--prefill-seqs", str(seqs), "--prefill-context", str(context)]
        h100, h200 = attention_s("h100", batch), attention_s("h200", batch)
        assert h200 <= h100 * (1 + 1e-9), (batch, h100, h200)
        cases += 1
print("prefill attention: H200 no slower than H100 in", cases, "cases")

# A measured profile prices whole steps: a batch beyond its fitted grid is in outside_fitted_range as
# in the warning (the JSON said [] while stderr warned). The tiny Llama's CPU profile, its device
# taken for an H100's (a profile prices only its own device), with 64 decode sequences its largest,
# asked for 100.
import os
import tempfile
source = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(source, "profiles", "cpu-amd-epyc", "duet-tiny-llama.json")) as f:
    profile = json.load(f)
profile["device"] = "h100-sxm"
with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    json.dump(profile, f)
run = subprocess.run([duet, "cost", "--model", os.path.join(source, "models", "tiny-llama", "config.json"),
                      "--gpu", "h100", "--cost-model", "profile:" + f.name, "--decode-seqs", "100",
                      "--decode-context", "1000", "--json"], capture_output=True, text=True)
os.unlink(f.name)
assert run.returncode == 0, run.stderr
outside = json.loads(run.stdout)["outside_fitted_range"]
assert any("beyond the profile's fitted maximum" in o for o in outside), (outside, run.stderr)
print("profile: a batch beyond its grid is in outside_fitted_range")
