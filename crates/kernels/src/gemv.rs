//! The [`Gemv`] trait every matrix view implements.

use crate::dispatch::Exec;
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

/// `y = W x` for one activation vector.
pub trait Gemv: Sync {
    /// The matrix's sizes.
    fn dims(&self) -> Dims;
    /// `y = W x` with `x.len() == cols()` and `y.len() == rows()` already
    /// checked by [`Gemv::gemv`].
    fn gemv_sized(&self, x: &[f32], y: &mut [f32], ws: &mut Workspace, e: Exec) -> GemvResult;

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
        self.gemv_sized(x, y, ws, exec)
    }
}
