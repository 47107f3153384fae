//! The one error type of the crate.

use weights_file::panel::PanelError;

use thiserror::Error;

/// Errors from CQ4 quantization and panel decoding.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum Cq4Error {
    /// The codebook dimension is too small.
    #[error("codebook dimension d = {d} must be at least 4")]
    CodebookDimension {
        /// The rejected dimension.
        d: usize,
    },
    /// Lloyd–Max produced a degenerate codebook.
    #[error("Lloyd-Max codebook for d = {d} is degenerate")]
    CodebookNotConverged {
        /// The dimension.
        d: usize,
    },
    /// A tensor with no rows or no columns.
    #[error("cannot quantize an empty {n} x {k} tensor")]
    EmptyTensor {
        /// Rows.
        n: usize,
        /// Columns.
        k: usize,
    },
    /// A tensor too large to address.
    #[error("tensor {n} x {k} is too large")]
    TooLarge {
        /// Rows.
        n: usize,
        /// Columns.
        k: usize,
    },
    /// An impossible panel shape.
    #[error(transparent)]
    Shape(#[from] PanelError),
    /// An orthogonal rotation width that is not a positive multiple of 128
    /// up to [`MAX_ORTHOGONAL_KP`](crate::orthogonal::MAX_ORTHOGONAL_KP).
    #[error("orthogonal rotation width {kp} must be a positive multiple of 128, at most 16384")]
    BadRotationWidth {
        /// The rejected width.
        kp: usize,
    },
    /// Invalid rotation data.
    #[error("invalid rotation: {0}")]
    BadRotation(&'static str),
    /// A chunk that does not start on a super-block or is not whole super-blocks.
    #[error("chunk of {rows} rows at row {first_row} (N = {n}): chunks start at a multiple of 64 and are whole 64-row super-blocks, except the last one, which ends at N")]
    BadChunk {
        /// First row of the chunk.
        first_row: usize,
        /// Rows in the chunk.
        rows: usize,
        /// Rows of the tensor.
        n: usize,
    },
    /// An input-scale exponent outside the supported range.
    #[error("input scale exponent {e} is outside -3..=3")]
    InputExponent {
        /// The rejected exponent.
        e: i8,
    },
    /// A buffer of the wrong length.
    #[error("{what}: expected length {expected}, got {got}")]
    BufferLength {
        /// Which buffer.
        what: &'static str,
        /// Expected length (for row buffers: the row length it must be a multiple of).
        expected: usize,
        /// Actual length.
        got: usize,
    },
    /// A NaN or infinite input weight.
    #[error("non-finite weight at row {row}, column {col}")]
    NonFinite {
        /// Row.
        row: usize,
        /// Column (unpadded).
        col: usize,
    },
    /// A norm whose stored fp16 value would be infinite.
    #[error("row {row}, group {group}: norm {norm:e} overflows fp16 when stored")]
    NormOverflow {
        /// Row.
        row: usize,
        /// Group (0 for the orthogonal family).
        group: usize,
        /// The f64 norm.
        norm: f64,
    },
    /// A GPTQ Hessian that cannot be used (§CQ4.18).
    #[error("Hessian: {0}")]
    BadHessian(String),
    /// A row index past N.
    #[error("row {row} out of range (N = {n})")]
    RowOutOfRange {
        /// The row.
        row: usize,
        /// Rows of the tensor.
        n: usize,
    },
}

impl Cq4Error {
    /// True when the tensor given is the problem (non-finite or too large
    /// values, an empty or oversized shape, a corrupt panel file), false
    /// when the caller broke the API's contract (chunking, buffer lengths).
    pub fn is_bad_input(&self) -> bool {
        !matches!(
            self,
            Cq4Error::CodebookDimension { .. }
                | Cq4Error::CodebookNotConverged { .. }
                | Cq4Error::BadChunk { .. }
                | Cq4Error::BufferLength { .. }
                | Cq4Error::InputExponent { .. }
                | Cq4Error::RowOutOfRange { .. }
                | Cq4Error::BadRotation(_)
        )
    }
}
