//! The [`Gemv`] trait every matrix view implements: `y = W x` for one
//! activation vector, and the GEMM `Y[M x N] = X[M x K] W^T` for `M` of
//! them at once.
//!
//! # GEMM results
//!
//! Row `m` of a GEMM is, bit for bit, the GEMV of row `m` of `X`, on every
//! tier: activations are quantized per row exactly as a GEMV does, and each
//! kernel call computes one weight group against one activation row with
//! the GEMV kernels themselves. What the GEMM changes is the order of
//! work: ggml and CQ4 matrices take each weight group (8 rows, or a
//! 64-channel super-block) once and run it against all `M` rows while it is
//! in cache ("weight-stationary"), so the weights stream from memory once
//! per call instead of `M` times.

use crate::dispatch::{split_rows, Exec};
use crate::error::{check_len, KernelError};
use crate::workspace::Workspace;

/// What a GEMV returns.
pub type GemvResult = Result<(), KernelError>;

/// A matrix's sizes, as [`Gemv::dims`] reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Output rows `N`.
    pub rows: usize,
    /// Input columns (`K`; `Kp`, the padded width, for CQ4: callers zero-pad `x`).
    pub cols: usize,
    /// Bytes of weight data a call streams (for throughput figures).
    pub weight_bytes: usize,
}

impl Dims {
    /// `rows x cols`, streaming `weight_bytes` per call.
    pub const fn new(rows: usize, cols: usize, weight_bytes: usize) -> Dims {
        Dims {
            rows,
            cols,
            weight_bytes,
        }
    }
}

/// `y = W x` for one activation vector, `Y = X W^T` for several.
pub trait Gemv: Sync {
    /// The matrix's sizes.
    fn dims(&self) -> Dims;
    /// `Y = X W^T` for `m >= 1` rows, lengths already checked by
    /// [`Gemv::gemm`] / [`Gemv::gemv`] (`m = 1`): the one method a matrix
    /// implements.
    fn gemm_sized(
        &self,
        m: usize,
        x: &[f32],
        y: &mut [f32],
        ws: &mut Workspace,
        exec: Exec,
    ) -> GemvResult;

    /// Output rows `N`.
    fn rows(&self) -> usize {
        self.dims().rows
    }
    /// Input columns (`K`; `Kp`, the padded width, for CQ4: callers zero-pad `x`).
    fn cols(&self) -> usize {
        self.dims().cols
    }
    /// Bytes of weight data a call streams (for throughput figures).
    fn weight_bytes(&self) -> usize {
        self.dims().weight_bytes
    }
    /// `y = W x`. `x.len() == cols()`, `y.len() == rows()`, else
    /// [`KernelError::Length`].
    fn gemv(&self, x: &[f32], y: &mut [f32], ws: &mut Workspace, exec: Exec) -> GemvResult {
        check_len("x", self.cols(), x.len())?;
        check_len("y", self.rows(), y.len())?;
        self.gemm_sized(1, x, y, ws, exec)
    }

    /// `Y[m x rows()] = X[m x cols()] W^T`, both row-major: `x.len() == m *
    /// cols()`, `y.len() == m * rows()`, else [`KernelError::Length`]. Row
    /// `i` of `Y` equals [`Gemv::gemv`] of row `i` of `X` bit for bit.
    fn gemm(
        &self,
        m: usize,
        x: &[f32],
        y: &mut [f32],
        ws: &mut Workspace,
        exec: Exec,
    ) -> GemvResult {
        let size = |what: &str, per_row: usize| {
            m.checked_mul(per_row)
                .ok_or_else(|| KernelError::Shape(format!("{what}: {m} x {per_row} overflows")))
        };
        check_len("x (m x cols)", size("x", self.cols())?, x.len())?;
        check_len("y (m x rows)", size("y", self.rows())?, y.len())?;
        if m == 0 {
            return Ok(());
        }
        self.gemm_sized(m, x, y, ws, exec)
    }
}

/// Activation rows per call of a multi-row (GEMM) kernel: each weight
/// group is decoded once per this many rows of `X`. A multiple of
/// [`crate::act::CQ4_TILE_ROWS`].
pub(crate) const GEMM_ROWS: usize = 64;

/// The GEMM driver of the ggml and CQ4 matrices: `Y` (`m x n`, row-major)
/// from weight groups of `U` rows. `tile(row0, i0, rows, out)` runs the
/// group whose first row is `row0` against activation rows `i0..i0 + rows`
/// (`rows <= GEMM_ROWS`) into `out[U * i + r]` (`out.len() == U * rows`,
/// every value written; of each row the first `min(U, n - row0)` values
/// are kept). With `m == 1` the results go straight into `y`; otherwise
/// into `yt`, laid out `[group][m][U]`, so a task owns whole groups for
/// every activation row and the kernels write their tiles in place; the
/// rows are copied into `Y` at the end. Each group runs against all `m`
/// rows (in chunks of `GEMM_ROWS`) before the next one: the weights
/// stream from memory once per call.
pub(crate) fn weight_stationary<const U: usize>(
    m: usize,
    y: &mut [f32],
    yt: &mut Vec<f32>,
    exec: Exec,
    tile: impl Fn(usize, usize, usize, &mut [f32]) + Sync,
) {
    if m == 1 {
        split_rows(y, U, exec, |first, ys| {
            for (gi, yc) in ys.chunks_mut(U).enumerate() {
                let mut out = [0.0f32; U];
                tile(first + gi * U, 0, 1, &mut out);
                yc.copy_from_slice(&out[..yc.len()]);
            }
        });
        return;
    }
    let n = y.len() / m;
    let need = n.div_ceil(U) * U * m;
    if yt.len() < need {
        yt.resize(need, 0.0);
    }
    let yt = &mut yt[..need];
    split_rows(yt, U * m, exec, |first, ts| {
        for (gi, tc) in ts.chunks_exact_mut(U * m).enumerate() {
            let row0 = (first / (U * m) + gi) * U;
            for i0 in (0..m).step_by(GEMM_ROWS) {
                let mc = GEMM_ROWS.min(m - i0);
                tile(row0, i0, mc, &mut tc[U * i0..U * (i0 + mc)]);
            }
        }
    });
    for (g, block) in yt.chunks_exact(U * m).enumerate() {
        let (row0, rows) = (g * U, U.min(n - g * U));
        for (i, o) in block.chunks_exact(U).enumerate() {
            y[i * n + row0..i * n + row0 + rows].copy_from_slice(&o[..rows]);
        }
    }
}
