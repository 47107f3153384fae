//! Whole-row entry points: argument validation and dispatch by [`GgmlType`].

use crate::block::{BlockFormat, EncodeError, WeightedBlockFormat};
use crate::dtype::{apply_dtype, MaterializeStats, TorchDtype};
use crate::error::{Op, QuantError};
use crate::float::{bf16_to_f32, f32_to_bf16, f32_to_fp16, fp16_to_f32};
use crate::iq4::{Iq4Nl, Iq4Xs};
use crate::k_quants::{Q2K, Q3K, Q4K, Q5K, Q6K};
use crate::legacy::{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
use crate::types::GgmlType;

/// Every type [`dequantize_rows`] and [`quantize_rows`] implement, in id order.
pub const SUPPORTED_TYPES: [GgmlType; 15] = {
    use GgmlType::*;
    [
        F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, BF16,
    ]
};

/// The types whose ggml quantizer uses an importance matrix (see
/// [`quantize_rows_imatrix`]), in id order.
pub const IMATRIX_TYPES: [GgmlType; 11] = {
    use GgmlType::*;
    [
        Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS,
    ]
};

/// True when [`dequantize_rows`] implements `ty` (one of [`SUPPORTED_TYPES`]).
pub fn supports_decode(ty: GgmlType) -> bool {
    SUPPORTED_TYPES.contains(&ty)
}

/// True when [`quantize_rows`] and [`quantize_rows_imatrix`] implement `ty`.
pub fn supports_encode(ty: GgmlType) -> bool {
    // Every decodable type is also encodable (ggml's reference quantizers).
    supports_decode(ty)
}

/// True when ggml's quantizer of `ty` uses an importance matrix (one of
/// [`IMATRIX_TYPES`]); for the other encodable types (Q8_0, F16, BF16, F32)
/// [`quantize_rows_imatrix`] writes the bytes of [`quantize_rows`], as ggml does.
pub fn uses_imatrix(ty: GgmlType) -> bool {
    IMATRIX_TYPES.contains(&ty)
}

/// Bytes of one row of `ncols` weights of `ty`, or why that is not a valid row.
pub fn row_bytes(ty: GgmlType, ncols: usize) -> Result<usize, QuantError> {
    let block_size = ty.block_size();
    if ncols == 0 || !ncols.is_multiple_of(block_size) {
        return Err(QuantError::BadRowWidth {
            ty,
            ncols,
            block_size,
        });
    }
    (ncols / block_size)
        .checked_mul(ty.type_size())
        .ok_or(QuantError::SizeOverflow { ty, ncols, rows: 1 })
}

/// Checks the geometry of a call: `values` f32 on one side, `bytes` on the
/// other. Returns the number of rows.
fn check_geometry(
    ty: GgmlType,
    ncols: usize,
    values: usize,
    bytes: usize,
) -> Result<usize, QuantError> {
    let rb = row_bytes(ty, ncols)?;
    if !values.is_multiple_of(ncols) {
        return Err(QuantError::PartialRow {
            ty,
            ncols,
            len: values,
        });
    }
    let rows = values / ncols;
    let expected = rows
        .checked_mul(rb)
        .ok_or(QuantError::SizeOverflow { ty, ncols, rows })?;
    if bytes != expected {
        return Err(QuantError::ByteLength {
            ty,
            ncols,
            rows,
            row_bytes: rb,
            expected,
            actual: bytes,
        });
    }
    Ok(rows)
}

/// Dequantizes (or converts) whole rows: `src` holds exactly
/// `out.len() / ncols` rows of type `ty`, each `ncols` weights wide.
///
/// Bit-identical to ggml's `dequantize_row_*` (and exact for F16/BF16/F32).
pub fn dequantize_rows(
    ty: GgmlType,
    src: &[u8],
    ncols: usize,
    out: &mut [f32],
) -> Result<(), QuantError> {
    if !supports_decode(ty) {
        return Err(QuantError::Unsupported { ty, op: Op::Decode });
    }
    check_geometry(ty, ncols, out.len(), src.len())?;
    match ty {
        GgmlType::F32 => {
            for (o, b) in out.iter_mut().zip(src.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
            Ok(())
        }
        GgmlType::F16 => {
            for (o, b) in out.iter_mut().zip(src.chunks_exact(2)) {
                *o = fp16_to_f32([b[0], b[1]]);
            }
            Ok(())
        }
        GgmlType::BF16 => {
            for (o, b) in out.iter_mut().zip(src.chunks_exact(2)) {
                *o = bf16_to_f32([b[0], b[1]]);
            }
            Ok(())
        }
        GgmlType::Q4_0 => decode_blocks::<Q4_0>(src, out),
        GgmlType::Q4_1 => decode_blocks::<Q4_1>(src, out),
        GgmlType::Q5_0 => decode_blocks::<Q5_0>(src, out),
        GgmlType::Q5_1 => decode_blocks::<Q5_1>(src, out),
        GgmlType::Q8_0 => decode_blocks::<Q8_0>(src, out),
        GgmlType::Q2_K => decode_blocks::<Q2K>(src, out),
        GgmlType::Q3_K => decode_blocks::<Q3K>(src, out),
        GgmlType::Q4_K => decode_blocks::<Q4K>(src, out),
        GgmlType::Q5_K => decode_blocks::<Q5K>(src, out),
        GgmlType::Q6_K => decode_blocks::<Q6K>(src, out),
        GgmlType::IQ4_NL => decode_blocks::<Iq4Nl>(src, out),
        GgmlType::IQ4_XS => decode_blocks::<Iq4Xs>(src, out),
        _ => Err(QuantError::Unsupported { ty, op: Op::Decode }),
    }
}

fn decode_blocks<F: BlockFormat>(src: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    for (bytes, values) in src.chunks_exact(F::BYTES).zip(out.chunks_exact_mut(F::QK)) {
        let block = F::read(bytes)?;
        F::decode(&block, values)?;
    }
    Ok(())
}

/// Quantizes (or converts) whole rows of f32 to `ty`: `src` holds whole rows
/// of `ncols` weights, `dst` exactly their bytes.
///
/// Byte-identical to what ggml's `ggml_quantize_chunk` writes without an
/// importance matrix (what llama-quantize writes without one): the reference
/// quantizers `quantize_row_*_ref`, and for IQ4_NL `quantize_iq4_nl(.., NULL)`
/// (see [`crate::iq4`]), except that this function fails where ggml would
/// silently write garbage:
/// - [`QuantError::NonFiniteInput`] for a NaN/inf input to a block format;
/// - [`QuantError::ScaleOverflow`] for a block scale/min beyond fp16;
/// - [`QuantError::F16Overflow`] for a finite value that F16 would turn into inf.
///
/// F32 copies, BF16 rounds to nearest even; NaN and inf pass through both
/// and F16. On error `dst` may be partly written.
pub fn quantize_rows(
    ty: GgmlType,
    src: &[f32],
    ncols: usize,
    dst: &mut [u8],
) -> Result<(), QuantError> {
    if !supports_encode(ty) {
        return Err(QuantError::Unsupported { ty, op: Op::Encode });
    }
    check_geometry(ty, ncols, src.len(), dst.len())?;
    match ty {
        GgmlType::F32 => {
            for (v, b) in src.iter().zip(dst.chunks_exact_mut(4)) {
                b.copy_from_slice(&v.to_le_bytes());
            }
            Ok(())
        }
        GgmlType::F16 => {
            for (index, (v, b)) in src.iter().zip(dst.chunks_exact_mut(2)).enumerate() {
                let h = f32_to_fp16(*v);
                if v.is_finite() && !half::f16::from_le_bytes(h).is_finite() {
                    return Err(QuantError::F16Overflow { index, value: *v });
                }
                b.copy_from_slice(&h);
            }
            Ok(())
        }
        GgmlType::BF16 => {
            for (v, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
                b.copy_from_slice(&f32_to_bf16(*v));
            }
            Ok(())
        }
        GgmlType::Q4_0 => encode_blocks::<Q4_0>(src, ncols, dst),
        GgmlType::Q4_1 => encode_blocks::<Q4_1>(src, ncols, dst),
        GgmlType::Q5_0 => encode_blocks::<Q5_0>(src, ncols, dst),
        GgmlType::Q5_1 => encode_blocks::<Q5_1>(src, ncols, dst),
        GgmlType::Q8_0 => encode_blocks::<Q8_0>(src, ncols, dst),
        GgmlType::Q2_K => encode_blocks::<Q2K>(src, ncols, dst),
        GgmlType::Q3_K => encode_blocks::<Q3K>(src, ncols, dst),
        GgmlType::Q4_K => encode_blocks::<Q4K>(src, ncols, dst),
        GgmlType::Q5_K => encode_blocks::<Q5K>(src, ncols, dst),
        GgmlType::Q6_K => encode_blocks::<Q6K>(src, ncols, dst),
        GgmlType::IQ4_NL => encode_blocks::<Iq4Nl>(src, ncols, dst),
        GgmlType::IQ4_XS => encode_blocks::<Iq4Xs>(src, ncols, dst),
        _ => Err(QuantError::Unsupported { ty, op: Op::Encode }),
    }
}

fn check_finite(ty: GgmlType, src: &[f32]) -> Result<(), QuantError> {
    match src.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(QuantError::NonFiniteInput {
            ty,
            index,
            value: src[index],
        }),
        None => Ok(()),
    }
}

/// Turns a block-level [`EncodeError`] of block `block` (counted from the
/// start of `src`) into the row-level error naming its position.
fn block_error<F: BlockFormat>(e: EncodeError, block: usize, blocks_per_row: usize) -> QuantError {
    match e {
        EncodeError::Overflow(o) => QuantError::ScaleOverflow {
            ty: F::TYPE,
            block,
            row: block / blocks_per_row.max(1),
            block_in_row: block % blocks_per_row.max(1),
            field: o.field,
            value: o.value,
        },
        EncodeError::Length(e) => e,
    }
}

fn encode_blocks<F: BlockFormat>(
    src: &[f32],
    ncols: usize,
    dst: &mut [u8],
) -> Result<(), QuantError> {
    check_finite(F::TYPE, src)?;
    let blocks_per_row = ncols / F::QK;
    for (block, (values, bytes)) in src
        .chunks_exact(F::QK)
        .zip(dst.chunks_exact_mut(F::BYTES))
        .enumerate()
    {
        let encoded = F::encode(values).map_err(|e| block_error::<F>(e, block, blocks_per_row))?;
        F::write(&encoded, bytes)?;
    }
    Ok(())
}

/// Quantizes whole rows of f32 to `ty` with an importance matrix, as
/// llama-quantize does with `--imatrix`: `imatrix` holds one value per
/// column (the mean of `x^2` of that input column over the calibration
/// activations, what llama-quantize passes for a 2-D weight; for a 3-D
/// MoE tensor call this once per expert with that expert's slice).
///
/// Byte-identical to ggml's `ggml_quantize_chunk(ty, src, dst, 0, rows,
/// ncols, imatrix)`: for the types of [`IMATRIX_TYPES`] the importance
/// weighted searches of `quantize_<type>`, for Q8_0, F16, BF16 and F32 the
/// bytes of [`quantize_rows`] (ggml ignores the matrix for them). Every row
/// is quantized on its own, so the bytes do not depend on how rows are split
/// between calls.
///
/// Errors, besides those of [`quantize_rows`]:
/// - [`QuantError::ImatrixLength`] when `imatrix.len() != ncols`;
/// - [`QuantError::BadImportance`] for a NaN, infinite or negative value
///   (checked for every type, including those that ignore the matrix).
///
/// On error `dst` may be partly written.
pub fn quantize_rows_imatrix(
    ty: GgmlType,
    src: &[f32],
    ncols: usize,
    imatrix: &[f32],
    dst: &mut [u8],
) -> Result<(), QuantError> {
    if !supports_encode(ty) {
        return Err(QuantError::Unsupported { ty, op: Op::Encode });
    }
    check_geometry(ty, ncols, src.len(), dst.len())?;
    if imatrix.len() != ncols {
        return Err(QuantError::ImatrixLength {
            ty,
            expected: ncols,
            actual: imatrix.len(),
        });
    }
    if let Some(index) = imatrix.iter().position(|v| !(v.is_finite() && *v >= 0.0)) {
        return Err(QuantError::BadImportance {
            ty,
            index,
            value: imatrix[index],
        });
    }
    match ty {
        GgmlType::Q4_0 => encode_blocks_weighted::<Q4_0>(src, ncols, imatrix, dst),
        GgmlType::Q4_1 => encode_blocks_weighted::<Q4_1>(src, ncols, imatrix, dst),
        GgmlType::Q5_0 => encode_blocks_weighted::<Q5_0>(src, ncols, imatrix, dst),
        GgmlType::Q5_1 => encode_blocks_weighted::<Q5_1>(src, ncols, imatrix, dst),
        GgmlType::Q2_K => encode_blocks_weighted::<Q2K>(src, ncols, imatrix, dst),
        GgmlType::Q3_K => encode_blocks_weighted::<Q3K>(src, ncols, imatrix, dst),
        GgmlType::Q4_K => encode_blocks_weighted::<Q4K>(src, ncols, imatrix, dst),
        GgmlType::Q5_K => encode_blocks_weighted::<Q5K>(src, ncols, imatrix, dst),
        GgmlType::Q6_K => encode_blocks_weighted::<Q6K>(src, ncols, imatrix, dst),
        GgmlType::IQ4_NL => encode_blocks_weighted::<Iq4Nl>(src, ncols, imatrix, dst),
        GgmlType::IQ4_XS => encode_blocks_weighted::<Iq4Xs>(src, ncols, imatrix, dst),
        _ => quantize_rows(ty, src, ncols, dst),
    }
}

fn encode_blocks_weighted<F: WeightedBlockFormat>(
    src: &[f32],
    ncols: usize,
    imatrix: &[f32],
    dst: &mut [u8],
) -> Result<(), QuantError> {
    check_finite(F::TYPE, src)?;
    let blocks_per_row = ncols / F::QK;
    let row_bytes = blocks_per_row * F::BYTES;
    for (r, (row, row_dst)) in src
        .chunks_exact(ncols)
        .zip(dst.chunks_exact_mut(row_bytes))
        .enumerate()
    {
        // ggml's legacy formats: sigma2 = sum(x^2) / n_per_row, summed in order.
        let mut sum_x2 = 0.0f32;
        for v in row {
            sum_x2 += v * v;
        }
        let row_mean_square = sum_x2 / ncols as f32;
        for (b, ((values, importance), bytes)) in row
            .chunks_exact(F::QK)
            .zip(imatrix.chunks_exact(F::QK))
            .zip(row_dst.chunks_exact_mut(F::BYTES))
            .enumerate()
        {
            let encoded = F::encode_weighted(values, importance, row_mean_square)
                .map_err(|e| block_error::<F>(e, r * blocks_per_row + b, blocks_per_row))?;
            F::write(&encoded, bytes)?;
        }
    }
    Ok(())
}

/// Materializes rows as f32 under a dtype policy: dequantizes (any type of
/// [`supports_decode`]) into `out`, then passes every value through `dtype`
/// (see [`TorchDtype`] and [`apply_dtype`]).
///
/// With [`TorchDtype::Float16`], finite values whose fp16 rounding is +-inf
/// are left as their f32 value and counted in the returned stats (indices
/// relative to `out`; use [`MaterializeStats::merge`] across row chunks).
pub fn materialize_rows(
    ty: GgmlType,
    src: &[u8],
    ncols: usize,
    dtype: TorchDtype,
    out: &mut [f32],
) -> Result<MaterializeStats, QuantError> {
    match (ty, dtype) {
        // One pass instead of a copy and then a rounding pass over `out`:
        // the same values, as `bf16_round_bits` is `apply_dtype`'s step.
        (GgmlType::F32, TorchDtype::BFloat16) => {
            check_geometry(ty, ncols, out.len(), src.len())?;
            for (o, b) in out.iter_mut().zip(src.as_chunks::<4>().0) {
                *o = f32::from_bits(crate::dtype::bf16_round_bits(u32::from_le_bytes(*b)));
            }
            Ok(MaterializeStats::default())
        }
        // Every decoded value is already one of the dtype's (finite values
        // round to themselves, and fp16 cannot overflow): only a NaN can
        // change (its quiet bit), so only NaNs take the round trip.
        (GgmlType::BF16, TorchDtype::BFloat16) | (GgmlType::F16, TorchDtype::Float16) => {
            dequantize_rows(ty, src, ncols, out)?;
            if out.iter().any(|v| v.is_nan()) {
                for v in out.iter_mut().filter(|v| v.is_nan()) {
                    *v = match dtype {
                        TorchDtype::BFloat16 => crate::float::round_through_bf16(*v),
                        _ => crate::float::round_through_f16(*v),
                    };
                }
            }
            Ok(MaterializeStats::default())
        }
        _ => {
            dequantize_rows(ty, src, ncols, out)?;
            Ok(apply_dtype(dtype, out))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An F32 source under `bfloat16` (one fused pass) gives decoding then
    /// [`apply_dtype`], bit for bit: every pattern of the low 17 bits under
    /// 16 sign / exponent / mantissa tops (zeros, subnormals, the largest
    /// finite values, infinities, NaNs), and a stride over all 2^32; and
    /// the same geometry error for a source of the wrong length.
    #[test]
    fn f32_source_under_bf16_is_decode_then_round() {
        let mut bits: Vec<u32> = Vec::new();
        for high in [0u32, 0x0040, 0x0080, 0x3F80, 0x7F00, 0x7F7F, 0x7F80, 0x7FC0] {
            for sign in [0u32, 0x8000] {
                bits.extend((0..=0x1_FFFFu32).map(|low| ((sign | high) << 16) | low));
            }
        }
        bits.extend((0..=u32::MAX).step_by(65_521));
        let src: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
        let mut want = vec![0f32; bits.len()];
        dequantize_rows(GgmlType::F32, &src, bits.len(), &mut want).unwrap();
        apply_dtype(TorchDtype::BFloat16, &mut want);
        let mut got = vec![0f32; bits.len()];
        let stats = materialize_rows(
            GgmlType::F32,
            &src,
            bits.len(),
            TorchDtype::BFloat16,
            &mut got,
        )
        .unwrap();
        assert!(stats.is_clean());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{:#010x}", bits[i]);
        }
        let short = materialize_rows(
            GgmlType::F32,
            &src[..src.len() - 4],
            bits.len(),
            TorchDtype::BFloat16,
            &mut got,
        );
        let want_err = dequantize_rows(GgmlType::F32, &src[..src.len() - 4], bits.len(), &mut want);
        assert_eq!(
            format!("{:?}", short.unwrap_err()),
            format!("{:?}", want_err.unwrap_err())
        );
    }

    /// A bf16 source under `bfloat16` and an f16 source under `float16`
    /// skip the round trip of values that are already the dtype's; the
    /// values are those of decoding then [`apply_dtype`], bit for bit, for
    /// every one of the 65536 encodings (NaNs with and without the quiet
    /// bit, infinities, subnormals, both zeros, the largest values).
    #[test]
    fn materializing_a_source_in_its_own_dtype_is_the_round_trip() {
        let src: Vec<u8> = (0..=u16::MAX).flat_map(|b| b.to_le_bytes()).collect();
        for (ty, dtype) in [
            (GgmlType::BF16, TorchDtype::BFloat16),
            (GgmlType::F16, TorchDtype::Float16),
        ] {
            let mut want = vec![0f32; 1 << 16];
            dequantize_rows(ty, &src, 1 << 16, &mut want).unwrap();
            let want_stats = apply_dtype(dtype, &mut want);
            let mut got = vec![0f32; 1 << 16];
            let stats = materialize_rows(ty, &src, 1 << 16, dtype, &mut got).unwrap();
            assert!(got
                .iter()
                .map(|v| v.to_bits())
                .eq(want.iter().map(|v| v.to_bits())));
            assert_eq!(stats.f16_overflows, want_stats.f16_overflows);
            assert_eq!(stats.f16_overflows, 0);
        }
    }
}
