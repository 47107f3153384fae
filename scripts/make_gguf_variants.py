#!/usr/bin/env python3
"""Write fixtures/gguf-variants/: small GGUF files exercising what llama.cpp
accepts but other readers reject, made with gguf-py (the reference writer):

- v2.gguf: a GGUF version 2 file (v2 and v3 share the little-endian layout;
  gguf-py writes v3, so the version field is patched to 2 afterwards),
- align4.gguf / align64.gguf: general.alignment = 4 / 64,
- upper_key.gguf: metadata keys that are not lower_snake_case,
- nested.gguf: every metadata value type, and nested arrays,
- moe.gguf: a one-expert-layer MoE model (llama architecture, 4 experts):
  3-D expert tensors `[n_expert, N, K]` in Q8_0 and Q5_1 (quantized by
  gguf-py, byte-exact with ggml's reference quantizers), in Q4_K (the 20
  ggml-made rows of fixtures/ggml-vectors/q4_k.gguf as 4 experts of 5 rows)
  and in F32 (a float expert tensor, which keep mode leaves in the source);
  rows per expert 12 and 5, so R4 / R8 have tail rows.

Usage: scripts/make_gguf_variants.py
"""
import pathlib

import numpy as np
import gguf

OUT = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "gguf-variants"


def tensors(w, seed):
    rng = np.random.default_rng(seed)
    w.add_tensor("tok_embd.weight", rng.standard_normal((8, 32)).astype(np.float32))
    w.add_tensor("blk.0.attn_q.weight", rng.standard_normal((32, 32)).astype(np.float16))
    w.add_tensor("blk.0.attn_norm.weight", rng.standard_normal(32).astype(np.float32))
    # A 3-element tensor: its byte length (12) is not a multiple of 8, so the
    # next tensor's offset depends on the alignment.
    w.add_tensor("odd.bias", np.arange(3, dtype=np.float32))
    w.add_tensor("blk.0.ffn_up.weight", rng.standard_normal((16, 32)).astype(np.float32))


def write(name, seed, alignment=None, extra=None, version=None):
    path = OUT / name
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    if extra:
        extra(w)
    tensors(w, seed)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if version is not None:
        b = bytearray(path.read_bytes())
        b[4:8] = int(version).to_bytes(4, "little")
        path.write_bytes(bytes(b))
    print("wrote", path)


def upper(w):
    w.add_string("General.Name", "Upper Case Key")
    w.add_uint32("MyVendor.CONTEXT_Length", 4096)
    w.add_string("tokenizer.ggml.MODEL", "gpt2")


def nested(w):
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 1.5)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "h\u00e9llo")
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_float64("t.f64", -2.25)
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_str", ["a", "bc", ""])
    w.add_array("t.nested", [[1, 2], [3], [4, 5, 6]])
    w.add_array("t.nested_str", [["x", "y"], ["z"]])


def moe(path):
    rng = np.random.default_rng(14)
    n_expert, n_embd, n_ff = 4, 256, 12
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(2)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(2)
    Q = gguf.GGMLQuantizationType

    def experts(name, shape, qtype, scale):
        x = (rng.standard_normal(shape) * scale).astype(np.float32)
        w.add_tensor(name, gguf.quants.quantize(x, qtype), raw_dtype=qtype)

    w.add_tensor("token_embd.weight", rng.standard_normal((8, n_embd)).astype(np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor("blk.0.ffn_gate_inp.weight",
                 rng.standard_normal((n_expert, n_embd)).astype(np.float32))
    experts("blk.0.ffn_gate_exps.weight", (n_expert, n_ff, n_embd), Q.Q8_0, 0.05)
    experts("blk.0.ffn_up_exps.weight", (n_expert, n_ff, n_embd), Q.Q5_1, 0.05)
    w.add_tensor("blk.0.ffn_down_exps.weight",
                 (rng.standard_normal((n_expert, n_embd, n_ff)) * 0.05).astype(np.float32))
    # ggml's own Q4_K bytes (20 rows of 1024) as 4 experts of 5 rows.
    q4k = gguf.GGUFReader(str(OUT.parent / "ggml-vectors" / "q4_k.gguf"))
    t = next(t for t in q4k.tensors if t.name == "quantized")
    data = np.array(t.data, dtype=np.uint8).reshape(n_expert, 5, -1)
    w.add_tensor("blk.1.ffn_gate_exps.weight", data, raw_dtype=Q.Q4_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", path)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    write("v2.gguf", 1, version=2)
    write("align4.gguf", 2, alignment=4)
    write("align64.gguf", 3, alignment=64)
    write("upper_key.gguf", 4, extra=upper)
    write("nested.gguf", 5, extra=nested)
    moe(OUT / "moe.gguf")


if __name__ == "__main__":
    main()
