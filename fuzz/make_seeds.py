#!/usr/bin/env python3
"""Write the committed seed corpora fuzz/corpus/<target>/ from the fixtures.

    python3 fuzz/make_seeds.py [--convert target/release/convert]

Deterministic; standard library only. What it writes:

- gguf: fixtures/gguf-variants/* as they are; every fixtures/models/*.gguf
  and fixtures/ggml-vectors/*.gguf shrunk to a small *valid* file (metadata
  arrays cut to 8 elements, every tensor cut to its first row and to at most
  256 weights of whole blocks, offsets re-laid out); two truncated copies.
- safetensors: the tiny HF model's model.safetensors shrunk the same way
  (first row, at most 64 values), hand-made files covering every dtype,
  zero-size tensors, __metadata__, 8 dims, and a few broken ones.
- hf_folder: inputs in the format of fuzz/targets.rs `hf_files` (parts
  joined by b"\\n--\\n": config.json, index, shard 1, shard 2).
- weights: the smallest .weights files of each kind that `convert` writes
  (precision, flags, ndim) for fixtures/models/tiny-llama-f32.gguf with
  --plain, --qtype q4_k / q5_k, --bits 4, for tiny-llama-Q6_K.gguf (keep),
  and for a tiny made-up model (16 x 128 embedding: its CQ4 orthogonal file
  is small) with --plain, --qtype q8_0 (R8 and R4) / q5_0, --bits 4.
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
SEP = b"\n--\n"

# ggml type id -> (block size, bytes per block)
GGML = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
    8: (32, 34), 9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144),
    13: (256, 176), 14: (256, 210), 15: (256, 292), 24: (1, 1), 25: (1, 2),
    26: (1, 4), 27: (1, 8), 28: (1, 8), 30: (1, 2),
}
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


class Reader:
    def __init__(self, b):
        self.b, self.p = b, 0

    def take(self, n):
        v = self.b[self.p:self.p + n]
        self.p += n
        return v

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def string(self):
        return self.take(self.u64())

    def value(self, t, cut):
        """The value's bytes re-encoded, arrays cut to `cut` elements."""
        if t == 8:
            s = self.string()
            return struct.pack("<Q", len(s)) + s
        if t == 9:
            et, n = self.u32(), self.u64()
            items = [self.value(et, cut) for _ in range(n)]
            items = items[:cut]
            return struct.pack("<IQ", et, len(items)) + b"".join(items)
        return self.take(SCALAR[t])


def gstr(s):
    return struct.pack("<Q", len(s)) + s


def shrink_gguf(b, max_cols=256, cut=8):
    r = Reader(b)
    magic, version, n_t, n_kv = r.u32(), r.u32(), r.u64(), r.u64()
    kvs, alignment = [], 32
    for _ in range(n_kv):
        k = r.string()
        t = r.u32()
        v = r.value(t, cut)
        if k == b"general.alignment":
            alignment = struct.unpack("<I", v)[0]
        kvs.append(gstr(k) + struct.pack("<I", t) + v)
    infos = []
    for _ in range(n_t):
        name = r.string()
        dims = [r.u64() for _ in range(r.u32())]
        ty, off = r.u32(), r.u64()
        infos.append((name, dims, ty, off))
    data_offset = (r.p + alignment - 1) // alignment * alignment
    out_infos, blobs, pos = [], [], 0
    for name, dims, ty, off in infos:
        bs, ts = GGML[ty]
        ne0 = dims[0]
        if ne0 > max_cols and ne0 >= bs:
            ne0 = max(bs, max_cols // bs * bs)
        row = ne0 // bs * ts
        start = data_offset + off
        blob = b[start:start + row]
        new_dims = [ne0] + [1] * (len(dims) - 1)
        pos = (pos + alignment - 1) // alignment * alignment
        out_infos.append(gstr(name) + struct.pack("<I", len(new_dims))
                         + b"".join(struct.pack("<Q", d) for d in new_dims)
                         + struct.pack("<IQ", ty, pos))
        blobs.append((pos, blob))
        pos += len(blob)
    head = struct.pack("<IIQQ", magic, version, len(out_infos), len(kvs))
    head += b"".join(kvs) + b"".join(out_infos)
    head += b"\0" * ((-len(head)) % alignment)
    data = bytearray(pos)
    for p, blob in blobs:
        data[p:p + len(blob)] = blob
    return head + bytes(data)


def st_file(header, data=b"", pad_to=8):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % pad_to)
    return struct.pack("<Q", len(h)) + h + data


ST_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "U64": 8,
            "I32": 4, "U32": 4, "I16": 2, "U16": 2, "I8": 1, "U8": 1,
            "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1}


def read_st(b):
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    return header, b[8 + n:]


def shrink_st(b, max_vals=64, names=None):
    """(header dict, data) with every tensor cut to its first row and at most
    `max_vals` values; `names` selects tensors."""
    header, data = read_st(b)
    out, blob = {}, bytearray()
    if "__metadata__" in header:
        out["__metadata__"] = header["__metadata__"]
    items = [(k, v) for k, v in header.items() if k != "__metadata__"]
    items.sort(key=lambda kv: kv[1]["data_offsets"][0])
    for k, v in items:
        if names is not None and k not in names:
            continue
        size = ST_BYTES[v["dtype"]]
        shape = v["shape"]
        cols = min(shape[-1], max_vals) if shape else 1
        new_shape = [1] * (len(shape) - 1) + [cols] if shape else []
        start = v["data_offsets"][0]
        part = data[start:start + cols * size]
        out[k] = {"dtype": v["dtype"], "shape": new_shape,
                  "data_offsets": [len(blob), len(blob) + len(part)]}
        blob += part
    return out, bytes(blob)


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def fixture(*p):
    return os.path.join(ROOT, "fixtures", *p)


def gguf_seeds():
    for f in sorted(os.listdir(fixture("gguf-variants"))):
        with open(fixture("gguf-variants", f), "rb") as fh:
            write("gguf", "variant-" + f, fh.read())
    shrunk = {}
    for sub in ("models", "ggml-vectors"):
        for f in sorted(os.listdir(fixture(sub))):
            if not f.endswith(".gguf"):
                continue
            with open(fixture(sub, f), "rb") as fh:
                s = shrink_gguf(fh.read())
            shrunk[f] = s
            write("gguf", "shrunk-" + f, s)
    s = shrunk["tiny-llama-f32.gguf"]
    write("gguf", "truncated-header.gguf", s[:len(s) // 8])
    write("gguf", "truncated-data.gguf", s[:len(s) - 100])


def st_seeds():
    with open(fixture("models", "tiny-llama-hf-bf16", "model.safetensors"), "rb") as fh:
        model = fh.read()
    h, d = shrink_st(model)
    write("safetensors", "shrunk-tiny-llama-bf16.safetensors", st_file(h, d))
    # Every dtype, with one and with several values.
    all_types = {}
    blob = bytearray()
    for i, (dt, size) in enumerate(sorted(ST_BYTES.items())):
        part = bytes((i * 7 + j) & 0xFF for j in range(2 * size))
        all_types["t_" + dt.lower()] = {"dtype": dt, "shape": [2],
                                        "data_offsets": [len(blob), len(blob) + len(part)]}
        blob += part
    for dt, n, nbytes in (("F4", [2, 2], 2), ("F6_E2M3", [4], 3), ("F6_E3M2", [8], 6)):
        all_types["t_" + dt.lower()] = {"dtype": dt, "shape": n,
                                        "data_offsets": [len(blob), len(blob) + nbytes]}
        blob += bytes(range(nbytes))
    write("safetensors", "every-dtype.safetensors", st_file(all_types, bytes(blob)))
    write("safetensors", "metadata-zero-size.safetensors", st_file({
        "__metadata__": {"format": "pt", "note": "zero-size tensors"},
        "empty": {"dtype": "F32", "shape": [0, 5], "data_offsets": [0, 0]},
        "scalar": {"dtype": "F16", "shape": [], "data_offsets": [0, 2]},
        "eight_dims": {"dtype": "U8", "shape": [1, 2, 1, 2, 1, 2, 1, 2], "data_offsets": [2, 18]},
    }, bytes(18)))
    write("safetensors", "empty-header.safetensors", st_file({}))
    mat = {"model.layers.0.mlp.up_proj.weight": {"dtype": "F32", "shape": [2, 4],
                                                  "data_offsets": [0, 32]}}
    good = st_file(mat, struct.pack("<8f", *[0.5 * i for i in range(8)]))
    write("safetensors", "f32-matrix.safetensors", good)
    write("safetensors", "bad-truncated.safetensors", good[:-3])
    write("safetensors", "bad-trailing.safetensors", good + b"\0")
    bad = {"w": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}
    write("safetensors", "bad-hole.safetensors", st_file(bad, bytes(12)))
    write("safetensors", "bad-json.safetensors", struct.pack("<Q", 6) + b'{"a":1')
    write("safetensors", "bad-length.safetensors", struct.pack("<Q", 1 << 40) + b"{}")
    return model


def hf_seeds(model):
    with open(fixture("models", "tiny-llama-hf-bf16", "config.json"), "rb") as fh:
        config = fh.read()
    h, d = shrink_st(model, max_vals=16)
    single = st_file(h, d)
    write("hf_folder", "single", SEP.join([config, b"", single]))
    names = sorted(k for k in h if k != "__metadata__")
    half = len(names) // 2
    shards, weight_map = [], {}
    for i, part in enumerate((names[:half], names[half:])):
        sh, sd = shrink_st(model, max_vals=16, names=set(part))
        shards.append(st_file(sh, sd))
        for n in part:
            weight_map[n] = "model-%05d-of-00002.safetensors" % (i + 1)
    index = json.dumps({"metadata": {"total_size": len(d)}, "weight_map": weight_map},
                       indent=2).encode()
    write("hf_folder", "sharded", SEP.join([config, index] + shards))
    # One shard only, and an index that lists a tensor in the wrong shard.
    one = {n: "model-00001-of-00002.safetensors" for n in names[:half]}
    write("hf_folder", "one-shard", SEP.join(
        [config, json.dumps({"weight_map": one}).encode(), shards[0]]))
    wrong = dict(weight_map)
    wrong[names[0]] = "model-00002-of-00002.safetensors"
    write("hf_folder", "bad-wrong-shard", SEP.join(
        [config, json.dumps({"weight_map": wrong}).encode()] + shards))
    write("hf_folder", "bad-no-weights", SEP.join([config]))
    write("hf_folder", "bad-config", SEP.join([b"{\"model_type\": ", b"", single]))
    write("hf_folder", "bad-escape", SEP.join(
        [config, json.dumps({"weight_map": {names[0]: "../x.safetensors"}}).encode()]))


def tiny_model(dir_):
    """A made-up Hugging Face llama with 16 x 128 matrices and a 16-token
    embedding: its CQ4 orthogonal embedding file is small."""
    os.makedirs(dir_, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "hidden_size": 128, "intermediate_size": 128, "num_hidden_layers": 1,
              "num_attention_heads": 1, "num_key_value_heads": 1, "vocab_size": 16,
              "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "torch_dtype": "float32"}
    with open(os.path.join(dir_, "config.json"), "w") as f:
        json.dump(config, f)
    shapes = {"model.embed_tokens.weight": [16, 128],
              "model.layers.0.self_attn.q_proj.weight": [128, 128],
              "model.layers.0.input_layernorm.weight": [128],
              "model.norm.weight": [128],
              "lm_head.weight": [16, 128]}
    header, blob, state = {}, bytearray(), 12345
    for name, shape in shapes.items():
        n = 1
        for s in shape:
            n *= s
        vals = []
        for _ in range(n):
            state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
            vals.append(((state >> 40) / (1 << 24) - 0.5) * (0.0 if "norm" in name else 0.2)
                        + (1.0 if "norm" in name else 0.0))
        if name == "model.norm.weight":
            vals[3] = 1e5  # beyond fp16: this norm becomes a plain FP32 file
        part = struct.pack("<%df" % n, *vals)
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [len(blob), len(blob) + len(part)]}
        blob += part
    with open(os.path.join(dir_, "model.safetensors"), "wb") as f:
        f.write(st_file(header, bytes(blob)))


def weights_seeds(convert):
    tmp = tempfile.mkdtemp(prefix="convert-seeds-")
    try:
        src = fixture("models", "tiny-llama-f32.gguf")
        tiny = os.path.join(tmp, "tiny-hf")
        tiny_model(tiny)
        runs = {
            "plain": [src, "--plain"],
            "tiny-plain": [tiny, "--plain"],
            "tiny-q8_0": [tiny, "--qtype", "q8_0"],
            "tiny-q8_0-r4": [tiny, "--qtype", "q8_0", "--interleave", "4"],
            "tiny-q5_0": [tiny, "--qtype", "q5_0"],
            "q4_k": [src, "--qtype", "q4_k"],
            "q5_k": [src, "--qtype", "q5_k"],
            "keep-q6_k": [fixture("models", "tiny-llama-Q6_K.gguf")],
            "cq4": [src, "--bits", "4"],
            "tiny-cq4": [tiny, "--bits", "4"],
        }
        # The smallest file of each kind: precision, flags, ndim.
        by_kind = {}
        for tag, args in runs.items():
            out = os.path.join(tmp, "out-" + tag)
            subprocess.run([convert, args[0], out, "--quiet", "--no-verify"] + args[1:],
                           check=True)
            for f in sorted(os.listdir(out)):
                if not f.endswith(".weights"):
                    continue
                with open(os.path.join(out, f), "rb") as fh:
                    b = fh.read()
                kind = (b[48:52], b[4:8], b[12:16])
                if kind not in by_kind or len(b) < len(by_kind[kind][1]):
                    by_kind[kind] = (tag + "-" + f, b)
        for name, b in sorted(by_kind.values()):
            if len(b) <= 80_000:
                write("weights", name, b)
    finally:
        shutil.rmtree(tmp)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--convert", default=os.path.join(ROOT, "target", "release", "convert"))
    a = ap.parse_args()
    for t in ("gguf", "safetensors", "hf_folder", "weights"):
        shutil.rmtree(os.path.join(CORPUS, t), ignore_errors=True)
    gguf_seeds()
    model = st_seeds()
    hf_seeds(model)
    weights_seeds(a.convert)
    for t in sorted(os.listdir(CORPUS)):
        d = os.path.join(CORPUS, t)
        files = os.listdir(d)
        size = sum(os.path.getsize(os.path.join(d, f)) for f in files)
        print("%-12s %3d files %7d bytes" % (t, len(files), size))


if __name__ == "__main__":
    main()
