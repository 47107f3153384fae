//! Zero-copy readers for the model files `convert` takes as input.
//!
//! - [`gguf`]: GGUF v2 / v3 (every metadata type, nested arrays, any
//!   power-of-two `general.alignment`, keys of any case).
//! - [`safetensors_file`]: single safetensors files; [`Catalogue::open`] also
//!   reads Hugging Face folders with sharded indexes.
//! - [`Catalogue`]: one tensor list for all of them, with a [`Role`] per tensor.
//!
//! Shapes are row-major, outermost first (`[N, K]` for a weight with N
//! outputs and K inputs), the safetensors / PyTorch convention; GGUF's `ne`
//! order is reversed on the way in. Tensor bytes are always slices of a
//! memory map, never copies.
#![deny(missing_docs)]

pub mod catalogue;
pub mod error;
pub mod gguf;
pub mod hessians;
pub mod hf;
pub mod imatrix;
pub mod mmap;
pub mod names;
pub mod roles;
pub mod safetensors_file;

pub use catalogue::{Catalogue, SourceKind, Tensor};
pub use error::{ErrorKind, SourceError};
pub use roles::Role;
