"""Check a Hessian folder (hessians.safetensors + hessian_metadata.json, as
scripts/hessians writes it and the engine's calibration does) against the
properties the format promises and, optionally, independent references.

    check_hessians.py DIR [--model GGUF] [--imatrix IMATRIX.gguf]
                          [--activations DUMP_DIR] [--like DIR2 --rtol R]

Always (exits 1 on the first failed property, naming it):
  - the file is what safetensors 0.8 itself writes for these arrays: loading
    it and saving the arrays again gives the same bytes (so: F32, name
    order, compact header, no __metadata__);
  - every key K has a K.diag; K is F32 [n, n], K.diag F32 [n];
  - H is exactly symmetric, .diag is diag(H) bit for bit, every value is
    finite, the diagonal is >= 0;
  - H is positive semi-definite: its smallest eigenvalue (numpy eigvalsh in
    f64) >= -1e-5 * its largest (f32 rounding of an exact Gram matrix moves
    eigenvalues by about 1e-7 of the norm);
  - hessian_metadata.json has sample_counts, unresolved_targets, errors,
    error_samples, rows, timings; rows and sample_counts name exactly the
    keys of the file, with positive integers.
--model GGUF: the keys are exactly the HF module names of the file's 2-D
  blk.N.{attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down}.weight
  tensors (this script's own table), with n = the tensor's input width.
--imatrix F: llama.cpp's llama-imatrix output for the same model, text, ctx
  and chunks. Its entries are the same matmuls; counts == rows exactly, and
  .diag * rows matches in_sum2 per column within the rounding bound of the
  two f32 sums of positive terms: llama-imatrix's running sum over all
  `rows` terms, ours over at most 512 per call, and the final f32 rounding,
  i.e. relative (rows + 514) * 2^-24 (6.1e-5 on the tiny fixture, where the
  worst measured is 1.8e-6; 1.0e-3 at 16384 rows, worst measured 9.0e-5).
--activations D: the rows the collector saw (its --dump-activations; the
  file D/KEY.f32 holds rows of n floats): rows == their count, and H equals
  X^T X / rows in f64 within the rounding bound of an f32 sum of at most
  512 products per entry plus the final f32 rounding.
--like DIR2 --rtol R: every H entry within R * max|H| of DIR2's (another run,
  e.g. another machine's build or thread count).
"""

import argparse
import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

KINDS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
META_KEYS = ("sample_counts", "unresolved_targets", "errors", "error_samples", "rows", "timings")


def fail(msg):
    print(f"check_hessians: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def hf_key(name, prefix="model.layers"):
    """blk.N.KIND.weight -> PREFIX.N.MODULE, or None."""
    parts = name.split(".")
    if len(parts) != 4 or parts[0] != "blk" or not parts[1].isdigit() or parts[3] != "weight":
        return None
    mod = KINDS.get(parts[2])
    return f"{prefix}.{parts[1]}.{mod}" if mod else None


def load(d):
    path = os.path.join(d, "hessians.safetensors")
    raw = open(path, "rb").read()
    t = load_file(path)
    meta = json.load(open(os.path.join(d, "hessian_metadata.json")))
    return raw, t, meta


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--model")
    ap.add_argument("--imatrix")
    ap.add_argument("--activations")
    ap.add_argument("--like")
    ap.add_argument("--rtol", type=float, default=1e-4)
    a = ap.parse_args()

    raw, t, meta = load(a.dir)
    tmp = os.path.join(a.dir, ".check-resave.safetensors")
    try:
        save_file(t, tmp)
        if open(tmp, "rb").read() != raw:
            fail("hessians.safetensors differs from safetensors' own file of the same arrays")
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)

    keys = sorted(k for k in t if not k.endswith(".diag"))
    if not keys:
        fail("no Hessians in the file")
    for k in t:
        if t[k].dtype != np.float32:
            fail(f"{k} is {t[k].dtype}, not F32")
    worst_eig = 0.0
    for k in keys:
        h = t[k]
        if k + ".diag" not in t:
            fail(f"{k} has no {k}.diag")
        d = t[k + ".diag"]
        n = h.shape[0]
        if h.shape != (n, n) or d.shape != (n,):
            fail(f"{k}: shapes {h.shape} and {d.shape}")
        if not np.isfinite(h).all():
            fail(f"{k}: non-finite values")
        if not np.array_equal(h, h.T):
            fail(f"{k}: H is not exactly symmetric")
        if d.tobytes() != np.ascontiguousarray(np.diagonal(h)).tobytes():
            fail(f"{k}: .diag is not diag(H) bit for bit")
        if (d < 0).any():
            fail(f"{k}: negative diagonal")
        ev = np.linalg.eigvalsh(h.astype(np.float64))
        ratio = ev[0] / ev[-1] if ev[-1] > 0 else 0.0
        worst_eig = min(worst_eig, ratio)
        if ev[0] < -1e-5 * max(ev[-1], 0.0):
            fail(f"{k}: not PSD: eigenvalues {ev[0]:.4g} .. {ev[-1]:.4g}")
    extra = sorted(k[:-5] for k in t if k.endswith(".diag") and k[:-5] not in t)
    if extra:
        fail(f".diag without its matrix: {extra[:3]}")

    for mk in META_KEYS:
        if mk not in meta:
            fail(f"hessian_metadata.json has no '{mk}'")
    for mk in ("rows", "sample_counts"):
        got = meta[mk]
        if sorted(got) != keys:
            fail(f"metadata '{mk}' names {len(got)} modules, the file {len(keys)}")
        if any(not isinstance(v, int) or v <= 0 for v in got.values()):
            fail(f"metadata '{mk}' has a non-positive or non-integer count")
    if not isinstance(meta["unresolved_targets"], list) or not isinstance(meta["error_samples"], list):
        fail("unresolved_targets / error_samples are not lists")
    if not isinstance(meta["errors"], dict) or not isinstance(meta["timings"], dict):
        fail("errors / timings are not objects")
    rows = meta["rows"]
    print(f"check_hessians: {len(keys)} Hessians: F32, symmetric, .diag = diag(H), PSD "
          f"(worst min/max eigenvalue {worst_eig:.2e}), file = safetensors' own bytes, metadata complete")

    if a.model:
        import gguf
        r = gguf.GGUFReader(a.model)
        want = {}
        for ten in r.tensors:
            k = hf_key(ten.name)
            if k and len(ten.shape) == 2:
                want[k] = int(ten.shape[0])
        if sorted(want) != keys:
            fail(f"keys differ from the model's targets: missing {sorted(set(want) - set(keys))[:4]}, "
                 f"extra {sorted(set(keys) - set(want))[:4]}")
        for k, n in want.items():
            if t[k].shape[0] != n:
                fail(f"{k}: n = {t[k].shape[0]}, the weight's input width is {n}")
        print(f"check_hessians: keys = the {len(want)} attn/ffn matmuls of {os.path.basename(a.model)}, "
              f"widths match")

    if a.imatrix:
        import gguf
        r = gguf.GGUFReader(a.imatrix)
        ims = {ten.name: np.array(ten.data, dtype=np.float32).reshape(-1) for ten in r.tensors}
        names = sorted({n.rsplit(".", 1)[0] for n in ims})
        seen, worst = set(), 0.0
        for w in names:
            k = hf_key(w)
            if k is None:
                continue
            if k not in t:
                fail(f"llama-imatrix has {w}, the Hessians have no {k}")
            seen.add(k)
            s2, cnt = ims[w + ".in_sum2"].astype(np.float64), ims[w + ".counts"]
            if len(cnt) != 1 or int(round(float(cnt[0]))) != rows[k]:
                fail(f"{w}: llama-imatrix count {cnt}, rows {rows[k]}")
            mine = t[k + ".diag"].astype(np.float64) * rows[k]
            rel = np.abs(mine - s2) / np.maximum(np.abs(s2), 1e-30)
            worst = max(worst, float(rel.max()))
            bound = (rows[k] + 514) * 2.0**-24
            if rel.max() > bound:
                j = int(rel.argmax())
                fail(f"{w}: .diag*rows {mine[j]:.8g} vs in_sum2 {s2[j]:.8g} (column {j}; "
                     f"relative {rel[j]:.3g} > bound {bound:.3g})")
        if seen != set(keys):
            fail(f"Hessians without a llama-imatrix entry: {sorted(set(keys) - seen)[:4]}")
        print(f"check_hessians: .diag * rows = llama-imatrix in_sum2 for all {len(seen)} entries "
              f"(worst relative difference {worst:.2e}), counts = rows")

    if a.activations:
        worst = 0.0
        for k in keys:
            n = t[k].shape[0]
            x = np.fromfile(os.path.join(a.activations, k + ".f32"), dtype=np.float32).reshape(-1, n)
            if x.shape[0] != rows[k]:
                fail(f"{k}: {x.shape[0]} dumped rows, metadata rows {rows[k]}")
            x = x.astype(np.float64)
            ref = x.T @ x / x.shape[0]
            mag = np.abs(x).T @ np.abs(x) / x.shape[0]
            bound = 512 * 2.0**-24 * mag + 2.0**-24 * np.abs(ref) + 1e-38
            r = np.abs(t[k].astype(np.float64) - ref) / bound
            worst = max(worst, float(r.max()))
            if r.max() > 1.0:
                i, j = np.unravel_index(int(r.argmax()), r.shape)
                fail(f"{k}[{i},{j}] = {t[k][i, j]:.8g}, X^T X / n = {ref[i, j]:.8g}")
        print(f"check_hessians: H = X^T X / rows of the dumped activations for all {len(keys)} "
              f"(worst |error| / rounding bound {worst:.3f})")

    if a.like:
        _, t2, _ = load(a.like)
        if sorted(t2) != sorted(t):
            fail(f"{a.like} has other keys")
        worst = 0.0
        for k in t:
            scale = float(np.abs(t2[k]).max()) or 1.0
            diff = float(np.abs(t[k].astype(np.float64) - t2[k]).max()) / scale
            worst = max(worst, diff)
            if diff > a.rtol:
                fail(f"{k}: differs from {a.like} by {diff:.3g} of its largest value (rtol {a.rtol})")
        print(f"check_hessians: every entry within {worst:.2e} of the largest value of {a.like}")


if __name__ == "__main__":
    main()
