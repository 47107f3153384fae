#!/usr/bin/env python3
"""Write a big Gemma-3-270M-like model for the CQ4 benchmark (scripts/bench-cq4).

Shapes follow Gemma 3 270M (hidden 640, 4 query heads and 1 KV head of 256,
vocabulary 262144, token embedding tied: there is no lm_head tensor) with a
wider feed-forward (8704 instead of 2048) so that 18 layers bring the model
to about 500M weights:

    model.embed_tokens.weight                       262144 x 640   167,772,160
    per layer (x 18):
      self_attn.q_proj / o_proj                     1024 x 640 / 640 x 1024
      self_attn.k_proj / v_proj                     256 x 640
      mlp.gate_proj / up_proj                       8704 x 640
      mlp.down_proj                                 640 x 8704
      input_layernorm, post_attention_layernorm,
      pre_feedforward_layernorm,
      post_feedforward_layernorm                    640
      self_attn.q_norm / k_norm                     256
    model.norm.weight                               640
    total                                           498,131,456 weights
    (matmul 330,301,440 = Hadamard family; embedding 167,772,160 = orthogonal)

Weights: Gaussian, mean 0, std 0.02; norms: 1 + 0.05 * Gaussian. Every
tensor has its own generator, SFC64 seeded with (--seed, tensor index), so
the output depends only on the arguments and a tensor's values do not
depend on which other tensors are written (--only). The values are rounded
to bf16 (nearest, ties to even) in both formats, so a conversion with
--torch-dtype bf16 (or f32) reads the same numbers from either.

Formats (--format):
  safetensors-bf16 (default): a Hugging Face folder: config.json
      (model_type gemma3, tie_word_embeddings true) and model.safetensors in
      bf16 with HF names, tensors in the order listed above (the embedding
      first); about 1.0 GB.
  gguf-f32: one GGUF v3 file (OUT is the file name), architecture gemma3,
      llama.cpp names (token_embd, blk.N.attn_q ... ffn_down, attn_norm,
      post_attention_norm, ffn_norm, post_ffw_norm, attn_q_norm,
      attn_k_norm, output_norm), F32; about 2.0 GB. Header by gguf-py's
      GGUFWriter.

--only embedding | layers writes a subset (with the same values): the
embedding alone, or everything but the embedding (layers and norms; no
tied embedding then). scripts/bench-cq4 times the two families with them.

The data is written streaming, in chunks of CHUNK weights (4 Mi: 8 MiB of
bf16), so memory stays at a few tens of MB whatever the size. The output
is written under OUT.tmp and renamed into place.

Usage: scripts/gen_big_model.py OUT [--format safetensors-bf16|gguf-f32]
           [--seed 0] [--layers 18] [--ffn 8704] [--vocab 262144]
           [--only embedding|layers] [--hidden 640 --heads 4 --kv-heads 1 --head-dim 256]
Needs: numpy (and gguf for gguf-f32): scripts/requirements.txt.
"""
import argparse
import json
import os
import shutil
import struct
import sys
import time

import numpy as np

HIDDEN = 640
VOCAB = 262144
N_HEAD = 4
N_KV_HEAD = 1
HEAD_DIM = 256
Q_DIM = N_HEAD * HEAD_DIM
KV_DIM = N_KV_HEAD * HEAD_DIM
STD = 0.02
LAYERS = 18  # default layer count
FFN = 8704  # default feed-forward width
CHUNK = 4 << 20  # weights per generated chunk

# (HF suffix, GGUF suffix, shape function of ffn) per layer, in file order.
LAYER = [
    ("input_layernorm.weight", "attn_norm.weight", lambda f: (HIDDEN,)),
    ("self_attn.q_proj.weight", "attn_q.weight", lambda f: (Q_DIM, HIDDEN)),
    ("self_attn.k_proj.weight", "attn_k.weight", lambda f: (KV_DIM, HIDDEN)),
    ("self_attn.v_proj.weight", "attn_v.weight", lambda f: (KV_DIM, HIDDEN)),
    ("self_attn.q_norm.weight", "attn_q_norm.weight", lambda f: (HEAD_DIM,)),
    ("self_attn.k_norm.weight", "attn_k_norm.weight", lambda f: (HEAD_DIM,)),
    ("self_attn.o_proj.weight", "attn_output.weight", lambda f: (HIDDEN, Q_DIM)),
    ("post_attention_layernorm.weight", "post_attention_norm.weight", lambda f: (HIDDEN,)),
    ("pre_feedforward_layernorm.weight", "ffn_norm.weight", lambda f: (HIDDEN,)),
    ("mlp.gate_proj.weight", "ffn_gate.weight", lambda f: (f, HIDDEN)),
    ("mlp.up_proj.weight", "ffn_up.weight", lambda f: (f, HIDDEN)),
    ("mlp.down_proj.weight", "ffn_down.weight", lambda f: (HIDDEN, f)),
    ("post_feedforward_layernorm.weight", "post_ffw_norm.weight", lambda f: (HIDDEN,)),
]


def plan(layers, ffn, only, vocab=VOCAB):
    """[(index, hf name, gguf name, shape)] in file order. `index` (the
    position in the full model) seeds the tensor's generator."""
    full = [("model.embed_tokens.weight", "token_embd.weight", (vocab, HIDDEN))]
    for i in range(layers):
        for hf, gg, shape in LAYER:
            full.append((f"model.layers.{i}.{hf}", f"blk.{i}.{gg}", shape(ffn)))
    full.append(("model.norm.weight", "output_norm.weight", (HIDDEN,)))
    out = []
    for idx, (hf, gg, shape) in enumerate(full):
        if only == "embedding" and idx != 0:
            continue
        if only == "layers" and idx == 0:
            continue
        out.append((idx, hf, gg, shape))
    return out


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def bf16_bits(x):
    """f32 array -> uint16 bf16 bits, round to nearest, ties to even (finite input)."""
    b = x.view(np.uint32)
    return ((b + (0x7FFF + ((b >> 16) & 1))) >> 16).astype(np.uint16)


def chunks(seed, idx, shape):
    """Yield the tensor's values as bf16 bits (uint16), CHUNK at a time."""
    rng = np.random.Generator(np.random.SFC64(np.random.SeedSequence([seed, idx])))
    n = numel(shape)
    norm = len(shape) == 1
    done = 0
    while done < n:
        m = min(CHUNK, n - done)
        x = rng.standard_normal(m, dtype=np.float32)
        if norm:
            x = (1.0 + 0.05 * x).astype(np.float32)
        else:
            x *= np.float32(STD)
        yield bf16_bits(x)
        done += m


def config(layers, ffn, only, vocab=VOCAB):
    return {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3",
        "hidden_size": HIDDEN,
        "intermediate_size": ffn,
        "num_hidden_layers": 0 if only == "embedding" else layers,
        "num_attention_heads": N_HEAD,
        "num_key_value_heads": N_KV_HEAD,
        "head_dim": HEAD_DIM,
        "vocab_size": vocab,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "hidden_activation": "gelu_pytorch_tanh",
        "tie_word_embeddings": only != "layers",
        "torch_dtype": "bfloat16",
        "_comment": "random weights for benchmarks (scripts/gen_big_model.py), not a usable model",
    }


def write_safetensors(out_dir, tensors, seed, cfg):
    tmp = out_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    header = {"__metadata__": {"format": "pt"}}
    off = 0
    for _, name, _, shape in tensors:
        nb = 2 * numel(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + nb]}
        off += nb
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)  # the data starts 8-byte aligned
    with open(os.path.join(tmp, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for idx, _, _, shape in tensors:
            for c in chunks(seed, idx, shape):
                f.write(c.astype("<u2", copy=False).data)
        assert f.tell() == 8 + len(hb) + off
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp, out_dir)
    return os.path.getsize(os.path.join(out_dir, "model.safetensors"))


def write_gguf(out_file, tensors, seed, cfg):
    import gguf

    tmp = out_file + ".tmp"
    w = gguf.GGUFWriter(tmp, "gemma3")
    w.add_name("bench-gemma3-like")
    w.add_description(f"random weights for benchmarks (scripts/gen_big_model.py), seed {seed}")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(HIDDEN)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_KV_HEAD)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    for _, _, name, shape in tensors:
        w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * numel(shape))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    for idx, _, _, shape in tensors:
        # gguf-py's alignment padding before and after each tensor, as
        # GGUFWriter.write_tensor_data does for in-memory arrays.
        w.write_padding(fout, fout.tell())
        for c in chunks(seed, idx, shape):
            f32 = (c.astype(np.uint32) << 16).view(np.float32)
            fout.write(f32.astype("<f4", copy=False).data)
        w.write_padding(fout, 4 * numel(shape))
    w.close()
    os.replace(tmp, out_file)
    return os.path.getsize(out_file)


def main():
    # The shapes (LAYER, plan, config, write_gguf) read these globals.
    global HIDDEN, N_HEAD, N_KV_HEAD, HEAD_DIM, Q_DIM, KV_DIM
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="output folder (safetensors-bf16) or .gguf file (gguf-f32)")
    ap.add_argument("--format", default="safetensors-bf16", choices=["safetensors-bf16", "gguf-f32"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=LAYERS)
    ap.add_argument("--ffn", type=int, default=FFN, help=f"feed-forward width (default {FFN})")
    ap.add_argument("--vocab", type=int, default=VOCAB,
                    help=f"embedding rows (default {VOCAB}; smaller for a quick benchmark)")
    ap.add_argument("--only", choices=["embedding", "layers"],
                    help="write only the token embedding, or only the rest")
    ap.add_argument("--hidden", type=int, default=HIDDEN,
                    help=f"hidden size (default {HIDDEN}); with --heads, --kv-heads and "
                    "--head-dim other model sizes, e.g. a 7B-class one: --hidden 4096 --heads 32 "
                    "--kv-heads 8 --head-dim 128 --ffn 14336 --layers 32 --vocab 128256")
    ap.add_argument("--heads", type=int, default=N_HEAD, help=f"query heads (default {N_HEAD})")
    ap.add_argument("--kv-heads", type=int, default=N_KV_HEAD,
                    help=f"key/value heads (default {N_KV_HEAD})")
    ap.add_argument("--head-dim", type=int, default=HEAD_DIM, help=f"(default {HEAD_DIM})")
    args = ap.parse_args()
    if args.layers < 0 or args.ffn < 1 or args.vocab < 1:
        ap.error("--layers must be >= 0, --ffn and --vocab >= 1")
    if min(args.hidden, args.heads, args.kv_heads, args.head_dim) < 1:
        ap.error("--hidden, --heads, --kv-heads and --head-dim must be >= 1")
    HIDDEN, N_HEAD, N_KV_HEAD, HEAD_DIM = args.hidden, args.heads, args.kv_heads, args.head_dim
    Q_DIM, KV_DIM = N_HEAD * HEAD_DIM, N_KV_HEAD * HEAD_DIM

    t0 = time.time()
    tensors = plan(args.layers, args.ffn, args.only, args.vocab)
    cfg = config(args.layers, args.ffn, args.only, args.vocab)
    if args.format == "safetensors-bf16":
        size = write_safetensors(args.out, tensors, args.seed, cfg)
    else:
        size = write_gguf(args.out, tensors, args.seed, cfg)
    n = sum(numel(s) for _, _, _, s in tensors)
    n_mat = sum(numel(s) for _, _, _, s in tensors if len(s) == 2)
    print(json.dumps({
        "out": args.out, "format": args.format, "seed": args.seed, "layers": args.layers,
        "ffn": args.ffn, "vocab": args.vocab, "only": args.only, "tensors": len(tensors), "weights": n,
        "matrix_weights": n_mat, "data_file_bytes": size,
        "seconds": round(time.time() - t0, 1),
    }), file=sys.stderr)


if __name__ == "__main__":
    main()
