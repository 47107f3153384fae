"""Re-derive the docs/FORMAT.md §CQ4 packed panels test vectors with numpy, following the
document's text (not the Rust code). Written by the cq4 author as a self-check
of the document; it is NOT the independent reference encoder.

    python3 -m venv /tmp/npenv && /tmp/npenv/bin/pip install numpy
    /tmp/npenv/bin/python crates/cq4/tools/doc_check.py      # ~4 s
"""
import sys
import numpy as np

M64 = (1 << 64) - 1
def splitmix(seed):
    s = seed & M64
    while True:
        s = (s + 0x9E3779B97F4A7C15) & M64
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        yield z ^ (z >> 31)

def f64(bits):
    return np.frombuffer(np.uint64(bits).tobytes(), dtype=np.float64)[0]

SQRT_2 = f64(0x3FF6A09E667F3BCD); LN_2 = f64(0x3FE62E42FEFA39EF); FRAC_PI_4 = f64(0x3FE921FB54442D18)
MAGIC = np.float64(25165824.0); SQRT128 = np.sqrt(np.float64(128.0))

def det_ln(u):  # vectorised over an array u in (0,1]
    m, e = np.frexp(u); f = 2.0 * m; e = (e - 1).astype(np.float64)
    big = f > SQRT_2
    f = np.where(big, f / 2.0, f); e = np.where(big, e + 1.0, e)
    s = (f - 1.0) / (f + 1.0); z = s * s
    p = np.full_like(u, 1.0 / 21.0)
    for i in range(9, -1, -1):
        p = p * z + 1.0 / float(2 * i + 1)
    return e * LN_2 + (2.0 * s) * p

fact = [1.0]
for n in range(1, 20):
    fact.append(fact[-1] * float(n))
def det_sincos(u):
    t = 8.0 * u; q = np.floor(t); f = t - q; q = q.astype(np.int64)
    a = np.where(q % 2 == 0, f, 1.0 - f) * FRAC_PI_4
    z = a * a
    sc = lambda i, n: (1.0 / fact[n]) if i % 2 == 0 else -(1.0 / fact[n])
    ps = np.full_like(u, sc(9, 19)); pc = np.full_like(u, sc(9, 18))
    for i in range(8, -1, -1):
        ps = ps * z + sc(i, 2 * i + 1); pc = pc * z + sc(i, 2 * i)
    S = a * ps; C = pc
    table = {0: (S, C), 1: (C, S), 2: (C, -S), 3: (S, -C), 4: (-S, -C), 5: (-C, -S), 6: (-C, S), 7: (-S, C)}
    sn = np.zeros_like(u); cs = np.zeros_like(u)
    for k, (a_, b_) in table.items():
        sn = np.where(q == k, a_, sn); cs = np.where(q == k, b_, cs)
    return sn, cs

def gaussian(seed, L):
    g = splitmix(seed)
    pairs = (L + 1) // 2
    a = np.array([next(g) for _ in range(2 * pairs)], dtype=np.uint64)
    A, B = a[0::2], a[1::2]
    u1 = ((A >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0**-53
    u2 = (B >> np.uint64(11)).astype(np.float64) * 2.0**-53
    r = np.sqrt(-2.0 * det_ln(u1)); sn, cs = det_sincos(u2)
    out = np.empty(2 * pairs); out[0::2] = r * cs; out[1::2] = r * sn
    return out[:L]

def seqsum_rows(x):  # sequential sum along axis 1
    s = np.zeros(x.shape[0])
    for i in range(x.shape[1]):
        s = s + x[:, i]
    return s

def codebook(d):
    i = np.arange(200001, dtype=np.int64)
    x = (i - 100000).astype(np.float64) / 100000.0
    p = 1.0 - x * x
    def ipow(b, e):
        r = np.ones_like(b); b = b.copy()
        while e > 0:
            if e & 1: r = r * b
            b = b * b; e >>= 1
        return r
    w = ipow(p, (d - 4) // 2) * np.sqrt(p) if d % 2 == 0 else ipow(p, (d - 3) // 2)
    C = np.add.accumulate(w)  # sequential running sum
    T = C[-1]
    c = np.zeros(16)
    for q in range(1, 17):
        t = (T * float(q)) / 17.0
        c[q - 1] = x[np.argmax(C >= t)]
    wx = w * x
    for it in range(200):
        b = (c[:-1] + c[1:]) / 2.0
        cell = np.searchsorted(b, x, side='left')  # #{b_i < x}
        new = c.copy()
        for q in range(16):
            sel = cell == q
            W = np.add.accumulate(w[sel])[-1] if sel.any() else 0.0
            Mq = np.add.accumulate(wx[sel])[-1] if sel.any() else 0.0
            if W > 0:
                new[q] = Mq / W
        delta = np.max(np.abs(new - c)); c = new
        if delta < 1e-8:
            break
    for q in range(8, 16):
        s = (c[q] - c[15 - q]) / 2.0; c[q] = s; c[15 - q] = -s
    cb = c.astype(np.float16)
    return cb, it + 1

def hadamard_params(seed):
    g = splitmix(seed)
    left = np.array([-1 if next(g) >> 63 else 1 for _ in range(128)], dtype=np.int8)
    right = np.array([-1 if next(g) >> 63 else 1 for _ in range(128)], dtype=np.int8)
    perm = list(range(128))
    for i in range(127, 0, -1):
        j = next(g) % (i + 1); perm[i], perm[j] = perm[j], perm[i]
    return left, right, np.array(perm, dtype=np.uint32)

def fwht(x):  # along axis 1, any order is exact on our inputs; use the documented one
    x = x.copy(); h = 1
    while h < 128:
        y = x.reshape(x.shape[0], -1, 2, h)
        a, b = y[:, :, 0, :].copy(), y[:, :, 1, :].copy()
        y[:, :, 0, :] = a + b; y[:, :, 1, :] = a - b
        x = y.reshape(x.shape[0], 128); h *= 2
    return x

def orth_R(seed, kp):
    G = gaussian(seed ^ 0x4F5254484F474F4E ^ kp, kp * kp).reshape(kp, kp)
    A = G.copy(); vs = []; betas = []; diag = []
    for j in range(kp):
        ss = 0.0
        for i in range(j, kp):
            ss = ss + A[i, j] * A[i, j]
        alpha = np.sqrt(ss)
        if alpha == 0.0:
            vs.append(None); betas.append(0.0); diag.append(0.0); continue
        r = -alpha if A[j, j] >= 0 else alpha
        v = A[j:, j].copy(); v[0] = A[j, j] - r
        vtv = 0.0
        for x in v:
            vtv = vtv + x * x
        beta = 2.0 / vtv
        if j + 1 < kp:
            s = np.zeros(kp - j - 1)
            for i in range(j, kp):
                s = s + v[i - j] * A[i, j + 1:]
            t = beta * s
            A[j:, j + 1:] = A[j:, j + 1:] - np.outer(v, t)
        vs.append(v); betas.append(beta); diag.append(r)
    Q = np.eye(kp)
    for j in range(kp - 1, -1, -1):
        if betas[j] == 0.0: continue
        v = vs[j]
        s = np.zeros(kp - j)
        for i in range(j, kp):
            s = s + v[i - j] * Q[i, j:]
        t = betas[j] * s
        Q[j:, j:] = Q[j:, j:] - np.outer(v, t)
    for c in range(kp):
        if diag[c] < 0: Q[:, c] = -Q[:, c]
    return Q.astype(np.float16)

def fnv(b):
    h = 0xcbf29ce484222325
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & M64
    return h

def idx_of(cb16, x):
    c = cb16.astype(np.float64); m = (c[:-1] + c[1:]) / 2.0
    return np.searchsorted(m, x, side='left').astype(np.uint8)  # #{m_i < x}

def pack(idx, N, Kp):  # idx: [N][Kp] uint8
    SB = -(-N // 64); ng = Kp // 128
    full = np.zeros((SB * 64, Kp), dtype=np.uint8); full[:N] = idx
    data = np.zeros(SB * 64 * Kp // 2, dtype=np.uint8)
    n = np.arange(SB * 64)[:, None]; k = np.arange(Kp)[None, :]
    sb, c = n // 64, n % 64; g, kg, kc = k // 128, (k % 128) // 4, k % 4
    j = 4 * c + kc
    byte = ((sb * ng + g) * 32 + kg) * 128 + j // 2
    shift = (j % 2) * 4
    np.bitwise_or.at(data, byte.ravel(), (full << shift.astype(np.uint8)).ravel().astype(np.uint8))
    return data

def scales(scb16, nrm16, N, Kp, rot_bytes):
    ng = Kp // 128; SB = -(-N // 64)
    out = bytearray(scb16.tobytes())
    out += np.full(2 * Kp, 1.0, dtype=np.float16).tobytes()
    out += nrm16.astype('<f2').tobytes()
    if (N * ng) % 2: out += b'\0\0'
    cb_scale = np.maximum(np.max(np.abs(scb16.astype(np.float32))) / np.float32(127), np.float32(1e-10))
    fold = np.zeros((SB * 64, ng), dtype=np.float32)
    fold[:N] = nrm16.reshape(N, ng).astype(np.float32) * cb_scale
    out += fold.reshape(SB, 64, ng).transpose(0, 2, 1).astype('<f4').tobytes()
    out += rot_bytes
    return bytes(out)

ok = True
def check(name, got, want):
    global ok
    good = got == want; ok &= good
    print(("OK  " if good else "BAD ") + name, got if not good else "", "" if good else f"want {want}")

g = splitmix(0x4351345000000001)
check("splitmix default", [hex(next(g)) for _ in range(3)], ['0x8f0eb9802107ff33', '0xd87ec685d7757b65', '0xe67333b6672ccc46'])
gv = gaussian(0x4351345000000001, 4)
check("gaussian KAT", [hex(np.float64(x).view(np.uint64)) for x in gv], ['0x3fe386ed724ea4be', '0xbfec7814f0058583', '0xbfb17a78e0cf8994', '0x3fdd057aed36d3fe'])
cb128, iters = codebook(128)
check("codebook d=128", ' '.join(f'{b:04x}' for b in cb128.view(np.uint16)), "b39a b1c9 b089 af0d ad4b ab62 a85d a1c7 21c7 285d 2b62 2d4b 2f0d 3089 31c9 339a")
check("codebook d=128 iterations", iters, 179)
cb256, _ = codebook(256)
check("codebook d=256", ' '.join(f'{b:04x}' for b in cb256.view(np.uint16)), "b16b b01d ae70 ad00 ab81 a93b a62e a017 2017 262e 293b 2b81 2d00 2e70 301d 316b")
cb640, _ = codebook(640)
check("codebook d=640", ' '.join(f'{b:04x}' for b in cb640.view(np.uint16)), "aee3 ad37 ac14 aa55 a8c0 a69e a3d0 9d2b 1d2b 23d0 269e 28c0 2a55 2c14 2d37 2ee3")
left, right, perm = hadamard_params(0x4351345000000001)
check("perm[0..16]", list(perm[:16]), [59, 51, 58, 102, 67, 62, 56, 79, 54, 61, 107, 111, 50, 126, 17, 40])

# Golden Hadamard tensor
N, K = 100, 256; Kp = 256; ng = 2
W = (0.02 * gaussian(42, N * K)).astype(np.float32).reshape(N, K)
V = W.astype(np.float64)
c128 = cb128.astype(np.float64)
cb_factor = np.max(np.abs(c128)) / 127.0
check("cb_factor bits", hex(np.float64(cb_factor).view(np.uint64)), '0x3f5ea54a952a54a9')
idx = np.zeros((N, Kp), dtype=np.uint8); nrm = np.zeros((N, ng), dtype=np.float16)
for g_ in range(ng):
    v = V[:, 128 * g_:128 * g_ + 128]
    norm = np.maximum(np.sqrt(seqsum_rows(v * v)), 1e-8)
    u = v / norm[:, None]
    uf = (u + MAGIC) - MAGIC
    a = left.astype(np.float64)[None, :] * uf
    h = fwht(a)
    rot = (right[perm].astype(np.float64)[None, :] * h[:, perm]) / SQRT128
    # §7.3 norm search, row by row as the text reads.
    mids = (c128[:-1] + c128[1:]) / 2.0
    q_best = idx_of(cb128, rot); s_best = np.ones(N)
    for n_ in range(N):
        best = None
        for t in range(9):
            gt = float(16 + t) / 20.0
            q = np.array([sum(1 for m in mids if m * gt < r) for r in rot[n_]], dtype=np.uint8)
            num = 0.0; den = 0.0
            for j in range(128):
                num += rot[n_, j] * c128[q[j]]; den += c128[q[j]] * c128[q[j]]
            if num > 0 and (best is None or num * num / den > best[0]):
                best = (num * num / den, num / den, q)
        if best is not None:
            s_best[n_] = best[1]; q_best[n_] = best[2]
    idx[:, 128 * g_:128 * g_ + 128] = q_best
    nrm[:, g_] = ((norm * s_best) * cb_factor).astype(np.float16)
scb = (c128 / cb_factor).astype(np.float16)
check("hadamard stored codebook", ' '.join(f'{b:04x}' for b in scb.view(np.uint16)), "d7f0 d60a d4bc d35d d187 cfb6 cc8e c608 4608 4c8e 4fb6 5187 535d 54bc 560a 57f0")
data = pack(idx, N, Kp)
rot_b = left.tobytes() + right.tobytes() + perm.astype('<u4').tobytes()
blob = scales(scb, nrm.ravel(), N, Kp, rot_b)
check("hadamard golden data fnv", f'{fnv(data.tobytes()):016x}', '18de8f9135f92366')
check("hadamard golden scales fnv", f'{fnv(blob):016x}', 'd0dff11a50309560')

# Orthogonal: R for Kp=128 and the golden tensor (Kp=256)
R128 = orth_R(0x4351345000000001, 128)
check("R128 fnv", f'{fnv(R128.astype("<f2").tobytes()):016x}', '12ee64ba3d20185e')
R = orth_R(0x4351345000000001, 256)
Rq = R.astype(np.float64)
norm = np.maximum(np.sqrt(seqsum_rows(V * V)), 1e-8)
uf = (V / norm[:, None] + MAGIC) - MAGIC
rot = uf @ Rq  # exact in any order (contract section 11)
idx = idx_of(cb256, rot)
nrm = np.repeat(norm.astype(np.float16)[:, None], ng, axis=1)
data = pack(idx, N, Kp)
blob = scales(cb256, nrm.ravel(), N, Kp, R.astype('<f2').tobytes() + R.T.copy().astype('<f2').tobytes())
check("orthogonal golden data fnv", f'{fnv(data.tobytes()):016x}', 'f02a1024517e59b2')
check("orthogonal golden scales fnv", f'{fnv(blob):016x}', '7faa6e074cf04251')
print("ALL OK" if ok else "MISMATCH")
sys.exit(0 if ok else 1)
