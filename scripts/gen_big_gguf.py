#!/usr/bin/env python3
"""Write a big, llama-shaped GGUF v3 model for benchmarks (scripts/bench).

The 2-D weights (token_embd, attention, feed-forward, output) are in one
ggml block type (Q4_K by default: 144-byte blocks of 256 weights); the norms
are F32. The quantized blocks are random bytes except their fp16 scale
fields (Q4_K: `d` and `dmin`, the first 4 bytes of each block), which are
all fp16(0.01), so every block dequantizes to finite, small values and the
file is a plausible model. The output depends only on the arguments (seed).

Shapes: hidden 2048, ffn 8192, vocab 32000, 32 heads of 64, 8 KV heads
(GQA: attn_k/attn_v are 512 x 2048); the layer count is chosen so the file
is about --size-gb GB (1 GB = 1e9 bytes). At 1.0 GB with Q4_K: 27 layers,
246 tensors, 997858208 bytes.

The header is written with gguf-py's GGUFWriter (the reference writer); the
tensor data is streamed in chunks of at most CHUNK_BYTES straight to the
file, so memory stays low (tens of MB) whatever the size.

Usage: scripts/gen_big_gguf.py OUT.gguf [--size-gb 1.0] [--type q4_k] [--seed 0]
Needs: pip install -r scripts/requirements.txt  (numpy, gguf)
"""
import argparse
import os
import sys
import time

import numpy as np
import gguf

Q = gguf.GGMLQuantizationType

# type -> (ggml type, llama file type, byte offsets of the fp16 scale fields
# inside a block). Block sizes come from gguf-py's GGML_QUANT_SIZES.
TYPES = {
    "q8_0": (Q.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0, (0,)),       # d
    "q5_0": (Q.Q5_0, gguf.LlamaFileType.MOSTLY_Q5_0, (0,)),       # d
    "q4_k": (Q.Q4_K, gguf.LlamaFileType.MOSTLY_Q4_K_M, (0, 2)),   # d, dmin
    "q5_k": (Q.Q5_K, gguf.LlamaFileType.MOSTLY_Q5_K_M, (0, 2)),   # d, dmin
    "q6_k": (Q.Q6_K, gguf.LlamaFileType.MOSTLY_Q6_K, (208,)),     # d (last)
}

HIDDEN = 2048
FFN = 8192
VOCAB = 32000
N_HEAD = 32
N_HEAD_KV = 8
HEAD_DIM = HIDDEN // N_HEAD
KV_DIM = N_HEAD_KV * HEAD_DIM
CTX = 4096
CHUNK_BYTES = 8 << 20
SCALE = np.float16(0.01)


def plan(n_layers):
    """(name, shape rows x cols, quantized?) in llama.cpp's tensor order."""
    t = [("token_embd.weight", (VOCAB, HIDDEN), True)]
    for i in range(n_layers):
        b = f"blk.{i}."
        t += [
            (b + "attn_norm.weight", (HIDDEN,), False),
            (b + "attn_q.weight", (HIDDEN, HIDDEN), True),
            (b + "attn_k.weight", (KV_DIM, HIDDEN), True),
            (b + "attn_v.weight", (KV_DIM, HIDDEN), True),
            (b + "attn_output.weight", (HIDDEN, HIDDEN), True),
            (b + "ffn_norm.weight", (HIDDEN,), False),
            (b + "ffn_gate.weight", (FFN, HIDDEN), True),
            (b + "ffn_up.weight", (FFN, HIDDEN), True),
            (b + "ffn_down.weight", (HIDDEN, FFN), True),
        ]
    t += [("output_norm.weight", (HIDDEN,), False),
          ("output.weight", (VOCAB, HIDDEN), True)]
    return t


def qbytes(shape, qtype):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rows, cols = shape
    assert cols % block == 0, (shape, qtype)
    return rows * (cols // block) * size


def layers_for(size_bytes, qtype):
    fixed = 2 * qbytes((VOCAB, HIDDEN), qtype) + 4 * HIDDEN
    per = sum(qbytes(s, qtype) if q else 4 * s[0]
              for _, s, q in plan(1) if _.startswith("blk.0."))
    return max(1, round((size_bytes - fixed) / per))


def quant_chunks(rng, nbytes, qtype, scale_offsets):
    """Yield the tensor's bytes in chunks of whole blocks: random bytes with
    every fp16 scale field set to SCALE."""
    _, bsize = gguf.GGML_QUANT_SIZES[qtype]
    per_chunk = max(1, CHUNK_BYTES // bsize)
    nblocks = nbytes // bsize
    scale = np.frombuffer(SCALE.astype("<f2").tobytes(), dtype=np.uint8)
    done = 0
    while done < nblocks:
        n = min(per_chunk, nblocks - done)
        raw = rng.bit_generator.random_raw((n * bsize + 7) // 8)
        blocks = raw.view(np.uint8)[: n * bsize].reshape(n, bsize)
        for off in scale_offsets:
            blocks[:, off:off + 2] = scale
        yield blocks
        done += n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--size-gb", type=float, default=1.0,
                    help="approximate file size in GB (1e9 bytes); default 1.0")
    ap.add_argument("--type", default="q4_k", choices=sorted(TYPES),
                    help="ggml type of the 2-D weights; default q4_k")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    qtype, ftype, scale_offsets = TYPES[args.type]
    n_layers = layers_for(args.size_gb * 1e9, qtype)
    tensors = plan(n_layers)
    t0 = time.time()

    tmp = args.out + ".tmp"
    w = gguf.GGUFWriter(tmp, "llama")
    w.add_name(f"bench-llama-{n_layers}L-{args.type}")
    w.add_description(f"random {args.type} weights for benchmarks, seed {args.seed}")
    w.add_context_length(CTX)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(FFN)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(VOCAB)
    w.add_file_type(int(ftype))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    for name, shape, quant in tensors:
        if quant:
            # GGUFWriter takes the byte shape of raw blocks (uint8) and turns
            # it into the logical shape itself.
            nbytes = qbytes(shape, qtype)
            _, bsize = gguf.GGML_QUANT_SIZES[qtype]
            block = gguf.GGML_QUANT_SIZES[qtype][0]
            byte_shape = (shape[0], shape[1] // block * bsize)
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nbytes, raw_dtype=qtype)
        else:
            w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * shape[0])

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    # Stream the tensor data ourselves, in the order of the tensor infos,
    # with gguf-py's alignment padding before and after each tensor (what
    # GGUFWriter.write_tensor_data does for whole in-memory arrays).
    rng = np.random.Generator(np.random.SFC64(args.seed))
    fout = w.fout[0]
    total = 0
    for name, shape, quant in tensors:
        w.write_padding(fout, fout.tell())
        if quant:
            nbytes = qbytes(shape, qtype)
            for blocks in quant_chunks(rng, nbytes, qtype, scale_offsets):
                fout.write(blocks.data)
        else:
            norm = (1.0 + 0.05 * rng.standard_normal(shape[0])).astype("<f4")
            nbytes = norm.nbytes
            fout.write(norm.data)
        w.write_padding(fout, nbytes)
        total += nbytes
    w.close()
    os.replace(tmp, args.out)

    size = os.path.getsize(args.out)
    print(f"wrote {args.out}: {size} bytes ({size / 1e9:.3f} GB), {len(tensors)} tensors, "
          f"{n_layers} layers, {args.type}, seed {args.seed}, {time.time() - t0:.1f} s",
          file=sys.stderr)


if __name__ == "__main__":
    main()
