//! Reusable per-caller scratch: quantized activations. Buffers only grow, so
//! a caller that keeps one `Workspace` allocates nothing after the first
//! call of each shape.

use crate::act::{ActQ8_0, BlockQ8K};

/// Scratch buffers of one GEMV caller (not shared between threads; the
/// kernels read them while running in parallel).
#[derive(Debug, Default, Clone)]
pub struct Workspace {
    pub(crate) q8_0: Vec<ActQ8_0>,
    pub(crate) q8_k: Vec<BlockQ8K>,
    pub(crate) cq4: Cq4Scratch,
    /// GEMM outputs by weight group (`[group][M][rows per group]`, the
    /// multi-row kernels' tiles), copied into `Y` at the end.
    pub(crate) yt: Vec<f32>,
}

#[derive(Debug, Default, Clone)]
pub(crate) struct Cq4Scratch {
    pub(crate) z: Vec<f32>,
    pub(crate) q: Vec<i8>,
    pub(crate) scale: Vec<f32>,
    pub(crate) qsum: Vec<i32>,
    /// The quants of a GEMM's rows interleaved for the multi-row kernels
    /// ([`crate::act::Cq4Rows`]).
    pub(crate) packed: Vec<i8>,
}

impl Workspace {
    /// An empty workspace.
    pub fn new() -> Self {
        Self::default()
    }
}
