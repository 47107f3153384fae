//! The Hadamard family's quantizer (FORMAT.md §CQ4.7.1) on [`LANES`]
//! groups at once: lane `l` of every `[f64; LANES]` belongs to one
//! (row, group) item, so every step of the contract (the sequential sum of
//! squares included) runs per lane in exactly its documented order while
//! the lanes fill a vector register. Portable code: the `simd` module
//! compiles the same body again with AVX2 enabled (Rust never contracts
//! `a * b + c` into an FMA or reassociates, so the values are the same).
//!
//! The indices come from the norm search (§CQ4.7.3) alone: its candidate
//! `g = 1` compares with `m_i * 1 = m_i`, i.e. it is §7.1's rule, so §7.1
//! is not computed separately.

use crate::codebook::LEVELS;
use crate::hadamard::{sqrt128, HadamardRotation, FIXED_MAGIC, HADAMARD_N};

/// Items per batch (f64 lanes of one AVX2 register).
pub(crate) const LANES: usize = 4;

/// A batch: `x[i][l]` = value `i` of item `l`'s group, as f64.
pub(crate) type Batch = [[f64; LANES]; HADAMARD_N];

/// The batch's indices: `idx[j][l]` for column `j` of item `l`.
pub(crate) type BatchIdx = [[u8; LANES]; HADAMARD_N];

/// Per-encoder constants of the batch quantizer.
#[derive(Debug, Clone)]
pub(crate) struct HadamardQuant {
    left: [f64; HADAMARD_N],
    /// For output column `j`: `perm[j]` and `right[perm[j]]`.
    pub(crate) perm: [usize; HADAMARD_N],
    pub(crate) right: [f64; HADAMARD_N],
    /// The canonical codebook values and their midpoints (§CQ4.4).
    cb: [f64; LEVELS],
    mid: [f64; LEVELS - 1],
    norm_floor: f64,
}

/// Scale candidates of the norm search (§CQ4.7.3): `g_t = (16 + t) / 20`,
/// `t = 0..9`, i.e. 0.80, 0.85, ..., 1.20 (`g_4 = 1` exactly).
pub const SCALE_CANDIDATES: usize = 9;

/// `g_t` of [`SCALE_CANDIDATES`].
pub fn scale_candidate(t: usize) -> f64 {
    (16 + t) as f64 / 20.0
}

impl HadamardQuant {
    pub(crate) fn new(
        h: &HadamardRotation,
        cb: &[f64; LEVELS],
        mid: &[f64; LEVELS - 1],
        norm_floor: f64,
    ) -> Self {
        let mut perm = [0usize; HADAMARD_N];
        let mut right = [0.0f64; HADAMARD_N];
        for j in 0..HADAMARD_N {
            perm[j] = h.perm[j] as usize;
            right[j] = h.right[perm[j]] as f64;
        }
        HadamardQuant {
            left: h.left.map(|x| x as f64),
            perm,
            right,
            cb: *cb,
            mid: *mid,
            norm_floor,
        }
    }

    /// Quantize one batch in place: returns each item's norm `nu` (the
    /// clamped norm times the chosen scale, §CQ4.7.3) and writes
    /// `idx[j][l]` (the index of column `j` of item `l`).
    #[inline(always)]
    pub(crate) fn batch(&self, x: &mut Batch, idx: &mut BatchIdx) -> [f64; LANES] {
        let norm = self.transform(x);
        let s = self.refine(x, idx);
        std::array::from_fn(|l| norm[l] * s[l])
    }

    /// §CQ4.7.3, per lane, from `x` = `h`: for each scale candidate `g`,
    /// the indices of `rot / g` (thresholds `m_i * g`) and their
    /// least-squares scale `num / den`; the candidate with the largest
    /// `num * num / den` wins (the first on ties; none with `num <= 0`:
    /// then the indices of `g = 1`, which are §7.1's since `m_i * 1 = m_i`,
    /// and scale 1). Writes the winner's indices and returns its scale.
    #[inline(always)]
    pub(crate) fn refine(&self, x: &Batch, idx: &mut BatchIdx) -> [f64; LANES] {
        let s128 = sqrt128();
        let mut rot: Batch = [[0.0; LANES]; HADAMARD_N];
        for (j, (&p, &r)) in self.perm.iter().zip(&self.right).enumerate() {
            for l in 0..LANES {
                rot[j][l] = (r * x[p][l]) / s128;
            }
        }
        let mut best_score = [f64::NEG_INFINITY; LANES];
        let mut best_scale = [1.0f64; LANES];
        let mut cand: BatchIdx = [[0; LANES]; HADAMARD_N];
        let mut plain: BatchIdx = [[0; LANES]; HADAMARD_N];
        for t in 0..SCALE_CANDIDATES {
            let g = scale_candidate(t);
            let thr = self.mid.map(|m| m * g);
            let mut num = [0.0f64; LANES];
            let mut den = [0.0f64; LANES];
            for (rj, cj) in rot.iter().zip(cand.iter_mut()) {
                for l in 0..LANES {
                    let mut q = 0u8;
                    for &th in &thr {
                        q += (th < rj[l]) as u8;
                    }
                    cj[l] = q;
                    let c = self.cb[q as usize];
                    num[l] += rj[l] * c;
                    den[l] += c * c;
                }
            }
            if g == 1.0 {
                plain = cand;
            }
            for l in 0..LANES {
                if num[l] > 0.0 {
                    let score = (num[l] * num[l]) / den[l];
                    if score > best_score[l] {
                        best_score[l] = score;
                        best_scale[l] = num[l] / den[l];
                        for (d, c) in idx.iter_mut().zip(&cand) {
                            d[l] = c[l];
                        }
                    }
                }
            }
        }
        for l in 0..LANES {
            if best_score[l] == f64::NEG_INFINITY {
                for (d, c) in idx.iter_mut().zip(&plain) {
                    d[l] = c[l];
                }
            }
        }
        best_scale
    }

    /// The norms, and `x` replaced by `h = FWHT(left * uf)` per lane.
    #[inline(always)]
    pub(crate) fn transform(&self, x: &mut Batch) -> [f64; LANES] {
        // ss = sum v_i * v_i, sequential in i (per lane).
        let mut ss = [0.0f64; LANES];
        for v in x.iter() {
            for l in 0..LANES {
                ss[l] += v[l] * v[l];
            }
        }
        let norm = ss.map(|s| s.sqrt().max(self.norm_floor));
        // a_i = left[i] * ((v_i / norm + MAGIC) - MAGIC).
        for (v, &s) in x.iter_mut().zip(&self.left) {
            for l in 0..LANES {
                v[l] = s * ((v[l] / norm[l] + FIXED_MAGIC) - FIXED_MAGIC);
            }
        }
        // FWHT (exact, §CQ4.11), lane-wise.
        let mut h = 1;
        while h < HADAMARD_N {
            for i in (0..HADAMARD_N).step_by(2 * h) {
                for t in i..i + h {
                    let (a, b) = (x[t], x[t + h]);
                    for l in 0..LANES {
                        x[t][l] = a[l] + b[l];
                        x[t + h][l] = a[l] - b[l];
                    }
                }
            }
            h *= 2;
        }
        norm
    }
}
