//! The 4-bit Lloyd–Max codebook for one coordinate of a uniformly random unit
//! vector in dimension `d`: density proportional to `(1 - x^2)^((d-3)/2)` on
//! `[-1, 1]`. Every step below is an IEEE-754 basic operation in f64 in the
//! stated order, so the result is bit-reproducible.
//!
//! 1. Grid: `x_i = (i - 100000) / 100000` for `i = 0..=200000` (integer
//!    subtraction, then one f64 division). `x_{200000-i} = -x_i` exactly.
//! 2. Weights: `p = 1 - x*x`. For even `d`: `w = ipow(p, (d-4)/2) * sqrt(p)`;
//!    for odd `d`: `w = ipow(p, (d-3)/2)`. `ipow(b, e)` is square-and-multiply
//!    from the least significant bit: `r = 1; while e > 0 { if e odd { r = r*b };
//!    b = b*b; e = e >> 1 }` (the last squaring is computed but unused).
//!    No `pow` call: the weights use only `*` and `sqrt`.
//! 3. Initial centroids: running sums `C_i = C_{i-1} + w_i` (C_{-1} = 0,
//!    ascending i); `T = C_200000`; for q = 1..=16 the target is
//!    `t_q = (T * q) / 17` and the initial centroid `c_{q-1} = x_j` for the
//!    smallest `j` with `C_j >= t_q`.
//! 4. Lloyd iterations, at most 200: midpoints `b_i = (c_i + c_{i+1}) / 2`
//!    (i = 0..15); grid point `x_j` belongs to cell `#{i : b_i < x_j}` (a point
//!    exactly on a midpoint goes to the lower cell); for each cell,
//!    `W = sum w_j`, `M = sum (w_j * x_j)` over its points in ascending `j`
//!    (sequential, product rounded then added); new `c = M / W` (a cell with
//!    `W == 0` keeps its centroid). `delta = max |c_new - c_old|`; the new
//!    centroids replace the old; stop after this iteration if `delta < 1e-8`.
//! 5. Odd symmetrization (the density is even, so the optimal quantizer is
//!    odd; the quantile start on the discrete grid is not exactly symmetric and
//!    Lloyd converges slowly, leaving ~1e-5 asymmetry in the innermost levels):
//!    for q = 8..16: `s = (c_q - c_{15-q}) / 2; c_q = s; c_{15-q} = -s`.
//! 6. The canonical codebook is `fp16_rne(c_q)` for q = 0..16 (ascending,
//!    index 0 most negative); everything downstream uses these fp16 values.

use crate::error::Cq4Error;
use weights_file::fp16::{f16_bits_to_f64, f64_to_f16_bits};

/// Grid half-width: the grid has `2 * GRID_HALF + 1` points.
pub const GRID_HALF: usize = 100_000;
/// Maximum Lloyd iterations.
pub const MAX_ITERATIONS: usize = 200;
/// Convergence threshold on the largest centroid move.
pub const TOLERANCE: f64 = 1e-8;
/// Codebook entries (4 bits).
pub const LEVELS: usize = 16;

/// A computed codebook for one dimension `d`.
#[derive(Debug, Clone, PartialEq)]
pub struct Codebook {
    /// The dimension it was computed for.
    pub d: usize,
    /// The f64 Lloyd–Max result (after symmetrization, before fp16 rounding).
    pub raw: [f64; LEVELS],
    /// The canonical codebook: fp16 bits, ascending.
    pub bits: [u16; LEVELS],
    /// The canonical codebook as exact f64 values.
    pub values: [f64; LEVELS],
    /// Decision thresholds `(values[i] + values[i+1]) / 2` (exact in f64).
    /// A rotated coordinate `x` gets index `#{i : midpoints[i] < x}`.
    pub midpoints: [f64; LEVELS - 1],
    /// Lloyd iterations performed.
    pub iterations: usize,
}

/// `b^e` by square-and-multiply from the least significant bit (see module docs).
fn ipow(mut b: f64, mut e: usize) -> f64 {
    let mut r = 1.0;
    while e > 0 {
        if e & 1 == 1 {
            r *= b;
        }
        b *= b;
        e >>= 1;
    }
    r
}

/// The grid and its (unnormalized) density weights.
fn grid(d: usize) -> (Vec<f64>, Vec<f64>) {
    let n = 2 * GRID_HALF + 1;
    let mut xs = Vec::with_capacity(n);
    let mut ws = Vec::with_capacity(n);
    for i in 0..n {
        let x = (i as f64 - GRID_HALF as f64) / GRID_HALF as f64;
        let p = 1.0 - x * x;
        let w = if d.is_multiple_of(2) {
            ipow(p, (d - 4) / 2) * p.sqrt()
        } else {
            ipow(p, (d - 3) / 2)
        };
        xs.push(x);
        ws.push(w);
    }
    (xs, ws)
}

fn midpoints_of(c: &[f64; LEVELS]) -> [f64; LEVELS - 1] {
    let mut m = [0.0; LEVELS - 1];
    for i in 0..LEVELS - 1 {
        m[i] = (c[i] + c[i + 1]) / 2.0;
    }
    m
}

/// The sums of one Lloyd iteration (step 4): for every cell `q`,
/// `W_q = sum w_j` and `M_q = sum (w_j * x_j)` over its grid points in
/// ascending `j`, each product rounded, then added. The grid is ascending
/// and the midpoints `b` non-decreasing, so each cell is one run of the
/// grid, `x_j` with `b_{q-1} < x_j <= b_q`. The cells' sums are independent
/// sequences: cells `q` and `15 - q` (about as long, the density being
/// even) run side by side in registers, each still sequential in `j`, so
/// the values are those of one sweep over the grid.
fn cell_sums(xs: &[f64], ws: &[f64], b: &[f64; LEVELS - 1]) -> ([f64; LEVELS], [f64; LEVELS]) {
    let mut start = [0usize; LEVELS + 1];
    for q in 1..LEVELS {
        // Exactly the sweep's test `b_{q-1} < x` (negated), NaN included.
        #[allow(clippy::neg_cmp_op_on_partial_ord)]
        let p = xs.partition_point(|&x| !(b[q - 1] < x));
        start[q] = p;
    }
    start[LEVELS] = xs.len();
    let cell = |q: usize| (&xs[start[q]..start[q + 1]], &ws[start[q]..start[q + 1]]);
    let mut wsum = [0.0f64; LEVELS];
    let mut msum = [0.0f64; LEVELS];
    for q in 0..LEVELS / 2 {
        let p = LEVELS - 1 - q;
        let ((xa, wa), (xb, wb)) = (cell(q), cell(p));
        let both = xa.len().min(xb.len());
        let (mut w0, mut m0, mut w1, mut m1) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        for j in 0..both {
            w0 += wa[j];
            m0 += wa[j] * xa[j];
            w1 += wb[j];
            m1 += wb[j] * xb[j];
        }
        for j in both..xa.len() {
            w0 += wa[j];
            m0 += wa[j] * xa[j];
        }
        for j in both..xb.len() {
            w1 += wb[j];
            m1 += wb[j] * xb[j];
        }
        (wsum[q], msum[q], wsum[p], msum[p]) = (w0, m0, w1, m1);
    }
    (wsum, msum)
}

/// Compute the Lloyd–Max codebook for dimension `d` (`d >= 4`).
pub fn lloyd_max(d: usize) -> Result<Codebook, Cq4Error> {
    if d < 4 {
        return Err(Cq4Error::CodebookDimension { d });
    }
    let (xs, ws) = grid(d);

    // Initial centroids at the quantiles q/17 of the discrete CDF.
    let mut c = [0.0f64; LEVELS];
    {
        let mut total = 0.0;
        for &w in &ws {
            total += w;
        }
        let mut acc = 0.0;
        let mut q = 1usize;
        for (j, &w) in ws.iter().enumerate() {
            acc += w;
            while q <= LEVELS && acc >= (total * q as f64) / 17.0 {
                c[q - 1] = xs[j];
                q += 1;
            }
            if q > LEVELS {
                break;
            }
        }
        if q <= LEVELS {
            return Err(Cq4Error::CodebookNotConverged { d });
        }
    }

    let mut iterations = 0;
    for _ in 0..MAX_ITERATIONS {
        iterations += 1;
        let b = midpoints_of(&c);
        // Midpoints must be non-decreasing for the single sweep below to
        // equal the counting rule #{i : b_i < x}.
        if b.windows(2).any(|p| p[0] > p[1]) {
            return Err(Cq4Error::CodebookNotConverged { d });
        }
        let (wsum, msum) = cell_sums(&xs, &ws, &b);
        let mut delta = 0.0f64;
        for q in 0..LEVELS {
            if wsum[q] > 0.0 {
                let nc = msum[q] / wsum[q];
                delta = delta.max((nc - c[q]).abs());
                c[q] = nc;
            }
        }
        if delta < TOLERANCE {
            break;
        }
    }

    for q in LEVELS / 2..LEVELS {
        let s = (c[q] - c[LEVELS - 1 - q]) / 2.0;
        c[q] = s;
        c[LEVELS - 1 - q] = -s;
    }

    let mut bits = [0u16; LEVELS];
    let mut values = [0.0f64; LEVELS];
    for q in 0..LEVELS {
        bits[q] = f64_to_f16_bits(c[q]);
        values[q] = f16_bits_to_f64(bits[q]);
    }
    if values.windows(2).any(|p| p[0] >= p[1]) || values.iter().any(|v| !v.is_finite()) {
        return Err(Cq4Error::CodebookNotConverged { d });
    }
    Ok(Codebook {
        d,
        raw: c,
        bits,
        values,
        midpoints: midpoints_of(&values),
        iterations,
    })
}

/// Index of `x` for the thresholds `m` (ascending): `#{i : m[i] < x}`.
#[inline(always)]
pub fn index_of(m: &[f64; LEVELS - 1], x: f64) -> u8 {
    let mut idx = 0u8;
    for &t in m {
        idx += (t < x) as u8;
    }
    idx
}

/// The thresholds padded with `-inf` in front and `+inf` at the end, for
/// [`index_bsearch`].
pub fn padded_thresholds(m: &[f64; LEVELS - 1]) -> [f64; LEVELS + 1] {
    let mut p = [f64::NEG_INFINITY; LEVELS + 1];
    p[1..LEVELS].copy_from_slice(m);
    p[LEVELS] = f64::INFINITY;
    p
}

/// `#{i : m_i < x}` by a branch-free 4-step binary search over
/// `padded = [-inf, m_0, .., m_14, +inf]` (same result as [`index_of`] for
/// ascending thresholds). `padded[idx]` and `padded[idx + 1]` are then the
/// thresholds just below and just above `x`.
#[inline(always)]
pub fn index_bsearch(padded: &[f64; LEVELS + 1], x: f64) -> usize {
    let mut idx = 0usize;
    for step in [8usize, 4, 2, 1] {
        idx += step * (padded[idx + step] < x) as usize;
    }
    idx
}

pub use weights_file::panel::{cb_scale_of, codebook_i8};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn d128_matches_engine_values() {
        let cb = lloyd_max(128).unwrap();
        let engine = [
            0.01128, 0.03410, 0.05769, 0.08273, 0.11017, 0.14169, 0.18073, 0.23757,
        ];
        for (i, &e) in engine.iter().enumerate() {
            let pos = cb.values[8 + i];
            let neg = cb.values[7 - i];
            // Within half an fp16 ulp (2^-11 relative, rounded up) plus the
            // engine's 5-digit print precision.
            let tol = e * 2f64.powi(-11) + 1e-5;
            assert!((pos - e).abs() < tol, "c[{}] = {pos} vs {e}", 8 + i);
            assert!((neg + e).abs() < tol, "c[{}] = {neg} vs -{e}", 7 - i);
            // fp16 rounding is the only difference from the f64 result.
            assert!(
                (cb.raw[8 + i] - e).abs() < 1e-5,
                "raw {} vs {e}",
                cb.raw[8 + i]
            );
        }
        // Exactly odd-symmetric.
        for i in 0..8 {
            assert_eq!(cb.bits[i], cb.bits[15 - i] ^ 0x8000);
        }
        assert!(cb.iterations < MAX_ITERATIONS);
        eprintln!(
            "d=128 raw {:?}\nfp16 {:?}\niterations {}",
            cb.raw, cb.values, cb.iterations
        );
    }

    #[test]
    fn hadamard_int8_codebook() {
        let cb = lloyd_max(128).unwrap();
        let max = cb.values.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let cb_factor = max / 127.0;
        let mut stored = [0f32; LEVELS];
        for (s, &v) in stored.iter_mut().zip(&cb.values) {
            *s = weights_file::fp16::f16_bits_to_f32(f64_to_f16_bits(v / cb_factor));
        }
        let scale = cb_scale_of(&stored);
        assert_eq!(scale, 1.0);
        assert_eq!(
            codebook_i8(&stored, scale),
            [-127, -97, -76, -59, -44, -31, -18, -6, 6, 18, 31, 44, 59, 76, 97, 127]
        );
    }

    #[test]
    fn index_rule() {
        let cb = lloyd_max(128).unwrap();
        let m = &cb.midpoints;
        assert_eq!(index_of(m, -1.0), 0);
        assert_eq!(index_of(m, 1.0), 15);
        for i in 0..LEVELS - 1 {
            // Ties go to the lower index.
            assert_eq!(index_of(m, m[i]) as usize, i);
            assert_eq!(index_of(m, m[i].next_up()) as usize, i + 1);
        }
        for (q, &v) in cb.values.iter().enumerate() {
            assert_eq!(index_of(m, v) as usize, q);
        }
        let p = padded_thresholds(m);
        let mut probes = vec![-1.0, 1.0, 0.0, -0.0, f64::MIN_POSITIVE];
        for &t in m {
            probes.extend([t, t.next_up(), t.next_down()]);
        }
        for i in 0..4001 {
            probes.push((i as f64 - 2000.0) * 1.5e-4);
        }
        for &x in &probes {
            assert_eq!(index_bsearch(&p, x), index_of(m, x) as usize, "{x}");
        }
    }

    #[test]
    fn larger_dimensions_scale_like_sqrt_d() {
        for d in [256usize, 640, 1024, 2048] {
            let cb = lloyd_max(d).unwrap();
            // The 4-bit Gaussian Lloyd–Max outer level is ~2.733 sigma,
            // sigma = 1/sqrt(d); the sphere marginal is slightly narrower.
            let outer = cb.values[15] * (d as f64).sqrt();
            assert!((2.6..2.75).contains(&outer), "d={d} outer={outer}");
            assert!(cb.values.windows(2).all(|p| p[0] < p[1]));
        }
        assert!(matches!(
            lloyd_max(3),
            Err(Cq4Error::CodebookDimension { d: 3 })
        ));
    }

    /// [`cell_sums`] gives the values of the contract's single sweep over
    /// the grid (a point goes to cell `#{i : b_i < x}`), bit for bit, for
    /// the midpoints of real iterations, ties on grid points, empty cells
    /// and cells running to the grid's ends.
    #[test]
    fn cell_sums_equal_one_sweep() {
        fn sweep(xs: &[f64], ws: &[f64], b: &[f64; LEVELS - 1]) -> ([f64; LEVELS], [f64; LEVELS]) {
            let mut wsum = [0.0f64; LEVELS];
            let mut msum = [0.0f64; LEVELS];
            let mut cell = 0usize;
            for (&x, &w) in xs.iter().zip(ws) {
                while cell < LEVELS - 1 && b[cell] < x {
                    cell += 1;
                }
                wsum[cell] += w;
                msum[cell] += w * x;
            }
            (wsum, msum)
        }
        let bits = |v: &[f64; LEVELS]| v.map(f64::to_bits);
        for d in [4usize, 5, 128, 640] {
            let (xs, ws) = grid(d);
            let cb = lloyd_max(d).unwrap();
            let mut cases = vec![cb.midpoints, midpoints_of(&cb.raw)];
            // Midpoints on grid points (ties go to the lower cell), equal
            // midpoints (empty cells) and midpoints beyond the grid.
            let mut on = [0.0f64; LEVELS - 1];
            for (i, m) in on.iter_mut().enumerate() {
                *m = xs[1000 + 12000 * i];
            }
            cases.push(on);
            let mut dup = cb.midpoints;
            dup[3] = dup[4];
            dup[5] = dup[4];
            cases.push(dup);
            let mut wide = cb.midpoints;
            wide[0] = -2.0;
            wide[LEVELS - 2] = 2.0;
            cases.push(wide);
            for b in cases {
                let (w1, m1) = cell_sums(&xs, &ws, &b);
                let (w2, m2) = sweep(&xs, &ws, &b);
                assert_eq!(bits(&w1), bits(&w2), "d {d}");
                assert_eq!(bits(&m1), bits(&m2), "d {d}");
            }
        }
    }
}
