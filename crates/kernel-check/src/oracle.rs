//! The FP32 oracle: dequantize the file's weights exactly as the codecs do
//! (ggml: `ggml_quants::dequantize_rows` on each row's blocks; CQ4:
//! `cq4`'s qdq), then `y_n = sum_k w_nk * x_k` with f64 products and sums.
//! Kernel results are compared with it through [`ErrorStats`].

use rayon::prelude::*;

use kernels::panel::GROUP;
use kernels::{check_len, FloatMatrix, Gemv, GgmlMatrix, KernelError, Matrix, PanelMatrix};

/// An oracle result.
#[derive(Debug, Clone, PartialEq)]
pub struct Oracle {
    /// `W x` in f64.
    pub y: Vec<f64>,
    /// Dequantized weights that are NaN or infinite.
    pub nonfinite_weights: usize,
}

fn dot64(w: &[f32], x: &[f32]) -> (f64, usize) {
    let mut s = 0f64;
    let mut bad = 0;
    for (&a, &b) in w.iter().zip(x) {
        if !a.is_finite() {
            bad += 1;
        }
        s += a as f64 * b as f64;
    }
    (s, bad)
}

/// Oracle of a ggml matrix (any layout: each row's blocks are gathered in
/// column order, then `dequantize_rows`).
pub fn ggml_oracle(m: &GgmlMatrix<'_>, x: &[f32]) -> Result<Oracle, KernelError> {
    check_len("x", m.cols(), x.len())?;
    let ty = m.format().ggml_type();
    let rows: Vec<Result<(f64, usize), KernelError>> = (0..m.rows())
        .into_par_iter()
        .map_init(
            || (vec![0u8; m.row_bytes()], vec![0f32; m.cols()]),
            |(rb, w), r| {
                m.row_blocks(r, rb)?;
                ggml_quants::dequantize_rows(ty, rb, m.cols(), w)
                    .map_err(|e| KernelError::Unsupported(e.to_string()))?;
                Ok(dot64(w, x))
            },
        )
        .collect();
    collect(rows)
}

fn collect(rows: Vec<Result<(f64, usize), KernelError>>) -> Result<Oracle, KernelError> {
    let mut y = Vec::with_capacity(rows.len());
    let mut bad = 0;
    for r in rows {
        let (v, b) = r?;
        y.push(v);
        bad += b;
    }
    Ok(Oracle {
        y,
        nonfinite_weights: bad,
    })
}

/// Oracle of a panel tensor through `cq4`'s qdq (`view.dequantize_rows` per
/// 64-row chunk). Cost `O(N Kp log)` (Hadamard) or `O(N Kp^2)` (orthogonal);
/// see [`panel_oracle_factored`] for large orthogonal tensors.
pub fn panel_oracle(view: &cq4::PanelTensorView<'_>, x: &[f32]) -> Result<Oracle, KernelError> {
    let g = view.geometry();
    let (n, kp) = (g.n(), g.k());
    check_len("x (Kp)", kp, x.len())?;
    let chunks: Vec<Result<Vec<(f64, usize)>, KernelError>> = (0..n.div_ceil(64))
        .into_par_iter()
        .map(|sb| {
            let rows = 64.min(n - 64 * sb);
            let mut w = vec![0f32; rows * kp];
            view.dequantize_rows(64 * sb, &mut w)
                .map_err(|e| KernelError::Panel(e.to_string()))?;
            Ok(w.chunks_exact(kp).map(|row| dot64(row, x)).collect())
        })
        .collect();
    let mut rows = Vec::with_capacity(n);
    for c in chunks {
        rows.extend(c?.into_iter().map(Ok));
    }
    collect(rows)
}

/// The same oracle with the rotation moved onto `x` (exact algebra, f64):
/// `y_n = sum_g norm[n][g] * sum_j cb[idx(n, j)] * t_j` with
/// `t = R^T (x / input_scale)` (orthogonal) or, per group,
/// `t_j = right_p * FWHT(left * x / input_scale)_p / sqrt(128)`, `p = perm[j]`.
/// Cost `O(N Kp + Kp^2)`. Weights are not materialized, so
/// `nonfinite_weights` counts non-finite norms instead.
pub fn panel_oracle_factored(m: &PanelMatrix<'_>, x: &[f32]) -> Result<Oracle, KernelError> {
    check_len("x (Kp)", m.cols(), x.len())?;
    let view = m.view();
    let t = crate::rotation::factored(view, x);
    let codebook = view.codebook();
    let ng = m.groups();
    let rows: Vec<Result<(f64, usize), KernelError>> = (0..m.rows())
        .into_par_iter()
        .map(|n| {
            let mut y = 0f64;
            let mut bad = 0;
            for g in 0..ng {
                let nrm = weights_file::fp16::f16_bits_to_f32(view.norm(n, g));
                if !nrm.is_finite() {
                    bad += 1;
                }
                let mut s = 0f64;
                for (j, &tj) in t.iter().enumerate().skip(g * GROUP).take(GROUP) {
                    let idx = view
                        .index(n, j)
                        .map_err(|e| KernelError::Panel(e.to_string()))?;
                    s += codebook[idx as usize] as f64 * tj;
                }
                y += nrm as f64 * s;
            }
            Ok((y, bad))
        })
        .collect();
    collect(rows)
}

/// Oracle of a plain float matrix.
pub fn float_oracle(m: &FloatMatrix<'_>, x: &[f32]) -> Result<Oracle, KernelError> {
    check_len("x", m.cols(), x.len())?;
    let rows: Vec<Result<(f64, usize), KernelError>> = (0..m.rows())
        .into_par_iter()
        .map(|r| {
            let w: Vec<f32> = (0..m.cols()).map(|c| m.at(r, c)).collect();
            Ok(dot64(&w, x))
        })
        .collect();
    collect(rows)
}

/// How far a kernel result is from the oracle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ErrorStats {
    /// `||y - ref||_2 / ||ref||_2` over rows where both are finite (0 when
    /// both norms are 0, infinite when only the reference norm is 0).
    pub rel_l2: f64,
    /// `max |y - ref|` over those rows.
    pub max_abs: f64,
    /// `||ref||_2`.
    pub ref_l2: f64,
    /// Rows where exactly one of `y` and `ref` is finite.
    pub finiteness_mismatches: usize,
    /// Rows where the reference is not finite.
    pub nonfinite_reference: usize,
}

/// Compare `y` with `reference`.
pub fn compare(y: &[f32], reference: &[f64]) -> ErrorStats {
    let (mut e2, mut r2, mut max_abs) = (0f64, 0f64, 0f64);
    let (mut mism, mut nonfin) = (0, 0);
    for (&a, &r) in y.iter().zip(reference) {
        let (fa, fr) = (a.is_finite(), r.is_finite());
        if !fr {
            nonfin += 1;
        }
        if fa != fr {
            mism += 1;
        }
        if fa && fr {
            let d = a as f64 - r;
            e2 += d * d;
            r2 += r * r;
            max_abs = max_abs.max(d.abs());
        }
    }
    let rel_l2 = if r2 > 0.0 {
        (e2 / r2).sqrt()
    } else if e2 == 0.0 {
        0.0
    } else {
        f64::INFINITY
    };
    ErrorStats {
        rel_l2,
        max_abs,
        ref_l2: r2.sqrt(),
        finiteness_mismatches: mism,
        nonfinite_reference: nonfin,
    }
}

/// Every weight of `m` as the oracle sees it, `rows x cols` f32 row-major
/// (`cols` is `Kp` for a panel tensor): ggml rows through
/// `ggml_quants::dequantize_rows`, panels through `cq4`'s qdq, floats
/// widened. This is what `convert qdq` exports, so an exported model holds
/// exactly the weights `verify` checks the kernels against.
pub fn weights(m: &Matrix<'_>) -> Result<Vec<f32>, KernelError> {
    match m {
        Matrix::Ggml(g) => {
            let ty = g.format().ggml_type();
            let cols = g.cols();
            let mut out = vec![0f32; g.rows() * cols];
            let mut rb = vec![0u8; g.row_bytes()];
            for (r, w) in out.chunks_exact_mut(cols.max(1)).enumerate() {
                g.row_blocks(r, &mut rb)?;
                ggml_quants::dequantize_rows(ty, &rb, cols, w)
                    .map_err(|e| KernelError::Unsupported(e.to_string()))?;
            }
            Ok(out)
        }
        Matrix::Panel(p) => cq4::PanelTensorView::new(*p.view())
            .and_then(|v| v.qdq())
            .map_err(|e| KernelError::Panel(e.to_string())),
        Matrix::Float(f) => {
            let (rows, cols) = (f.rows(), f.cols());
            let mut out = Vec::with_capacity(rows * cols);
            for r in 0..rows {
                out.extend((0..cols).map(|c| f.at(r, c)));
            }
            Ok(out)
        }
    }
}
