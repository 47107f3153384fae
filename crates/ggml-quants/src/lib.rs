//! ggml block formats for the `convert` workspace.
//!
//! - [`types`]: the [`GgmlType`] table (ids, names, block geometry).
//! - [`legacy`]: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 blocks.
//! - [`k_quants`]: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K super-blocks.
//! - [`iq4`]: IQ4_NL blocks and IQ4_XS super-blocks.
//! - [`float`]: fp16 / bf16 scalar conversions.
//! - row entry points: [`dequantize_rows`], [`quantize_rows`],
//!   [`quantize_rows_imatrix`], [`materialize_rows`].
//!
//! Decoding reproduces ggml's `dequantize_row_*` bit for bit; encoding
//! reproduces byte for byte what ggml's `ggml_quantize_chunk` (the function
//! llama-quantize calls) writes, without an importance matrix
//! ([`quantize_rows`]: the reference quantizers `quantize_row_*_ref`) and
//! with one ([`quantize_rows_imatrix`]): same f32 operations in the same
//! order, never contracted into fused multiply-adds. The library never
//! panics on bad input and never prints: every problem is a [`QuantError`].
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod block;
pub mod dtype;
pub mod error;
pub mod float;
pub mod iq4;
pub mod k_quants;
pub mod legacy;
mod rows;
mod search;
pub mod types;

#[cfg(test)]
mod tests;

pub use block::{BlockFormat, EncodeError, WeightedBlockFormat};
pub use dtype::{apply_dtype, F16OverflowAt, MaterializeStats, ParseDtypeError, TorchDtype};
pub use error::{Op, QuantError};
pub use rows::{
    dequantize_rows, materialize_rows, quantize_rows, quantize_rows_imatrix, row_bytes,
    supports_decode, supports_encode, uses_imatrix, IMATRIX_TYPES, SUPPORTED_TYPES,
};
pub use types::{Dtype, GgmlType, RawType, ALL_RAW_TYPES, ALL_TYPES};
