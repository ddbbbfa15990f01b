#!/usr/bin/env python3
"""HF transformers' generate() throughput for the model shapes duet benchmarks, with random
weights, at the batch sizes and context lengths of `duet bench decode`: the peer that duet's
decode throughput is divided by (`duet bench decode --peer peer.json`).

It runs only on the GPU machine, whose image has PyTorch and transformers (this repository's
machines have neither):

    python3 scripts/peer_hf.py --out peer.json [--batches 1,8,32,64,128,256] [--contexts 512,1024,2048,4096]

Per (batch, context): a prompt of `context` random tokens per sequence is prefilled, then
`--new-tokens` tokens are generated greedily; the decode throughput is
batch * (new_tokens - 1) / (time of generate - time of a 1-token generate), so that the prefill
is not counted. Every point runs generate()'s default (dynamic) KV cache; at the batches of
`--static-batches` (default 64, where duet's target is set) it also runs the static cache
(cache_implementation="static"), and the point's figure is the faster of the two, so that the
peer is not the slower of its own configurations. The JSON is rewritten after every point: a run
cut short keeps what it measured.
"""
import argparse
import json
import sys
import time


def llama_3_2_1b_config(transformers):
    # Shapes of meta-llama/Llama-3.2-1B (its config.json), as duet's built-in ModelSpec.
    rope = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192}
    # transformers 5 holds the rotary settings in one field, rope_parameters (its dataclass config
    # converts the older two keyword arguments only as a legacy path); 4.x takes rope_theta and
    # rope_scaling.
    if int(transformers.__version__.split(".")[0]) >= 5:
        rope_kwargs = {"rope_parameters": dict(rope, rope_theta=500000.0)}
    else:
        rope_kwargs = {"rope_theta": 500000.0, "rope_scaling": rope}
    return transformers.LlamaConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
        rms_norm_eps=1e-5, tie_word_embeddings=True, **rope_kwargs)


def timed_generate(model, torch, ids, new_tokens, cache):
    extra = {} if cache == "dynamic" else {"cache_implementation": cache}
    torch.cuda.synchronize()
    start = time.perf_counter()
    model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                   do_sample=False, pad_token_id=0, **extra)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def out_of_memory(torch, e):
    # cuBLAS and the caching allocator also report exhaustion as a plain RuntimeError.
    text = str(e)
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in text or "CUBLAS_STATUS_ALLOC" in text


def decode_tokens_per_s(model, torch, ids, new_tokens, cache):
    """Decode tokens/s of generate() with this KV cache, or None when the GPU runs out of memory."""
    try:
        timed_generate(model, torch, ids, 2, cache)  # warm-up
        prefill = timed_generate(model, torch, ids, 1, cache)
        total = timed_generate(model, torch, ids, new_tokens, cache)
    except RuntimeError as e:
        if not out_of_memory(torch, e):
            raise
        torch.cuda.empty_cache()
        return None, None
    return ids.shape[0] * (new_tokens - 1) / max(total - prefill, 1e-9), total


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--batches", default="1,8,32,64,128,256")
    parser.add_argument("--contexts", default="512,1024,2048,4096")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--static-batches", default="64",
                        help="batches also measured with the static KV cache (empty: none)")
    args = parser.parse_args()
    try:
        import torch
        import transformers
    except ImportError as e:
        sys.exit(f"peer_hf.py: needs PyTorch and transformers ({e}); run it on the GPU machine")
    torch.manual_seed(0)
    config = llama_3_2_1b_config(transformers)
    with torch.device("cuda"):  # random initialisation on the GPU: seconds, where the host's takes a minute
        model = transformers.LlamaForCausalLM(config)
    model = model.to(dtype=torch.bfloat16).eval()
    static_batches = {int(x) for x in args.static_batches.split(",") if x}
    result = {"peer": "huggingface transformers " + transformers.__version__, "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name(0), "model": "llama-3.2-1b (random weights, bf16)",
              "new_tokens": args.new_tokens, "rows": [], "skipped": []}
    with torch.inference_mode():
        for b in [int(x) for x in args.batches.split(",")]:
            for c in [int(x) for x in args.contexts.split(",")]:
                ids = torch.randint(1, config.vocab_size, (b, c), device="cuda")
                row = {"batch": b, "context": c}
                for cache in ["dynamic"] + (["static"] if b in static_batches else []):
                    try:
                        tps, total = decode_tokens_per_s(model, torch, ids, args.new_tokens, cache)
                    except Exception as e:  # a cache this transformers cannot run: kept, not fatal
                        why = f"{type(e).__name__}: {e}"[:300]
                    else:
                        why = "out of memory" if tps is None else None
                    if why:
                        result["skipped"].append({"batch": b, "context": c, "cache": cache, "why": why})
                        print(f"batch {b} context {c} {cache} cache: skipped ({why})", flush=True)
                        continue
                    row[f"{cache}_tokens_per_s"] = tps
                    if tps > row.get("tokens_per_s", 0.0):
                        row.update({"tokens_per_s": tps, "generate_s": total, "cache": cache})
                    print(f"batch {b:4d} context {c:5d} {cache:7s}: {tps:10.0f} decode tokens/s", flush=True)
                if "tokens_per_s" in row:
                    result["rows"].append(row)
                with open(args.out, "w") as f:
                    json.dump(result, f, indent=2)
    if not result["rows"]:
        sys.exit(f"peer_hf.py: no point measured ({len(result['skipped'])} skipped); see {args.out}")
    print(f"wrote {args.out}: {len(result['rows'])} points, {len(result['skipped'])} skipped")


if __name__ == "__main__":
    main()
