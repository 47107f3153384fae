//! GPTQ for the Hadamard family (FORMAT.md §CQ4.18): the error of each
//! 128-column group, after it is quantized with the stored fp16 norm and
//! the kernels' int8 codebook, is compensated in the row's later columns
//! with the gain `H'_BF H'_FF^-1` of the input Hessian `H'` (the engine's
//! `hessians.safetensors` entry, in the scaled coordinates of §16, padded
//! and damped), computed from the lower Cholesky factor of the
//! index-reversed `H'` ("the Cholesky factor of the inverse" without an
//! inverse).
//!
//! Every value is an IEEE-754 f64 basic operation in the order §CQ4.18
//! states, so the gains and the bytes do not depend on the thread count or
//! the CPU; the rows stay independent of each other (super-blocks still
//! stream and run in parallel).

use rayon::prelude::*;

use crate::error::Cq4Error;
use crate::hadamard::HADAMARD_N;

/// Relative damping: `0.01 * mean(diag H') + ABS_DAMP` is added to the
/// diagonal (the engine converter's constants).
pub const REL_DAMP: f64 = 0.01;
/// Absolute damping term.
pub const ABS_DAMP: f64 = 1e-6;

/// The per-tensor GPTQ gains: for each group `g < ng - 1`, a
/// `128 x (Kp - 128 (g + 1))` row-major matrix `G_g`; after group `g` of a
/// row is quantized with error `e` (`v - reconstruction`, 128 values), the
/// row's later columns become `v[128(g+1) + c] + sum_i e_i * G_g[i][c]`
/// (added one `i` at a time, `i` ascending).
#[derive(Debug, Clone)]
pub struct Gptq {
    kp: usize,
    gains: Vec<Vec<f64>>,
}

impl Gptq {
    /// The gains for a tensor of `k` columns from its Hessian `h` (`k x k`
    /// f32, little-endian bytes, row-major: any alignment) and the tensor's
    /// input-scale exponents (`k` values of §16, or `None` for scale 1).
    /// Errors: a wrong length, a non-finite entry, or a damped matrix that
    /// is not positive definite (bad input).
    pub fn new(h: &[u8], k: usize, exps: Option<&[i8]>) -> Result<Self, Cq4Error> {
        let kp = k
            .checked_add(HADAMARD_N - 1)
            .ok_or(Cq4Error::TooLarge { n: k, k })?
            / HADAMARD_N
            * HADAMARD_N;
        let want = k
            .checked_mul(k)
            .and_then(|x| x.checked_mul(4))
            .ok_or(Cq4Error::TooLarge { n: k, k })?;
        if h.len() != want {
            return Err(Cq4Error::BufferLength {
                what: "Hessian (K x K f32)",
                expected: want,
                got: h.len(),
            });
        }
        if let Some(e) = exps {
            if e.len() != k {
                return Err(Cq4Error::BufferLength {
                    what: "input exponents",
                    expected: k,
                    got: e.len(),
                });
            }
        }
        let l = factor(h, k, kp, exps)?;
        let ng = kp / HADAMARD_N;
        let gains = (0..ng.saturating_sub(1))
            .into_par_iter()
            .map(|g| gain(&l, kp, g))
            .collect();
        Ok(Gptq { kp, gains })
    }

    /// Padded columns `Kp`.
    pub fn kp(&self) -> usize {
        self.kp
    }

    /// `G_g` (`128 x (Kp - 128 (g + 1))`, row-major); empty for the last group.
    pub fn gain_of(&self, g: usize) -> &[f64] {
        self.gains.get(g).map_or(&[], |v| &v[..])
    }

    /// Compensate group `g`'s error `err` in `rest`, the row's columns
    /// `128 (g + 1)..Kp` (§CQ4.18 step 6).
    pub fn update(&self, g: usize, err: &[f64; HADAMARD_N], rest: &mut [f64]) {
        let Some(gain) = self.gains.get(g) else {
            return;
        };
        let f = rest.len();
        debug_assert_eq!(gain.len(), HADAMARD_N * f);
        for (&e, gr) in err.iter().zip(gain.chunks_exact(f)) {
            for (r, &x) in rest.iter_mut().zip(gr) {
                *r += e * x;
            }
        }
    }
}

/// Steps 1-4: `H'` (symmetrized, scaled, padded, damped), index-reversed
/// into `P`, and `P`'s lower Cholesky factor `L` (row-major `kp x kp`, the
/// upper triangle unused).
fn factor(h: &[u8], k: usize, kp: usize, exps: Option<&[i8]>) -> Result<Vec<f64>, Cq4Error> {
    let at = |i: usize, j: usize| -> f64 {
        let o = 4 * (i * k + j);
        f32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]) as f64
    };
    for i in 0..k {
        for j in 0..k {
            if !at(i, j).is_finite() {
                return Err(Cq4Error::BadHessian(format!(
                    "entry ({i}, {j}) is not finite"
                )));
            }
        }
    }
    let e = |i: usize| exps.map_or(0, |e| e[i] as i32);
    // A[i][j] in original indices (i >= j suffices: A is symmetric).
    let a = |i: usize, j: usize| -> f64 {
        if i < k && j < k {
            ((at(i, j) + at(j, i)) * 0.5) * pow2(-(e(i) + e(j)))
        } else if i == j {
            1.0
        } else {
            0.0
        }
    };
    let mut sum = 0.0f64;
    for d in 0..kp {
        sum += a(d, d);
    }
    let damp = REL_DAMP * (sum / kp as f64) + ABS_DAMP;
    // P[i][j] = A[kp-1-i][kp-1-j] (+ damp on the diagonal), lower triangle.
    let mut l = vec![0.0f64; kp * kp];
    for i in 0..kp {
        for j in 0..=i {
            let v = a(kp - 1 - i, kp - 1 - j);
            l[i * kp + j] = if i == j { v + damp } else { v };
        }
    }
    cholesky(&mut l, kp)?;
    Ok(l)
}

/// Step 4 in place on the lower triangle of `l` (`kp x kp`, row-major):
/// Cholesky-Banachiewicz, row by row; every entry's products are
/// subtracted in ascending `t`, as the right-looking (outer product) form
/// does. Off-diagonal entries are computed [`CHAINS`] at a time (their sums
/// over the columns before the block are independent chains, then each
/// finishes its own sum in order), which gives the same operations on each
/// entry in the same order as [`cholesky_reference`] (tested bit for bit).
fn cholesky(l: &mut [f64], kp: usize) -> Result<(), Cq4Error> {
    for i in 0..kp {
        let (done, row) = l.split_at_mut(i * kp);
        let row = &mut row[..kp];
        let mut j0 = 0;
        while j0 + CHAINS <= i {
            let mut acc = [0.0f64; CHAINS];
            acc.copy_from_slice(&row[j0..j0 + CHAINS]);
            let rows: [&[f64]; CHAINS] =
                std::array::from_fn(|c| &done[(j0 + c) * kp..(j0 + c) * kp + j0 + c + 1]);
            for (t, &a) in row[..j0].iter().enumerate() {
                for c in 0..CHAINS {
                    acc[c] -= a * rows[c][t];
                }
            }
            for c in 0..CHAINS {
                for t in j0..j0 + c {
                    acc[c] -= row[t] * rows[c][t];
                }
                row[j0 + c] = acc[c] / rows[c][j0 + c];
                check_entry(row[j0 + c], i, j0 + c, kp)?;
            }
            j0 += CHAINS;
        }
        for j in j0..=i {
            entry(done, row, i, j, kp)?;
        }
    }
    Ok(())
}

/// Independent sums per row in [`cholesky`].
const CHAINS: usize = 8;

/// One entry `(i, j)`, `j <= i`, of step 4 (`done`: rows `0..i` of `L`).
fn entry(done: &[f64], row: &mut [f64], i: usize, j: usize, kp: usize) -> Result<(), Cq4Error> {
    let mut acc = row[j];
    if j < i {
        let lj = &done[j * kp..j * kp + kp];
        for (a, b) in row[..j].iter().zip(&lj[..j]) {
            acc -= a * b;
        }
        row[j] = acc / lj[j];
    } else {
        for a in &row[..j] {
            acc -= a * a;
        }
        if !(acc > 0.0 && acc.is_finite()) {
            return Err(Cq4Error::BadHessian(format!(
                "not positive definite after damping (pivot {acc:e} at column {})",
                kp - 1 - i
            )));
        }
        row[j] = acc.sqrt();
    }
    check_entry(row[j], i, j, kp)
}

fn check_entry(v: f64, i: usize, j: usize, kp: usize) -> Result<(), Cq4Error> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(Cq4Error::BadHessian(format!(
            "Cholesky factor not finite at ({}, {})",
            kp - 1 - i,
            kp - 1 - j
        )))
    }
}

/// Step 4 one entry at a time (the transcription [`cholesky`] is tested
/// against).
#[cfg(test)]
fn cholesky_reference(l: &mut [f64], kp: usize) -> Result<(), Cq4Error> {
    for i in 0..kp {
        let (done, row) = l.split_at_mut(i * kp);
        for j in 0..=i {
            entry(done, &mut row[..kp], i, j, kp)?;
        }
    }
    Ok(())
}

/// Step 5: `G_g[i][c] = X[127 - i][f - 1 - c]` where `X L_ff = L[f..f+128][0..f]`
/// (`f = kp - 128 (g + 1)`), by back substitution, columns descending.
fn gain(l: &[f64], kp: usize, g: usize) -> Vec<f64> {
    let f = kp - HADAMARD_N * (g + 1);
    let mut out = vec![0.0f64; HADAMARD_N * f];
    out.par_chunks_mut(f).enumerate().for_each(|(i, o)| {
        let r = HADAMARD_N - 1 - i;
        let mut y: Vec<f64> = l[(f + r) * kp..(f + r) * kp + f].to_vec();
        for c in (0..f).rev() {
            let x = y[c] / l[c * kp + c];
            y[c] = x;
            let lc = &l[c * kp..c * kp + c];
            for (yc, &lv) in y[..c].iter_mut().zip(lc) {
                *yc -= x * lv;
            }
        }
        for (cc, v) in o.iter_mut().enumerate() {
            *v = y[f - 1 - cc];
        }
    });
    out
}

/// `2^e` as an f64 (exact for the exponents of §16).
fn pow2(e: i32) -> f64 {
    f64::from_bits(((1023 + e) as u64) << 52)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{fill_gaussian, SplitMix64};

    fn le(h: &[f32]) -> Vec<u8> {
        h.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// A random positive semi-definite `k x k` Hessian `X^T X / m` with
    /// uneven column scales (f32).
    fn hessian(k: usize, m: usize, seed: u64) -> Vec<f32> {
        let mut rng = SplitMix64::new(seed);
        let mut x = vec![0.0f64; m * k];
        fill_gaussian(&mut rng, &mut x);
        for (i, v) in x.iter_mut().enumerate() {
            *v *= 1.0 + (i % k) as f64 / 7.0;
        }
        let mut h = vec![0f32; k * k];
        for i in 0..k {
            for j in 0..k {
                let mut s = 0.0;
                for r in 0..m {
                    s += x[r * k + i] * x[r * k + j];
                }
                h[i * k + j] = (s / m as f64) as f32;
            }
        }
        h
    }

    /// The damped, scaled `H'` in original indices, as f64.
    fn dense(h: &[f32], k: usize, kp: usize) -> Vec<f64> {
        let mut a = vec![0.0; kp * kp];
        for i in 0..kp {
            for j in 0..kp {
                a[i * kp + j] = if i < k && j < k {
                    (h[i * k + j] as f64 + h[j * k + i] as f64) * 0.5
                } else if i == j {
                    1.0
                } else {
                    0.0
                };
            }
        }
        let mean = (0..kp).map(|d| a[d * kp + d]).sum::<f64>() / kp as f64;
        for d in 0..kp {
            a[d * kp + d] += REL_DAMP * mean + ABS_DAMP;
        }
        a
    }

    /// Solve `M x = b` by Gaussian elimination with partial pivoting.
    fn solve(mut m: Vec<f64>, n: usize, mut b: Vec<f64>) -> Vec<f64> {
        for c in 0..n {
            let p = (c..n)
                .max_by(|&x, &y| m[x * n + c].abs().total_cmp(&m[y * n + c].abs()))
                .unwrap();
            for t in 0..n {
                m.swap(c * n + t, p * n + t);
            }
            b.swap(c, p);
            for r in c + 1..n {
                let f = m[r * n + c] / m[c * n + c];
                for t in c..n {
                    m[r * n + t] -= f * m[c * n + t];
                }
                b[r] -= f * b[c];
            }
        }
        let mut x = vec![0.0; n];
        for c in (0..n).rev() {
            let mut s = b[c];
            for t in c + 1..n {
                s -= m[c * n + t] * x[t];
            }
            x[c] = s / m[c * n + c];
        }
        x
    }

    /// Each group's gain equals the explicit Schur-complement update
    /// `H'_BF H'_FF^-1` recomputed from scratch for the remaining columns
    /// (the independent check of calibration facts §6.5).
    #[test]
    fn gains_equal_the_explicit_schur_complement_update() {
        for (k, seed) in [(300usize, 1u64), (256, 2), (130, 3)] {
            let h = hessian(k, 2 * k, seed);
            let gq = Gptq::new(&le(&h), k, None).unwrap();
            let kp = gq.kp();
            let a = dense(&h, k, kp);
            for g in 0..kp / 128 - 1 {
                let f0 = 128 * (g + 1);
                let f = kp - f0;
                let gain = gq.gain_of(g);
                assert_eq!(gain.len(), 128 * f);
                // Row i of G is (H'_FF^-1 H'_F,b_i)^T.
                let mut aff = vec![0.0; f * f];
                for r in 0..f {
                    for c in 0..f {
                        aff[r * f + c] = a[(f0 + r) * kp + f0 + c];
                    }
                }
                for i in [0usize, 57, 127] {
                    let b: Vec<f64> = (0..f).map(|c| a[(f0 + c) * kp + 128 * g + i]).collect();
                    let want = solve(aff.clone(), f, b);
                    let got = &gain[i * f..(i + 1) * f];
                    let scale = want.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
                    for (c, (w, x)) in want.iter().zip(got).enumerate() {
                        assert!(
                            (w - x).abs() <= 1e-9 * scale,
                            "k {k} g {g} i {i} c {c}: {x} vs {w}"
                        );
                    }
                }
            }
        }
    }

    /// Padded columns are exactly uncoupled: their gains are exactly 0, so
    /// the padding stays 0.
    #[test]
    fn padding_gets_no_update() {
        let k = 200;
        let h = hessian(k, 300, 9);
        let gq = Gptq::new(&le(&h), k, None).unwrap();
        let f = gq.kp() - 128;
        let gain = gq.gain_of(0);
        for i in 0..128 {
            for c in (k - 128)..f {
                assert_eq!(gain[i * f + c].to_bits(), 0, "i {i} c {c}");
            }
        }
    }

    /// Power-of-two input scales enter exactly: the gains with exponents
    /// equal, bit for bit, those of the Hessian scaled beforehand by
    /// `2^-(e_i + e_j)`, and differ from the unscaled ones.
    #[test]
    fn scales_enter_as_exact_powers_of_two() {
        let k = 256;
        let h = hessian(k, 400, 4);
        let exps: Vec<i8> = (0..k).map(|i| ((i * 5) % 7) as i8 - 3).collect();
        let pre: Vec<f32> = (0..k * k)
            .map(|x| h[x] * pow2(-(exps[x / k] as i32 + exps[x % k] as i32)) as f32)
            .collect();
        let scaled = Gptq::new(&le(&h), k, Some(&exps)).unwrap();
        let same = Gptq::new(&le(&pre), k, None).unwrap();
        let plain = Gptq::new(&le(&h), k, None).unwrap();
        let bits = |g: &Gptq| g.gain_of(0).iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&scaled), bits(&same));
        assert_ne!(bits(&scaled), bits(&plain));
    }

    #[test]
    fn blocked_cholesky_equals_the_entrywise_one() {
        for k in [5usize, 8, 9, 17, 130] {
            let h = hessian(k, 2 * k + 3, k as u64);
            let kp = k;
            let mut a = vec![0.0f64; kp * kp];
            for i in 0..kp {
                for j in 0..=i {
                    a[i * kp + j] = h[i * k + j] as f64 + if i == j { 0.1 } else { 0.0 };
                }
            }
            let mut b = a.clone();
            cholesky(&mut a, kp).unwrap();
            cholesky_reference(&mut b, kp).unwrap();
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b), "k {k}");
        }
    }

    #[test]
    fn bad_hessians_are_refused() {
        let k = 130;
        let mut h = hessian(k, 200, 5);
        assert!(matches!(
            Gptq::new(&le(&h[1..]), k, None),
            Err(Cq4Error::BufferLength { .. })
        ));
        h[5] = f32::NAN;
        let e = Gptq::new(&le(&h), k, None).unwrap_err();
        assert!(e.is_bad_input() && e.to_string().contains("(0, 5)"), "{e}");
        // Strongly indefinite: -I.
        let neg: Vec<f32> = (0..k * k)
            .map(|i| if i % (k + 1) == 0 { -1.0 } else { 0.0 })
            .collect();
        let e = Gptq::new(&le(&neg), k, None).unwrap_err();
        assert!(e.to_string().contains("positive definite"), "{e}");
    }
}
