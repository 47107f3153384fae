//! GEMV (`y = W x`) and GEMM (`Y = X W^T`) kernels over every layout
//! `convert` writes: CQ4 packed panels (both rotation families), ggml Q8_0 /
//! Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q4_K / Q5_K / Q6_K / Q2_K / Q3_K / IQ4_NL /
//! IQ4_XS in plain row-major and R4 / R8 row-interleaved layouts, and plain
//! FP16 / FP32; scalar reference, AVX2, AVX-512 VNNI, NEON and SME2 tiers,
//! chosen at run time, all bit-identical.
//!
//! # Embedding API
//!
//! An engine maps a `.weights` file, views it as a [`Matrix`] (zero-copy:
//! the view borrows the mapped bytes), keeps one [`Workspace`] per calling
//! thread, and calls [`Gemv::gemv`] / [`Gemv::gemm`] with an [`Exec`]:
//!
//! ```no_run
//! use kernels::{Exec, Gemv, Matrix, Workspace};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let bytes = std::fs::read("layer_0_attn_q.cq4p.weights")?; // or a memory map
//! let matrix = Matrix::parse(&bytes)?;         // validates the container, borrows `bytes`
//! let w = matrix.as_gemv();
//! let (n, k) = (w.rows(), w.cols());           // CQ4: k is Kp, zero-pad x beyond the model's K
//! let mut ws = Workspace::new();               // scratch; reuse it, calls then allocate nothing
//! let exec = Exec::best();                     // fastest tier here, rows split over rayon
//!
//! let x = vec![0.5f32; k];
//! let mut y = vec![0f32; n];
//! w.gemv(&x, &mut y, &mut ws, exec)?;          // y = W x
//!
//! let m = 16;                                  // a prefill batch
//! let xs = vec![0.5f32; m * k];                // X: m x k, row-major
//! let mut ys = vec![0f32; m * n];              // Y: m x n, row-major
//! w.gemm(m, &xs, &mut ys, &mut ws, exec)?;     // Y = X W^T; row i == gemv(row i), bit for bit
//! # Ok(())
//! # }
//! ```
//!
//! The stable surface for engines (the `embed` example runs it on a
//! bundle: `cargo run --release -p kernels --example embed -- BUNDLE`):
//!
//! - Matrix views: [`Matrix::parse`] (any container) or, from a parsed
//!   [`weights_file::WeightsFile`], [`Matrix::from_file`],
//!   [`GgmlMatrix::from_file`], [`PanelMatrix::from_file`],
//!   [`FloatMatrix::from_file`], [`GgmlExperts::from_file`] (3-D MoE
//!   sidecars; [`GgmlExperts::expert`] is a [`GgmlMatrix`]). Each also has a
//!   `new` over raw regions. [`Matrix::kind`] names what a file holds.
//! - [`Gemv`]: `rows`, `cols`, `weight_bytes`, `gemv`, `gemm`. Results are
//!   deterministic: the same on every tier, with any thread count, and row
//!   `i` of a GEMM equals the GEMV of row `i` bit for bit, for any `m`.
//!   Wrong lengths return [`KernelError::Length`]; non-finite activations
//!   [`KernelError::Activation`]; nothing panics on bad file bytes (views
//!   validate them when built).
//! - [`Workspace`]: activation scratch of one caller (`Send`, not shared
//!   between concurrent calls). Buffers only grow.
//! - Dispatch: [`Exec`] (`isa`, `parallel`), [`Isa`], [`available`],
//!   [`best`]; `parallel` splits output rows over the *current* rayon pool
//!   (run the call inside `pool.install(..)` to use an engine's own pool).
//!   `CONVERT_FORCE_ISA=scalar|avx2|avx512|neon|sme2` caps the tiers.
//! - [`KernelError`] (with [`KernelError::is_bad_input`]).
//!
//! Everything else public ([`dispatch`]'s per-block kernel tables,
//! [`operands`], [`act`], [`scalar`], the tier modules, [`blocks`],
//! [`mod@format`]) is the machinery `convert verify` and the tests reach into;
//! it is documented but may change between versions.
//!
//! # Modules
//!
//! - [`scalar`]: the reference kernels. Written for clarity, they *define*
//!   the results: every SIMD path equals them bit for bit (integer parts
//!   exact in i32, one documented f32 operation order, no FMA; see
//!   [`mod@format`] and [`scalar::cq4_superblock`]).
//! - [`x86::avx2`], `x86::avx512` (VNNI): `#[target_feature]` kernels with the
//!   scalar signatures; [`dispatch`] picks a tier at run time
//!   (`is_x86_feature_detected!`, cached; `CONVERT_FORCE_ISA` caps it).
//!   [`x86::avx2_gemm`]: the multi-row (GEMM) kernels of the AVX2 tier.
//! - `aarch64::neon` (`sdot`), `aarch64::sme2` (SME2 `luti4` + ZA `sdot`
//!   for the CQ4 panels): the aarch64 tiers, same signatures, same bits;
//!   `aarch64::neon_gemm`, `aarch64::sme2_gemm` (`smopa` into ZA): their
//!   multi-row kernels.
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
//! (`weights-file`, re-exported as [`weights_file`]) and the ggml block
//! formats (`ggml-quants`) only, so an engine embedding it pulls in no
//! quantizer. It never reads files and never allocates inside kernel loops.
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
mod act_isa;
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
pub use weights_file;
pub use weights_file::panel::RotationFamily;
pub use weights_file::PanelView;
pub use workspace::Workspace;
