//! Plain float types (F32, F16, BF16) and the fp16 / bf16 scalar conversions
//! every block format uses.
//!
//! Conversions go through the `half` crate. f32 -> f16 and f32 -> bf16 round
//! to nearest, ties to even, exactly like ggml's `GGML_FP32_TO_FP16` and
//! `GGML_FP32_TO_BF16` (NaN stays NaN, with the quiet bit set for bf16);
//! f16 -> f32 and bf16 -> f32 are exact.

use half::{bf16, f16};

/// Reads a little-endian fp16 field as f32 (ggml's `GGML_FP16_TO_FP32`).
#[inline]
pub fn fp16_to_f32(bytes: [u8; 2]) -> f32 {
    f16::from_le_bytes(bytes).to_f32()
}

/// Reads little-endian fp16 values (`bytes.len() == 2 * out.len()`) as
/// f32, each exactly [`fp16_to_f32`]: through `half`'s slice conversion,
/// 64 values at a time (F16C where the CPU has it).
pub fn fp16_slice_to_f32(bytes: &[u8], out: &mut [f32]) {
    use half::slice::HalfFloatSliceExt;
    assert_eq!(bytes.len(), 2 * out.len(), "fp16 bytes for the f32 values");
    let mut tmp = [f16::ZERO; 64];
    for (b, o) in bytes.chunks(128).zip(out.chunks_mut(64)) {
        let h = &mut tmp[..o.len()];
        for (t, p) in h.iter_mut().zip(b.as_chunks::<2>().0) {
            *t = f16::from_le_bytes(*p);
        }
        h.convert_to_f32_slice(o);
    }
}

/// Rounds an f32 to fp16 (round to nearest even) and returns its
/// little-endian bytes, whatever the result (inf included).
#[inline]
pub fn f32_to_fp16(value: f32) -> [u8; 2] {
    f16::from_f32(value).to_le_bytes()
}

/// Reads a little-endian bf16 value as f32 (exact).
#[inline]
pub fn bf16_to_f32(bytes: [u8; 2]) -> f32 {
    bf16::from_le_bytes(bytes).to_f32()
}

/// Rounds an f32 to bf16 (round to nearest even) and returns its
/// little-endian bytes.
#[inline]
pub fn f32_to_bf16(value: f32) -> [u8; 2] {
    bf16::from_f32(value).to_le_bytes()
}

/// A block field (scale or min) whose fp16 rounding is not finite.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FieldOverflow {
    /// Field name as ggml's block struct spells it (`d`, `dmin`, `m`).
    pub field: &'static str,
    /// The f32 value that was to be stored.
    pub value: f32,
}

/// Rounds a block scale or min to fp16, refusing a result that is +-inf or NaN.
#[inline]
pub fn scale_to_fp16(value: f32, field: &'static str) -> Result<[u8; 2], FieldOverflow> {
    let h = f16::from_f32(value);
    if h.is_finite() {
        Ok(h.to_le_bytes())
    } else {
        Err(FieldOverflow { field, value })
    }
}

/// f32 -> fp16 -> f32 round trip (round to nearest even).
#[inline]
pub fn round_through_f16(value: f32) -> f32 {
    f16::from_f32(value).to_f32()
}

/// f32 -> bf16 -> f32 round trip (round to nearest even).
#[inline]
pub fn round_through_bf16(value: f32) -> f32 {
    bf16::from_f32(value).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slice conversion gives every fp16 bit pattern's scalar value, in
    /// runs whose lengths cross the 64-value blocks.
    #[test]
    fn fp16_slices_convert_like_single_values() {
        let bytes: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
        for len in [1usize, 63, 64, 65, 129, 65536] {
            let starts = [0usize, 1, 0x7BFF, 0x7C00 - len.min(0x7C00), 65536 - len];
            for start in starts.into_iter().filter(|s| s + len <= 65536) {
                let b = &bytes[2 * start..2 * (start + len)];
                let mut out = vec![0f32; len];
                fp16_slice_to_f32(b, &mut out);
                for (i, (o, p)) in out.iter().zip(b.as_chunks::<2>().0).enumerate() {
                    let want = fp16_to_f32(*p);
                    assert!(
                        o.to_bits() == want.to_bits() || (o.is_nan() && want.is_nan()),
                        "fp16 {:#06x}: {o:e} against {want:e}",
                        start + i
                    );
                }
            }
        }
    }
}
