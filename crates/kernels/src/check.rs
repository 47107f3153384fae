//! Verification of one container file: what `convert verify` runs per file.
//!
//! For a file's matrix `W` and the fixed activations [`activations`]
//! (seeded Gaussian), every requested tier computes `y = W x`; each result
//! is compared with the f64 oracle ([`crate::oracle`]) and, when the scalar
//! tier ran too, with the scalar result bit for bit. CQ4 orthogonal files
//! additionally decode a few rows as embedding lookups
//! ([`PanelMatrix::embedding_row`]) and compare them with `cq4`'s qdq.
//!
//! # Error bounds
//!
//! The kernels' only approximation is the 8-bit activation quantization
//! (round-to-nearest with step `max|x| / 127` per block of 32 (Q8_0), 256
//! (Q8_K) or per rotated group of 128 (CQ4)) plus, for CQ4, the int8
//! codebook (`round(cb / cb_scale)` instead of the stored fp16 value). For
//! Gaussian `x` the rounding error is uniform, so the relative L2 error of
//! `W x` is about `E[max|x_block|] / (127 sqrt(12))`: 0.47% for blocks of
//! 32 (`E max ~ 2.07 sigma`), 0.66% for 256 (`~2.9 sigma`), 0.6% for CQ4
//! groups of 128, plus ~0.4% from the CQ4 int8 codebook. The bounds below
//! are the measured worst case over the test matrices (`docs/KERNELS.md`)
//! with a margin of about 2x; they are far below what a wrong kernel
//! produces (a single wrong block scale or nibble order gives >> 10%).

use weights_file::WeightsFile;

use crate::dispatch::{Exec, Isa};
use crate::ggml::QuantFormat;
use crate::oracle::{
    compare, float_oracle, ggml_oracle, panel_oracle, panel_oracle_factored, ErrorStats,
};
use crate::panel::{Family, PanelMatrix};
use crate::workspace::Workspace;
use crate::{Gemv, Matrix};

/// Seed of the verification activations (the ASCII bytes "VERIFY\0\1").
pub const SEED: u64 = 0x5645_5249_4659_0001;

/// The verification activations for `k` columns: `k` standard normal values
/// from `cq4::rng::fill_gaussian(SplitMix64::new(SEED))` rounded to f32.
pub fn activations(k: usize) -> Vec<f32> {
    let mut v = vec![0f64; k];
    cq4::rng::fill_gaussian(&mut cq4::rng::SplitMix64::new(SEED), &mut v);
    v.into_iter().map(|x| x as f32).collect()
}

/// What a file holds, for the bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A ggml matrix.
    Ggml(QuantFormat),
    /// A CQ4 panel matrix.
    Cq4,
    /// A plain FP16 / FP32 matrix.
    Float,
}

/// The relative-L2 bound of `kind` against the oracle (module docs).
pub fn rel_l2_bound(kind: &Kind) -> f64 {
    match kind {
        Kind::Ggml(QuantFormat::Q8_0 | QuantFormat::Q5_0) => 0.012,
        Kind::Ggml(_) => 0.015,
        Kind::Cq4 => 0.02,
        Kind::Float => 1e-4,
    }
}

/// Bound on `max |kernel decode - qdq| / max |qdq row|` of embedding rows.
pub const EMBEDDING_BOUND: f32 = 1e-4;

/// Above this many multiply-adds (`N * Kp * Kp`) an orthogonal file's
/// oracle uses [`panel_oracle_factored`] instead of materializing qdq.
pub const QDQ_ORACLE_LIMIT: u64 = 1 << 31;

/// One tier's result on one file.
#[derive(Debug, Clone)]
pub struct IsaCheck {
    /// The tier (for plain float files, always `scalar`).
    pub isa: Isa,
    /// Error against the oracle.
    pub stats: ErrorStats,
    /// The relative-L2 bound applied.
    pub bound: f64,
    /// Bit-identical to the scalar tier (when the scalar tier ran).
    pub identical_to_scalar: Option<bool>,
    /// Kernel error, if the call failed.
    pub error: Option<String>,
}

impl IsaCheck {
    /// Within the bound, same finiteness as the oracle, identical to scalar.
    pub fn pass(&self) -> bool {
        self.error.is_none()
            && self.stats.rel_l2 <= self.bound
            && self.stats.finiteness_mismatches == 0
            && self.identical_to_scalar != Some(false)
    }
}

/// Embedding-row decode check.
#[derive(Debug, Clone)]
pub struct EmbeddingCheck {
    /// Rows decoded.
    pub rows: Vec<usize>,
    /// `max |decode - qdq| / max |qdq|` over those rows.
    pub rel_max: f32,
    /// [`EMBEDDING_BOUND`].
    pub bound: f32,
}

impl EmbeddingCheck {
    /// Within the bound.
    pub fn pass(&self) -> bool {
        self.rel_max <= self.bound
    }
}

/// The verification of one file.
#[derive(Debug, Clone, Default)]
pub struct FileCheck {
    /// What the file holds (`Q4_K r8`, `CQ4 hadamard`, `FP16`, ...).
    pub kind: String,
    /// `[N, K]` as the kernels see it.
    pub shape: (usize, usize),
    /// Problems that fail the file before or besides the numbers
    /// (container or panel validation, non-finite dequantized weights).
    pub problems: Vec<String>,
    /// One entry per tier run.
    pub isas: Vec<IsaCheck>,
    /// Embedding-row check (CQ4 orthogonal files).
    pub embedding: Option<EmbeddingCheck>,
}

impl FileCheck {
    /// No problems, every tier passes, the embedding check passes.
    pub fn pass(&self) -> bool {
        self.problems.is_empty()
            && self.isas.iter().all(IsaCheck::pass)
            && self.embedding.as_ref().is_none_or(EmbeddingCheck::pass)
    }
}

/// Verify one container's bytes on `isas` (each must be available).
pub fn check_container(bytes: &[u8], isas: &[Isa]) -> FileCheck {
    let mut fc = FileCheck::default();
    let f = match WeightsFile::parse(bytes) {
        Ok(f) => f,
        Err(e) => {
            fc.problems.push(format!("container: {e}"));
            return fc;
        }
    };
    let m = match Matrix::from_file(&f) {
        Ok(m) => m,
        Err(e) => {
            fc.problems.push(e.to_string());
            return fc;
        }
    };
    let g = m.as_gemv();
    fc.shape = (g.rows(), g.cols());
    // An empty matrix holds no weights, so its data region (and the file
    // length) bounds neither dimension: a 96-byte file can claim 0 x 2^40.
    // The activations (K values), results and oracle (N values) below are
    // sized by the dimensions, so they are never built for one; `convert`
    // never writes a zero-sized tensor.
    if g.rows() == 0 || g.cols() == 0 {
        fc.problems.push(format!(
            "the matrix is empty ({} x {}): there are no weights to verify",
            g.rows(),
            g.cols()
        ));
        return fc;
    }
    let x = activations(g.cols());
    let (kind, oracle) = match &m {
        Matrix::Ggml(gm) => {
            fc.kind = format!("{} {}", gm.format().ggml_type(), gm.layout().name());
            (Kind::Ggml(gm.format()), ggml_oracle(gm, &x))
        }
        Matrix::Float(fm) => {
            fc.kind = format!("{:?}", fm.float_type()).to_uppercase();
            (Kind::Float, float_oracle(fm, &x))
        }
        Matrix::Panel(pm) => {
            let family = pm.family();
            fc.kind = match family {
                Family::Hadamard => "CQ4 hadamard".into(),
                Family::Orthogonal => "CQ4 orthogonal".into(),
            };
            let (n, kp) = (pm.rows(), pm.cols());
            let view = match cq4::PanelTensorView::parse(family, n, kp, f.scales(), f.data()) {
                Ok(v) => v,
                Err(e) => {
                    fc.problems.push(format!("panel validation: {e}"));
                    return fc;
                }
            };
            let big = family == Family::Orthogonal
                && (n as u64)
                    .saturating_mul(kp as u64)
                    .saturating_mul(kp as u64)
                    > QDQ_ORACLE_LIMIT;
            let oracle = if big {
                panel_oracle_factored(pm, &x)
            } else {
                panel_oracle(&view, &x)
            };
            if family == Family::Orthogonal {
                fc.embedding = Some(embedding_check(pm, &view));
            }
            (Kind::Cq4, oracle)
        }
    };
    let oracle = match oracle {
        Ok(o) => o,
        Err(e) => {
            fc.problems.push(format!("oracle: {e}"));
            return fc;
        }
    };
    if kind != Kind::Float && oracle.nonfinite_weights > 0 {
        fc.problems.push(format!(
            "{} dequantized weights are not finite (corrupt block scale or norm)",
            oracle.nonfinite_weights
        ));
    }
    let bound = rel_l2_bound(&kind);
    let tiers: Vec<Isa> = if kind == Kind::Float {
        vec![Isa::Scalar]
    } else {
        isas.to_vec()
    };
    let mut ws = Workspace::new();
    let mut scalar_bits: Option<Vec<u32>> = None;
    let mut runs = Vec::new();
    for isa in tiers {
        let mut y = vec![0f32; g.rows()];
        let r = g.gemv(&x, &mut y, &mut ws, Exec::new(isa, true));
        let error = r.err().map(|e| e.to_string());
        if isa == Isa::Scalar && error.is_none() {
            scalar_bits = Some(y.iter().map(|v| v.to_bits()).collect());
        }
        runs.push((isa, y, error));
    }
    for (isa, y, error) in runs {
        let identical_to_scalar = match (&scalar_bits, isa) {
            (Some(s), i) if i != Isa::Scalar && error.is_none() => {
                Some(y.iter().map(|v| v.to_bits()).eq(s.iter().copied()))
            }
            _ => None,
        };
        fc.isas.push(IsaCheck {
            isa,
            stats: compare(&y, &oracle.y),
            bound,
            identical_to_scalar,
            error,
        });
    }
    fc
}

fn embedding_check(pm: &PanelMatrix<'_>, view: &cq4::PanelTensorView<'_>) -> EmbeddingCheck {
    let n = pm.rows();
    let kp = pm.cols();
    let mut rows = vec![0, n / 2, n - 1];
    rows.dedup();
    let mut want = vec![0f32; kp];
    let mut got = vec![0f32; kp];
    let (mut err, mut scale) = (0f32, 0f32);
    for &r in &rows {
        let ok = view.embedding_row(r, &mut want).is_ok() && pm.embedding_row(r, &mut got).is_ok();
        if !ok {
            err = f32::INFINITY;
            continue;
        }
        for (w, g) in want.iter().zip(&got) {
            scale = scale.max(w.abs());
            let d = (w - g).abs();
            err = if d.is_nan() {
                f32::INFINITY
            } else {
                err.max(d)
            };
        }
    }
    let rel_max = if scale > 0.0 {
        err / scale
    } else if err == 0.0 {
        0.0
    } else {
        f32::INFINITY
    };
    EmbeddingCheck {
        rows,
        rel_max,
        bound: EMBEDDING_BOUND,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weights_file::format::Header;
    use weights_file::write::prefix;
    use weights_file::Precision;

    /// A plain FP16 file of `shape` with its zero-filled data.
    fn plain(shape: &[u64]) -> crate::aligned::AlignedBytes {
        let n: u64 = shape.iter().product();
        let mut b = prefix(&Header::plain(Precision::Fp16, shape, 2 * n), &[]).unwrap();
        b.resize(b.len() + 2 * n as usize, 0);
        crate::aligned::AlignedBytes::copy_of(&b)
    }

    #[test]
    fn empty_matrices_fail_without_sizing_anything_by_the_other_dimension() {
        // Found by fuzzing: 96-byte files claiming 0 x 2^40 (activations of
        // 2^40 values) or 2^40 x 0 (2^40 results) aborted on allocation.
        for shape in [[0, 1 << 40], [1 << 40, 0]] {
            let b = plain(&shape);
            assert_eq!(b.as_slice().len(), 96);
            let fc = check_container(b.as_slice(), &[Isa::Scalar]);
            assert!(!fc.pass());
            assert!(fc.isas.is_empty());
            assert!(fc.problems[0].contains("empty"), "{:?}", fc.problems);
        }
        let fc = check_container(plain(&[2, 3]).as_slice(), &[Isa::Scalar]);
        assert!(fc.pass(), "{fc:?}");
    }
}
