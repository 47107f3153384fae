//! The [`Gemv`] trait every matrix view implements.

use crate::dispatch::Exec;
use crate::error::KernelError;
use crate::workspace::Workspace;

/// `y = W x` for one activation vector.
pub trait Gemv: Sync {
    /// Output rows `N`.
    fn rows(&self) -> usize;
    /// Input columns (`K`; `Kp`, the padded width, for CQ4: callers zero-pad `x`).
    fn cols(&self) -> usize;
    /// Bytes of weight data a call streams (for throughput figures).
    fn weight_bytes(&self) -> usize;
    /// `y = W x`. `x.len() == cols()`, `y.len() == rows()`.
    fn gemv(
        &self,
        x: &[f32],
        y: &mut [f32],
        ws: &mut Workspace,
        exec: Exec,
    ) -> Result<(), KernelError>;
}
