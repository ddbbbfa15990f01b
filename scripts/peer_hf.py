#!/usr/bin/env python3
"""HF transformers' generate() throughput for the model shapes duet benchmarks, with random
weights, at the batch sizes and context lengths of `duet bench decode`: the peer that duet's
decode throughput is divided by (`duet bench decode --peer peer.json`).

It runs only on the GPU machine, whose image has PyTorch and transformers (this repository's
machines have neither):

    python3 scripts/peer_hf.py --out peer.json [--batches 1,8,32,64,128,256] [--contexts 512,1024,2048,4096]

Per (batch, context): a prompt of `context` random tokens per sequence is prefilled, then
`--new-tokens` tokens are generated greedily with a static KV cache when transformers offers one;
the decode throughput is batch * new_tokens / (time of generate - time of a 1-token generate),
so that the prefill is not counted.
"""
import argparse
import json
import sys
import time


def llama_3_2_1b_config(transformers):
    # Shapes of meta-llama/Llama-3.2-1B (its config.json), as duet's built-in ModelSpec.
    return transformers.LlamaConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
        rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})


def timed_generate(model, torch, ids, new_tokens):
    torch.cuda.synchronize()
    start = time.perf_counter()
    model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                   do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--batches", default="1,8,32,64,128,256")
    parser.add_argument("--contexts", default="512,1024,2048,4096")
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args()
    try:
        import torch
        import transformers
    except ImportError as e:
        sys.exit(f"peer_hf.py: needs PyTorch and transformers ({e}); run it on the GPU machine")
    torch.manual_seed(0)
    config = llama_3_2_1b_config(transformers)
    model = transformers.LlamaForCausalLM(config).to(device="cuda", dtype=torch.bfloat16).eval()
    rows = []
    with torch.inference_mode():
        for b in [int(x) for x in args.batches.split(",")]:
            for c in [int(x) for x in args.contexts.split(",")]:
                ids = torch.randint(1, config.vocab_size, (b, c), device="cuda")
                try:
                    timed_generate(model, torch, ids, 2)  # warm-up
                    prefill = timed_generate(model, torch, ids, 1)
                    total = timed_generate(model, torch, ids, args.new_tokens)
                except torch.cuda.OutOfMemoryError:
                    print(f"batch {b} context {c}: out of memory, skipped", flush=True)
                    torch.cuda.empty_cache()
                    continue
                decode_s = max(total - prefill, 1e-9)
                tps = b * (args.new_tokens - 1) / decode_s
                rows.append({"batch": b, "context": c, "tokens_per_s": tps, "generate_s": total})
                print(f"batch {b:4d} context {c:5d}: {tps:10.0f} decode tokens/s", flush=True)
    result = {"peer": "huggingface transformers " + transformers.__version__, "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name(0), "model": "llama-3.2-1b (random weights, bf16)",
              "new_tokens": args.new_tokens, "rows": rows}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
