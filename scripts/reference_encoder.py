#!/usr/bin/env python3
"""Independent numpy reference encoder for CQ4 packed-panel files (`.cq4p.weights`).

Written only from docs/FORMAT.md (container, dtype policy, names) and
docs/FORMAT.md §CQ4 packed panels (the CQ4 byte contract, first drafted as
docs/cq4-contract.md). It shares no code with the Rust
encoder and never calls it. Section numbers in comments (§n) refer to
the CQ4 section of FORMAT.md unless they name another section.

Usage:
  reference_encoder.py MODEL OUTDIR [--torch-dtype float32|bfloat16|float16]
                       [--seed S] [--tensors NAME,...]
  reference_encoder.py --self-test
  reference_encoder.py --diff REFERENCE_FILE OTHER_FILE     (locate the first differing element)

Numerics: every "sequential" sum of the contract is evaluated as a Python loop
over the summed index, vectorised over the other axes (elementwise numpy
operations on float64 are single IEEE operations, never fused). numpy's
`sum`, `dot` and `@` are never used on floating-point data. All f64 -> fp16
roundings go through `fp16_from_f64` below (exact integer-scaled rounding),
which the self-test also compares with numpy's own cast.
"""

import argparse
import json
import os
import struct
import sys
import time

import numpy as np

# ---------------------------------------------------------------------------
# Constants (§1, §3, FORMAT.md)
# ---------------------------------------------------------------------------
DEFAULT_SEED = 0x4351_3450_0000_0001
ORTHOGONAL_SEED_TAG = 0x4F52_5448_4F47_4F4E
MAGIC = 25165824.0  # 1.5 * 2^24
SQRT128 = float(np.sqrt(np.float64(128.0)))
NORM_FLOOR = 1e-8
GS = 128
U64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def f64_from_bits(b):
    return struct.unpack("<d", struct.pack("<Q", b))[0]


def bits_of_f64(x):
    return struct.unpack("<Q", struct.pack("<d", float(x)))[0]


SQRT_2 = f64_from_bits(0x3FF6A09E667F3BCD)
LN_2 = f64_from_bits(0x3FE62E42FEFA39EF)
FRAC_PI_4 = f64_from_bits(0x3FE921FB54442D18)
assert SQRT128 == f64_from_bits(0x4026A09E667F3BCD)

CONTAINER_MAGIC = 0x54434143
FLAG_ORTHOGONAL_ROTATION = 1 << 1
FLAG_PACKED_PANELS = 1 << 5
PRECISION_CQ4 = 6
HEADER_LEN = 84
ALIGNMENT = 32


def align(x, a):
    return (x + a - 1) // a * a


class EncodeError(Exception):
    pass


# ---------------------------------------------------------------------------
# Rounding helpers
# ---------------------------------------------------------------------------
def fp16_from_f64(x):
    """RNE of f64 values directly to binary16 (§0): one rounding, |x| >= 65520 -> inf,
    subnormals, signed zeros kept, NaN stays NaN. Returns a float16 array."""
    x = np.asarray(x, dtype=np.float64)
    ax = np.abs(x)
    finite = np.isfinite(ax)
    axf = np.where(finite, ax, 0.0)
    _, e = np.frexp(axf)  # axf = m * 2^e, m in [0.5, 1)
    # binary16 quantum: 2^(e-11) for normals (e-1 >= -14), 2^-24 for subnormals
    qexp = np.maximum(e, -13) - 11
    y = np.ldexp(axf, -qexp)  # exact scaling by a power of two
    r = np.rint(y)  # round half to even
    mag = np.ldexp(r, qexp)  # exact
    mag = np.where(mag > 65504.0, np.inf, mag)
    mag = np.where(finite, mag, ax)  # inf stays inf, NaN stays NaN
    out = np.copysign(mag, x)  # every value is now exactly representable in fp16
    return out.astype(np.float16)


def f32_from_f64(x):
    return np.asarray(x, dtype=np.float64).astype(np.float32)  # RNE, one rounding


def bf16_round_f32(x):
    """f32 -> bf16 (RNE, NaN stays NaN) -> f32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    nan = np.isnan(x)
    quiet = ((u >> 16) | 0x40) << 16
    out = np.where(nan, quiet, rounded).astype(np.uint32)
    return out.view(np.float32)


def fp16_round_f32_checked(x, name):
    """f32 -> fp16 (RNE) -> f32; a finite value becoming inf is an error (FORMAT.md dtype)."""
    h = fp16_from_f64(x.astype(np.float64))
    bad = np.isfinite(x) & ~np.isfinite(h)
    if bad.any():
        first = x[bad].flat[0]
        raise EncodeError(
            f"{name}: {int(bad.sum())} value(s) overflow float16 (first {float(first)!r})")
    return h.astype(np.float32)


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in bytes(data):
        h = ((h ^ b) * 0x100000001B3) & U64
    return h


# ---------------------------------------------------------------------------
# §2 SplitMix64 (vectorised: draw i of a fresh stream depends only on i)
# ---------------------------------------------------------------------------
def splitmix64_draws(seed, count, start=0):
    """Draws start .. start+count-1 of SplitMix64(seed), as a uint64 array."""
    i = np.arange(start + 1, start + count + 1, dtype=np.uint64)
    z = np.uint64(seed & U64) + i * np.uint64(GAMMA)  # wrapping uint64 arithmetic
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class SplitMix64:
    """Scalar generator (Python ints), for the Hadamard parameters."""

    def __init__(self, seed):
        self.state = seed & U64

    def next_u64(self):
        self.state = (self.state + GAMMA) & U64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & U64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & U64
        return z ^ (z >> 31)


# ---------------------------------------------------------------------------
# §3 Box-Muller without libm
# ---------------------------------------------------------------------------
LN_COEF = [1.0 / float(2 * i + 1) for i in range(11)]  # c_i = 1/(2i+1)


def det_ln(u):
    u = np.asarray(u, dtype=np.float64)
    m, e = np.frexp(u)
    f = 2.0 * m  # exact, f in [1, 2)
    e = e - 1
    big = f > SQRT_2
    f = np.where(big, f / 2.0, f)
    e = np.where(big, e + 1, e)
    s = (f - 1.0) / (f + 1.0)
    z = s * s
    p = np.full_like(s, LN_COEF[10])
    for i in range(9, -1, -1):
        p = p * z + LN_COEF[i]  # rounded product, then rounded sum (numpy never fuses)
    return (e.astype(np.float64) * LN_2) + ((2.0 * s) * p)


_FACT = [1.0]
for _n in range(1, 20):
    _FACT.append(_FACT[-1] * float(_n))
SIN_COEF = [(1.0 if i % 2 == 0 else -1.0) * (1.0 / _FACT[2 * i + 1]) for i in range(10)]
COS_COEF = [(1.0 if i % 2 == 0 else -1.0) * (1.0 / _FACT[2 * i]) for i in range(10)]


def det_sincos_turn(u):
    u = np.asarray(u, dtype=np.float64)
    t = 8.0 * u
    q = np.floor(t)
    f = t - q
    qi = q.astype(np.int64)
    a = np.where(qi % 2 == 0, f, 1.0 - f) * FRAC_PI_4
    z = a * a
    ps = np.full_like(a, SIN_COEF[9])
    pc = np.full_like(a, COS_COEF[9])
    for i in range(8, -1, -1):
        ps = ps * z + SIN_COEF[i]
        pc = pc * z + COS_COEF[i]
    S = a * ps
    C = pc
    # (sin, cos) by octant q
    sin_sel = [S, C, C, S, -S, -C, -C, -S]
    cos_sel = [C, S, -S, -C, -C, -S, S, C]
    sn = np.select([qi == k for k in range(8)], sin_sel)
    cs = np.select([qi == k for k in range(8)], cos_sel)
    return sn, cs


def fill_gaussian(seed, length):
    """fill_gaussian(SplitMix64(seed), out[0..length]) of §3, a fresh stream."""
    pairs = (length + 1) // 2
    d = splitmix64_draws(seed, 2 * pairs)
    a = d[0::2]
    b = d[1::2]
    two_m53 = 2.0 ** -53
    u1 = ((a >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * two_m53
    u2 = (b >> np.uint64(11)).astype(np.float64) * two_m53
    r = np.sqrt(-2.0 * det_ln(u1))
    sn, cs = det_sincos_turn(u2)
    out = np.empty(2 * pairs, dtype=np.float64)
    out[0::2] = r * cs
    out[1::2] = r * sn
    return out[:length]


# ---------------------------------------------------------------------------
# §4 Codebook
# ---------------------------------------------------------------------------
def seq_sum(x):
    """Sequential sum s = 0.0; s = s + x_i (np.add.accumulate is a left-to-right loop)."""
    if len(x) == 0:
        return 0.0
    return float(0.0 + np.add.accumulate(np.asarray(x, dtype=np.float64))[-1])


def ipow(b, e):
    r = np.ones_like(b)
    while e > 0:
        if e & 1:
            r = r * b
        b = b * b
        e >>= 1
    return r


_CODEBOOK_CACHE = {}


def lloyd_codebook(d):
    """Returns (c before fp16 as f64 array, number of Lloyd iterations)."""
    if d < 4:
        raise EncodeError("codebook dimension must be >= 4")
    i = np.arange(200001, dtype=np.int64)
    x = (i - 100000).astype(np.float64) / 100000.0
    p = 1.0 - x * x
    if d % 2 == 0:
        w = ipow(p, (d - 4) // 2) * np.sqrt(p)
    else:
        w = ipow(p, (d - 3) // 2)
    C = np.add.accumulate(w)  # C_i = C_{i-1} + w_i, C_{-1} = 0
    T = C[200000]
    c = np.empty(16, dtype=np.float64)
    for q in range(1, 17):
        tq = (T * float(q)) / 17.0
        j = int(np.searchsorted(C, tq, side="left"))  # smallest j with C_j >= t_q
        c[q - 1] = x[j]
    wx = w * x
    iters = 0
    for _ in range(200):
        iters += 1
        b = (c[:-1] + c[1:]) / 2.0
        if not np.all(b[:-1] <= b[1:]):
            raise EncodeError("midpoints not ascending")
        # cell of x_j = #{i : b_i < x_j}; cells are contiguous ranges of j
        # pos_i = #{j : x_j <= b_i}: cell i = [pos_{i-1}, pos_i)
        pos = np.searchsorted(x, b, side="right")
        bounds = [0] + [int(v) for v in pos] + [200001]
        cn = c.copy()
        for q in range(16):
            s, e = bounds[q], bounds[q + 1]
            W = seq_sum(w[s:e])
            M = seq_sum(wx[s:e])
            if W != 0.0:
                cn[q] = M / W
        delta = float(np.max(np.abs(cn - c)))
        c = cn
        if delta < 1e-8:
            break
    # §4.5 odd symmetrisation
    for q in range(8, 16):
        s = (c[q] - c[15 - q]) / 2.0
        c[q] = s
        c[15 - q] = -s
    return c, iters


def codebook(d):
    """fp16 canonical codebook cb[16] and f64 thresholds m[15] for dimension d (§4.6)."""
    if d not in _CODEBOOK_CACHE:
        c, iters = lloyd_codebook(d)
        cb = fp16_from_f64(c)
        cb64 = cb.astype(np.float64)
        if not np.all(cb64[:-1] < cb64[1:]):
            raise EncodeError(f"codebook for d={d} not strictly ascending")
        m = (cb64[:-1] + cb64[1:]) / 2.0
        _CODEBOOK_CACHE[d] = (cb, m, c, iters)
    return _CODEBOOK_CACHE[d]


def idx_of(x, m):
    """idx(x) = #{i : m_i < x} (ties to the lower index)."""
    return np.searchsorted(m, x, side="left").astype(np.uint8)


# ---------------------------------------------------------------------------
# §5 Hadamard parameters and FWHT
# ---------------------------------------------------------------------------
def hadamard_params(seed):
    g = SplitMix64(seed)
    left = [(-1 if (g.next_u64() >> 63) else 1) for _ in range(128)]
    right = [(-1 if (g.next_u64() >> 63) else 1) for _ in range(128)]
    perm = list(range(128))
    for i in range(127, 0, -1):
        j = g.next_u64() % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return np.array(left, dtype=np.int64), np.array(right, dtype=np.int64), np.array(perm, dtype=np.int64)


def fwht(x):
    """Unnormalised FWHT along the last axis (length 128), butterflies as written in §5."""
    x = x.copy()
    n = x.shape[-1]
    h = 1
    while h < n:
        y = x.reshape(x.shape[:-1] + (n // (2 * h), 2, h))
        a = y[..., 0, :].copy()
        b = y[..., 1, :].copy()
        y[..., 0, :] = a + b
        y[..., 1, :] = a - b
        x = y.reshape(x.shape)
        h *= 2
    return x


# ---------------------------------------------------------------------------
# §6 Orthogonal rotation
# ---------------------------------------------------------------------------
_ROTATION_CACHE = {}


def orthogonal_rotation(seed, Kp):
    """Stored fp16 R[Kp][Kp] (§6)."""
    key = (seed, Kp)
    if key in _ROTATION_CACHE:
        return _ROTATION_CACHE[key]
    if Kp <= 0 or Kp % 128:
        raise EncodeError("Kp must be a positive multiple of 128")
    G = fill_gaussian((seed ^ ORTHOGONAL_SEED_TAG ^ Kp) & U64, Kp * Kp)
    A = G.reshape(Kp, Kp).copy()
    vs = [None] * Kp
    betas = [0.0] * Kp
    r = np.zeros(Kp, dtype=np.float64)
    for j in range(Kp):
        col = A[j:, j].copy()
        alpha = float(np.sqrt(seq_sum(col * col)))
        if alpha == 0.0:
            r[j] = 0.0
            continue
        ajj = float(A[j, j])
        rj = -alpha if ajj >= 0.0 else alpha
        r[j] = rj
        v = col
        v[0] = ajj - rj
        vtv = seq_sum(v * v)
        beta = 2.0 / vtv
        vs[j] = v
        betas[j] = beta
        if j + 1 < Kp:
            s = np.zeros(Kp - j - 1, dtype=np.float64)
            for i in range(j, Kp):
                s = s + v[i - j] * A[i, j + 1:]
            t = beta * s
            A[j:, j + 1:] = A[j:, j + 1:] - np.multiply.outer(v, t)
    Q = np.eye(Kp, dtype=np.float64)
    for j in range(Kp - 1, -1, -1):
        v = vs[j]
        if v is None:
            continue
        s = np.zeros(Kp - j, dtype=np.float64)
        for i in range(j, Kp):
            s = s + v[i - j] * Q[i, j:]
        t = betas[j] * s
        Q[j:, j:] = Q[j:, j:] - np.multiply.outer(v, t)
    neg = r < 0.0
    Q[:, neg] = -Q[:, neg]
    R = fp16_from_f64(Q)
    # §11: the encoder refuses a rotation with a stored column norm >= 1.9
    R64 = R.astype(np.float64)
    for c in range(Kp):
        if float(np.sqrt(seq_sum(R64[:, c] * R64[:, c]))) >= 1.9:
            raise EncodeError(f"rotation column {c} norm >= 1.9")
    _ROTATION_CACHE[key] = R
    return R


# ---------------------------------------------------------------------------
# §7 quantization, §8 stored values, §9 panels, §10 scales blob
# ---------------------------------------------------------------------------
def _row_norms(V):
    """norm = max(sqrt(sum_i v_i*v_i (sequential over the last axis)), NORM_FLOOR)."""
    ss = np.zeros(V.shape[:-1], dtype=np.float64)
    for i in range(V.shape[-1]):
        ss = ss + V[..., i] * V[..., i]
    return np.maximum(np.sqrt(ss), NORM_FLOOR)


def quantize_hadamard(Wp, seed):
    """Wp: f64 [N, Kp]. Returns (indices uint8 [N, Kp], norms f64 [N, ng])."""
    N, Kp = Wp.shape
    ng = Kp // GS
    idx, nu = hadamard_groups(Wp.reshape(N, ng, GS), seed)
    return idx.reshape(N, Kp), nu


def hadamard_groups(V, seed):
    """§7.1 + §7.3 on groups V: f64 [..., 128]. Returns (indices uint8 [..., 128],
    nu f64 [...])."""
    left, right, perm = hadamard_params(seed)
    cb, m, _, _ = codebook(128)
    norm = _row_norms(V)
    u = V / norm[..., None]
    uf = (u + MAGIC) - MAGIC
    a = left.astype(np.float64) * uf
    h = fwht(a)
    rot = (right[perm].astype(np.float64) * h[..., perm]) / SQRT128
    idx, s = refine_scales(rot, idx_of(rot, m), cb.astype(np.float64), m)
    return idx, norm * s


# ---------------------------------------------------------------------------
# §CQ4.18 GPTQ (--hessians)
# ---------------------------------------------------------------------------
def read_hessians(path):
    """hessians.safetensors -> {module path: (H f32 [K, K], diag f32 [K] or None)};
    '__' in a key stands for '/' (the engine's rule)."""
    from safetensors.numpy import load_file
    t = load_file(path)
    out = {}
    for k, v in t.items():
        if k.endswith(".diag"):
            continue
        d = t.get(k + ".diag")
        out[k.replace("__", "/")] = (np.asarray(v, dtype=np.float32), None if d is None else np.asarray(d, np.float32))
    return out


def gptq_gains(H, e, Kp):
    """§18 steps 1-5: the gains G_g (128 x f, f = Kp - 128 (g + 1)) for g < ng - 1."""
    K = H.shape[0]
    A = np.zeros((Kp, Kp))
    H64 = H.astype(np.float64)
    A[:K, :K] = ((H64 + H64.T) * 0.5) * np.exp2(-(e[:, None] + e[None, :]).astype(np.float64))
    for d in range(K, Kp):
        A[d, d] = 1.0
    damp = 0.01 * (seq_sum(np.diag(A).copy()) / float(Kp)) + 1e-6
    for d in range(Kp):
        A[d, d] = A[d, d] + damp
    P = A[::-1, ::-1].copy()
    L = np.zeros((Kp, Kp))
    for j in range(Kp):
        d = P[j, j]
        if not (d > 0 and np.isfinite(d)):
            raise EncodeError(f"Hessian not positive definite after damping (column {Kp - 1 - j})")
        L[j, j] = np.sqrt(d)
        col = P[j + 1:, j] / L[j, j]
        L[j + 1:, j] = col
        P[j + 1:, j + 1:] -= np.outer(col, col)
    if not np.all(np.isfinite(L)):
        raise EncodeError("Hessian: Cholesky factor not finite")
    gains = []
    for g in range(Kp // GS - 1):
        f = Kp - GS * (g + 1)
        Y = L[f:f + GS, :f].copy()
        for c in range(f - 1, -1, -1):
            x = Y[:, c] / L[c, c]
            Y[:, c] = x
            Y[:, :c] -= np.outer(x, L[c, :c])
        gains.append(Y[::-1, ::-1].copy())
    return gains


def kernel_codebook(scb):
    """§8: int8 codebook of the kernels, round_half_away(f32(scb) / cb_scale)."""
    s32 = scb.astype(np.float32)
    cb_scale = np.float32(np.maximum(np.max(np.abs(s32)) / np.float32(127.0), np.float32(1e-10)))
    v = (s32 / cb_scale).astype(np.float64)
    return np.sign(v) * np.floor(np.abs(v) + 0.5), float(cb_scale)


def quantize_hadamard_gptq(Wp, seed, H, e):
    """§18: Wp f64 [N, Kp] (scaled by 2^e); H f32 [K, K]; e int [K].
    Returns (indices uint8 [N, Kp], nu f64 [N, ng])."""
    N, Kp = Wp.shape
    ng = Kp // GS
    gains = gptq_gains(H, np.asarray(e, dtype=np.int64), Kp)
    left, right, perm = hadamard_params(seed)
    cb, _, _, _ = codebook(128)
    cb64 = cb.astype(np.float64)
    cb_factor = float(np.max(np.abs(cb64))) / 127.0
    cbi8, cb_scale = kernel_codebook(fp16_from_f64(cb64 / cb_factor))
    assert cb_scale == 1.0
    work = Wp.copy()
    idx = np.zeros((N, Kp), dtype=np.uint8)
    nu = np.zeros((N, ng))
    for g in range(ng):
        B = slice(GS * g, GS * g + GS)
        V = work[:, B].copy()
        q, n = hadamard_groups(V, seed)
        idx[:, B] = q
        nu[:, g] = n
        if g + 1 == ng:
            break
        nrm = fp16_from_f64(n * cb_factor).astype(np.float64)
        y = cbi8[q]
        z = np.zeros_like(y)
        z[:, perm] = right[perm].astype(np.float64) * y
        h = fwht(z)
        rec = ((left.astype(np.float64) * h) / SQRT128) * nrm[:, None]
        E = V - rec
        G = gains[g]
        F = slice(GS * (g + 1), Kp)
        for i in range(GS):
            work[:, F] += E[:, i:i + 1] * G[i][None, :]
    return idx, nu


def refine_scales(rot, idx0, cb64, m):
    """§7.3 norm search. rot: f64 [..., 128]; idx0: the §7.1 indices. For each
    g_t = (16 + t) / 20, t = 0..9: indices #{i : m_i * g < rot_j}, num = sum_j
    rot_j * c_j, den = sum_j c_j * c_j (sequential in j); the largest
    (num * num) / den with num > 0 wins (the first on ties). Returns the winning
    indices and scale num / den (idx0 and 1.0 where no candidate has num > 0)."""
    shape = rot.shape[:-1]
    best_score = np.full(shape, -np.inf)
    best_s = np.ones(shape)
    best_idx = idx0.copy()
    for t in range(9):
        g = float(16 + t) / 20.0
        q = np.zeros(rot.shape, dtype=np.uint8)
        for th in m * g:
            q += (th < rot).astype(np.uint8)
        c = cb64[q]
        num = np.zeros(shape)
        den = np.zeros(shape)
        for j in range(rot.shape[-1]):
            num = num + rot[..., j] * c[..., j]
            den = den + c[..., j] * c[..., j]
        ok = num > 0
        score = np.where(ok, (num * num) / np.where(ok, den, 1.0), -np.inf)
        better = ok & (score > best_score)
        best_score = np.where(better, score, best_score)
        best_s = np.where(better, num / np.where(ok, den, 1.0), best_s)
        best_idx = np.where(better[..., None], q, best_idx)
    return best_idx, best_s


def quantize_orthogonal(Wp, seed, check_exact=True):
    N, Kp = Wp.shape
    R = orthogonal_rotation(seed, Kp)
    R64 = R.astype(np.float64)
    cb, m, _, _ = codebook(Kp)
    norm = _row_norms(Wp)  # zero padding adds nothing but is summed as written
    uf = (Wp / norm[:, None] + MAGIC) - MAGIC
    rot = np.zeros((N, Kp), dtype=np.float64)
    for k in range(Kp):  # sequential in k, vectorised over rows and columns j
        rot = rot + uf[:, k:k + 1] * R64[k][None, :]
    if check_exact:
        # Independent check of the §11 exactness claim: integers times 2^-52, in int64.
        mi = np.ldexp(uf, 28)
        ri = np.ldexp(R64, 24)
        assert np.all(mi == np.rint(mi)) and np.all(ri == np.rint(ri))
        exact = np.matmul(mi.astype(np.int64), ri.astype(np.int64))  # integer: exact, order-free
        if not np.array_equal(np.ldexp(exact.astype(np.float64), -52), rot) or \
                np.any(np.abs(exact) >= (1 << 53)):
            raise EncodeError("orthogonal dot is not exact (contract §11 claim fails)")
    idx = idx_of(rot, m)
    return idx, norm


def pack_panels(idx_full, N, Kp):
    """§9: idx_full uint8 [N, Kp] -> data region bytes (padded rows nibble 0)."""
    SB64 = (N + 63) // 64
    ng = Kp // GS
    P = np.zeros((SB64 * 64, Kp), dtype=np.uint8)
    P[:N] = idx_full
    # [sb, c, g, kg, kc] -> [sb, g, kg, c, kc]
    P = P.reshape(SB64, 64, ng, 32, 4).transpose(0, 2, 3, 1, 4).reshape(-1, 2)
    return (P[:, 0] | (P[:, 1] << 4)).astype(np.uint8).tobytes()


def awq_exponents(W, a):
    """FORMAT.md §CQ4.16: power-of-two input-scale exponents of an f32 [N, K]
    tensor for the f32 importance a [K]."""
    N, K = W.shape
    c = np.zeros(K, dtype=np.float64)
    for row in W:  # row by row, in row order: the contract's summation order
        r = row.astype(np.float64)
        c += r * r
    a64 = np.asarray(a, dtype=np.float32).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = a64 / c
    ok = (a64 > 0) & (c > 0) & np.isfinite(t) & (t >= 2.0 ** -1022)
    E = np.frexp(np.where(ok, t, 1.0))[1].astype(np.int64)
    count = int(ok.sum())
    if count == 0:
        return np.zeros(K, dtype=np.int64)
    mean = (2 * int(E[ok].sum()) + count) // (2 * count)
    e = np.clip(np.floor_divide(E - mean + 2, 4), -3, 3)
    return np.where(ok, e, 0).astype(np.int64)


def read_imatrix(path):
    """llama.cpp's GGUF imatrix: {name: f32 importance}, value = in_sum2 /
    lround(count) in f32 (1.0 where the count is 0)."""
    from gguf import GGUFReader
    r = GGUFReader(path)
    t = {x.name: np.asarray(x.data, dtype=np.float32).reshape(-1) for x in r.tensors}
    out = {}
    for name, sums in t.items():
        if not name.endswith(".in_sum2"):
            continue
        base = name[: -len(".in_sum2")]
        cnt = t[base + ".counts"]
        k = sums.size // cnt.size
        vals = []
        for e, cn in enumerate(cnt):
            n = np.float32(np.floor(abs(float(cn)) + 0.5) * (1 if cn >= 0 else -1))
            seg = sums[e * k:(e + 1) * k]
            vals.append(np.ones(k, np.float32) if n == 0 else (seg / n).astype(np.float32))
        out[base] = np.concatenate(vals)
    return out


def encode_tensor(W, family, seed, importance=None, hessian=None):
    """W: f32 [N, K] (already materialised per the dtype policy); importance:
    f32 [K] (AWQ input scales, §CQ4.16, either family) or None.
    Returns the complete .cq4p.weights file bytes and a dict describing its regions."""
    W = np.asarray(W, dtype=np.float32)
    exps = None
    if importance is not None:
        exps = awq_exponents(W, importance)
        # W * 2^e: exact in f32 (W was checked finite below; 2^e <= 8).
        W = (W * np.exp2(exps).astype(np.float32)[None, :]).astype(np.float32)
    if W.ndim != 2 or W.shape[0] == 0 or W.shape[1] == 0:
        raise EncodeError("CQ4 needs a non-empty 2-D tensor")
    if not np.all(np.isfinite(W)):
        raise EncodeError("NaN or infinite input")
    N, K = W.shape
    Kp = 128 * ((K + 127) // 128)
    ng = Kp // GS
    SB64 = (N + 63) // 64
    Wp = np.zeros((N, Kp), dtype=np.float64)
    Wp[:, :K] = W.astype(np.float64)

    if family == "hadamard":
        cb, _, _, _ = codebook(128)
        if hessian is not None:
            if hessian.shape != (K, K):
                raise EncodeError(f"Hessian is {hessian.shape}, the matrix has {K} columns")
            if not np.all(np.isfinite(hessian)):
                raise EncodeError("Hessian: an entry is not finite")
            e = exps if exps is not None else np.zeros(K, dtype=np.int64)
            idx, norm = quantize_hadamard_gptq(Wp, seed, hessian, e)
        else:
            idx, norm = quantize_hadamard(Wp, seed)
        cb64 = cb.astype(np.float64)
        cb_factor = float(np.max(np.abs(cb64))) / 127.0
        scb = fp16_from_f64(cb64 / cb_factor)
        nrm = fp16_from_f64(norm * cb_factor)
    elif family == "orthogonal":
        cb, _, _, _ = codebook(Kp)
        idx, norm = quantize_orthogonal(Wp, seed)
        scb = cb.copy()
        nrm = np.repeat(fp16_from_f64(norm)[:, None], ng, axis=1)
    else:
        raise ValueError(family)
    if not np.all(np.isfinite(nrm.astype(np.float64))):
        bad = np.argwhere(~np.isfinite(nrm.astype(np.float64)))[0]
        raise EncodeError(f"stored norm overflows fp16 at row {bad[0]} group {bad[1]}")

    input_scale = np.full(Kp, 1.0, dtype=np.float64)
    if exps is not None:
        input_scale[:K] = np.exp2(exps.astype(np.float64))
    recip = fp16_from_f64(np.minimum(1.0 / np.maximum(input_scale, 1e-8), 65504.0))
    input_scale = fp16_from_f64(input_scale)
    scb32 = scb.astype(np.float32)
    # SPEC-AMBIGUITY: §8 cb_scale — the orthogonal cell says "same formula", i.e.
    # f32(max|scb|)/127 (not 1.0 as in the Hadamard cell); the 1e-10 floor is taken as
    # the f32 nearest to 1e-10 ("f32 ops"). The floor never applies to real codebooks.
    cb_scale = np.maximum(np.max(np.abs(scb32)) / np.float32(127.0), np.float32(1e-10))
    cb_scale = np.float32(cb_scale)
    fold = np.zeros((SB64 * 64, ng), dtype=np.float32)
    fold[:N] = nrm.astype(np.float32) * cb_scale  # f32 multiply
    folded = fold.reshape(SB64, 64, ng).transpose(0, 2, 1)  # [SB64][ng][64]

    parts = []
    parts.append(("codebook", scb.astype("<f2").tobytes()))
    parts.append(("input_scale", input_scale.astype("<f2").tobytes()))
    parts.append(("recip", recip.astype("<f2").tobytes()))
    parts.append(("norms", nrm.astype("<f2").tobytes()))
    parts.append(("norms_pad", b"\0\0" if (N * ng) % 2 else b""))
    parts.append(("folded", np.ascontiguousarray(folded).astype("<f4").tobytes()))
    if family == "hadamard":
        left, right, perm = hadamard_params(seed)
        parts.append(("left", left.astype(np.int8).tobytes()))
        parts.append(("right", right.astype(np.int8).tobytes()))
        parts.append(("perm", perm.astype("<u4").tobytes()))
        flags = FLAG_PACKED_PANELS
    else:
        R = orthogonal_rotation(seed, Kp)
        parts.append(("R", R.astype("<f2").tobytes()))
        parts.append(("RT", np.ascontiguousarray(R.T).astype("<f2").tobytes()))
        flags = FLAG_PACKED_PANELS | FLAG_ORTHOGONAL_ROTATION
    scales = b"".join(p for _, p in parts)
    data = pack_panels(idx, N, Kp)
    assert len(data) == SB64 * 64 * Kp // 2

    # SPEC-AMBIGUITY: FORMAT.md refers to a "§cq4" section that does not exist; the CQ4
    # header fields are taken from FORMAT.md §CQ4.8 and the container rules of FORMAT.md.
    header = struct.pack(
        "<IIII4QIQQIIQ",
        CONTAINER_MAGIC, flags, ALIGNMENT, 2,
        N, Kp, 0, 0,
        PRECISION_CQ4, len(data), len(scales), GS, ng, N)
    assert len(header) == HEADER_LEN
    scales_offset = align(HEADER_LEN, ALIGNMENT)
    data_offset = align(scales_offset + len(scales), ALIGNMENT)
    out = bytearray(data_offset + len(data))
    out[:HEADER_LEN] = header
    out[scales_offset:scales_offset + len(scales)] = scales
    out[data_offset:] = data
    return bytes(out), {"scales": scales, "data": data, "nrm": nrm}


# ---------------------------------------------------------------------------
# §CQ4.17 data-free importance (--input-scales auto)
# ---------------------------------------------------------------------------
HF_LAYER_SUFFIX = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
}


def hf_name_of(arch, gguf):
    """The Hugging Face name of a llama.cpp tensor name (FORMAT.md §engine layout table)."""
    if gguf == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf == "output_norm.weight":
        return "model.norm.weight"
    if gguf == "output.weight":
        return "lm_head.weight"
    if not gguf.startswith("blk."):
        return None
    layer, tail = gguf[4:].split(".", 1)
    if tail == "ffn_norm.weight":
        suffix = "pre_feedforward_layernorm.weight" if arch == "gemma3" else "post_attention_layernorm.weight"
    else:
        suffix = HF_LAYER_SUFFIX.get(tail)
    if suffix is None or not layer.isdigit():
        return None
    return f"model.layers.{int(layer)}.{suffix}"


def seq_mean(x):
    """(sum_i x_i, sequential) / n."""
    return seq_sum(x) / float(len(x))


def importance_estimate(model_info, tensors, torch_dtype):
    """§CQ4.17. Returns {source tensor name: f32 importance [K]} or (None, reason)."""
    arch, is_gguf, heads, kv_heads, tied = model_info
    by_name = {n: (load, shape) for n, load, shape in tensors}

    def name_of(gguf):
        return gguf if is_gguf else hf_name_of(arch, gguf)

    def get(gguf, ndim):
        n = name_of(gguf)
        if n is None or n not in by_name or len(by_name[n][1]) != ndim:
            return None
        W = materialize(by_name[n][0](), torch_dtype, n).astype(np.float32)
        if ndim == 1 and arch.startswith("gemma") and not is_gguf:
            W = (W + np.float32(1.0)).astype(np.float32)  # f32(w + 1)
        return W.astype(np.float64)

    def normed(g, x):
        m = seq_mean(x)
        if not m > 0.0:
            return np.zeros(len(g))
        return (g * g) * (x / m)

    def energies(W, x):  # P(W, x)_i = sum_k (w*w) * x_k, sequential in k
        out = np.zeros(W.shape[0])
        for k in range(W.shape[1]):
            out = out + (W[:, k] * W[:, k]) * x[k]
        return out

    if heads is None:
        return None, "no head count"
    n_layer = 0
    while name_of(f"blk.{n_layer}.attn_norm.weight") in by_name:
        n_layer += 1
    if n_layer == 0:
        return None, "no layers"
    pa, fn = name_of("blk.0.post_attention_norm.weight"), name_of("blk.0.ffn_norm.weight")
    post = pa in by_name and pa != fn
    E = get("token_embd.weight", 2)
    if E is None:
        return None, "no embedding"
    V, H = E.shape
    S = np.zeros(H)
    for t in range(V):
        S = S + E[t] * E[t]
    r = (S / float(V)) * (float(H) if arch.startswith("gemma") else 1.0)
    out = {}

    def put(gguf, a):
        n = name_of(gguf)
        if n in by_name and len(by_name[n][1]) == 2 and by_name[n][1][1] == len(a):
            out[n] = a.astype(np.float32)

    layers = []
    for l in range(n_layer):
        p = f"blk.{l}."
        ga = get(p + "attn_norm.weight", 1)
        if ga is None or len(ga) != H:
            return None, f"attn_norm {l}"
        A = normed(ga, r)
        Wv = get(p + "attn_v.weight", 2)
        if Wv is None or Wv.shape[1] != H:
            return None, f"attn_v {l}"
        v = energies(Wv, A)
        if kv_heads == 0 or heads == 0 or heads % kv_heads or len(v) % kv_heads:
            return None, "heads"
        dv, rep = len(v) // kv_heads, heads // kv_heads
        O = np.concatenate([v[(h // rep) * dv:(h // rep + 1) * dv] for h in range(heads)])
        Wo = get(p + "attn_output.weight", 2)
        if Wo is None or Wo.shape[1] != len(O):
            return None, f"attn_output {l}"
        a = energies(Wo, O)
        if len(a) != H:
            return None, f"attn_output rows {l}"
        if post:
            g = get(p + "post_attention_norm.weight", 1)
            if g is None or len(g) != H:
                return None, f"post_attention_norm {l}"
            a = normed(g, a)
        r = r + a
        gf = get(p + "ffn_norm.weight", 1)
        if gf is None or len(gf) != H:
            return None, f"ffn_norm {l}"
        F = normed(gf, r)
        Wg, Wu = get(p + "ffn_gate.weight", 2), get(p + "ffn_up.weight", 2)
        if Wg is None or Wg.shape[1] != H:
            return None, f"ffn_gate {l}"
        g_ = energies(Wg, F)
        if Wu is None or Wu.shape[1] != H:
            return None, f"ffn_up {l}"
        u = energies(Wu, F)
        if len(u) != len(g_):
            return None, f"ffn_up rows {l}"
        Dn = (u * g_) / (1.0 + g_)
        Wd = get(p + "ffn_down.weight", 2)
        if Wd is None or Wd.shape[1] != len(Dn):
            return None, f"ffn_down {l}"
        a = energies(Wd, Dn)
        if len(a) != H:
            return None, f"ffn_down rows {l}"
        if post:
            g = get(p + "post_ffw_norm.weight", 1)
            if g is None or len(g) != H:
                return None, f"post_ffw_norm {l}"
            a = normed(g, a)
        r = r + a
        layers.append((A, O, F, Dn))
    go = get("output_norm.weight", 1)
    if go is None or len(go) != H:
        return None, "output_norm"
    for l, (A, O, F, Dn) in enumerate(layers):
        p = f"blk.{l}."
        for k in ("attn_q", "attn_k", "attn_v"):
            put(p + k + ".weight", A)
        put(p + "attn_output.weight", O)
        for k in ("ffn_gate", "ffn_up"):
            put(p + k + ".weight", F)
        put(p + "ffn_down.weight", Dn)
    Xo = normed(go, r)
    if name_of("output.weight") in by_name:
        put("output.weight", Xo)
    elif tied:
        put("token_embd.weight", Xo)
    return out, None


def model_info(path, tensors):
    """(arch, is_gguf, heads, kv_heads, tied) for §CQ4.17."""
    names = {n for n, _, _ in tensors}
    if os.path.isdir(path) or path.endswith(".safetensors"):
        cfg_path = os.path.join(path if os.path.isdir(path) else os.path.dirname(path), "config.json")
        cfg = json.load(open(cfg_path)) if os.path.exists(cfg_path) else {}
        text = cfg.get("text_config") or cfg
        mt = cfg.get("model_type", "")
        arch = "gemma3" if mt == "gemma3_text" else mt
        heads = text.get("num_attention_heads", cfg.get("num_attention_heads"))
        kv = text.get("num_key_value_heads", cfg.get("num_key_value_heads")) or heads
        has_out = "lm_head.weight" in names
        has_emb = "model.embed_tokens.weight" in names
        tie = cfg.get("tie_word_embeddings")
        tied = (not has_out) and (has_emb if not isinstance(tie, bool) else (tie and has_emb))
        return arch, False, heads, kv, tied
    from gguf import GGUFReader
    r = GGUFReader(path)

    def field(k):
        f = r.fields.get(k)
        if f is None:
            return None
        v = f.parts[f.data[0]]
        return bytes(v).decode() if f.types and f.types[0].name == "STRING" else int(v[0])
    arch = field("general.architecture") or ""
    heads = field(f"{arch}.attention.head_count")
    kv = field(f"{arch}.attention.head_count_kv") or heads
    tied = "output.weight" not in names and "token_embd.weight" in names
    return arch, True, heads, kv, tied


# ---------------------------------------------------------------------------
# Model readers and the dtype policy (FORMAT.md)
# ---------------------------------------------------------------------------
EMBED_NAMES = {"token_embd.weight", "model.embed_tokens.weight"}
OUTPUT_NAMES = {"output.weight", "lm_head.weight"}


def read_gguf(path):
    """Yields (name, f32 array with row-major shape, outermost first) in source order."""
    from gguf import GGUFReader, GGMLQuantizationType
    from gguf.quants import dequantize
    reader = GGUFReader(path)
    for t in reader.tensors:
        ne = [int(v) for v in t.shape]
        shape = tuple(reversed(ne))
        qt = t.tensor_type
        if qt == GGMLQuantizationType.F32:
            arr = np.asarray(t.data, dtype=np.float32)
        elif qt == GGMLQuantizationType.F16:
            arr = np.asarray(t.data).view(np.float16).astype(np.float32)
        elif qt == GGMLQuantizationType.BF16:
            raw = np.ascontiguousarray(t.data).view(np.uint16)
            arr = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.asarray(dequantize(t.data, qt), dtype=np.float32)
        yield t.name, lambda arr=arr, shape=shape: arr.reshape(shape), shape


def read_safetensors_file(path):
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen].decode("utf-8"))
    base = 8 + hlen
    dt = {"F32": np.float32, "F16": np.float16, "BF16": "bf16", "F64": np.float64}
    # SPEC-AMBIGUITY: "source order" of a safetensors file is undefined; the JSON header
    # order is used (it only matters for name clashes, never for CQ4 bytes).
    for name, info in header.items():
        if name == "__metadata__":
            continue
        s, e = info["data_offsets"]
        raw = blob[base + s:base + e]
        shape = tuple(info["shape"])
        kind = dt.get(info["dtype"])

        def load(raw=raw, shape=shape, kind=kind, name=name, dtype=info["dtype"]):
            if kind is None:
                raise EncodeError(f"{name}: unsupported safetensors dtype {dtype}")
            if kind == "bf16":
                bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
                arr = bits.view(np.float32)
            else:
                arr = np.frombuffer(raw, dtype=np.dtype(kind).newbyteorder("<")).astype(np.float32)
            return arr.reshape(shape)
        yield name, load, shape


def read_model(path):
    if os.path.isdir(path):
        st = os.path.join(path, "model.safetensors")
        if not os.path.exists(st):
            raise EncodeError("only single-file Hugging Face folders are supported")
        return list(read_safetensors_file(st))
    if path.endswith(".safetensors"):
        return list(read_safetensors_file(path))
    return list(read_gguf(path))


def materialize(arr, torch_dtype, name):
    if torch_dtype == "float32":
        return arr
    if torch_dtype == "bfloat16":
        return bf16_round_f32(arr)
    if torch_dtype == "float16":
        return fp16_round_f32_checked(arr, name)
    raise ValueError(torch_dtype)


def file_names(names):
    """FORMAT.md: sanitise, prefix '_' for a leading '.', '~2', '~3' on case-insensitive clashes."""
    # SPEC-AMBIGUITY: clashes are compared on the sanitised base name over all source
    # tensors (not only CQ4 ones, not including the suffix); the fixtures have none.
    out = {}
    seen = {}
    for n in names:
        s = "".join(ch if (ch.isascii() and (ch.isalnum() or ch in "._-")) else "_" for ch in n)
        if s.startswith("."):
            s = "_" + s
        key = s.lower()
        if key in seen:
            seen[key] += 1
            s = f"{s}~{seen[key]}"
        else:
            seen[key] = 1
        out[n] = s
    return out


def family_of(name, shape):
    # SPEC-AMBIGUITY: no document says which tensors are "matmul weights" (convert --help:
    # "norms and other small tensors become plain FP16", "small" undefined). Reading used:
    # The role decision is not part of the byte contract: 2-D tensors are CQ4; the token
    # embedding and lm_head take the orthogonal family, every other one the Hadamard family.
    if len(shape) != 2:
        return None
    if name in EMBED_NAMES or name in OUTPUT_NAMES:
        return "orthogonal"
    return "hadamard"


def encode_model(model, outdir, torch_dtype, seed, only=None, verbose=True, imatrix=None,
                 input_scales="auto", hessians=None):
    tensors = read_model(model)
    im = read_imatrix(imatrix) if imatrix else {}
    hs = read_hessians(hessians) if hessians else {}
    info = model_info(model, tensors) if hs else None
    est = {}
    if input_scales == "auto":
        est, why = importance_estimate(model_info(model, tensors), tensors, torch_dtype)
        if est is None:
            est = {}
            if verbose:
                print(f"  no importance estimate: {why}", file=sys.stderr)
    names = file_names([n for n, _, _ in tensors])
    os.makedirs(outdir, exist_ok=True)
    written = []
    for name, load, shape in tensors:
        fam = family_of(name, shape)
        if fam is None or (only is not None and name not in only):
            continue
        t0 = time.time()
        W = materialize(load(), torch_dtype, name)
        imp = im.get(name)
        hess = None
        if hs and fam == "hadamard":
            # §18: the Hugging Face module path (a GGUF name mapped).
            hf = hf_name_of(info[0], name) if info[1] else name
            entry = hs.get(hf[:-len(".weight")] if hf and hf.endswith(".weight") else hf)
            if entry is not None:
                hess = entry[0]
                if imp is None:
                    imp = entry[1] if entry[1] is not None else np.diag(entry[0]).copy()
        if imp is None:
            imp = est.get(name)
        blob, _ = encode_tensor(W, fam, seed, imp, hess)
        fn = names[name] + ".cq4p.weights"
        with open(os.path.join(outdir, fn), "wb") as f:
            f.write(blob)
        written.append(fn)
        if verbose:
            print(f"  {fn}: {fam} {shape[0]}x{shape[1]} {len(blob)} bytes ({time.time() - t0:.2f}s)",
                  file=sys.stderr)
    return written


# ---------------------------------------------------------------------------
# --diff: locate the first differing element of two .cq4p.weights files
# ---------------------------------------------------------------------------
def describe_layout(buf):
    hdr = struct.unpack("<IIII4QIQQIIQ", buf[:HEADER_LEN])
    magic, flags, alignment, ndim, d0, d1, _, _, prec, data_bytes, scales_bytes, gs, ng, N = hdr
    Kp = d1
    SB64 = (N + 63) // 64
    so = align(HEADER_LEN, alignment)
    do = align(so + scales_bytes, alignment)
    regions = [("header", 0, HEADER_LEN, None), ("pad_header", HEADER_LEN, so, None)]
    o = so
    def add(name, length, kind):
        nonlocal o
        regions.append((name, o, o + length, kind))
        o += length
    add("codebook", 32, "<f2")
    add("input_scale", 2 * Kp, "<f2")
    add("recip", 2 * Kp, "<f2")
    add("norms", 2 * N * ng, "<f2")
    add("norms_pad", 2 if (N * ng) % 2 else 0, None)
    add("folded", 256 * SB64 * ng, "<f4")
    if flags & FLAG_ORTHOGONAL_ROTATION:
        add("R", 2 * Kp * Kp, "<f2")
        add("RT", 2 * Kp * Kp, "<f2")
    else:
        add("left", 128, "i1")
        add("right", 128, "i1")
        add("perm", 512, "<u4")
    regions.append(("pad_scales", o, do, None))
    regions.append(("panels", do, do + data_bytes, None))
    return dict(N=N, Kp=Kp, ng=ng, SB64=SB64, flags=flags, regions=regions)


def element_name(region, i, L):
    N, Kp, ng = L["N"], L["Kp"], L["ng"]
    if region == "norms":
        return f"nrm[n={i // ng}][g={i % ng}]"
    if region == "folded":
        sbg, c = divmod(i, 64)
        sb, g = divmod(sbg, ng)
        return f"fold[n={64 * sb + c}][g={g}] (sb={sb} c={c})"
    if region in ("R", "RT"):
        return f"{region}[{i // Kp}][{i % Kp}]"
    if region in ("input_scale", "recip", "codebook", "left", "right", "perm"):
        return f"{region}[{i}]"
    return f"{region}[{i}]"


def diff_files(ref_path, other_path, max_report=5):
    a = open(ref_path, "rb").read()
    b = open(other_path, "rb").read()
    if a == b:
        print(f"identical ({len(a)} bytes)")
        return 0
    print(f"reference {ref_path}: {len(a)} bytes; other {other_path}: {len(b)} bytes")
    if a[:HEADER_LEN] != b[:HEADER_LEN]:
        ha = struct.unpack("<IIII4QIQQIIQ", a[:HEADER_LEN])
        hb = struct.unpack("<IIII4QIQQIIQ", b[:HEADER_LEN])
        fields = ["magic", "flags", "alignment", "ndim", "dim0", "dim1", "dim2", "dim3",
                  "precision", "data_bytes", "scales_bytes", "group_size", "num_groups", "original_N"]
        for f, x, y in zip(fields, ha, hb):
            if x != y:
                print(f"  header.{f}: reference {x} other {y}")
        return 1
    L = describe_layout(a)
    reported = 0
    for name, s, e, kind in L["regions"]:
        ra, rb = a[s:e], b[s:e]
        if ra == rb:
            continue
        if name == "panels":
            pa = np.frombuffer(ra, np.uint8)
            pb = np.frombuffer(rb, np.uint8)
            bad = np.nonzero(pa != pb)[0]
            ndiff_nib = 0
            for off in bad:
                for hi in (0, 1):
                    na = (int(pa[off]) >> (4 * hi)) & 15
                    nb = (int(pb[off]) >> (4 * hi)) & 15
                    if na != nb:
                        ndiff_nib += 1
            print(f"  region panels: {len(bad)} bytes / {ndiff_nib} nibbles differ")
            for off in bad[:max_report]:
                blk, within = divmod(int(off), 128)
                sbg, kg = divmod(blk, 32)
                sb, g = divmod(sbg, L["ng"])
                c = within // 2
                n = 64 * sb + c
                k0 = 128 * g + 4 * kg + 2 * (within % 2)
                for hi in (0, 1):
                    na = (int(pa[off]) >> (4 * hi)) & 15
                    nb = (int(pb[off]) >> (4 * hi)) & 15
                    if na != nb:
                        print(f"    data byte {off}: weight (n={n}, k={k0 + hi}) index reference {na} other {nb}")
            reported += 1
            continue
        if kind is None:
            print(f"  region {name}: bytes differ (file offsets {s}..{e})")
            reported += 1
            continue
        va = np.frombuffer(ra, kind)
        vb = np.frombuffer(rb, kind)
        bad = np.nonzero(va.view(f"u{va.itemsize}") != vb.view(f"u{vb.itemsize}"))[0]
        print(f"  region {name} (file offset {s}): {len(bad)} of {len(va)} elements differ")
        for i in bad[:max_report]:
            bits = "%0*x" % (2 * va.itemsize, int(va.view(f"u{va.itemsize}")[i]))
            bbits = "%0*x" % (2 * vb.itemsize, int(vb.view(f"u{vb.itemsize}")[i]))
            print(f"    {element_name(name, int(i), L)}: reference {va[i].item()!r} (0x{bits})"
                  f" other {vb[i].item()!r} (0x{bbits})")
        reported += 1
    if len(a) != len(b):
        print("  file lengths differ")
    return 1


# ---------------------------------------------------------------------------
# --self-test: the contract's own test vectors
# ---------------------------------------------------------------------------
def self_test():
    ok = True
    results = []

    def check(label, got, want):
        nonlocal ok
        good = got == want
        ok &= good
        results.append(good)
        print(f"  [{'ok' if good else 'FAIL'}] {label}" + ("" if good else f"\n      got  {got}\n      want {want}"))

    def h16(a):
        return " ".join("%04x" % v for v in np.asarray(a, dtype=np.float16).view(np.uint16))

    t0 = time.time()
    print("self-test: §0 fp16 rounding (own RNE vs numpy float64->float16)")
    rng = np.random.default_rng(7)
    probe = np.concatenate([
        rng.standard_normal(200000) * np.exp(rng.uniform(-25, 12, 200000)),
        # halfway and near-halfway points between fp16 neighbours, incl. subnormals
        (np.arange(-70000, 70000, dtype=np.float64) + 0.5) * 2.0 ** -24,
        np.array([65504.0, 65519.99, 65520.0, -65520.0, 1e300, -0.0, 0.0, 2.0 ** -25,
                  2.0 ** -25 * (1 + 2 ** -52), np.inf, -np.inf]),
    ])
    h = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    mids = (h[:-1] + h[1:]) / 2
    probe = np.concatenate([probe, mids, np.nextafter(mids, 0), np.nextafter(mids, 1), -mids])
    mine = fp16_from_f64(probe).view(np.uint16)
    with np.errstate(over="ignore"):
        theirs = probe.astype(np.float16).view(np.uint16)
    check("fp16_from_f64 == numpy cast on %d probes" % len(probe), int(np.sum(mine != theirs)), 0)

    print("self-test: §2 SplitMix64")
    check("seed 0", [hex(int(v)) for v in splitmix64_draws(0, 3)],
          ["0xe220a8397b1dcdaf", "0x6e789e6aa1b965f4", "0x6c45d188009454f"])
    check("seed 1234567", [int(v) for v in splitmix64_draws(1234567, 5)],
          [6457827717110365317, 3203168211198807973, 9817491932198370423,
           4593380528125082431, 16408922859458223821])
    check("seed 0x4351345000000001", [hex(int(v)) for v in splitmix64_draws(DEFAULT_SEED, 3)],
          ["0x8f0eb9802107ff33", "0xd87ec685d7757b65", "0xe67333b6672ccc46"])
    g = SplitMix64(1234567)
    check("scalar generator == vectorised", [g.next_u64() for _ in range(5)],
          [int(v) for v in splitmix64_draws(1234567, 5)])

    print("self-test: §3 Gaussian samples")
    gs = fill_gaussian(DEFAULT_SEED, 4)
    check("values", [repr(float(v)) for v in gs],
          ["0.6102206451952481", "-0.8896584213181743", "-0.0682750271658164", "0.453459483770814"])
    check("bits", " ".join("%016x" % bits_of_f64(v) for v in gs),
          "3fe386ed724ea4be bfec7814f0058583 bfb17a78e0cf8994 3fdd057aed36d3fe")
    check("odd length drops last sine", [float(v) for v in fill_gaussian(DEFAULT_SEED, 3)],
          [float(v) for v in gs[:3]])

    print("self-test: §4 codebooks")
    cb, m, c, iters = codebook(128)
    check("d=128 iterations", iters, 179)
    check("d=128 positive half before fp16 (7 decimals)", ["%.7f" % v for v in c[8:]],
          ["0.0112843", "0.0341004", "0.0576925", "0.0827256", "0.1101724", "0.1416875",
           "0.1807265", "0.2375697"])
    check("d=128 fp16", h16(cb), "b39a b1c9 b089 af0d ad4b ab62 a85d a1c7 21c7 285d 2b62 2d4b 2f0d 3089 31c9 339a")
    check("d=256 fp16", h16(codebook(256)[0]), "b16b b01d ae70 ad00 ab81 a93b a62e a017 2017 262e 293b 2b81 2d00 2e70 301d 316b")
    check("d=640 fp16", h16(codebook(640)[0]), "aee3 ad37 ac14 aa55 a8c0 a69e a3d0 9d2b 1d2b 23d0 269e 28c0 2a55 2c14 2d37 2ee3")
    check("d=2048 fp16", h16(codebook(2048)[0]), "abb5 a9d5 a88f a713 a54d a362 a05c 99c4 19c4 205c 2362 254d 2713 288f 29d5 2bb5")
    print("      Lloyd iterations: " + ", ".join(f"d={d}: {codebook(d)[3]}" for d in (128, 256, 640, 2048)))

    print("self-test: §5 Hadamard parameters (default seed)")
    left, right, perm = hadamard_params(DEFAULT_SEED)
    sgn = lambda a: " ".join("-" if v < 0 else "+" for v in a[:16])
    check("left[0..16]", sgn(left), "- - - + + + + - + - - + - - - -")
    check("right[0..16]", sgn(right), "+ + + + - - - - + + + + + + - +")
    check("perm[0..16]", [int(v) for v in perm[:16]], [59, 51, 58, 102, 67, 62, 56, 79, 54, 61, 107, 111, 50, 126, 17, 40])
    check("perm is a permutation", sorted(perm.tolist()), list(range(128)))
    # FWHT butterflies == explicit Sylvester sum (exact on these inputs)
    x = np.ldexp(np.rint(rng.standard_normal((3, 128)) * 2 ** 20), -28)
    Hs = np.array([[(-1.0) ** bin(a & b).count("1") for b in range(128)] for a in range(128)])
    ref = np.zeros((3, 128))
    for b in range(128):
        ref = ref + x[:, b:b + 1] * Hs[:, b][None, :]
    check("FWHT == sum_b (-1)^popcount(a&b) x[b]", bool(np.array_equal(fwht(x), ref)), True)

    print("self-test: §6 orthogonal rotation (default seed, Kp = 128)")
    R = orthogonal_rotation(DEFAULT_SEED, 128)
    check("R[0][0..8]", h16(R[0, :8]), "a888 1fbd 2994 2cd8 b079 ad4d ab16 173f")
    check("R[127][120..128]", h16(R[127, 120:]), "2844 2cd5 2d0d 30c7 195b 2f64 afc0 2d53")
    check("FNV-1a-64(R)", "%016x" % fnv1a64(R.astype("<f2").tobytes()), "12ee64ba3d20185e")

    print("self-test: §8 stored Hadamard codebook")
    cb64 = codebook(128)[0].astype(np.float64)
    cb_factor = float(np.max(np.abs(cb64))) / 127.0
    scb = fp16_from_f64(cb64 / cb_factor)
    check("scb fp16", h16(scb), "d7f0 d60a d4bc d35d d187 cfb6 cc8e c608 4608 4c8e 4fb6 5187 535d 54bc 560a 57f0")
    check("cb_factor bits", "%016x" % bits_of_f64(cb_factor), "3f5ea54a952a54a9")
    s32 = scb.astype(np.float32)
    cb_scale = np.float32(max(np.max(np.abs(s32)) / np.float32(127.0), np.float32(1e-10)))
    q = (s32 / cb_scale).astype(np.float64)
    i8 = (np.sign(q) * np.floor(np.abs(q) + 0.5)).astype(int).tolist()
    check("cb_scale", float(cb_scale), 1.0)
    check("int8 codebook", i8, [-127, -97, -76, -59, -44, -31, -18, -6, 6, 18, 31, 44, 59, 76, 97, 127])

    print("self-test: §15 golden tensors (W[100][256] = f32(0.02 * gaussian(SplitMix64(42))))")
    W = f32_from_f64(0.02 * fill_gaussian(42, 100 * 256)).reshape(100, 256)
    golden = {
        "hadamard": ("18de8f9135f92366", "d0dff11a50309560", 3248, "88 6e 41 a5 f6 47 8c b5", "0edc 0e92 0dc3 0fbc"),
        "orthogonal": ("f02a1024517e59b2", "7faa6e074cf04251", 264624, "59 d9 74 42 6b 78 19 77", "3502 3502 3518 3518"),
    }
    for fam, (hd, hs, sb, d8, n4) in golden.items():
        blob, parts = encode_tensor(W, fam, DEFAULT_SEED)
        scales, data = parts["scales"], parts["data"]
        got = ("%016x" % fnv1a64(data), "%016x" % fnv1a64(scales), len(scales),
               " ".join("%02x" % v for v in data[:8]), h16(parts["nrm"].reshape(-1)[:4]))
        check(f"{fam}: (FNV data, FNV scales, scales_bytes, data[0..8], norms[0..4])", got, (hd, hs, sb, d8, n4))
        check(f"{fam}: scales at 96, data at align(96+scales_bytes, 32), file length",
              (blob[96:96 + len(scales)] == scales, blob[align(96 + len(scales), 32):] == data,
               len(blob)), (True, True, align(96 + len(scales), 32) + len(data)))
    print(f"self-test: {sum(results)} passed, {len(results) - sum(results)} failed ({time.time() - t0:.1f}s)")
    return 0 if ok else 1


# ---------------------------------------------------------------------------
# --make-edge-gguf: a small synthetic GGUF exercising the corners the fixtures miss
# ---------------------------------------------------------------------------
def make_edge_gguf(path):
    """K not a multiple of 128 (both families), N not a multiple of 64, N*ng odd (norms
    pad), N = 1, all-zero rows (NORM_FLOOR), tiny rows (fp16-subnormal / zero stored
    norms), large rows, a single outlier, F16 and BF16 sources."""
    import gguf
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_embedding_length(200)
    w.add_context_length(64)
    w.add_head_count(1)
    w.add_feed_forward_length(300)
    rng = np.random.default_rng(20240601)
    emb = (rng.standard_normal((70, 200)) * 0.05).astype(np.float32)
    emb[5] = 0.0
    emb[6] = 1e-30
    emb[7, 3] = -2.5
    w.add_tensor("token_embd.weight", emb)
    q = (rng.standard_t(3, (67, 100)) * 0.02).astype(np.float32)
    q[0] = 0.0
    q[1] = 1e-7
    q[2] = 3e5
    q[3, 7] = 1.0
    q[4, :64] = 0.0
    w.add_tensor("blk.0.attn_q.weight", q)
    w.add_tensor("blk.0.attn_norm.weight", np.ones(200, np.float32))
    kb = (rng.standard_normal((130, 384)) * 0.03).astype(np.float32)
    kbits = (kb.view(np.uint32) >> 16).astype(np.uint16)
    w.add_tensor("blk.0.attn_k.weight", kbits.view(np.uint8).reshape(130, 768),
                 raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.add_tensor("blk.0.ffn_down.weight", rng.standard_normal((1, 300)).astype(np.float16))
    w.add_tensor("output.weight", (rng.standard_normal((33, 130)) * 0.02).astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return 0


def make_edge_hessians(path):
    """Hessians for the edge GGUF's Hadamard matrices (K = 100, 384, 300): X^T X / n of
    heavy-tailed inputs with uneven column scales, a dead column (zero row and column),
    a slightly asymmetric pair (the encoder symmetrizes), the .diag of one omitted."""
    from safetensors.numpy import save_file
    rng = np.random.default_rng(20261203)
    out = {}
    for module, K, diag in [("model.layers.0.self_attn.q_proj", 100, True),
                            ("model.layers.0.self_attn.k_proj", 384, True),
                            ("model.layers.0.mlp.down_proj", 300, False)]:
        X = rng.standard_t(4, (2 * K, K)) * np.exp(rng.standard_normal(K))[None, :]
        X[:, 7] = 0.0
        H = (X.T @ X / (2 * K)).astype(np.float32)
        H[3, 5] = np.nextafter(H[3, 5], np.float32(np.inf))
        out[module] = H
        if diag:
            out[module + ".diag"] = np.diag(H).copy()
    save_file(out, path)
    return 0


# ---------------------------------------------------------------------------
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", nargs="?")
    ap.add_argument("outdir", nargs="?")
    # SPEC-AMBIGUITY: FORMAT.md documents neither the --torch-dtype default nor the --seed
    # syntax; float32 and decimal-or-0x-hex are used here.
    ap.add_argument("--torch-dtype", default="float32",
                    help="float32 | bfloat16 | float16 (aliases f32, bf16, fp16/f16)")
    ap.add_argument("--seed", default=str(DEFAULT_SEED), help="bundle seed (decimal or 0x hex)")
    ap.add_argument("--tensors", default=None, help="comma-separated source tensor names")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--diff", nargs=2, metavar=("REFERENCE", "OTHER"))
    ap.add_argument("--make-edge-gguf", metavar="PATH", help="write the synthetic edge-case GGUF")
    ap.add_argument("--imatrix", default=None, metavar="FILE",
                    help="llama.cpp GGUF importance matrix: AWQ input scales (§CQ4.16)")
    ap.add_argument("--input-scales", default="auto", choices=["auto", "none"],
                    help="auto: the §CQ4.17 data-free importance for matrices without an imatrix entry")
    ap.add_argument("--hessians", default=None, metavar="FILE",
                    help="the engine's hessians.safetensors: GPTQ for Hadamard matrices (§CQ4.18)")
    ap.add_argument("--make-edge-hessians", metavar="PATH",
                    help="write Hessians for the synthetic edge-case GGUF's Hadamard matrices")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    if args.diff:
        return diff_files(*args.diff)
    if args.make_edge_gguf:
        return make_edge_gguf(args.make_edge_gguf)
    if args.make_edge_hessians:
        return make_edge_hessians(args.make_edge_hessians)
    if not args.model or not args.outdir:
        ap.error("MODEL and OUTDIR are required")
    aliases = {"float32": "float32", "f32": "float32", "fp32": "float32",
               "bfloat16": "bfloat16", "bf16": "bfloat16",
               "float16": "float16", "f16": "float16", "fp16": "float16"}
    if args.torch_dtype not in aliases:
        ap.error(f"unknown --torch-dtype {args.torch_dtype}")
    seed = int(args.seed, 0) & U64
    only = set(args.tensors.split(",")) if args.tensors else None
    try:
        t0 = time.time()
        written = encode_model(args.model, args.outdir, aliases[args.torch_dtype], seed, only,
                               verbose=not args.quiet, imatrix=args.imatrix,
                               input_scales=args.input_scales, hessians=args.hessians)
    except EncodeError as e:
        print(f"reference_encoder: error: {e}", file=sys.stderr)
        return 2
    print(f"reference_encoder: wrote {len(written)} files to {args.outdir} ({time.time() - t0:.1f}s)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
