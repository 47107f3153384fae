//! GEMV kernels over every layout `convert` writes: CQ4 packed panels (both
//! rotation families), ggml Q8_0 / Q5_0 / Q4_K / Q5_K / Q6_K in plain
//! row-major and R4 / R8 row-interleaved layouts, and plain FP16 / FP32.
//!
//! - [`scalar`]: the reference kernels. Written for clarity, they *define*
//!   the results: every SIMD path equals them bit for bit (integer parts
//!   exact in i32, one documented f32 operation order, no FMA; see
//!   [`mod@format`] and [`scalar::cq4_superblock`]).
//! - [`x86::avx2`], `x86::avx512` (VNNI): `#[target_feature]` kernels with the
//!   scalar signatures; [`dispatch`] picks a tier at run time
//!   (`is_x86_feature_detected!`, cached; `CONVERT_FORCE_ISA` caps it).
//! - `aarch64::neon` (`sdot`), `aarch64::sme2` (SME2 `luti4` + ZA `sdot`
//!   for the CQ4 panels): the aarch64 tiers, same signatures, same bits.
//! - [`GgmlMatrix`], [`PanelMatrix`], [`FloatMatrix`]: zero-copy views over
//!   container regions implementing [`Gemv`]; activations are quantized once
//!   per call into a reusable [`Workspace`] (ISA-independent), then output
//!   rows are split over rayon in multiples of 8 rows / 64-row super-blocks.
//!   A row's result never depends on the split, the layout or the tier.
//! - [`oracle`]: dequantize-then-f64 references and error statistics;
//!   [`check`]: the per-file verification `convert verify` runs.
//!
//! The crate never reads files and never allocates inside kernel loops.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(target_arch = "aarch64")]
pub mod aarch64;
pub mod act;
pub mod aligned;
pub mod blocks;
pub mod check;
pub mod dispatch;
mod error;
pub mod float;
pub mod format;
pub mod ggml;
pub mod oracle;
pub mod panel;
pub mod reference;
pub mod scalar;
mod workspace;
#[cfg(target_arch = "x86_64")]
pub mod x86;

pub use dispatch::{available, best, Exec, Isa};
pub use error::KernelError;
pub use float::{FloatMatrix, FloatType};
pub use ggml::{GgmlMatrix, QuantFormat, RowLayout};
pub use panel::{Family, PanelMatrix};
pub use workspace::Workspace;

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

/// Any matrix a container can hold.
#[derive(Debug, Clone)]
pub enum Matrix<'a> {
    /// A ggml sidecar (or plain ggml rows).
    Ggml(GgmlMatrix<'a>),
    /// A CQ4 packed-panel tensor.
    Panel(PanelMatrix<'a>),
    /// A plain FP16 / FP32 tensor.
    Float(FloatMatrix<'a>),
}

impl<'a> Matrix<'a> {
    /// The matrix of a parsed container, by its precision.
    pub fn from_file(f: &weights_file::WeightsFile<'a>) -> Result<Self, KernelError> {
        use weights_file::Precision;
        match f.header().precision() {
            Some(Precision::Ggml(_)) => GgmlMatrix::from_file(f).map(Matrix::Ggml),
            Some(Precision::Cq(_)) => PanelMatrix::from_file(f).map(Matrix::Panel),
            Some(Precision::Fp16 | Precision::Fp32) => FloatMatrix::from_file(f).map(Matrix::Float),
            _ => Err(KernelError::Unsupported(format!(
                "precision {:#x}",
                f.header().precision
            ))),
        }
    }

    /// The matrix as a `dyn Gemv`.
    pub fn as_gemv(&self) -> &dyn Gemv {
        match self {
            Matrix::Ggml(m) => m,
            Matrix::Panel(m) => m,
            Matrix::Float(m) => m,
        }
    }
}
