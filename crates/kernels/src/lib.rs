//! GEMV kernels over the layouts `convert` writes.
//!
//! Stub: the kernels issue fills this crate (scalar reference, AVX2,
//! AVX-512 VNNI, NEON, SME2, dispatch and the FP32 oracle).
#![deny(missing_docs)]
