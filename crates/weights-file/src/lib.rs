//! The `.weights` container written by `convert` (normative spec:
//! `docs/FORMAT.md` §container).
//!
//! - [`format`]: constants, flag bits, precision codes, the [`Header`] and
//!   the [`Layout`] of regions it implies.
//! - [`read`]: a zero-copy [`WeightsFile`] view that validates every field
//!   against the others and against the file length.
//! - [`write`]: temporary-name-then-rename output ([`AtomicFile`]) and the
//!   byte prefix (header, padding, scales) of a file.
//! - [`panel`] and [`interleave`]: pure index math of the CQ4 packed-panel
//!   layout and of the ggml row interleave.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod format;
pub mod interleave;
pub mod panel;
pub mod read;
pub mod write;

pub use format::{flags, Header, Layout, Precision};
pub use read::{ContainerError, WeightsFile};
pub use write::AtomicFile;
