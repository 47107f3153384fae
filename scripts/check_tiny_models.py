#!/usr/bin/env python3
"""Check, on the committed fixtures alone, the facts of
shared/reference/cactus-bundle.md §5 (GGUF sources) that the GGUF -> Hugging Face
inversion relies on, for the tiny models made by scripts/make_tiny_models.py:

  fixtures/models/tiny-llama3-hf  + tiny-llama3.gguf
  fixtures/models/tiny-qwen2-hf   + tiny-qwen2.gguf
  fixtures/models/tiny-gemma3-hf  + tiny-gemma3.gguf, tiny-gemma3-tokjson.gguf

It prints one line per fact, PASS or FAIL, then the tokenizer.* keys each
GGUF has, and exits 1 if any fact fails. Comparisons of values are exact
(bit for bit in f32): the HF weights are bf16, which --outtype f32 widens
exactly, and llama.cpp adds Gemma's 1 in f32.

Reads only fixtures/ (safetensors and tokenizer.model are parsed here, so
it needs nothing but numpy and gguf-py):
  "$(scripts/pyenv)" scripts/check_tiny_models.py [--root fixtures/models]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import struct
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType

ROOT = Path(__file__).resolve().parent.parent

results: list[tuple[bool, str, str]] = []


def fact(model: str, ok: bool, text: str) -> None:
    results.append((bool(ok), model, text))
    print(f"{'PASS' if ok else 'FAIL'}  {model:<14} {text}", flush=True)


# --------------------------------------------------------------------------
# readers


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor as float32 (bf16 and f16 widened exactly)."""
    raw = path.read_bytes()
    (n,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = raw[base + a:base + b]
        dt = info["dtype"]
        if dt == "BF16":
            v = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif dt == "F16":
            v = np.frombuffer(buf, dtype="<f2").astype(np.float32)
        elif dt == "F32":
            v = np.frombuffer(buf, dtype="<f4").copy()
        else:
            raise SystemExit(f"{path}: {name}: dtype {dt} not handled")
        out[name] = v.reshape(info["shape"])
    return out


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def read_sentencepiece(path: Path) -> list[tuple[str, float, int]]:
    """(piece, score, type) of a SentencePiece ModelProto: field 1 is the
    repeated SentencePiece {1: piece, 2: score (float), 3: type (default 1)}."""
    buf = path.read_bytes()
    pieces = []
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 2:
            n, i = _varint(buf, i)
            body, i = buf[i:i + n], i + n
            if field == 1:
                piece, score, typ = "", 0.0, 1
                j = 0
                while j < len(body):
                    k, j = _varint(body, j)
                    f, w = k >> 3, k & 7
                    if w == 2:
                        m, j = _varint(body, j)
                        if f == 1:
                            piece = body[j:j + m].decode("utf-8")
                        j += m
                    elif w == 5:
                        if f == 2:
                            (score,) = struct.unpack_from("<f", body, j)
                        j += 4
                    elif w == 0:
                        v, j = _varint(body, j)
                        if f == 3:
                            typ = v
                    elif w == 1:
                        j += 8
                    else:
                        raise SystemExit(f"{path}: wire type {w} in a piece")
                pieces.append((piece, score, typ))
        elif wire == 0:
            _, i = _varint(buf, i)
        elif wire == 5:
            i += 4
        elif wire == 1:
            i += 8
        else:
            raise SystemExit(f"{path}: wire type {wire}")
    return pieces


class Gguf:
    def __init__(self, path: Path):
        self.path = path
        self.r = GGUFReader(str(path))
        self.t = {t.name: t for t in self.r.tensors}

    def has(self, key: str) -> bool:
        return key in self.r.fields

    def get(self, key: str, default=None):
        f = self.r.fields.get(key)
        return default if f is None else f.contents()

    def keys(self, prefix: str) -> list[str]:
        return [k for k in self.r.fields if k.startswith(prefix)]

    def data(self, name: str) -> np.ndarray:
        return np.asarray(self.t[name].data, dtype=np.float32)

    def ne(self, name: str) -> list[int]:
        return [int(x) for x in self.t[name].shape]


def hf_to_gguf_name(name: str, arch: str) -> str | None:
    """§5's table, HF -> GGUF."""
    glob = {"model.embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight",
            "model.norm.weight": "output_norm.weight"}
    if name in glob:
        return glob[name]
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.(weight|bias)", name)
    if not m:
        return None
    n, mid, kind = m.groups()
    table = {
        "input_layernorm": "attn_norm",
        "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
        "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
        "post_attention_layernorm": "post_attention_norm" if arch == "gemma3" else "ffn_norm",
        "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm",
    }
    if mid not in table:
        return None
    return f"blk.{n}.{table[mid]}.{kind}"


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def unpermute(rows: np.ndarray, n: int) -> np.ndarray:
    """§5's inverse: HF row h*D + s*D/2 + i <- GGUF row h*D + 2i + s."""
    d = rows.shape[0] // n
    out = np.empty_like(rows)
    for h in range(n):
        for s in range(2):
            for i in range(d // 2):
                out[h * d + s * d // 2 + i] = rows[h * d + 2 * i + s]
    return out


# --------------------------------------------------------------------------
# checks shared by the three models


def check_names_and_values(model: str, hf: dict, g: Gguf, arch: str, transformed: set[str]) -> dict:
    """Names, shapes, dtypes; values of every tensor not in `transformed`.
    Returns the HF -> GGUF name map."""
    names = {}
    unknown = []
    for name in hf:
        gname = hf_to_gguf_name(name, arch)
        if gname is None:
            unknown.append(name)
        else:
            names[name] = gname
    fact(model, not unknown, f"every HF tensor has a §5 name ({len(names)} tensors; unmapped: {unknown or 'none'})")
    missing = sorted(v for v in names.values() if v not in g.t)
    extra = sorted(set(g.t) - set(names.values()))
    expect_extra = ["rope_freqs.weight"] if arch == "llama" else []
    fact(model, not missing and extra == expect_extra,
         f"GGUF tensors = the mapped HF names + {expect_extra or 'nothing'} (missing {missing or 'none'}, extra {extra or 'none'})")
    bad_shape = [n for n, gn in names.items() if gn in g.t and g.ne(gn) != list(reversed(hf[n].shape))
                 and gn != "token_embd.weight"]
    fact(model, not bad_shape, f"GGUF ne = reversed HF shape for every tensor but token_embd ({bad_shape or 'ok'})")
    types = sorted({g.t[n].tensor_type.name for n in g.t})
    fact(model, types == ["F32"], f"every GGUF tensor is F32 (--outtype f32): {types}")
    differ = [n for n, gn in names.items() if gn in g.t and n not in transformed and not same(g.data(gn), hf[n])]
    fact(model, not differ,
         f"{len([n for n in names if n not in transformed])} untransformed tensors are bit-identical to HF widened to f32 ({differ or 'ok'})")
    return names


def check_tokenizer_bpe(model: str, d: Path, g: Gguf, pre: str) -> None:
    tj = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    tc = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    cfg = json.loads((d / "config.json").read_text(encoding="utf-8"))
    fact(model, g.get("tokenizer.ggml.model") == "gpt2", f"tokenizer.ggml.model = {g.get('tokenizer.ggml.model')!r} (gpt2: byte-level BPE)")
    fact(model, g.get("tokenizer.ggml.pre") == pre,
         f"tokenizer.ggml.pre = {g.get('tokenizer.ggml.pre')!r} (set by make_tiny_models.py: a trained vocab's hash is unknown)")
    by_id = {i: t for t, i in tj["model"]["vocab"].items()}
    for a in tj["added_tokens"]:
        by_id[a["id"]] = a["content"]
    tokens = g.get("tokenizer.ggml.tokens")
    types = g.get("tokenizer.ggml.token_type")
    n = cfg["vocab_size"]
    fact(model, len(tokens) == n == len(types), f"{len(tokens)} tokens and token types = config vocab_size {n}")
    pads = [i for i in range(n) if i not in by_id]
    fact(model, all(tokens[i] == by_id[i] for i in by_id),
         f"tokens[id] = tokenizer.json token of id, raw byte-level text (Ġ, Ċ), for all {len(by_id)} ids")
    fact(model, all(tokens[i] == f"[PAD{i}]" and types[i] == 5 for i in pads),
         f"ids without a token ({len(pads)}" + (f": {pads[0]}..{pads[-1]}" if pads else "") + ") are [PADid] of type 5 (unused)")
    added = {a["id"]: a for a in tj["added_tokens"]}
    want = [(3 if added[i]["special"] else 4) if i in added else 1 for i in sorted(by_id)]
    have = [types[i] for i in sorted(by_id)]
    fact(model, want == have, "token_type: 1 normal, 3 special added token, 4 non-special added token ("
         + ", ".join(f"{c}x{have.count(c)}" for c in sorted(set(have))) + ")")
    fact(model, not g.has("tokenizer.ggml.scores"), "no tokenizer.ggml.scores for gpt2")
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    fact(model, g.get("tokenizer.ggml.merges") == merges, f"tokenizer.ggml.merges = tokenizer.json merges as 'a b' ({len(merges)})")
    tok_id = {t: i for i, t in by_id.items()}
    for key, src in (("bos", "bos_token"), ("eos", "eos_token"), ("padding", "pad_token")):
        name = tc.get(src)
        want_id = tok_id.get(name) if name is not None else None
        if want_id is None and key == "bos":
            want_id = cfg.get("bos_token_id")
        have_id = g.get(f"tokenizer.ggml.{key}_token_id")
        fact(model, have_id == want_id,
             f"tokenizer.ggml.{key}_token_id = {have_id} ({src} {name!r} of tokenizer_config.json"
             + (", else config.json bos_token_id" if key == "bos" else "") + ")")
    eos_cfg = cfg.get("eos_token_id")
    if isinstance(eos_cfg, list):
        fact(model, g.get("tokenizer.ggml.eos_token_id") in eos_cfg and len(eos_cfg) > 1,
             f"config.json's list eos_token_id {eos_cfg} keeps one id in the GGUF (no list key)")
    want_bos = tc.get("add_bos_token", tj.get("post_processor") is not None and "TemplateProcessing" in json.dumps(tj["post_processor"]))
    fact(model, g.get("tokenizer.ggml.add_bos_token") == bool(want_bos),
         f"tokenizer.ggml.add_bos_token = {g.get('tokenizer.ggml.add_bos_token')}")
    fact(model, g.get("tokenizer.chat_template") == tc["chat_template"], "tokenizer.chat_template = tokenizer_config.json chat_template")


def rope_llama3_factors(cfg: dict) -> np.ndarray:
    """convert_hf_to_gguf.py's rope_freqs, recomputed in float32 scalars
    (torch f32 0-d tensors there; NumPy 2 keeps Python floats weak)."""
    rs = cfg["rope_scaling"]
    base = cfg["rope_theta"]
    dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    freqs = (1.0 / (np.float32(base) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))).astype(np.float32)
    factor, low, high, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
    low_wl, high_wl = old / low, old / high
    out = []
    for f in freqs:
        wl = np.float32(2 * math.pi) / f
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (np.float32(old) / wl - np.float32(low)) / np.float32(high - low)
            out.append(np.float32(1) / ((np.float32(1) - smooth) / np.float32(factor) + smooth))
    return np.array(out, dtype=np.float32)


# --------------------------------------------------------------------------
# per model


def check_llama3(root: Path) -> None:
    m = "llama3"
    d = root / "tiny-llama3-hf"
    g = Gguf(root / "tiny-llama3.gguf")
    cfg = json.loads((d / "config.json").read_text(encoding="utf-8"))
    hf = read_safetensors(d / "model.safetensors")
    fact(m, g.get("general.architecture") == "llama", f"general.architecture = {g.get('general.architecture')!r}")
    qk = {n for n in hf if re.search(r"self_attn\.[qk]_proj\.", n)}
    names = check_names_and_values(m, hf, g, "llama", qk)
    n_head, n_kv = g.get("llama.attention.head_count"), g.get("llama.attention.head_count_kv")
    fact(m, (n_head, n_kv) == (cfg["num_attention_heads"], cfg["num_key_value_heads"]),
         f"head_count {n_head}, head_count_kv {n_kv} (GQA)")
    ok_inv, nontrivial = True, True
    for name in sorted(qk):
        n = n_head if ".q_proj." in name else n_kv
        gg = g.data(names[name])
        ok_inv &= same(unpermute(gg, n), hf[name])
        nontrivial &= not same(gg, hf[name])
    fact(m, ok_inv and nontrivial,
         f"q/k rows permuted: HF row h*D + s*D/2 + i == GGUF row h*D + 2i + s (n = head_count for attn_q, head_count_kv for attn_k), bit-exact, {len(qk)} tensors, and GGUF != HF")
    # the same relation as array ops
    name = "model.layers.0.self_attn.q_proj.weight"
    gg, D = g.data(names[name]), cfg["hidden_size"] // n_head
    arr = gg.reshape(n_head, D // 2, 2, -1).swapaxes(1, 2).reshape(gg.shape)
    fact(m, same(arr, hf[name]), "in array terms: reshape [n, D/2, 2, K], swap axes 1 and 2, reshape back")
    fact(m, not any(k.startswith("llama.rope.scaling") for k in g.r.fields),
         f"no llama.rope.scaling.* keys: the llama3 rope_scaling parameters are not stored (rope keys: {g.keys('llama.rope')})")
    rf = g.data("rope_freqs.weight")
    dim = cfg["head_dim"]
    fact(m, g.ne("rope_freqs.weight") == [dim // 2] and g.t["rope_freqs.weight"].tensor_type.name == "F32",
         f"rope_freqs.weight: F32 [{dim // 2}] = head_dim/2")
    want = rope_llama3_factors(cfg)
    fact(m, np.array_equal(rf, want),
         f"rope_freqs = llama3 factors from rope_scaling ({int((rf == 1).sum())} x 1.0, {int((rf == cfg['rope_scaling']['factor']).sum())} x factor {cfg['rope_scaling']['factor']}, "
         f"{int(((rf != 1) & (rf != cfg['rope_scaling']['factor'])).sum())} smoothed; max |diff| {float(np.max(np.abs(rf - want))):.3g})")
    fact(m, "output.weight" in g.t and same(g.data("output.weight"), hf["lm_head.weight"]),
         "untied: output.weight present, = lm_head.weight")
    fact(m, g.get("llama.vocab_size") == cfg["vocab_size"], f"llama.vocab_size = {g.get('llama.vocab_size')} (llama writes it)")
    check_tokenizer_bpe(m, d, g, "llama-bpe")


def check_qwen2(root: Path) -> None:
    m = "qwen2"
    d = root / "tiny-qwen2-hf"
    g = Gguf(root / "tiny-qwen2.gguf")
    cfg = json.loads((d / "config.json").read_text(encoding="utf-8"))
    hf = read_safetensors(d / "model.safetensors")
    fact(m, g.get("general.architecture") == "qwen2", f"general.architecture = {g.get('general.architecture')!r}")
    names = check_names_and_values(m, hf, g, "qwen2", set())
    qk = [n for n in hf if re.search(r"self_attn\.[qk]_proj\.", n)]
    fact(m, all(same(g.data(names[n]), hf[n]) for n in qk),
         f"no q/k permutation for qwen2: attn_q / attn_k weights and biases equal HF ({len(qk)} tensors)")
    biases = sorted(n for n in g.t if n.endswith(".bias"))
    fact(m, biases == sorted(f"blk.{i}.attn_{x}.bias" for i in range(cfg["num_hidden_layers"]) for x in "qkv"),
         f"q/k/v biases as blk.N.attn_q/k/v.bias ({len(biases)})")
    fact(m, cfg["tie_word_embeddings"] and "lm_head.weight" not in hf and "output.weight" not in g.t,
         "tied: no lm_head.weight in HF, no output.weight in GGUF")
    fact(m, not g.has("qwen2.vocab_size"), "no qwen2.vocab_size key: the vocab size is the token count")
    check_tokenizer_bpe(m, d, g, "qwen2")


def check_gemma3(root: Path) -> None:
    m = "gemma3"
    d = root / "tiny-gemma3-hf"
    g = Gguf(root / "tiny-gemma3.gguf")
    cfg = json.loads((d / "config.json").read_text(encoding="utf-8"))
    tc = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    tj = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    hf = read_safetensors(d / "model.safetensors")
    fact(m, g.get("general.architecture") == "gemma3", f"general.architecture = {g.get('general.architecture')!r}")
    norms = {n for n in hf if n.endswith("norm.weight")}
    names = check_names_and_values(m, hf, g, "gemma3", norms)
    kinds = sorted({re.sub(r"^blk\.\d+\.", "", names[n]) for n in norms})
    plus1 = [n for n in sorted(norms) if not same(g.data(names[n]), (hf[n] + np.float32(1)).astype(np.float32))]
    fact(m, not plus1, f"every *norm.weight: GGUF = HF + 1 (f32, exact), {len(norms)} tensors of kinds {kinds}")
    minus1 = all(same((g.data(names[n]) - np.float32(1)).astype(np.float32), hf[n]) for n in norms)
    fact(m, minus1, "and w = w_GGUF - 1 gives the bf16 HF value back bit for bit")
    qk = [n for n in hf if re.search(r"self_attn\.[qk]_proj\.", n)]
    fact(m, all(same(g.data(names[n]), hf[n]) for n in qk),
         f"no q/k permutation for gemma3: attn_q / attn_k equal HF ({len(qk)} tensors)")
    fact(m, "output.weight" not in g.t and "lm_head.weight" not in hf, "tied: no output.weight")
    pieces = read_sentencepiece(d / "tokenizer.model")
    n = cfg["vocab_size"]
    fact(m, g.ne("token_embd.weight") == [cfg["hidden_size"], n] and same(g.data("token_embd.weight"), hf["model.embed_tokens.weight"]),
         f"tokenizer.model route: token_embd NOT truncated: {g.ne('token_embd.weight')[1]} rows = vocab_size {n} "
         f"(> {len(pieces)} SentencePiece pieces), = HF")
    fact(m, g.get("tokenizer.ggml.model") == "llama" and g.get("tokenizer.ggml.pre") == "default",
         f"tokenizer.ggml.model = {g.get('tokenizer.ggml.model')!r}, pre = {g.get('tokenizer.ggml.pre')!r}")
    fact(m, g.get("tokenizer.ggml.add_space_prefix") is False, "tokenizer.ggml.add_space_prefix = false")
    tokens, scores, types = g.get("tokenizer.ggml.tokens"), g.get("tokenizer.ggml.scores"), g.get("tokenizer.ggml.token_type")
    fact(m, len(tokens) == len(scores) == len(types) == n, f"{n} tokens, scores, types (= vocab_size, padded)")
    dec = {int(k): v for k, v in tc.get("added_tokens_decoder", {}).items()}
    ok_t = ok_s = ok_y = True
    sp_type = {1: 1, 2: 2, 3: 3, 4: 1, 5: 5, 6: 6}  # proto type -> GGUF type (user-defined -> normal)
    for i, (piece, score, typ) in enumerate(pieces):
        if i in dec:
            special = dec[i]["special"]
            ok_t &= tokens[i] == (dec[i]["content"] if special else dec[i]["content"].replace("\u2581", " "))
            ok_s &= scores[i] == -1000.0
            ok_y &= types[i] == (3 if special else 4)
        else:
            ok_t &= tokens[i] == piece
            ok_s &= scores[i] == np.float32(score)
            ok_y &= types[i] == sp_type[typ]
    fact(m, ok_t, f"tokens[id] = SentencePiece piece for ids < {len(pieces)} (added_tokens_decoder content where listed)")
    fact(m, ok_s, "scores = SentencePiece scores; -1000 for tokenizer_config added_tokens_decoder entries")
    fact(m, ok_y, "token_type: sp normal/user-defined -> 1, unknown 2, control 3, byte 6; added_tokens_decoder special -> 3, else 4")
    pads = range(len(pieces), n)
    fact(m, all(tokens[i] == f"[PAD{i}]" and types[i] == 5 and scores[i] == -10000.0 for i in pads),
         f"ids {len(pieces)}..{n - 1} are [PADid], type 5, score -10000")
    byte_ids = [i for i, p in enumerate(pieces) if p[2] == 6]
    fact(m, len(byte_ids) == 256 and all(types[i] == 6 for i in byte_ids), "256 byte-fallback pieces <0xXX>, type 6")
    ids = {"bos": cfg["bos_token_id"], "eos": cfg["eos_token_id"][0], "unknown": 3, "padding": cfg["pad_token_id"]}
    fact(m, all(g.get(f"tokenizer.ggml.{k}_token_id") == v for k, v in ids.items()),
         f"bos/eos/unknown/padding ids = {[g.get(f'tokenizer.ggml.{k}_token_id') for k in ids]} (eos: first of config.json's {cfg['eos_token_id']})")
    fact(m, g.get("tokenizer.ggml.add_bos_token") is True and g.get("tokenizer.chat_template") == tc["chat_template"],
         "add_bos_token = true; chat_template = tokenizer_config.json's")
    fact(m, g.get("gemma3.attention.sliding_window") == cfg["sliding_window"],
         f"gemma3.attention.sliding_window = {g.get('gemma3.attention.sliding_window')}")
    fact(m, not g.has("gemma3.attention.sliding_window_pattern"),
         f"no gemma3.attention.sliding_window_pattern: layer_types {cfg['layer_types']} are not stored (llama.cpp assumes period 6)")
    fact(m, g.get("gemma3.rope.freq_base_swa") == cfg["rope_local_base_freq"] and g.get("gemma3.rope.freq_base") == cfg["rope_theta"],
         f"rope.freq_base {g.get('gemma3.rope.freq_base')} = rope_theta, rope.freq_base_swa {g.get('gemma3.rope.freq_base_swa')} = rope_local_base_freq")
    fact(m, not g.has("gemma3.final_logit_softcapping") and cfg["final_logit_softcapping"] is None,
         "final_logit_softcapping null -> no gemma3.final_logit_softcapping key")
    fact(m, not any("pre_attn" in k or "query_pre" in k for k in g.r.fields),
         f"query_pre_attn_scalar ({cfg['query_pre_attn_scalar']}) is not stored")
    fact(m, g.get("gemma3.attention.key_length") == cfg["head_dim"], f"gemma3.attention.key_length = head_dim {cfg['head_dim']}")

    # The tokenizer.json route (no tokenizer.model): here llama.cpp truncates token_embd.
    m2 = "gemma3-tokjson"
    g2 = Gguf(root / "tiny-gemma3-tokjson.gguf")
    n_real = len(tj["model"]["vocab"]) + len(tj["added_tokens"])
    overlap = sum(1 for a in tj["added_tokens"] if a["content"] in tj["model"]["vocab"])
    rows = g2.ne("token_embd.weight")[1]
    fact(m2, rows == n_real and same(g2.data("token_embd.weight"), hf["model.embed_tokens.weight"][:n_real]),
         f"token_embd truncated to len(model.vocab) + len(added_tokens) = {len(tj['model']['vocab'])} + {len(tj['added_tokens'])} = {rows} rows "
         f"(of {n}); the first {rows} HF rows")
    fact(m2, overlap == len(tj["added_tokens"]) and rows > len(tj["model"]["vocab"]),
         f"that count is not the real token count: all {overlap} added tokens are also in model.vocab (counted twice)")
    fact(m2, len(g2.get("tokenizer.ggml.tokens")) == n,
         f"but the token list is not truncated: {len(g2.get('tokenizer.ggml.tokens'))} tokens vs {rows} embedding rows")
    fact(m2, g2.get("tokenizer.ggml.model") == "gpt2" and not g2.has("tokenizer.ggml.scores"),
         "this route writes tokenizer.ggml.model 'gpt2' with merges, no scores")
    others = [t for t in g.t if t != "token_embd.weight"]
    fact(m2, all(same(g.data(t), g2.data(t)) for t in others), "every other tensor equals tiny-gemma3.gguf's")


def tokenizer_keys(root: Path) -> None:
    print("\ntokenizer.* keys per GGUF:")
    for f in ("tiny-llama3.gguf", "tiny-qwen2.gguf", "tiny-gemma3.gguf", "tiny-gemma3-tokjson.gguf"):
        g = Gguf(root / f)
        keys = []
        for k in g.keys("tokenizer."):
            field = g.r.fields[k]
            if field.types[0] == GGUFValueType.ARRAY:
                keys.append(f"{k}[{len(field.data)}]")
            else:
                v = g.get(k)
                keys.append(f"{k}={v!r}" if not isinstance(v, str) or len(v) < 20 else k)
        print(f"  {f}: " + ", ".join(keys))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=ROOT / "fixtures" / "models")
    args = ap.parse_args()
    for check in (check_llama3, check_qwen2, check_gemma3):
        try:
            check(args.root)
        except Exception as e:  # a broken fixture is a failed fact, not a crash
            fact(check.__name__[6:], False, f"check raised {type(e).__name__}: {e}")
    tokenizer_keys(args.root)
    failed = [r for r in results if not r[0]]
    print(f"\n{len(results) - len(failed)} PASS, {len(failed)} FAIL")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
