//! CQ4 quantization. Filled by the CQ4 issue.
#![deny(missing_docs)]
