//! The `.weights` container written by `convert` (see `docs/FORMAT.md`).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod interleave;
pub mod panel;
