//! Verification of one container file: what `convert verify` runs per file.
//!
//! For a file's matrix `W` and the fixed activations [`activations`]
//! (seeded Gaussian), every requested tier computes `y = W x`. Each result
//! is held to the *exact* reference of [`crate::reference`](mod@crate::reference) (the same
//! quantized activations the kernel uses, weights from an independent
//! decoder, f64, with a proven bound on the kernel's f32 rounding: a
//! correct kernel cannot fail it on any data), and, when the scalar tier ran
//! too, to the scalar result bit for bit. The activations themselves are
//! checked against `x` within the quantizer's own rounding bound. The
//! end-to-end error against unquantized activations is reported, not
//! judged. CQ4 orthogonal files also decode a few rows as embedding
//! lookups ([`PanelMatrix::embedding_row`]) and compare them with `cq4`'s
//! qdq. Raw files (integers, bool, ...) hold no matrix: only the container
//! is validated. A 3-D expert sidecar is checked expert by expert, every
//! expert, each as the 2-D matrix the kernels select.

use weights_file::{Precision, WeightsFile};

use kernels::{
    Exec, Gemv, GgmlExperts, GgmlMatrix, Isa, Matrix, PanelMatrix, RotationFamily, RowLayout,
    Workspace,
};

use crate::oracle::{compare, ErrorStats};
use crate::reference::{compare_exact, reference_with, ExactStats, Reference};

/// Seed of the verification activations (the ASCII bytes "VERIFY\0\1").
pub const SEED: u64 = 0x5645_5249_4659_0001;

/// The verification activations for `k` columns: `k` standard normal values
/// from `cq4::rng::fill_gaussian(SplitMix64::new(SEED))` rounded to f32.
pub fn activations(k: usize) -> Vec<f32> {
    let mut v = vec![0f64; k];
    cq4::rng::fill_gaussian(&mut cq4::rng::SplitMix64::new(SEED), &mut v);
    v.into_iter().map(|x| x as f32).collect()
}

/// Bound on `max |kernel decode - qdq| / max |qdq row|` of embedding rows.
pub const EMBEDDING_BOUND: f32 = 1e-4;

/// One tier's result on one file.
#[derive(Debug, Clone)]
pub struct IsaCheck {
    /// The tier (for plain float files, always `scalar`).
    pub isa: Isa,
    /// Against the exact reference (decides).
    pub exact: ExactStats,
    /// Against the end-to-end oracle (information).
    pub e2e: ErrorStats,
    /// Bit-identical to the scalar tier (when the scalar tier ran).
    pub identical_to_scalar: Option<bool>,
    /// The GEMM ([`gemm_rows`] rows of `X`: the check's activations and
    /// their negation, alternating) gave the GEMV's bits (negated in the
    /// odd rows) in every row of `Y` (`None` when the GEMV failed).
    pub gemm_identical: Option<bool>,
    /// Kernel error, if the call failed.
    pub error: Option<String>,
}

impl IsaCheck {
    /// Within the exact bound on every row, identical to scalar.
    pub fn pass(&self) -> bool {
        self.error.is_none()
            && self.exact.pass()
            && self.identical_to_scalar != Some(false)
            && self.gemm_identical != Some(false)
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
    /// What the file holds (`Q4_K r8`, `CQ4 hadamard`, `FP16`, `raw I64`).
    pub kind: String,
    /// `[N, K]` as the kernels see it (`[0, 0]` for raw files; of each
    /// expert for an expert sidecar).
    pub shape: (usize, usize),
    /// Experts of a 3-D expert sidecar (every one is checked; the results'
    /// rows are `expert x N + row`), `None` for other files.
    pub experts: Option<usize>,
    /// Problems that fail the file before or besides the numbers
    /// (container or panel validation, non-finite decoded weights).
    pub problems: Vec<String>,
    /// `max |a - x| / tolerance` of the kernels' activations (at most 1).
    pub activation_ratio: Option<f64>,
    /// One entry per tier run.
    pub isas: Vec<IsaCheck>,
    /// Embedding-row check (CQ4 orthogonal files).
    pub embedding: Option<EmbeddingCheck>,
}

impl FileCheck {
    /// No problems, faithful activations, every tier passes, the embedding
    /// check passes.
    pub fn pass(&self) -> bool {
        self.problems.is_empty()
            && self.activation_ratio.is_none_or(|r| r <= 1.0)
            && self.isas.iter().all(IsaCheck::pass)
            && self.embedding.as_ref().is_none_or(EmbeddingCheck::pass)
    }
}

/// Verify one container's bytes on `isas` (each must be available).
pub fn check_container(bytes: &[u8], isas: &[Isa]) -> FileCheck {
    check_container_with(bytes, isas, true)
}

/// [`check_container`], with the end-to-end error (information, decides
/// nothing) only if `e2e`; without it the reference's end-to-end values are
/// NaN, so [`IsaCheck::e2e`] counts every row as non-finite and says nothing.
pub fn check_container_with(bytes: &[u8], isas: &[Isa], e2e: bool) -> FileCheck {
    check_scoped(bytes, isas, Scope { e2e, gemm: true })
}

/// What a conversion checks on a file it has just written: as
/// [`check_container`] on `isas`, without the end-to-end error and without
/// the M = 2 GEMM against the GEMV (a property of the kernels, which their
/// tests prove and `convert verify` checks on any file).
pub fn self_check_container(bytes: &[u8], isas: &[Isa]) -> FileCheck {
    check_scoped(
        bytes,
        isas,
        Scope {
            e2e: false,
            gemm: false,
        },
    )
}

/// Which of the optional checks run.
#[derive(Debug, Clone, Copy)]
struct Scope {
    /// The end-to-end error (information).
    e2e: bool,
    /// The M = 2 GEMM against the GEMV, bit for bit.
    gemm: bool,
}

fn check_scoped(bytes: &[u8], isas: &[Isa], scope: Scope) -> FileCheck {
    let e2e = scope.e2e;
    let mut fc = FileCheck::default();
    let f = match WeightsFile::parse(bytes) {
        Ok(f) => f,
        Err(e) => {
            fc.problems.push(format!("container: {e}"));
            return fc;
        }
    };
    if let Some(Precision::Raw(t)) = f.header().precision() {
        fc.kind = format!("raw {t}");
        return fc;
    }
    if f.header()
        .sidecar_shape()
        .is_some_and(|s| s.experts.is_some())
    {
        return check_experts(&f, isas, scope, fc);
    }
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
    fc.kind = m.kind();
    let r = match reference_with(&m, &x, e2e) {
        Ok(r) => r,
        Err(e) => {
            fc.problems.push(format!("reference: {e}"));
            return fc;
        }
    };
    if let Matrix::Panel(pm) = &m {
        if pm.family() == RotationFamily::Orthogonal {
            match cq4::PanelTensorView::new(*pm.view()) {
                Ok(v) => fc.embedding = Some(embedding_check(pm, &v)),
                Err(e) => fc.problems.push(format!("panel decoder: {e}")),
            }
        }
    }
    if r.nonfinite_weights > 0 && !matches!(m, Matrix::Float(_)) {
        fc.problems.push(format!(
            "{} decoded weights are not finite (corrupt block scale or norm)",
            r.nonfinite_weights
        ));
    }
    if !matches!(m, Matrix::Float(_)) {
        fc.activation_ratio = Some(r.act_ratio);
    }
    let tiers: Vec<Isa> = if matches!(m, Matrix::Float(_)) {
        vec![Isa::Scalar]
    } else {
        isas.to_vec()
    };
    run_tiers(&[g], &x, &r, &tiers, scope.gemm, &mut fc);
    fc
}

/// A 3-D expert sidecar: every expert is checked as the 2-D matrix
/// [`GgmlExperts::expert`] gives (same activations), its rows appended to
/// one result, so a failing row is `expert x N + row`.
fn check_experts(f: &WeightsFile<'_>, isas: &[Isa], scope: Scope, mut fc: FileCheck) -> FileCheck {
    let e2e = scope.e2e;
    let ex = match GgmlExperts::from_file(f) {
        Ok(ex) => ex,
        Err(e) => {
            fc.problems.push(e.to_string());
            return fc;
        }
    };
    fc.kind = format!("{} {}", ex.format().ggml_type(), ex.layout().name());
    fc.shape = (ex.rows(), ex.cols());
    fc.experts = Some(ex.experts());
    let mut mats = Vec::with_capacity(ex.experts());
    for e in 0..ex.experts() {
        match ex.expert(e) {
            Ok(m) => mats.push(m),
            Err(err) => {
                fc.problems.push(format!("expert {e}: {err}"));
                return fc;
            }
        }
    }
    let x = activations(ex.cols());
    let mut all: Option<Reference> = None;
    for (e, m) in mats.iter().enumerate() {
        let r = match reference_with(&Matrix::Ggml(*m), &x, e2e) {
            Ok(r) => r,
            Err(err) => {
                fc.problems.push(format!("reference of expert {e}: {err}"));
                return fc;
            }
        };
        match &mut all {
            None => all = Some(r),
            Some(a) => {
                a.exact.extend(r.exact);
                a.bound.extend(r.bound);
                a.e2e.extend(r.e2e);
                a.act_ratio = a.act_ratio.max(r.act_ratio);
                a.nonfinite_weights += r.nonfinite_weights;
            }
        }
    }
    let Some(r) = all else {
        fc.problems.push("no experts".into());
        return fc;
    };
    if r.nonfinite_weights > 0 {
        fc.problems.push(format!(
            "{} decoded weights are not finite (corrupt block scale)",
            r.nonfinite_weights
        ));
    }
    fc.activation_ratio = Some(r.act_ratio);
    let gemvs: Vec<&dyn Gemv> = mats.iter().map(|m| m as &dyn Gemv).collect();
    run_tiers(&gemvs, &x, &r, isas, scope.gemm, &mut fc);
    fc
}

/// Runs of consecutive row groups in the GEMV sample of
/// [`check_sidecar_copy`] (at most; a matrix with fewer groups has them all).
pub const SAMPLE_RUNS: usize = 8;
/// Row groups per run of the sample.
pub const SAMPLE_RUN_GROUPS: usize = 2;

/// The rows [`check_sidecar_copy`] runs the GEMV on, as `(first row, rows)`
/// runs of an `n`-row matrix in groups of `factor` rows (`factor` 1: plain
/// rows): `G = n / factor` whole groups, at most [`SAMPLE_RUNS`] runs of
/// [`SAMPLE_RUN_GROUPS`] groups starting at groups `floor(i (G - 2) / 7)`,
/// `i = 0..8` (so the first and the last groups are in), the `n % factor`
/// tail rows added to the run that ends at the last group; every row when
/// there are at most 16 groups. Runs are disjoint and in order.
pub fn sample_runs(n: usize, factor: usize) -> Vec<(usize, usize)> {
    let factor = factor.max(1);
    let groups = n / factor;
    let per = SAMPLE_RUN_GROUPS;
    if groups <= SAMPLE_RUNS * per {
        return if n == 0 { vec![] } else { vec![(0, n)] };
    }
    let span = groups - per;
    let mut starts: Vec<usize> = (0..SAMPLE_RUNS)
        .map(|i| i * span / (SAMPLE_RUNS - 1))
        .collect();
    starts.dedup();
    starts
        .into_iter()
        .map(|g| {
            let rows = if g + per == groups {
                n - g * factor
            } else {
                per * factor
            };
            (g * factor, rows)
        })
        .collect()
}

/// Where block `b` of row `r` of an `n`-row matrix (`blocks` blocks of
/// `bb` bytes per row) lies in its sidecar layout (docs/FORMAT.md §sidecar):
/// rows in groups of `factor`, block `b` of the group's row `r % factor` at
/// slot `b * factor + r % factor` of the group; the rows after the last
/// whole group plain. Written from the format's text, apart from the
/// writer's and the kernels' code.
fn sidecar_block_offset(
    n: usize,
    r: usize,
    b: usize,
    blocks: usize,
    bb: usize,
    factor: usize,
) -> usize {
    let row_bytes = blocks * bb;
    if r >= n / factor * factor {
        r * row_bytes + b * bb
    } else {
        let g = r / factor;
        g * factor * row_bytes + (b * factor + r % factor) * bb
    }
}

/// The self-check of a ggml sidecar written from a quantized source
/// tensor by moving whole blocks (keep mode without `--qtype`), given the
/// file's bytes and `source`, the tensor's bytes as stored in the source:
///
/// - the container is validated as in [`check_container`];
/// - **every byte** of the data region is compared with the source: the
///   block at each position of the sidecar layout must be the source's
///   block of that row and column (`sidecar_block_offset`), so the file
///   holds exactly the source's weights (a problem names the first row
///   that differs);
/// - the kernels are run on the [`sample_runs`] rows of each matrix (of
///   each expert) on `isas`, each within the proven bound of the exact
///   reference, as [`check_container`] does on every row: that the
///   kernels read this layout right.
///
/// Cheaper than [`check_container`] (a byte comparison instead of the f64
/// reference on every row) and stronger on the file's content, which it
/// ties to the source.
pub fn check_sidecar_copy(bytes: &[u8], source: &[u8], isas: &[Isa]) -> FileCheck {
    let mut fc = FileCheck::default();
    let f = match WeightsFile::parse(bytes) {
        Ok(f) => f,
        Err(e) => {
            fc.problems.push(format!("container: {e}"));
            return fc;
        }
    };
    let Some(shape) = f.header().sidecar_shape() else {
        fc.problems.push("not a ggml sidecar".into());
        return fc;
    };
    let experts = shape.experts.map_or(1, |e| e as usize);
    let mats: Vec<GgmlMatrix<'_>> = match shape.experts {
        Some(_) => match GgmlExperts::from_file(&f) {
            Ok(ex) => (0..ex.experts())
                .filter_map(|e| ex.expert(e).ok())
                .collect(),
            Err(e) => {
                fc.problems.push(e.to_string());
                return fc;
            }
        },
        None => match GgmlMatrix::from_file(&f) {
            Ok(m) => vec![m],
            Err(e) => {
                fc.problems.push(e.to_string());
                return fc;
            }
        },
    };
    if mats.len() != experts {
        fc.problems
            .push("an expert matrix does not fit the file".into());
        return fc;
    }
    let m0 = mats[0];
    fc.kind = format!("{} {}", m0.format().ggml_type(), m0.layout().name());
    fc.shape = (m0.rows(), m0.cols());
    fc.experts = shape.experts.map(|e| e as usize);
    let factor = match m0.layout() {
        RowLayout::Interleaved(f) => f,
        RowLayout::RowMajor => 1,
    };
    let (n, bb) = (m0.rows(), m0.format().block_bytes());
    let blocks = m0.blocks_per_row();
    let row_bytes = blocks * bb;
    let data = f.data();
    if data.len() != source.len() || data.len() != experts * n * row_bytes {
        fc.problems.push(format!(
            "data is {} bytes, the source tensor {} ({} matrices of {n} rows of {row_bytes} bytes)",
            data.len(),
            source.len(),
            experts
        ));
        return fc;
    }
    'outer: for e in 0..experts {
        let (fd, sd) = (
            &data[e * n * row_bytes..(e + 1) * n * row_bytes],
            &source[e * n * row_bytes..(e + 1) * n * row_bytes],
        );
        for r in 0..n {
            for b in 0..blocks {
                let at = sidecar_block_offset(n, r, b, blocks, bb, factor);
                let want = &sd[r * row_bytes + b * bb..r * row_bytes + (b + 1) * bb];
                if fd[at..at + bb] != *want {
                    fc.problems.push(format!(
                        "data differs from the source tensor (first at {}row {r}, block {b})",
                        if experts > 1 {
                            format!("expert {e}, ")
                        } else {
                            String::new()
                        }
                    ));
                    break 'outer;
                }
            }
        }
    }
    // The sampled rows of every matrix, as sub-matrices over whole row
    // groups (the tail rows stay after the last group, as in the file).
    let x = activations(m0.cols());
    let mut subs: Vec<GgmlMatrix<'_>> = Vec::new();
    for m in &mats {
        for (first, rows) in sample_runs(n, factor) {
            match GgmlMatrix::new(
                m.format(),
                m.layout(),
                rows,
                m.cols(),
                &m.data()[first * row_bytes..(first + rows) * row_bytes],
            ) {
                Ok(s) => subs.push(s),
                Err(e) => {
                    fc.problems.push(e.to_string());
                    return fc;
                }
            }
        }
    }
    let mut all: Option<Reference> = None;
    for s in &subs {
        let r = match reference_with(&Matrix::Ggml(*s), &x, false) {
            Ok(r) => r,
            Err(err) => {
                fc.problems.push(format!("reference: {err}"));
                return fc;
            }
        };
        match &mut all {
            None => all = Some(r),
            Some(a) => {
                a.exact.extend(r.exact);
                a.bound.extend(r.bound);
                a.e2e.extend(r.e2e);
                a.act_ratio = a.act_ratio.max(r.act_ratio);
                a.nonfinite_weights += r.nonfinite_weights;
            }
        }
    }
    let Some(r) = all else {
        fc.problems.push("no rows".into());
        return fc;
    };
    if r.nonfinite_weights > 0 {
        fc.problems.push(format!(
            "{} decoded weights are not finite (corrupt block scale)",
            r.nonfinite_weights
        ));
    }
    fc.activation_ratio = Some(r.act_ratio);
    let gemvs: Vec<&dyn Gemv> = subs.iter().map(|m| m as &dyn Gemv).collect();
    run_tiers(&gemvs, &x, &r, isas, false, &mut fc);
    fc
}

/// Run `mats` (the rows of one file, in order) on every tier of `tiers`
/// and hold the concatenated result to `r` and to the scalar tier; with
/// `gemm`, also run the M = 2 GEMM against the GEMV.
fn run_tiers(
    mats: &[&dyn Gemv],
    x: &[f32],
    r: &Reference,
    tiers: &[Isa],
    gemm: bool,
    fc: &mut FileCheck,
) {
    let rows: usize = mats.iter().map(|m| m.rows()).sum();
    let mut ws = Workspace::new();
    let mut scalar_bits: Option<Vec<u32>> = None;
    let mut runs = Vec::new();
    for &isa in tiers {
        let mut y = vec![0f32; rows];
        let mut error = None;
        let mut at = 0;
        for m in mats {
            let res = m.gemv(x, &mut y[at..at + m.rows()], &mut ws, Exec::new(isa, true));
            at += m.rows();
            if let Err(e) = res {
                error = Some(e.to_string());
                break;
            }
        }
        if isa == Isa::Scalar && error.is_none() {
            scalar_bits = Some(y.iter().map(|v| v.to_bits()).collect());
        }
        let gemm = (gemm && error.is_none()).then(|| gemm_matches(mats, x, &y, isa, &mut ws));
        runs.push((isa, y, error, gemm));
    }
    for (isa, y, error, gemm_identical) in runs {
        let identical_to_scalar = match (&scalar_bits, isa) {
            (Some(s), i) if i != Isa::Scalar && error.is_none() => {
                Some(y.iter().map(|v| v.to_bits()).eq(s.iter().copied()))
            }
            _ => None,
        };
        fc.isas.push(IsaCheck {
            isa,
            exact: compare_exact(&y, r),
            e2e: compare(&y, &r.e2e),
            identical_to_scalar,
            gemm_identical,
            error,
        });
    }
}

/// Rows of the GEMM [`check_container`] runs per file on a tier with
/// multi-row kernels: a 16-row tile of the SME2 kernel plus one, so also
/// 4 / 8-row runs of the AVX2 / NEON kernels and their tails, and the
/// multi-row path of every ggml format.
pub const GEMM_ROWS: usize = 17;

/// Rows of that GEMM on a tier without multi-row kernels (`scalar`,
/// `avx512`), whose GEMM is the GEMV per row: enough for the driver.
pub const GEMM_ROWS_PER_ROW_TIERS: usize = 2;

/// The GEMM rows [`check_container`] runs on `isa`.
pub fn gemm_rows(isa: Isa) -> usize {
    match kernels::dispatch::kernels(isa) {
        Ok(k) if k.has_gemm() => GEMM_ROWS,
        _ => GEMM_ROWS_PER_ROW_TIERS,
    }
}

/// The M > 1 case: a GEMM of the [`gemm_rows`] rows `x, -x, x, -x, ..`
/// on `isa` must give `y` (the GEMV's result) in the even rows and `-y`
/// in the odd ones, bit for bit but for the sign of zeros (kernels'
/// `Gemv::gemm` contract: row `i` is the GEMV of row `i`). Negation is
/// exact through every activation quantizer (Q8_0 and Q8_K scales change
/// sign, CQ4 rotations and the round-half-even group quantizer are odd
/// functions) and every f32 operation after it, so a correct kernel
/// always passes; a kernel that mixes up rows, or tiles, fails. A zero
/// sum is +0.0 for `x` and `-x` alike, hence the sign exception. An error
/// counts as a mismatch.
fn gemm_matches(mats: &[&dyn Gemv], x: &[f32], y: &[f32], isa: Isa, ws: &mut Workspace) -> bool {
    let rows = gemm_rows(isa);
    let neg: Vec<f32> = x.iter().map(|v| -v).collect();
    let xs: Vec<f32> = (0..rows)
        .flat_map(|i| if i % 2 == 0 { x } else { &neg[..] })
        .copied()
        .collect();
    let mut at = 0;
    for m in mats {
        let n = m.rows();
        let mut ys = vec![0f32; rows * n];
        if m.gemm(rows, &xs, &mut ys, ws, Exec::new(isa, true))
            .is_err()
        {
            return false;
        }
        let want = &y[at..at + n];
        for (i, row) in ys.chunks_exact(n).enumerate() {
            let same = row.iter().zip(want).all(|(&a, &b)| {
                let a = if i % 2 == 0 { a } else { -a };
                a.to_bits() == b.to_bits() || (a == 0.0 && b == 0.0)
            });
            if !same {
                return false;
            }
        }
        at += n;
    }
    true
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
    fn plain(shape: &[u64]) -> kernels::aligned::AlignedBytes {
        let n: u64 = shape.iter().product();
        let mut b = prefix(&Header::plain(Precision::Fp16, shape, 2 * n), &[]).unwrap();
        b.resize(b.len() + 2 * n as usize, 0);
        kernels::aligned::AlignedBytes::copy_of(&b)
    }

    /// A Q8_0 R8 expert sidecar `[e, n, 64]` of Gaussian-ish weights.
    fn experts_file(e: usize, n: usize) -> Vec<u8> {
        use ggml_quants::GgmlType;
        use weights_file::{interleave, Interleave, SidecarShape};
        let k = 64;
        let shape = SidecarShape::experts(e as u64, n as u64, k as u64);
        let h = Header::sidecar_of(GgmlType::Q8_0, Interleave::R8, shape).unwrap();
        let mut b = prefix(&h, &[]).unwrap();
        let rb = 2 * 34;
        for ex in 0..e {
            let w: Vec<f32> = (0..n * k)
                .map(|i| ((i * 37 + ex * 11) % 23) as f32 / 23.0 - 0.5)
                .collect();
            let mut q = vec![0u8; n * rb];
            ggml_quants::quantize_rows(GgmlType::Q8_0, &w, k, &mut q).unwrap();
            let mut il = vec![0u8; q.len()];
            interleave::repack(&q, n, rb, 34, 8, &mut il).unwrap();
            b.extend_from_slice(&il);
        }
        b
    }

    /// A Q4_0 sidecar (factor `f`) of an `n x 64` matrix (2 blocks per
    /// row) made by the writer's repack, and its source bytes.
    fn q4_0_sidecar(n: usize, f: usize, experts: usize) -> (Vec<u8>, Vec<u8>) {
        use ggml_quants::GgmlType;
        use weights_file::{interleave, Interleave, SidecarShape};
        let k = 64;
        let rb = 2 * 18;
        let shape = if experts > 1 {
            SidecarShape::experts(experts as u64, n as u64, k as u64)
        } else {
            SidecarShape::matrix(n as u64, k as u64)
        };
        let il = if f == 4 {
            Interleave::R4
        } else {
            Interleave::R8
        };
        let h = Header::sidecar_of(GgmlType::Q4_0, il, shape).unwrap();
        let mut b = prefix(&h, &[]).unwrap();
        let mut src = Vec::new();
        for e in 0..experts {
            let w: Vec<f32> = (0..n * k)
                .map(|i| ((i * 31 + e * 7) % 29) as f32 / 29.0 - 0.5)
                .collect();
            let mut q = vec![0u8; n * rb];
            ggml_quants::quantize_rows(GgmlType::Q4_0, &w, k, &mut q).unwrap();
            let mut il = vec![0u8; q.len()];
            interleave::repack(&q, n, rb, 18, f, &mut il).unwrap();
            b.extend_from_slice(&il);
            src.extend_from_slice(&q);
        }
        (b, src)
    }

    #[test]
    fn sample_runs_cover_first_last_and_tail() {
        assert_eq!(sample_runs(0, 8), vec![]);
        assert_eq!(sample_runs(100, 8), vec![(0, 100)]);
        assert_eq!(sample_runs(131, 8), vec![(0, 131)]);
        for (n, f) in [
            (4096usize, 8usize),
            (4099, 8),
            (1003, 4),
            (139, 8),
            (10_000, 1),
        ] {
            let runs = sample_runs(n, f);
            assert!(runs.len() <= SAMPLE_RUNS, "{n} {f}");
            assert_eq!(runs[0].0, 0);
            let (a, r) = *runs.last().unwrap();
            assert_eq!(a + r, n, "{n} {f}: ends at the last row");
            for w in runs.windows(2) {
                assert!(w[0].0 + w[0].1 <= w[1].0, "{n} {f}: disjoint, in order");
            }
            for &(a, r) in &runs {
                assert_eq!(a % f, 0);
                assert!(r >= SAMPLE_RUN_GROUPS * f && r < (SAMPLE_RUN_GROUPS + 1) * f);
            }
        }
    }

    #[test]
    fn sidecar_copies_are_checked_byte_for_byte_and_sampled() {
        for (n, f, e) in [
            (8usize, 8usize, 1usize),
            (13, 4, 1),
            (300, 8, 1),
            (203, 8, 3),
        ] {
            let (b, src) = q4_0_sidecar(n, f, e);
            let fc = check_sidecar_copy(&b, &src, &kernels::available());
            assert!(fc.pass(), "{n} {f} {e}: {fc:?}");
            assert_eq!(fc.shape, (n, 64));
            assert_eq!(fc.isas.len(), kernels::available().len());
            // One changed byte of the data anywhere (here: the last one, a
            // tail row or the last group) is found.
            let mut bad = b.clone();
            let last = bad.len() - 1;
            bad[last] ^= 0x10;
            let fc = check_sidecar_copy(&bad, &src, &[Isa::Scalar]);
            assert!(!fc.pass());
            assert!(fc.problems[0].contains("differs from the source"), "{fc:?}");
            // Two blocks of a group swapped: same bytes, wrong places.
            let mut swapped = b.clone();
            let d = swapped.len() - e * n * 36;
            let (x, y) = (d, d + 18);
            for i in 0..18 {
                swapped.swap(x + i, y + i);
            }
            if swapped != b {
                let fc = check_sidecar_copy(&swapped, &src, &[Isa::Scalar]);
                assert!(fc.problems[0].contains("row 0"), "{fc:?}");
            }
            // Not this tensor's source.
            let fc = check_sidecar_copy(&b, &src[..src.len() - 36], &[Isa::Scalar]);
            assert!(!fc.pass());
        }
    }

    /// A matrix whose GEMM swaps output rows `a` and `b` of `Y` (a kernel
    /// that mixed up activation rows).
    struct Swapped<'a> {
        inner: &'a dyn Gemv,
        a: usize,
        b: usize,
    }

    impl Gemv for Swapped<'_> {
        fn dims(&self) -> kernels::Dims {
            self.inner.dims()
        }
        fn gemm_sized(
            &self,
            m: usize,
            x: &[f32],
            y: &mut [f32],
            ws: &mut Workspace,
            exec: Exec,
        ) -> kernels::GemvResult {
            self.inner.gemm(m, x, y, ws, exec)?;
            let n = self.rows();
            if m > self.a.max(self.b) {
                for c in 0..n {
                    y.swap(self.a * n + c, self.b * n + c);
                }
            }
            Ok(())
        }
    }

    #[test]
    fn the_gemm_check_passes_a_correct_matrix_and_catches_mixed_rows() {
        use kernels::{FloatMatrix, FloatType};
        let (n, k) = (5, 40);
        let w: Vec<u8> = (0..n * k)
            .flat_map(|i| ((i % 7) as f32 - 3.0).to_le_bytes())
            .collect();
        let mat = FloatMatrix::new(FloatType::F32, n, k, &w).unwrap();
        let x = activations(k);
        let mut ws = Workspace::new();
        let mut y = vec![0f32; n];
        mat.gemv(&x, &mut y, &mut ws, Exec::new(Isa::Scalar, false))
            .unwrap();
        assert_eq!(gemm_rows(Isa::Scalar), GEMM_ROWS_PER_ROW_TIERS);
        for isa in kernels::available() {
            let rows = gemm_rows(isa);
            assert!(gemm_matches(&[&mat], &x, &y, isa, &mut ws), "{isa}");
            // Rows of opposite sign swapped are caught; rows of the same
            // sign (both x, or both -x) are the same values, so they are not.
            let mut cases = vec![(0, 1, true)];
            if rows == GEMM_ROWS {
                cases.extend([(4, 15, true), (0, 2, false), (3, 5, false)]);
            }
            for (a, b, caught) in cases {
                let s = Swapped { inner: &mat, a, b };
                assert_eq!(
                    gemm_matches(&[&s], &x, &y, isa, &mut ws),
                    !caught,
                    "{isa}: rows {a} and {b}"
                );
            }
        }
    }

    #[test]
    fn expert_sidecars_check_every_expert() {
        let (e, n) = (3, 10);
        let b = experts_file(e, n);
        let fc = check_container(&b, &kernels::available());
        assert!(fc.pass(), "{fc:?}");
        assert_eq!((fc.experts, fc.shape), (Some(e), (n, 64)));
        assert_eq!(fc.kind, "Q8_0 r8");
        // An infinite block scale in the last row of the last expert (a
        // tail row: plain row-major) is found.
        let mut bad = b.clone();
        let last_block = bad.len() - 34;
        bad[last_block..last_block + 2].copy_from_slice(&0x7C00u16.to_le_bytes());
        let fc = check_container(&bad, &[Isa::Scalar]);
        assert!(!fc.pass());
        assert!(
            fc.problems.iter().any(|p| p.contains("not finite")),
            "{fc:?}"
        );
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
