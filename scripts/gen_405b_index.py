#!/usr/bin/env python3
"""Write a Llama-3.1-405B-shaped Hugging Face folder whose weights are
headers only (docs/SCALE_OUT.md §large models): config.json,
model.safetensors.index.json and the shards model-0000i-of-0000n.safetensors,
each a real safetensors header followed by a sparse hole of the size its
tensors need (the files report ~810 GB in all and take a few MB of disk).
`convert --dry-run` plans such a folder from the headers alone; converting
it would read zeros.

Shapes (Llama 3.1 405B): hidden 16384, 126 layers, 128 query heads and 8
KV heads of 128, feed-forward 53248, vocabulary 128256, untied lm_head,
BF16; 405,853,388,800 weights.

Usage: scripts/gen_405b_index.py OUT [--layers 126] [--shard-gb 4.3]
Standard library only.
"""
import argparse
import json
import os
import struct
import sys


def tensors(layers, hidden=16384, ffn=53248, heads=128, kv=8, head_dim=128, vocab=128256):
    yield "model.embed_tokens.weight", [vocab, hidden]
    for i in range(layers):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", [hidden]
        yield p + "self_attn.q_proj.weight", [heads * head_dim, hidden]
        yield p + "self_attn.k_proj.weight", [kv * head_dim, hidden]
        yield p + "self_attn.v_proj.weight", [kv * head_dim, hidden]
        yield p + "self_attn.o_proj.weight", [hidden, heads * head_dim]
        yield p + "post_attention_layernorm.weight", [hidden]
        yield p + "mlp.gate_proj.weight", [ffn, hidden]
        yield p + "mlp.up_proj.weight", [ffn, hidden]
        yield p + "mlp.down_proj.weight", [hidden, ffn]
    yield "model.norm.weight", [hidden]
    yield "lm_head.weight", [vocab, hidden]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=126)
    ap.add_argument("--shard-gb", type=float, default=4.3)
    a = ap.parse_args()
    limit = int(a.shard_gb * 1e9)
    groups, cur, size = [], [], 0
    for name, shape in tensors(a.layers):
        n = 2
        for d in shape:
            n *= d
        if cur and size + n > limit:
            groups.append(cur)
            cur, size = [], 0
        cur.append((name, shape, n))
        size += n
    groups.append(cur)
    os.makedirs(a.out, exist_ok=True)
    total = len(groups)
    weight_map, total_bytes, weights = {}, 0, 0
    for k, g in enumerate(groups):
        fname = f"model-{k + 1:05d}-of-{total:05d}.safetensors"
        header, off = {"__metadata__": {"format": "pt"}}, 0
        for name, shape, n in g:
            header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
            off += n
            weight_map[name] = fname
            weights += n // 2
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        path = os.path.join(a.out, fname)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            f.truncate(8 + len(text) + off)  # a sparse hole: no data written
        total_bytes += off
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total_bytes}, "weight_map": weight_map}, f, indent=2)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 16384, "intermediate_size": 53248, "num_hidden_layers": a.layers,
        "num_attention_heads": 128, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "bos_token_id": 128000, "eos_token_id": 128001,
    }
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    print(f"{a.out}: {total} shards, {weights:,} weights, {total_bytes / 1e9:.1f} GB (sparse)")


if __name__ == "__main__":
    sys.exit(main())
