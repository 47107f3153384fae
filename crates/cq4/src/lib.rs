//! CQ4: deterministic 4-bit codebook quantization of weight matrices into the
//! packed-panel layout of `.cq4p.weights` files.
//!
//! The normative description of every stored byte is `docs/FORMAT.md` §CQ4 packed panels.
//! In short: per group (Hadamard family, 128 columns) or per row (orthogonal
//! family) the weights are normalized by their L2 norm, rotated, and each
//! rotated coordinate is replaced by the index of the nearest entry of a
//! Lloyd–Max codebook. Every arithmetic step is an IEEE-754 basic operation in
//! a documented order, so the bytes do not depend on the thread count or the
//! CPU, and an independent implementation can reproduce them.
//!
//! - [`Bundle`]: per-bundle seed, Hadamard parameters, cached codebooks and
//!   orthogonal rotations.
//! - [`PanelEncoder`]: one tensor; [`PanelEncoder::encode_superblocks`] streams
//!   whole 64-row super-blocks into caller buffers,
//!   [`PanelEncoder::scales_blob`] builds the scales region.
//! - [`PanelTensorView`], [`qdq`], [`embedding_row`]: validate and dequantize
//!   a written tensor with the same arithmetic the encoder uses.
#![deny(missing_docs)]
// `unsafe` only in the SIMD kernels (`simd/{avx2,avx512,neon}.rs`,
// which allow it), every block with a `// SAFETY:` comment.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod awq;
pub mod codebook;
mod decode;
mod encode;
mod error;
pub mod gptq;
pub mod hadamard;
mod hadamard_quant;
pub mod importance;
pub mod orthogonal;
pub mod rng;
pub mod simd;

pub use codebook::Codebook;
pub use decode::{embedding_row, qdq, PanelTensorView};
pub use encode::{Bundle, PanelEncoder, NORM_FLOOR};
pub use error::Cq4Error;
pub use hadamard::HadamardRotation;
pub use orthogonal::OrthogonalRotation;
pub use rng::{SplitMix64, DEFAULT_SEED};
pub use simd::{EncodeIsa, ALL_ENCODE_ISAS};
/// fp16 conversions (the container's; re-exported for the encoder's users).
pub use weights_file::fp16;
pub use weights_file::panel::{PanelError, PanelGeometry, RotationFamily as Family};
/// Group size of both families (orthogonal: "virtual" groups of the kernels).
pub use weights_file::panel_view::GROUP as GROUP_SIZE;
