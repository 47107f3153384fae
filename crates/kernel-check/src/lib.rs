//! What `convert verify` runs on each file of a bundle, and what the kernel
//! tests hold every tier to.
//!
//! - [`reference`](mod@reference): the exact f64 reference of a GEMV (the kernel's own
//!   quantized activations, weights from an independent decoder) with a
//!   rounding bound proven for any data, and the end-to-end value with the
//!   unquantized activations.
//! - [`rotation`]: the CQ4 activation rotation in f64 with its f32 error
//!   bound, and the factored rotation of the end-to-end oracle.
//! - [`oracle`]: dequantize-then-f64 GEMV oracles and error statistics.
//! - [`check`]: the per-file verification (container, references, every
//!   tier bit for bit against scalar, embedding rows).
//!
//! Kept apart from `kernels` so that an engine embedding the kernels does
//! not pull in the quantizer (`cq4`), which the checks need for qdq.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod bounds;
pub mod check;
pub mod oracle;
pub mod reference;
pub mod rotation;

pub use check::{check_container, FileCheck, IsaCheck};
pub use reference::{compare_exact, reference, ExactStats, Reference};
