//! The `.weights` container written by `convert` (normative spec:
//! `docs/FORMAT.md` §container).
//!
//! - [`format`](mod@format): constants, flag bits, precision codes, the [`Header`] and
//!   the [`Layout`] of regions it implies.
//! - [`read`]: a zero-copy [`WeightsFile`] view that validates every field
//!   against the others and against the file length.
//! - [`write`](mod@write): temporary-name-then-rename output ([`AtomicFile`]) and the
//!   byte prefix (header, padding, scales) of a file.
//! - [`panel`] and [`interleave`]: pure index math of the CQ4 packed-panel
//!   layout and of the ggml row interleave; [`panel_view`]: the one
//!   validated zero-copy view of a CQ4 tensor's scales blob and panels that
//!   the decoder and the kernels both take.
//! - [`fp16`]: IEEE binary16 rounding as the format defines it.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod format;
pub mod fp16;
pub mod interleave;
pub mod panel;
pub mod panel_view;
pub mod read;
pub mod write;

pub use format::{flags, Header, Interleave, Layout, Precision, SidecarShape};
pub use panel_view::PanelView;
pub use read::{ContainerError, WeightsFile};
pub use write::AtomicFile;
