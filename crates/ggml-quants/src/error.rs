//! The one error type of the crate.

use crate::types::GgmlType;

/// Which direction of conversion an [`QuantError::Unsupported`] refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Bytes of a ggml type to f32 (`dequantize_row_*`).
    Decode,
    /// f32 to bytes of a ggml type (`quantize_row_*_ref`).
    Encode,
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Op::Decode => "decoding",
            Op::Encode => "encoding",
        })
    }
}

impl QuantError {
    /// True when the values or bytes converted are the problem (an
    /// unsupported type, a row width the type cannot hold, non-finite or
    /// out-of-range values), false when the caller's slices do not match.
    pub fn is_bad_input(&self) -> bool {
        !matches!(
            self,
            QuantError::PartialRow { .. }
                | QuantError::ByteLength { .. }
                | QuantError::BlockLength { .. }
        )
    }
}

/// Everything that can go wrong when converting rows. Every variant carries
/// the evidence needed to name the problem without re-running anything.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum QuantError {
    /// The ggml type is known but this crate does not implement the operation.
    #[error("{op} ggml type {ty} is not supported")]
    Unsupported {
        /// The requested type.
        ty: GgmlType,
        /// The requested direction.
        op: Op,
    },

    /// The row width is zero or not a multiple of the type's block size.
    #[error("row width {ncols} is not a positive multiple of the {ty} block size {block_size}")]
    BadRowWidth {
        /// The type.
        ty: GgmlType,
        /// The requested row width in weights.
        ncols: usize,
        /// Weights per block of `ty`.
        block_size: usize,
    },

    /// The f32 side (`out` for decoding, `src` for encoding) does not hold whole rows.
    #[error("{ty}: {len} f32 values are not a whole number of rows of {ncols}")]
    PartialRow {
        /// The type.
        ty: GgmlType,
        /// Row width in weights.
        ncols: usize,
        /// Length of the f32 slice.
        len: usize,
    },

    /// The byte side does not have exactly the length the rows need.
    #[error(
        "{ty}: {rows} rows of {ncols} need {expected} bytes ({row_bytes} per row), the byte slice has {actual}"
    )]
    ByteLength {
        /// The type.
        ty: GgmlType,
        /// Row width in weights.
        ncols: usize,
        /// Number of rows implied by the f32 side.
        rows: usize,
        /// Bytes of one row.
        row_bytes: usize,
        /// Bytes required.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },

    /// The byte size of the rows does not fit in `usize`.
    #[error("{ty}: {rows} rows of {ncols} overflow the address space")]
    SizeOverflow {
        /// The type.
        ty: GgmlType,
        /// Row width in weights.
        ncols: usize,
        /// Number of rows.
        rows: usize,
    },

    /// A block scale or min is not representable in fp16 (it would be stored
    /// as +-inf or NaN). ggml would write the non-finite value; this crate refuses.
    #[error(
        "{ty}: block {block} (row {row}, block {block_in_row} of the row): {field} = {value:e} does not fit fp16"
    )]
    ScaleOverflow {
        /// The type being encoded.
        ty: GgmlType,
        /// Index of the block counted from the start of `src`.
        block: usize,
        /// Row of the block, counted from the start of `src`.
        row: usize,
        /// Index of the block inside its row.
        block_in_row: usize,
        /// Which field overflowed (`d`, `dmin`, `m`).
        field: &'static str,
        /// The f32 value that did not fit.
        value: f32,
    },

    /// An input value to a block-quantized encode is NaN or infinite; ggml
    /// would produce a meaningless block, so this crate refuses.
    #[error("{ty}: input value {index} is {value}, block formats need finite values")]
    NonFiniteInput {
        /// The type being encoded.
        ty: GgmlType,
        /// Index of the value in `src`.
        index: usize,
        /// The value.
        value: f32,
    },

    /// Encoding to F16 would turn a finite value into +-inf.
    #[error("F16: input value {index} = {value:e} is beyond the fp16 range (would become inf)")]
    F16Overflow {
        /// Index of the value in `src`.
        index: usize,
        /// The value.
        value: f32,
    },

    /// The importance matrix given to [`crate::quantize_rows_imatrix`] does
    /// not hold one value per column.
    #[error("{ty}: the importance matrix has {actual} values, rows have {expected} columns")]
    ImatrixLength {
        /// The type being encoded.
        ty: GgmlType,
        /// Columns per row (`ncols`).
        expected: usize,
        /// Values in the importance matrix.
        actual: usize,
    },

    /// An importance value is NaN, infinite or negative (an importance
    /// matrix holds means of squares); ggml would quantize with it anyway
    /// and write meaningless or non-finite blocks, so this crate refuses.
    #[error(
        "{ty}: the importance of column {index} is {value}; importance must be finite and >= 0"
    )]
    BadImportance {
        /// The type being encoded.
        ty: GgmlType,
        /// Column of the value.
        index: usize,
        /// The value.
        value: f32,
    },

    /// A slice given to a block-level function has the wrong length.
    #[error("{ty}: block-level {what} has {actual} elements, expected {expected}")]
    BlockLength {
        /// The type.
        ty: GgmlType,
        /// Which argument.
        what: &'static str,
        /// Expected length.
        expected: usize,
        /// Given length.
        actual: usize,
    },
}
