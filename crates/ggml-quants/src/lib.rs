//! ggml block formats for the `convert` workspace.
#![deny(missing_docs)]

pub mod types;
pub use types::{GgmlType, ALL_TYPES};
