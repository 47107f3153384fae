//! The orthogonal rotation family: a dense random `Kp x Kp` orthogonal matrix
//! from the Householder QR of a seeded Gaussian matrix.
//!
//! Construction (all f64, every sum sequential in the stated index order):
//!
//! 1. `G` (`Kp x Kp`, row-major) from [`fill_gaussian`] with
//!    `SplitMix64::new(bundle_seed ^ ORTHOGONAL_SEED_TAG ^ Kp)`.
//! 2. Householder QR, `A = G`, for `j = 0..Kp`:
//!    - `alpha = sqrt(sum_{i=j..Kp} A[i][j]^2)`; if `alpha == 0` the step is the
//!      identity (`beta_j = 0`, `r_j = 0`) and is skipped.
//!    - `r_j = -alpha` if `A[j][j] >= 0` (including -0.0) else `+alpha`.
//!    - `v = (A[j][j] - r_j, A[j+1][j], .., A[Kp-1][j])`,
//!      `vtv = sum_i v_i^2`, `beta_j = 2 / vtv`.
//!    - for every column `c > j`: `s_c = sum_{i=j..Kp} v_{i-j} * A[i][c]`,
//!      `t_c = beta_j * s_c`, then `A[i][c] = A[i][c] - v_{i-j} * t_c` for all
//!      `i >= j`.
//! 3. `Q = I`; for `j = Kp-1` down to `0` (skipping identity steps), for every
//!    column `c >= j`: `s_c = sum_{i=j..Kp} v^{(j)}_{i-j} * Q[i][c]`,
//!    `t_c = beta_j * s_c`, `Q[i][c] = Q[i][c] - v^{(j)}_{i-j} * t_c` for
//!    `i >= j`. (Columns `c < j` are untouched: their rows `>= j` are zero.)
//! 4. Sign convention: negate column `c` of `Q` when `r_c < 0`, so the
//!    triangular factor has a non-negative diagonal (sign(0) = +1).
//! 5. Stored `R = fp16_rne(Q)` row-major; stored `R^T` is the exact transpose
//!    of the stored fp16 matrix. Quantization and decoding use only the stored
//!    fp16 values.

use rayon::prelude::*;

use crate::error::Cq4Error;
use crate::rng::{fill_gaussian, SplitMix64, ORTHOGONAL_SEED_TAG};
use crate::simd::NR;
use weights_file::fp16::{f16_bits_to_f32, f64_to_f16_bits};

/// Column-panel width of the right-looking test oracle.
#[cfg(test)]
const QP: usize = 32;

/// Largest supported orthogonal width: the rotation needs `2 * Kp^2` f64 of
/// working memory (4.3 GB at 16384) and `O(Kp^3)` time.
pub const MAX_ORTHOGONAL_KP: usize = 16384;

/// f32 values whose first one starts a 64-byte cache line, so that a
/// 16-value row at a multiple of 16 is one line: the filter tile loads one
/// row of an R panel per step, and a row split across two lines costs a
/// second line access on every load (a large `Vec` from the allocator
/// starts 16 bytes into a page). Safe code: the buffer holds up to 15
/// values more and the view starts where the alignment is, found from the
/// buffer's address each time (a clone re-lays its values out).
pub(crate) struct LineAligned {
    buf: Vec<f32>,
    len: usize,
}

/// Values per cache line.
const LINE_VALUES: usize = 64 / std::mem::size_of::<f32>();

impl LineAligned {
    pub(crate) fn zeroed(len: usize) -> Self {
        LineAligned {
            buf: vec![0.0; len + LINE_VALUES - 1],
            len,
        }
    }

    fn offset(&self) -> usize {
        // An f32 buffer is 4-byte aligned: the values to the next line.
        let into_line = (self.buf.as_ptr() as usize / std::mem::size_of::<f32>()) % LINE_VALUES;
        (LINE_VALUES - into_line) % LINE_VALUES
    }

    pub(crate) fn as_slice(&self) -> &[f32] {
        let o = self.offset();
        &self.buf[o..o + self.len]
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [f32] {
        let o = self.offset();
        &mut self.buf[o..o + self.len]
    }
}

impl Clone for LineAligned {
    fn clone(&self) -> Self {
        let mut c = LineAligned::zeroed(self.len);
        c.as_mut_slice().copy_from_slice(self.as_slice());
        c
    }
}

/// A dense orthogonal rotation for one padded width `Kp`.
#[derive(Clone)]
pub struct OrthogonalRotation {
    kp: usize,
    /// fp16 bits of R, row-major `[k][j]`.
    r_bits: Vec<u16>,
    /// R^T as f32 (exact fp16 values), row-major `[j][k]` = R[k][j].
    pub(crate) rt32: Vec<f32>,
    /// R as f32 packed in column panels of `NR`: panel `p` is `[k][NR]`;
    /// every row of a panel on a cache line of its own ([`LineAligned`]).
    pub(crate) packed: LineAligned,
    /// Upper bound on the Euclidean norm of every column of R.
    pub(crate) max_col_norm: f64,
}

impl std::fmt::Debug for OrthogonalRotation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrthogonalRotation")
            .field("kp", &self.kp)
            .field("max_col_norm", &self.max_col_norm)
            .finish_non_exhaustive()
    }
}

/// The generator state for the orthogonal rotation of width `kp`.
pub fn orthogonal_seed(bundle_seed: u64, kp: usize) -> u64 {
    bundle_seed ^ ORTHOGONAL_SEED_TAG ^ kp as u64
}

/// Column-panel matrix: panel `p` holds columns `p*QP..(p+1)*QP`, row-major inside.
#[cfg(test)]
struct PanelMatrix {
    panels: Vec<Vec<f64>>,
}

#[cfg(test)]
impl PanelMatrix {
    fn from_row_major(n: usize, a: &[f64]) -> Self {
        let np = n / QP;
        let mut panels = vec![vec![0.0; n * QP]; np];
        for (i, row) in a.chunks_exact(n).enumerate() {
            for (p, seg) in row.chunks_exact(QP).enumerate() {
                panels[p][i * QP..(i + 1) * QP].copy_from_slice(seg);
            }
        }
        PanelMatrix { panels }
    }

    fn identity(n: usize) -> Self {
        let np = n / QP;
        let mut panels = vec![vec![0.0; n * QP]; np];
        for i in 0..n {
            panels[i / QP][i * QP + i % QP] = 1.0;
        }
        PanelMatrix { panels }
    }

    fn get(&self, i: usize, c: usize) -> f64 {
        self.panels[c / QP][i * QP + c % QP]
    }

    /// Apply `X <- X - v * (beta * (v^T X))` to rows `j..n` of columns `c0..n`,
    /// each `s_c` summed sequentially over rows `j..n`.
    fn reflect(&mut self, j: usize, c0: usize, v: &[f64], beta: f64) {
        let p0 = c0 / QP;
        self.panels[p0..]
            .par_iter_mut()
            .enumerate()
            .for_each(|(pi, panel)| {
                let p = p0 + pi;
                let q0 = if p == p0 { c0 % QP } else { 0 };
                if q0 == 0 {
                    reflect_full(panel, j, v, beta);
                } else {
                    reflect_partial(panel, j, q0, v, beta);
                }
            });
    }
}

/// `reflect` on a whole panel (all `QP` columns): fixed-width loops.
#[cfg(test)]
#[inline]
fn reflect_full(panel: &mut [f64], j: usize, v: &[f64], beta: f64) {
    let (rows, _) = panel.as_chunks_mut::<QP>();
    let rows = &mut rows[j..];
    let mut s = [0.0f64; QP];
    for (row, &vi) in rows.iter().zip(v) {
        for q in 0..QP {
            s[q] += vi * row[q];
        }
    }
    let mut t = [0.0f64; QP];
    for q in 0..QP {
        t[q] = beta * s[q];
    }
    for (row, &vi) in rows.iter_mut().zip(v) {
        for q in 0..QP {
            row[q] -= vi * t[q];
        }
    }
}

/// `reflect` on columns `q0..QP` of a panel.
#[cfg(test)]
fn reflect_partial(panel: &mut [f64], j: usize, q0: usize, v: &[f64], beta: f64) {
    let n = panel.len() / QP;
    let mut s = [0.0f64; QP];
    for (i, &vi) in (j..n).zip(v) {
        let row = &panel[i * QP..(i + 1) * QP];
        for q in q0..QP {
            s[q] += vi * row[q];
        }
    }
    let mut t = [0.0f64; QP];
    for q in q0..QP {
        t[q] = beta * s[q];
    }
    for (i, &vi) in (j..n).zip(v) {
        let row = &mut panel[i * QP..(i + 1) * QP];
        for q in q0..QP {
            row[q] -= vi * t[q];
        }
    }
}

/// Column-panel width of the left-looking QR.
const LW: usize = 16;

/// One Householder reflector `H = I - beta v v^T` acting on rows `j..Kp`
/// (`beta == 0`: the identity step).
struct Reflector {
    v: Vec<f64>,
    beta: f64,
}

/// The f64 orthogonal factor `Q` (row-major, sign-normalized) of the Gaussian
/// matrix for `(bundle_seed, kp)`. `kp` must be a positive multiple of 128
/// (at most [`MAX_ORTHOGONAL_KP`]).
///
/// Computed "left-looking": each column's sequence of operations depends
/// only on the reflectors, so column panels (kept in cache) receive every
/// earlier reflector in order, then the panel is factored; `Q` is formed
/// panel by panel, all panels independent. Every element undergoes exactly
/// the operations of the module docs in the same order, so the result is
/// bit-identical to the step-by-step description for any thread count.
pub fn orthogonal_q(bundle_seed: u64, kp: usize) -> Result<Vec<f64>, Cq4Error> {
    orthogonal_q_on(crate::simd::EncodeIsa::best(), bundle_seed, kp)
}

/// [`orthogonal_q`] with the reflectors applied on `isa` (the same bits on
/// every tier; the tier only sets how many columns one instruction updates).
pub(crate) fn orthogonal_q_on(
    isa: crate::simd::EncodeIsa,
    bundle_seed: u64,
    kp: usize,
) -> Result<Vec<f64>, Cq4Error> {
    if kp == 0 || !kp.is_multiple_of(128) || kp > MAX_ORTHOGONAL_KP {
        return Err(Cq4Error::BadRotationWidth { kp });
    }
    let len = kp
        .checked_mul(kp)
        .ok_or(Cq4Error::BadRotationWidth { kp })?;
    let np = kp / LW;
    let mut panels: Vec<Vec<[f64; LW]>> = {
        let mut g = vec![0.0f64; len];
        fill_gaussian(
            &mut SplitMix64::new(orthogonal_seed(bundle_seed, kp)),
            &mut g,
        );
        (0..np)
            .map(|p| {
                g.chunks_exact(kp)
                    .map(|row| core::array::from_fn(|q| row[p * LW + q]))
                    .collect()
            })
            .collect()
    };

    let mut refl: Vec<Reflector> = Vec::with_capacity(kp);
    let mut diag: Vec<f64> = Vec::with_capacity(kp);
    // Panels factored per round; any value gives the same bits.
    let group = rayon::current_num_threads().max(1);
    let mut p0 = 0;
    while p0 < np {
        let p1 = (p0 + group).min(np);
        // Every earlier reflector, in order, onto each panel of the round.
        panels[p0..p1].par_iter_mut().for_each(|panel| {
            for (j, r) in refl.iter().enumerate() {
                if r.beta != 0.0 {
                    crate::simd::apply_reflector(isa, panel, j, 0, &r.v, r.beta);
                }
            }
        });
        // Factor the round's columns in order.
        for c in p0 * LW..p1 * LW {
            let (pc, qc) = (c / LW, c % LW);
            let col = &panels[pc];
            let mut ss = 0.0;
            for row in &col[c..] {
                ss += row[qc] * row[qc];
            }
            let alpha = ss.sqrt();
            if alpha == 0.0 {
                refl.push(Reflector {
                    v: Vec::new(),
                    beta: 0.0,
                });
                diag.push(0.0);
                continue;
            }
            let ajj = col[c][qc];
            let r = if ajj >= 0.0 { -alpha } else { alpha };
            let mut v = Vec::with_capacity(kp - c);
            v.push(ajj - r);
            v.extend(col[c + 1..].iter().map(|row| row[qc]));
            let mut vtv = 0.0;
            for &x in &v {
                vtv += x * x;
            }
            let beta = 2.0 / vtv;
            for (p, panel) in panels.iter_mut().enumerate().take(p1).skip(pc) {
                let q0 = if p == pc { qc + 1 } else { 0 };
                if q0 < LW {
                    crate::simd::apply_reflector(isa, panel, c, q0, &v, beta);
                }
            }
            refl.push(Reflector { v, beta });
            diag.push(r);
        }
        p0 = p1;
    }
    drop(panels);

    // Q = H_0 H_1 .. H_{Kp-1} I: column c receives H_c, H_{c-1}, .., H_0.
    let qpanels: Vec<Vec<[f64; LW]>> = (0..np)
        .into_par_iter()
        .map(|p| {
            let c0 = p * LW;
            let mut panel = vec![[0.0f64; LW]; kp];
            for q in 0..LW {
                panel[c0 + q][q] = 1.0;
            }
            for j in (0..c0 + LW).rev() {
                let r = &refl[j];
                if r.beta != 0.0 {
                    crate::simd::apply_reflector(
                        isa,
                        &mut panel,
                        j,
                        j.saturating_sub(c0),
                        &r.v,
                        r.beta,
                    );
                }
            }
            panel
        })
        .collect();

    let mut out = vec![0.0f64; len];
    for (i, row) in out.chunks_exact_mut(kp).enumerate() {
        for (c, x) in row.iter_mut().enumerate() {
            let val = qpanels[c / LW][i][c % LW];
            *x = if diag[c] < 0.0 { -val } else { val };
        }
    }
    Ok(out)
}

/// The right-looking transcription of the module docs (one pass over the
/// trailing matrix per step); the test oracle for [`orthogonal_q`].
#[cfg(test)]
pub(crate) fn orthogonal_q_right_looking(
    bundle_seed: u64,
    kp: usize,
) -> Result<Vec<f64>, Cq4Error> {
    if kp == 0 || !kp.is_multiple_of(128) || kp > MAX_ORTHOGONAL_KP {
        return Err(Cq4Error::BadRotationWidth { kp });
    }
    let len = kp
        .checked_mul(kp)
        .ok_or(Cq4Error::BadRotationWidth { kp })?;
    let mut g = vec![0.0f64; len];
    fill_gaussian(
        &mut SplitMix64::new(orthogonal_seed(bundle_seed, kp)),
        &mut g,
    );
    let mut a = PanelMatrix::from_row_major(kp, &g);
    drop(g);

    let mut vs: Vec<Vec<f64>> = Vec::with_capacity(kp);
    let mut betas = Vec::with_capacity(kp);
    let mut diag = Vec::with_capacity(kp);
    for j in 0..kp {
        let mut ss = 0.0;
        for i in j..kp {
            let x = a.get(i, j);
            ss += x * x;
        }
        let alpha = ss.sqrt();
        if alpha == 0.0 {
            vs.push(Vec::new());
            betas.push(0.0);
            diag.push(0.0);
            continue;
        }
        let ajj = a.get(j, j);
        let r = if ajj >= 0.0 { -alpha } else { alpha };
        let mut v = Vec::with_capacity(kp - j);
        v.push(ajj - r);
        for i in j + 1..kp {
            v.push(a.get(i, j));
        }
        let mut vtv = 0.0;
        for &x in &v {
            vtv += x * x;
        }
        let beta = 2.0 / vtv;
        if j + 1 < kp {
            a.reflect(j, j + 1, &v, beta);
        }
        vs.push(v);
        betas.push(beta);
        diag.push(r);
    }
    drop(a);

    let mut q = PanelMatrix::identity(kp);
    for j in (0..kp).rev() {
        if betas[j] == 0.0 {
            continue;
        }
        q.reflect(j, j, &vs[j], betas[j]);
    }

    let mut out = vec![0.0f64; len];
    for (i, row) in out.chunks_exact_mut(kp).enumerate() {
        for (c, x) in row.iter_mut().enumerate() {
            let val = q.get(i, c);
            *x = if diag[c] < 0.0 { -val } else { val };
        }
    }
    Ok(out)
}

impl OrthogonalRotation {
    /// Build the rotation of width `kp` for `bundle_seed` (see module docs).
    pub fn new(bundle_seed: u64, kp: usize) -> Result<Self, Cq4Error> {
        let q = orthogonal_q(bundle_seed, kp)?;
        let r_bits: Vec<u16> = q.iter().map(|&x| f64_to_f16_bits(x)).collect();
        Self::from_bits(kp, r_bits)
    }

    /// Wrap stored fp16 bits of R (row-major `[k][j]`, `kp x kp`).
    pub(crate) fn from_bits(kp: usize, r_bits: Vec<u16>) -> Result<Self, Cq4Error> {
        if kp == 0 || !kp.is_multiple_of(128) || kp.checked_mul(kp) != Some(r_bits.len()) {
            return Err(Cq4Error::BadRotationWidth { kp });
        }
        let mut rt32 = vec![0.0f32; r_bits.len()];
        for (k, row) in r_bits.chunks_exact(kp).enumerate() {
            for (j, &b) in row.iter().enumerate() {
                rt32[j * kp + k] = f16_bits_to_f32(b);
            }
        }
        if rt32.iter().any(|x| !x.is_finite()) {
            return Err(Cq4Error::BadRotation("R has a non-finite entry"));
        }
        let mut packed = LineAligned::zeroed(r_bits.len());
        for (p, panel) in packed.as_mut_slice().chunks_exact_mut(kp * NR).enumerate() {
            for (k, dst) in panel.chunks_exact_mut(NR).enumerate() {
                for (q, d) in dst.iter_mut().enumerate() {
                    *d = f16_bits_to_f32(r_bits[k * kp + p * NR + q]);
                }
            }
        }
        let mut max_sq = 0.0f64;
        for col in rt32.chunks_exact(kp) {
            let mut s = 0.0f64;
            for &x in col {
                s += x as f64 * x as f64;
            }
            max_sq = max_sq.max(s);
        }
        // Rounding slack of the f64 sum is far below 1e-6 relative.
        let max_col_norm = max_sq.sqrt() * (1.0 + 1e-6);
        // Exactness of the rotated coordinates needs every column norm < 2
        // (with margin); an orthogonal matrix rounded to fp16 has ~1.0.
        if max_col_norm.is_nan() || max_col_norm >= 1.9 || rt32.iter().any(|x| x.abs() > 1.0) {
            return Err(Cq4Error::BadRotation("R is not close to orthogonal"));
        }
        Ok(OrthogonalRotation {
            kp,
            r_bits,
            rt32,
            packed,
            max_col_norm,
        })
    }

    /// The padded width `Kp`.
    pub fn kp(&self) -> usize {
        self.kp
    }

    /// fp16 bits of R, row-major `[k][j]` (`rotated = u @ R`).
    pub fn r_bits(&self) -> &[u16] {
        &self.r_bits
    }

    /// fp16 bits of R^T, row-major (the exact transpose of [`Self::r_bits`]).
    pub fn rt_bits(&self) -> Vec<u16> {
        let kp = self.kp;
        let mut t = vec![0u16; self.r_bits.len()];
        for (k, row) in self.r_bits.chunks_exact(kp).enumerate() {
            for (j, &b) in row.iter().enumerate() {
                t[j * kp + k] = b;
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::DEFAULT_SEED;

    /// The view starts a cache line and has the requested length, for
    /// buffers that the allocator placed at every offset into a line; a
    /// clone (a new buffer, its own offset) holds the same values; and the
    /// packed R panels of a rotation are such a view.
    #[test]
    fn line_aligned_views_start_a_cache_line() {
        let mut offsets = std::collections::HashSet::new();
        // Keep the buffers alive so the allocator hands out new addresses.
        let mut keep = Vec::new();
        for len in (0..200).chain([4096, 1 << 20]) {
            let mut v = LineAligned::zeroed(len);
            offsets.insert(v.offset());
            for (i, x) in v.as_mut_slice().iter_mut().enumerate() {
                *x = i as f32;
            }
            assert_eq!(v.as_slice().len(), len);
            assert_eq!(v.as_slice().as_ptr() as usize % 64, 0, "len {len}");
            let c = v.clone();
            assert_eq!(c.as_slice().as_ptr() as usize % 64, 0);
            assert_eq!(c.as_slice(), v.as_slice());
            keep.push(v);
            keep.push(c);
        }
        // (Small buffers come at several offsets into a line.)
        assert!(offsets.len() > 1, "offsets seen: {offsets:?}");
        let r = OrthogonalRotation::new(DEFAULT_SEED, 128).unwrap();
        assert_eq!(r.packed.as_slice().as_ptr() as usize % 64, 0);
        assert_eq!(r.packed.as_slice().len(), 128 * 128);
    }

    fn gram_error(q: &[f64], n: usize) -> f64 {
        let mut worst = 0.0f64;
        for a in 0..n {
            for b in a..n {
                let mut d = 0.0;
                for k in 0..n {
                    d += q[k * n + a] * q[k * n + b];
                }
                let want = if a == b { 1.0 } else { 0.0 };
                worst = worst.max((d - want).abs());
            }
        }
        worst
    }

    #[test]
    fn q_is_orthogonal_and_reconstructs_g() {
        let n = 128;
        let q = orthogonal_q(DEFAULT_SEED, n).unwrap();
        assert!(gram_error(&q, n) < 1e-13);
        // Sign convention: R = Q^T G has a non-negative diagonal and is upper
        // triangular.
        let mut g = vec![0.0; n * n];
        fill_gaussian(
            &mut SplitMix64::new(orthogonal_seed(DEFAULT_SEED, n)),
            &mut g,
        );
        for i in 0..n {
            for c in 0..n {
                let mut r = 0.0;
                for k in 0..n {
                    r += q[k * n + i] * g[k * n + c];
                }
                if i == c {
                    assert!(r > 0.0, "diag {i} = {r}");
                } else if i > c {
                    assert!(r.abs() < 1e-12, "below diag ({i},{c}) = {r}");
                }
            }
        }
    }

    #[test]
    fn left_looking_equals_the_step_by_step_description() {
        for kp in [128usize, 256, 384] {
            let b = orthogonal_q_right_looking(DEFAULT_SEED ^ 5, kp).unwrap();
            // Every tier this CPU runs (the reflectors compiled for it;
            // the default one is among them).
            for isa in crate::simd::EncodeIsa::available() {
                let a = orthogonal_q_on(isa, DEFAULT_SEED ^ 5, kp).unwrap();
                assert!(
                    a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "kp {kp}, {}",
                    isa.name()
                );
            }
        }
    }

    #[test]
    fn thread_count_does_not_change_q() {
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let four = rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .unwrap();
        let a = one.install(|| orthogonal_q(DEFAULT_SEED, 384).unwrap());
        let b = four.install(|| orthogonal_q(DEFAULT_SEED, 384).unwrap());
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
    }

    #[test]
    fn stored_rotation_is_nearly_orthogonal() {
        let rot = OrthogonalRotation::new(DEFAULT_SEED, 256).unwrap();
        let n = 256;
        let r: Vec<f64> = rot
            .r_bits()
            .iter()
            .map(|&b| weights_file::fp16::f16_bits_to_f64(b))
            .collect();
        // fp16 rounding: errors ~ 2^-11 relative per entry.
        assert!(gram_error(&r, n) < 2e-3);
        assert!(rot.max_col_norm < 1.001 && rot.max_col_norm > 0.999);
        let rt = rot.rt_bits();
        for k in 0..n {
            for j in 0..n {
                assert_eq!(rt[j * n + k], rot.r_bits()[k * n + j]);
            }
        }
        assert!(OrthogonalRotation::new(DEFAULT_SEED, 100).is_err());
        assert!(OrthogonalRotation::new(DEFAULT_SEED, 0).is_err());
        assert!(OrthogonalRotation::new(DEFAULT_SEED, MAX_ORTHOGONAL_KP + 128).is_err());
        assert!(format!("{rot:?}").len() < 200);
    }
}
