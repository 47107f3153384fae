//! The [`BlockFormat`] trait every quantized block format implements, and
//! small byte helpers for (de)serializing `#[repr(C)]` blocks without unsafe.

use crate::error::QuantError;
use crate::float::FieldOverflow;
use crate::types::GgmlType;

/// One ggml block-quantized format: its block struct, how to read/write the
/// block from/to its on-disk bytes, and ggml's reference decode and encode.
pub trait BlockFormat {
    /// The ggml type of the format.
    const TYPE: GgmlType;
    /// Weights per block (`QK`).
    const QK: usize;
    /// Bytes per block (`sizeof(block_*)`).
    const BYTES: usize;
    /// The block struct (`#[repr(C)]`, alignment 1).
    type Block: Copy + std::fmt::Debug + PartialEq;

    /// Parses one block from exactly [`Self::BYTES`] bytes.
    fn read(bytes: &[u8]) -> Result<Self::Block, QuantError>;

    /// Writes one block into exactly [`Self::BYTES`] bytes.
    fn write(block: &Self::Block, out: &mut [u8]) -> Result<(), QuantError>;

    /// ggml's `dequantize_row_*` for one block; `out` holds exactly [`Self::QK`] values.
    fn decode(block: &Self::Block, out: &mut [f32]) -> Result<(), QuantError>;

    /// ggml's `quantize_row_*_ref` for one block; `src` holds exactly [`Self::QK`] values.
    ///
    /// Fails with [`EncodeError::Overflow`] when a scale/min would not be a
    /// finite fp16 and with [`EncodeError::Length`] on a wrong `src` length.
    fn encode(src: &[f32]) -> Result<Self::Block, EncodeError>;
}

/// A [`BlockFormat`] whose ggml quantizer takes importance weights
/// (`quantize_<type>(src, dst, nrows, n_per_row, imatrix)` with a non-NULL
/// imatrix, what `llama-quantize --imatrix` runs).
pub trait WeightedBlockFormat: BlockFormat {
    /// ggml's importance-weighted quantization of one block: `src` and
    /// `importance` hold exactly [`BlockFormat::QK`] values (the block's
    /// slice of the imatrix); `row_mean_square` is the mean of `x^2` over
    /// the whole row the block belongs to (`sigma2` of ggml's Q4_0, Q4_1,
    /// Q5_0 and Q5_1; the 256-weight formats and IQ4_NL ignore it and
    /// compute theirs from the block).
    fn encode_weighted(
        src: &[f32],
        importance: &[f32],
        row_mean_square: f32,
    ) -> Result<Self::Block, EncodeError>;
}

/// Why encoding one block failed.
#[derive(Debug, Clone, PartialEq)]
pub enum EncodeError {
    /// A scale or min does not fit fp16.
    Overflow(FieldOverflow),
    /// The input slice does not hold exactly one block.
    Length(QuantError),
}

impl From<FieldOverflow> for EncodeError {
    fn from(value: FieldOverflow) -> Self {
        EncodeError::Overflow(value)
    }
}

pub(crate) fn block_len_error(
    ty: GgmlType,
    what: &'static str,
    expected: usize,
    actual: usize,
) -> QuantError {
    QuantError::BlockLength {
        ty,
        what,
        expected,
        actual,
    }
}

/// Sequential reader of fixed-size fields from a byte slice. Never panics:
/// reading past the end yields zero bytes (callers check the length first).
pub(crate) struct ByteReader<'a> {
    rest: &'a [u8],
}

impl<'a> ByteReader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    pub(crate) fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.rest.len());
        let (head, tail) = self.rest.split_at(n);
        out[..n].copy_from_slice(head);
        self.rest = tail;
        out
    }
}

/// A fixed-size block field: read from and written to bytes in order.
pub(crate) trait Field: Sized {
    fn read(r: &mut ByteReader<'_>) -> Self;
    fn write(&self, w: &mut ByteWriter<'_>);
}

impl<const N: usize> Field for [u8; N] {
    fn read(r: &mut ByteReader<'_>) -> Self {
        r.take()
    }
    fn write(&self, w: &mut ByteWriter<'_>) {
        w.put(self);
    }
}

impl<const N: usize> Field for [i8; N] {
    fn read(r: &mut ByteReader<'_>) -> Self {
        r.take::<N>().map(|b| b as i8)
    }
    fn write(&self, w: &mut ByteWriter<'_>) {
        w.put(&self.map(|b| b as u8));
    }
}

/// Sequential writer of fixed-size fields into a byte slice. Never panics:
/// bytes past the end are dropped (callers check the length first).
pub(crate) struct ByteWriter<'a> {
    rest: &'a mut [u8],
}

impl<'a> ByteWriter<'a> {
    pub(crate) fn new(bytes: &'a mut [u8]) -> Self {
        Self { rest: bytes }
    }

    pub(crate) fn put(&mut self, src: &[u8]) {
        let n = src.len().min(self.rest.len());
        let rest = std::mem::take(&mut self.rest);
        let (head, tail) = rest.split_at_mut(n);
        head.copy_from_slice(&src[..n]);
        self.rest = tail;
    }
}

/// Implements [`BlockFormat`] for a marker type from the block struct's
/// inherent `dequantize` / `quantize`; the block's bytes are its fields in
/// the order listed (ggml's struct order, no padding: the size assert below
/// fails to compile if a field is left out or the size is wrong).
macro_rules! impl_block_format {
    ($marker:ident, $block:ident, $ty:expr, $qk:expr, $bytes:expr; $($field:ident),+) => {
        const _: () = assert!(::std::mem::size_of::<$block>() == $bytes);
        const _: () = assert!(::std::mem::align_of::<$block>() == 1);

        impl $crate::block::BlockFormat for $marker {
            const TYPE: $crate::types::GgmlType = $ty;
            const QK: usize = $qk;
            const BYTES: usize = $bytes;
            type Block = $block;

            fn read(bytes: &[u8]) -> Result<$block, $crate::error::QuantError> {
                let arr: &[u8; $bytes] = bytes.try_into().map_err(|_| {
                    $crate::block::block_len_error($ty, "block bytes", $bytes, bytes.len())
                })?;
                let mut r = $crate::block::ByteReader::new(arr);
                Ok($block {
                    $($field: $crate::block::Field::read(&mut r),)+
                })
            }

            fn write(block: &$block, out: &mut [u8]) -> Result<(), $crate::error::QuantError> {
                let len = out.len();
                let arr: &mut [u8; $bytes] = out
                    .try_into()
                    .map_err(|_| $crate::block::block_len_error($ty, "block bytes", $bytes, len))?;
                let mut w = $crate::block::ByteWriter::new(arr);
                $($crate::block::Field::write(&block.$field, &mut w);)+
                Ok(())
            }

            fn decode(block: &$block, out: &mut [f32]) -> Result<(), $crate::error::QuantError> {
                let len = out.len();
                let arr: &mut [f32; $qk] = out
                    .try_into()
                    .map_err(|_| $crate::block::block_len_error($ty, "decoded values", $qk, len))?;
                block.dequantize(arr);
                Ok(())
            }

            fn encode(src: &[f32]) -> Result<$block, $crate::block::EncodeError> {
                let arr: &[f32; $qk] = src.try_into().map_err(|_| {
                    $crate::block::EncodeError::Length($crate::block::block_len_error(
                        $ty,
                        "values to encode",
                        $qk,
                        src.len(),
                    ))
                })?;
                Ok($block::quantize(arr)?)
            }
        }
    };
}
pub(crate) use impl_block_format;

/// Implements [`WeightedBlockFormat`] for a marker type from the block
/// struct's inherent `quantize_weighted(x, importance, row_mean_square)`.
macro_rules! impl_weighted_block_format {
    ($marker:ident, $block:ident, $ty:expr, $qk:expr) => {
        impl $crate::block::WeightedBlockFormat for $marker {
            fn encode_weighted(
                src: &[f32],
                importance: &[f32],
                row_mean_square: f32,
            ) -> Result<$block, $crate::block::EncodeError> {
                let length = |what, actual| {
                    $crate::block::EncodeError::Length($crate::block::block_len_error(
                        $ty, what, $qk, actual,
                    ))
                };
                let x: &[f32; $qk] = src
                    .try_into()
                    .map_err(|_| length("values to encode", src.len()))?;
                let qw: &[f32; $qk] = importance
                    .try_into()
                    .map_err(|_| length("importance weights", importance.len()))?;
                Ok($block::quantize_weighted(x, qw, row_mean_square)?)
            }
        }
    };
}
pub(crate) use impl_weighted_block_format;
