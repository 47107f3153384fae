//! ggml block formats for the `convert` workspace.
//!
//! - [`types`]: the [`GgmlType`] table (ids, names, block geometry).
//! - [`legacy`]: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 blocks.
//! - [`k_quants`]: Q4_K, Q5_K, Q6_K super-blocks.
//! - [`float`]: fp16 / bf16 scalar conversions.
//! - row entry points: [`dequantize_rows`], [`quantize_rows`], [`materialize_rows`].
//!
//! Decoding reproduces ggml's `dequantize_row_*` bit for bit and encoding
//! ggml's reference quantizers `quantize_row_*_ref` byte for byte (same f32
//! operations in the same order). The library never panics on bad input and
//! never prints: every problem is a [`QuantError`].
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod block;
pub mod dtype;
pub mod error;
pub mod float;
pub mod k_quants;
pub mod legacy;
mod rows;
pub mod types;

#[cfg(test)]
mod tests;

pub use block::{BlockFormat, EncodeError};
pub use dtype::{apply_dtype, F16OverflowAt, MaterializeStats, ParseDtypeError, TorchDtype};
pub use error::{Op, QuantError};
pub use rows::{
    dequantize_rows, materialize_rows, quantize_rows, row_bytes, supports_decode, supports_encode,
};
pub use types::{Dtype, GgmlType, RawType, ALL_RAW_TYPES, ALL_TYPES};
