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
