//! GEMV (and GEMM, `Gemv::gemm`) kernels over every layout `convert` writes: CQ4 packed panels (both
//! rotation families), ggml Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q4_K / Q5_K / Q6_K / Q2_K / Q3_K / IQ4_NL / IQ4_XS in plain
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
//! - [`GgmlExperts`]: the experts of a 3-D MoE sidecar; each
//!   [`GgmlExperts::expert`] is a [`GgmlMatrix`] over that expert's bytes.
//! - [`GgmlMatrix`], [`PanelMatrix`], [`FloatMatrix`]: zero-copy views over
//!   container regions implementing [`Gemv`]; activations are quantized once
//!   per call into a reusable [`Workspace`] (ISA-independent), then output
//!   rows are split over rayon in multiples of 8 rows / 64-row super-blocks.
//!   A row's result never depends on the split, the layout or the tier.
//! - [`isa`] (detection, `CONVERT_FORCE_ISA`), [`table`] (the kernel
//!   signatures), [`operands`] (what the kernels take): leaf modules; the
//!   drivers build operands and call through [`dispatch`]'s tables.
//!
//! The references kernels are checked against (and `convert verify`) are
//! in the `kernel-check` crate; this crate depends on the container
//! (`weights-file`) and the ggml block formats (`ggml-quants`) only, so an
//! engine embedding it pulls in no quantizer. It never reads files and never
//! allocates inside kernel loops.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

/// Two public group kernels of one SIMD tier that forward to one shared
/// const-generic body (`$body::<false>`, `$body::<true>`), with the tier's
/// target features `$feat` and the body's contract.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
macro_rules! forward_pair {
    ($feat:literal, $act:ty, $body:ident, $(#[$d0:meta])* $f0:ident, $(#[$d1:meta])* $f1:ident) => {
        forward_pair!(@one $feat, $act, $body, false, $(#[$d0])* $f0);
        forward_pair!(@one $feat, $act, $body, true, $(#[$d1])* $f1);
    };
    (@one $feat:literal, $act:ty, $body:ident, $flag:literal, $(#[$d:meta])* $f:ident) => {
        $(#[$d])*
        ///
        /// # Safety
        #[doc = concat!("The CPU must support the target features `", $feat, "`.")]
        #[target_feature(enable = $feat)]
        pub unsafe fn $f(g: &$crate::operands::RowGroup<'_>, act: &[$act], out: &mut [f32; 8]) {
            // SAFETY: the caller upholds the body's contract (same features).
            unsafe { $body::<$flag>(g, act, out) }
        }
    };
}

#[cfg(target_arch = "aarch64")]
pub mod aarch64;
pub mod act;
pub mod aligned;
pub mod blocks;
pub mod dispatch;
mod error;
pub mod float;
pub mod format;
mod gemv;
pub mod ggml;
pub mod isa;
mod matrix;
pub mod operands;
pub mod panel;
pub mod scalar;
pub mod table;
mod workspace;
#[cfg(target_arch = "x86_64")]
pub mod x86;

pub use dispatch::{available, best, Exec, Isa};
pub use error::{check_len, KernelError};
pub use float::{FloatMatrix, FloatType};
pub use gemv::{Dims, Gemv, GemvResult};
pub use ggml::{GgmlExperts, GgmlMatrix, QuantFormat, RowLayout};
pub use matrix::Matrix;
pub use panel::PanelMatrix;
pub use weights_file::panel::RotationFamily;
pub use weights_file::PanelView;
pub use workspace::Workspace;
