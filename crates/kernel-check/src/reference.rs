//! References a kernel result is checked against, with proven bounds.
//!
//! # The exact check (pass / fail)
//!
//! A kernel quantizes the activations `x` once (Q8_0, Q8_K, or the rotated
//! per-group int8 of CQ4) and then computes exact integer dot products that
//! it scales and sums in f32. Given those *same* quantized activations `a`
//! (dequantized exactly, in f64) and the weights decoded by an independent
//! decoder (`ggml_quants::dequantize_rows`; for CQ4 `cq4::PanelTensorView`'s
//! indices and norms with the kernels' int8 codebook), the exact value
//! `r_n = sum_k w_nk a_k` is computed in f64. The kernel differs from it
//! only by f32 rounding, which standard forward error analysis bounds
//! (`u = 2^-24`, `g(m) = m u / (1 - m u)`):
//!
//! - ggml formats: block `b` contributes `fl(fl(S) fl(d d_a)) - fl(fl(M)
//!   fl(dmin d_a))`, each of the two products off by at most `g(3)` of
//!   `A_b = S d d_a` (`B_b = M dmin d_a`), the difference by `u`; the
//!   sequential sum of `nb` blocks adds `g(nb - 1) sum |c_b|`. So
//!   `|y - r| <= g(nb + 4) sum_b (|A_b| + |B_b|)`, plus `u sum |w a|` for the
//!   one rounding ggml's decoder may make per weight (`d1 * q - m1`).
//! - CQ4: group `g` contributes `fl(fl(isum fl(s_g)) f_g)` (isum exact), so
//!   `|y - r| <= g(ng + 3) sum_g |isum_g s_g f_g|`.
//! - FP16 / FP32: `|y - r| <= g(K + 1) sum_k |w_k x_k|`.
//!
//! Every bound also has an absolute `2^-149` per operation for subnormal
//! results and a `2 K 2^-53` relative term for the f64 reference itself. A
//! correct kernel can never exceed them, whatever the data; a kernel that
//! reads one wrong nibble, scale or block exceeds them by orders of
//! magnitude.
//!
//! # The activations (pass / fail)
//!
//! That the kernel's activations are faithful to `x` is checked element by
//! element against the quantizer's own rounding bound (`kernels::format`
//! `ActBlock::tolerance`; CQ4: the f32 rotation against an f64 rotation of `x`
//! with its error bound, and `|q s - z| <= s (0.5 + 2^-14)`).
//!
//! # End to end (information)
//!
//! `sum_k w_nk x_k` with the unquantized `x` (CQ4: the stored fp16 codebook
//! and the rotation applied to `x` in f64) is reported as the relative error
//! of the kernel, which is what a user sees; it depends on the data and
//! decides nothing.

use rayon::prelude::*;

use kernels::act::{quantize_groups, Cq4Act};
use kernels::format::{
    ActBlock, GgmlFormat, Iq4Nl, Iq4Xs, Q2K, Q3K, Q4K, Q4_0, Q4_1, Q5K, Q5_0, Q5_1, Q6K, Q8_0,
};
use kernels::panel::GROUP;
use kernels::{
    check_len, FloatMatrix, Gemv, GgmlMatrix, Isa, KernelError, Matrix, PanelMatrix, QuantFormat,
};
use weights_file::fp16::{f16_bits_to_f32, f16_bits_to_f64};
use weights_file::panel::PanelError;

use crate::rotation::{factored, rotated_exact};

pub use crate::bounds::{gamma, TINY, U};

/// The references of one GEMV.
#[derive(Debug, Clone, PartialEq)]
pub struct Reference {
    /// `sum_k w_nk a_k` in f64 with the kernel's own quantized activations.
    pub exact: Vec<f64>,
    /// Proven bound of `|kernel - exact|` per row.
    pub bound: Vec<f64>,
    /// `sum_k w_nk x_k` in f64 with the unquantized activations.
    pub e2e: Vec<f64>,
    /// `max |a - x| / tolerance` over the activations (at most 1 for a
    /// faithful quantizer).
    pub act_ratio: f64,
    /// Decoded weights (CQ4: norms) that are not finite.
    pub nonfinite_weights: usize,
}

/// How a kernel result compares with a [`Reference`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExactStats {
    /// `max |y - exact| / bound` over the rows (at most 1 passes).
    pub worst_ratio: f64,
    /// The row where it is reached.
    pub worst_row: usize,
    /// Rows over their bound (or non-finite where the reference is finite,
    /// or the reverse).
    pub failing_rows: usize,
}

impl ExactStats {
    /// Every row within its bound.
    pub fn pass(&self) -> bool {
        self.failing_rows == 0
    }
}

/// Compare `y` with the exact reference.
pub fn compare_exact(y: &[f32], r: &Reference) -> ExactStats {
    let mut s = ExactStats {
        worst_ratio: 0.0,
        worst_row: 0,
        failing_rows: 0,
    };
    for (i, ((&v, &e), &b)) in y.iter().zip(&r.exact).zip(&r.bound).enumerate() {
        let ratio = if !e.is_finite() || !b.is_finite() {
            if v.is_finite() {
                f64::INFINITY
            } else {
                0.0
            }
        } else if !v.is_finite() {
            f64::INFINITY
        } else {
            let d = (f64::from(v) - e).abs();
            if d == 0.0 {
                0.0
            } else if b == 0.0 {
                f64::INFINITY
            } else {
                d / b
            }
        };
        if ratio > 1.0 {
            s.failing_rows += 1;
        }
        if ratio > s.worst_ratio || (i == 0 && ratio.is_nan()) {
            s.worst_ratio = ratio;
            s.worst_row = i;
        }
    }
    s
}

/// The references of `m` for activations `x` (`x.len() == m.cols()`).
pub fn reference(m: &Matrix<'_>, x: &[f32]) -> Result<Reference, KernelError> {
    reference_with(m, x, true)
}

/// [`reference()`](fn@reference), with the end-to-end sums only if `e2e` (otherwise
/// [`Reference::e2e`] is all NaN: the checks that decide do not use it, and
/// skipping it saves a third of the ggml reference's arithmetic).
pub fn reference_with(m: &Matrix<'_>, x: &[f32], e2e: bool) -> Result<Reference, KernelError> {
    check_len("x", m.as_gemv().cols(), x.len())?;
    let mut r = match (m, e2e) {
        (Matrix::Ggml(g), true) => ggml_any::<true>(g, x),
        (Matrix::Ggml(g), false) => ggml_any::<false>(g, x),
        (Matrix::Float(f), _) => Ok(float(f, x)),
        (Matrix::Panel(p), _) => panel(p, x, e2e),
    }?;
    if !e2e {
        r.e2e.fill(f64::NAN);
    }
    Ok(r)
}

fn ggml_any<const E2E: bool>(g: &GgmlMatrix<'_>, x: &[f32]) -> Result<Reference, KernelError> {
    match g.format() {
        QuantFormat::Q8_0 => ggml::<Q8_0, E2E>(g, x),
        QuantFormat::Q4_0 => ggml::<Q4_0, E2E>(g, x),
        QuantFormat::Q4_1 => ggml::<Q4_1, E2E>(g, x),
        QuantFormat::Q5_0 => ggml::<Q5_0, E2E>(g, x),
        QuantFormat::Q5_1 => ggml::<Q5_1, E2E>(g, x),
        QuantFormat::Q4K => ggml::<Q4K, E2E>(g, x),
        QuantFormat::Q5K => ggml::<Q5K, E2E>(g, x),
        QuantFormat::Q6K => ggml::<Q6K, E2E>(g, x),
        QuantFormat::Q2K => ggml::<Q2K, E2E>(g, x),
        QuantFormat::Q3K => ggml::<Q3K, E2E>(g, x),
        QuantFormat::Iq4Nl => ggml::<Iq4Nl, E2E>(g, x),
        QuantFormat::Iq4Xs => ggml::<Iq4Xs, E2E>(g, x),
    }
}

/// Per-row results of the row loops.
struct Row {
    exact: f64,
    bound: f64,
    e2e: f64,
    nonfinite: usize,
}

fn collect(rows: Vec<Result<Row, KernelError>>, act_ratio: f64) -> Result<Reference, KernelError> {
    let mut r = Reference {
        exact: Vec::with_capacity(rows.len()),
        bound: Vec::with_capacity(rows.len()),
        e2e: Vec::with_capacity(rows.len()),
        act_ratio,
        nonfinite_weights: 0,
    };
    for row in rows {
        let row = row?;
        r.exact.push(row.exact);
        r.bound.push(row.bound);
        r.e2e.push(row.e2e);
        r.nonfinite_weights += row.nonfinite;
    }
    Ok(r)
}

/// `|a - x| / tol`, 0 when equal (also for a zero tolerance).
fn ratio(a: f64, x: f64, tol: f64) -> f64 {
    let d = (a - x).abs();
    if d == 0.0 {
        0.0
    } else if tol > 0.0 {
        d / tol
    } else {
        f64::INFINITY
    }
}

fn ggml<F: GgmlFormat, const E2E: bool>(
    m: &GgmlMatrix<'_>,
    x: &[f32],
) -> Result<Reference, KernelError> {
    let (k, nb) = (m.cols(), m.blocks_per_row());
    let mut act = vec![F::Act::default(); nb];
    F::Act::quantize(x, &mut act)?;
    let mut a = vec![0f64; k];
    let mut act_ratio = 0f64;
    for (b, blk) in act.iter().enumerate() {
        let tol = blk.tolerance();
        for i in 0..F::QK {
            let v = blk.value(i);
            a[b * F::QK + i] = v;
            act_ratio = act_ratio.max(ratio(v, f64::from(x[b * F::QK + i]), tol));
        }
    }
    let ty = F::TYPE;
    let bb = F::BYTES;
    let g_blocks = gamma(nb + 4);
    let g_ref = U + 2.0 * k as f64 / (1u64 << 53) as f64;
    let abs = (4 * nb + 4) as f64 * TINY;
    let rows: Vec<Result<Row, KernelError>> = (0..m.rows())
        .into_par_iter()
        .map_init(
            || (vec![0u8; m.row_bytes()], vec![0f32; k]),
            |(rb, w), r| {
                m.row_blocks(r, rb)?;
                ggml_quants::dequantize_rows(ty, rb, k, w)
                    .map_err(|e| KernelError::Unsupported(e.to_string()))?;
                let (exact, e2e, wa, nonfinite) = dot_sums::<E2E>(w, &a, x);
                let mut terms = 0f64;
                for (blk, ab) in rb.chunks_exact(bb).zip(&act) {
                    let (p, q) = F::block_terms(blk, ab);
                    terms += p.abs() + q.abs();
                }
                Ok(Row {
                    exact,
                    bound: g_blocks * terms + g_ref * wa + abs,
                    e2e,
                    nonfinite,
                })
            },
        )
        .collect();
    collect(rows, act_ratio)
}

/// `(sum w a, sum w x, sum |w a|, non-finite w)` in f64 over one row
/// (`sum w x` only if `E2E`, else 0). The
/// sums run in sixteen interleaved chains (vectorizable): the bound's `2 K
/// 2^-53` term for the f64 reference covers the rounding of any summation
/// order (`K` products each rounded once, any order of `K - 1` additions:
/// at most `(2 K - 1) 2^-53 sum |w a|` to first order).
fn dot_sums<const E2E: bool>(w: &[f32], a: &[f64], x: &[f32]) -> (f64, f64, f64, usize) {
    // Sixteen chains: enough independent additions in flight to hide the
    // f64 add latency on wide vector units (four chains left it
    // latency-bound: the oracle was a third of keep mode's CPU time).
    const L: usize = 16;
    let (mut ex, mut e2, mut wa) = ([0f64; L], [0f64; L], [0f64; L]);
    let mut bad = [0usize; L];
    let (wc, wt) = w.as_chunks::<L>();
    let (ac, at) = a.as_chunks::<L>();
    let (xc, xt) = x.as_chunks::<L>();
    for ((wv, av), xv) in wc.iter().zip(ac).zip(xc) {
        for l in 0..L {
            bad[l] += usize::from(!wv[l].is_finite());
            let wi = f64::from(wv[l]);
            ex[l] += wi * av[l];
            if E2E {
                e2[l] += wi * f64::from(xv[l]);
            }
            wa[l] += (wi * av[l]).abs();
        }
    }
    let sum = |v: [f64; L]| {
        let h: [f64; 8] = std::array::from_fn(|i| v[i] + v[i + 8]);
        let q: [f64; 4] = std::array::from_fn(|i| h[i] + h[i + 4]);
        (q[0] + q[2]) + (q[1] + q[3])
    };
    let (mut exact, mut e2e, mut wab) = (sum(ex), sum(e2), sum(wa));
    let mut nonfinite: usize = bad.iter().sum();
    for ((&wi, &ai), &xi) in wt.iter().zip(at).zip(xt) {
        nonfinite += usize::from(!wi.is_finite());
        let wi = f64::from(wi);
        exact += wi * ai;
        if E2E {
            e2e += wi * f64::from(xi);
        }
        wab += (wi * ai).abs();
    }
    (exact, e2e, wab, nonfinite)
}

fn float(m: &FloatMatrix<'_>, x: &[f32]) -> Reference {
    let k = m.cols();
    let g = gamma(k + 1) + 2.0 * k as f64 / (1u64 << 53) as f64;
    let abs = (2 * k + 2) as f64 * TINY;
    let rows: Vec<Result<Row, KernelError>> = (0..m.rows())
        .into_par_iter()
        .map_init(
            || vec![0f32; k],
            |w_row, r| {
                m.row_into(r, w_row);
                let (mut s, mut sa) = (0f64, 0f64);
                let mut nonfinite = 0;
                for (&w, &xv) in w_row.iter().zip(x) {
                    if !w.is_finite() {
                        nonfinite += 1;
                    }
                    let p = f64::from(w) * f64::from(xv);
                    s += p;
                    sa += p.abs();
                }
                Ok(Row {
                    exact: s,
                    bound: g * sa + abs,
                    e2e: s,
                    nonfinite,
                })
            },
        )
        .collect();
    // The activations are x itself.
    collect(rows, 0.0).expect("float rows never fail")
}

fn panel(m: &PanelMatrix<'_>, x: &[f32], with_e2e: bool) -> Result<Reference, KernelError> {
    let view = m.view();
    let (n, kp, ng) = (m.rows(), m.cols(), m.groups());
    // The kernel's activations, computed as the kernels compute them.
    let mut z = vec![0f32; kp];
    m.rotate(x, &mut z, Isa::Scalar)?;
    let (mut q, mut scale, mut qsum) = (vec![0i8; kp], vec![0f32; ng], vec![0i32; ng]);
    quantize_groups(&z, &mut q, &mut scale, &mut qsum)?;
    let act = Cq4Act::new(&q, &scale, &qsum);
    // Their fidelity: the f32 rotation against the f64 one, then the int8
    // quantization against the f32 rotation.
    let (z_exact, z_bound) = rotated_exact(view, x);
    let mut act_ratio = 0f64;
    for j in 0..kp {
        act_ratio = act_ratio.max(ratio(f64::from(z[j]), z_exact[j], z_bound[j]));
        let s = f64::from(act.scale[j / GROUP]);
        let qs = f64::from(act.q[j]) * s;
        act_ratio = act_ratio.max(ratio(qs, f64::from(z[j]), s * (0.5 + 1.0 / 16384.0)));
    }
    let t = factored(view, x);
    let cb_i8 = view.cb_i8();
    // The int8 codebook values of both nibbles of every byte (low first):
    // the self-check (no e2e sum) reads each stored byte once.
    let byte_values: [[i32; 2]; 256] =
        std::array::from_fn(|b| [i32::from(cb_i8[b & 15]), i32::from(cb_i8[b >> 4])]);
    let cb_scale = view.cb_scale();
    let codebook = view.codebook_bits().map(f16_bits_to_f64);
    let g_groups = gamma(ng + 3);
    let abs = (3 * ng + 3) as f64 * TINY;
    let rows: Vec<Result<Row, KernelError>> = (0..n)
        .into_par_iter()
        .map_init(
            || [0u8; GROUP],
            |idx, r| {
                let (mut exact, mut e2e, mut terms) = (0f64, 0f64, 0f64);
                let mut nonfinite = 0;
                for g in 0..ng {
                    let norm = f16_bits_to_f32(view.norm(r, g));
                    if !norm.is_finite() {
                        nonfinite += 1;
                    }
                    let folded = f64::from(norm * cb_scale);
                    let panel_err = |e: PanelError| KernelError::Panel(e.to_string());
                    let cols = g * GROUP..(g + 1) * GROUP;
                    // The integer sum is exact in any order; the e2e sum is
                    // information only: four f64 chains.
                    let mut isum = 0i32;
                    let mut s4 = [0f64; 4];
                    if !with_e2e {
                        // Four columns per stored byte pair, no index array.
                        let pairs = view.group_pairs(r, g).map_err(panel_err)?;
                        let q = act.q[cols].as_chunks::<4>().0;
                        for ([b0, b1], q) in pairs.iter().zip(q) {
                            let ([v0, v1], [v2, v3]) =
                                (byte_values[*b0 as usize], byte_values[*b1 as usize]);
                            isum += v0 * i32::from(q[0])
                                + v1 * i32::from(q[1])
                                + v2 * i32::from(q[2])
                                + v3 * i32::from(q[3]);
                        }
                    } else {
                        view.group_indices(r, g, idx).map_err(panel_err)?;
                        for (&i, &qj) in idx.iter().zip(&act.q[cols.clone()]) {
                            isum += i32::from(cb_i8[i as usize]) * i32::from(qj);
                        }
                        for (ic, tc) in idx.chunks_exact(4).zip(t[cols].chunks_exact(4)) {
                            for l in 0..4 {
                                s4[l] += codebook[ic[l] as usize] * tc[l];
                            }
                        }
                    }
                    let term = folded * f64::from(act.scale[g]) * f64::from(isum);
                    exact += term;
                    terms += term.abs();
                    e2e += f64::from(norm) * ((s4[0] + s4[1]) + (s4[2] + s4[3]));
                }
                Ok(Row {
                    exact,
                    bound: g_groups * terms + abs,
                    e2e,
                    nonfinite,
                })
            },
        )
        .collect();
    collect(rows, act_ratio)
}
