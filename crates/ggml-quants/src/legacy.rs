//! The legacy 32-weight block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
//!
//! Decoding follows ggml's `dequantize_row_*` and encoding ggml's
//! `quantize_row_*_ref` operation for operation, so results are bit/byte
//! identical to ggml's reference code.
#![allow(clippy::needless_range_loop)]

use crate::block::{impl_block_format, impl_weighted_block_format};
use crate::float::{fp16_to_f32, scale_to_fp16, FieldOverflow};
use crate::search::{make_qkx_quants, make_qx_quants, Grid, Qkx};
use crate::types::GgmlType;

/// Weights per legacy block.
pub const QK: usize = 32;

/// x86 C semantics of a float -> int conversion (`cvttss2si`): truncation
/// toward zero; NaN and out-of-range values give `i32::MIN`.
#[inline]
pub(crate) fn c_f32_to_i32(v: f32) -> i32 {
    if v.is_nan() || !(-2_147_483_648.0..2_147_483_648.0).contains(&v) {
        i32::MIN
    } else {
        v as i32
    }
}

/// C `(int8_t)f` as compiled for x86 (truncate to int32, keep the low byte).
#[inline]
fn c_f32_to_i8(v: f32) -> i8 {
    c_f32_to_i32(v) as i8
}

/// C `(uint8_t)f` as compiled for x86 (truncate to int32, keep the low byte).
#[inline]
fn c_f32_to_u8(v: f32) -> u8 {
    c_f32_to_i32(v) as u8
}

/// Absolute max and the signed value having it, with ggml's `amax < fabsf(v)` update rule.
#[inline]
fn signed_absmax(x: &[f32; QK]) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// Min and max with ggml's `FLT_MAX` / `-FLT_MAX` start and strict updates.
#[inline]
fn min_max(x: &[f32; QK]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// The weights of ggml's importance-weighted legacy quantizers:
/// `qw[j] * sqrt(sigma2 + x[j]^2)`, `sigma2` the mean of `x^2` over the row.
#[inline]
fn importance_weights(x: &[f32; QK], qw: &[f32; QK], sigma2: f32) -> [f32; QK] {
    let mut w = [0.0f32; QK];
    for j in 0..QK {
        w[j] = qw[j] * (sigma2 + x[j] * x[j]).sqrt();
    }
    w
}

/// Packs 32 5-bit quants into low nibbles and a little-endian `qh` word.
#[inline]
fn pack_5bit(l: &[u8; QK]) -> ([u8; QK / 2], [u8; 4]) {
    let mut qs = [0u8; QK / 2];
    let mut qh = 0u32;
    for j in 0..QK / 2 {
        let (xi0, xi1) = (l[j], l[j + QK / 2]);
        qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
        qh |= (((xi0 & 0x10) as u32) >> 4) << j;
        qh |= (((xi1 & 0x10) as u32) >> 4) << (j + QK / 2);
    }
    (qs, qh.to_le_bytes())
}

/// Packs 32 4-bit quants into nibbles (low = weight j, high = weight j + 16).
#[inline]
fn pack_4bit(l: &[u8; QK]) -> [u8; QK / 2] {
    let mut qs = [0u8; QK / 2];
    for j in 0..QK / 2 {
        qs[j] = l[j] | (l[j + QK / 2] << 4);
    }
    qs
}

#[inline]
fn inverse_or_zero(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

// ---------------------------------------------------------------- Q4_0

/// `block_q4_0`: fp16 scale, 32 4-bit quants (offset 8).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ4_0 {
    /// Scale (fp16, little-endian).
    pub d: [u8; 2],
    /// Nibbles: low = weight j, high = weight j + 16.
    pub qs: [u8; QK / 2],
}

impl BlockQ4_0 {
    fn dequantize(&self, y: &mut [f32; QK]) {
        let d = fp16_to_f32(self.d);
        for j in 0..QK / 2 {
            let x0 = (self.qs[j] & 0x0F) as i32 - 8;
            let x1 = (self.qs[j] >> 4) as i32 - 8;
            y[j] = x0 as f32 * d;
            y[j + QK / 2] = x1 as f32 * d;
        }
    }

    fn quantize(x: &[f32; QK]) -> Result<Self, FieldOverflow> {
        let max = signed_absmax(x);
        let d = max / -8.0;
        let id = inverse_or_zero(d);
        let mut qs = [0u8; QK / 2];
        for j in 0..QK / 2 {
            let x0 = x[j] * id;
            let x1 = x[QK / 2 + j] * id;
            let xi0 = c_f32_to_i8(x0 + 8.5).min(15) as u8;
            let xi1 = c_f32_to_i8(x1 + 8.5).min(15) as u8;
            qs[j] = xi0 | (xi1 << 4);
        }
        Ok(Self {
            d: scale_to_fp16(d, "d")?,
            qs,
        })
    }
}

impl BlockQ4_0 {
    /// ggml's `quantize_row_q4_0_impl` with an importance matrix:
    /// `make_qx_quants(8)` under weights `qw * sqrt(sigma2 + x^2)`.
    fn quantize_weighted(
        x: &[f32; QK],
        qw: &[f32; QK],
        sigma2: f32,
    ) -> Result<Self, FieldOverflow> {
        let weight = importance_weights(x, qw, sigma2);
        let mut l = [0i8; QK];
        let d = make_qx_quants(8, x, &mut l, Some(&weight));
        Ok(Self {
            d: scale_to_fp16(d, "d")?,
            qs: pack_4bit(&l.map(|v| v as u8)),
        })
    }
}

/// Marker for the Q4_0 format.
#[derive(Debug, Clone, Copy)]
pub struct Q4_0;
impl_block_format!(Q4_0, BlockQ4_0, GgmlType::Q4_0, QK, 18; d, qs);
impl_weighted_block_format!(Q4_0, BlockQ4_0, GgmlType::Q4_0, QK);

// ---------------------------------------------------------------- Q4_1

/// `block_q4_1`: fp16 scale and min, 32 4-bit quants.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ4_1 {
    /// Scale (fp16, little-endian).
    pub d: [u8; 2],
    /// Min (fp16, little-endian).
    pub m: [u8; 2],
    /// Nibbles: low = weight j, high = weight j + 16.
    pub qs: [u8; QK / 2],
}

impl BlockQ4_1 {
    fn dequantize(&self, y: &mut [f32; QK]) {
        let d = fp16_to_f32(self.d);
        let m = fp16_to_f32(self.m);
        for j in 0..QK / 2 {
            let x0 = (self.qs[j] & 0x0F) as i32;
            let x1 = (self.qs[j] >> 4) as i32;
            y[j] = x0 as f32 * d + m;
            y[j + QK / 2] = x1 as f32 * d + m;
        }
    }

    fn quantize(x: &[f32; QK]) -> Result<Self, FieldOverflow> {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inverse_or_zero(d);
        let mut qs = [0u8; QK / 2];
        for j in 0..QK / 2 {
            let x0 = (x[j] - min) * id;
            let x1 = (x[QK / 2 + j] - min) * id;
            let xi0 = c_f32_to_i8(x0 + 0.5).min(15) as u8;
            let xi1 = c_f32_to_i8(x1 + 0.5).min(15) as u8;
            qs[j] = xi0 | (xi1 << 4);
        }
        Ok(Self {
            d: scale_to_fp16(d, "d")?,
            m: scale_to_fp16(min, "m")?,
            qs,
        })
    }
}

impl BlockQ4_1 {
    /// ggml's `quantize_row_q4_1_impl` with an importance matrix:
    /// `make_qkx3_quants(15)` under weights `qw * sqrt(sigma2 + x^2)`.
    fn quantize_weighted(
        x: &[f32; QK],
        qw: &[f32; QK],
        sigma2: f32,
    ) -> Result<Self, FieldOverflow> {
        let weight = importance_weights(x, qw, sigma2);
        let mut l = [0u8; QK];
        let (d, the_min) = make_qkx_quants(Qkx::Three, 15, x, &weight, &mut l, Grid::QKX3);
        Ok(Self {
            d: scale_to_fp16(d, "d")?,
            m: scale_to_fp16(-the_min, "m")?,
            qs: pack_4bit(&l),
        })
    }
}

/// Marker for the Q4_1 format.
#[derive(Debug, Clone, Copy)]
pub struct Q4_1;
impl_block_format!(Q4_1, BlockQ4_1, GgmlType::Q4_1, QK, 20; d, m, qs);
impl_weighted_block_format!(Q4_1, BlockQ4_1, GgmlType::Q4_1, QK);

// ---------------------------------------------------------------- Q5_0

/// `block_q5_0`: fp16 scale, 32 high bits, 32 low nibbles (offset 16).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ5_0 {
    /// Scale (fp16, little-endian).
    pub d: [u8; 2],
    /// Fifth bits, a little-endian u32: bit j = weight j.
    pub qh: [u8; 4],
    /// Low nibbles: low = weight j, high = weight j + 16.
    pub qs: [u8; QK / 2],
}

impl BlockQ5_0 {
    fn dequantize(&self, y: &mut [f32; QK]) {
        let d = fp16_to_f32(self.d);
        let qh = u32::from_le_bytes(self.qh);
        for j in 0..QK / 2 {
            let xh_0 = (((qh >> j) << 4) & 0x10) as u8;
            let xh_1 = ((qh >> (j + 12)) & 0x10) as u8;
            let x0 = ((self.qs[j] & 0x0F) | xh_0) as i32 - 16;
            let x1 = ((self.qs[j] >> 4) | xh_1) as i32 - 16;
            y[j] = x0 as f32 * d;
            y[j + QK / 2] = x1 as f32 * d;
        }
    }

    fn quantize(x: &[f32; QK]) -> Result<Self, FieldOverflow> {
        let max = signed_absmax(x);
        let d = max / -16.0;
        let id = inverse_or_zero(d);
        let mut qs = [0u8; QK / 2];
        let mut qh = 0u32;
        for j in 0..QK / 2 {
            let x0 = x[j] * id;
            let x1 = x[QK / 2 + j] * id;
            let xi0 = c_f32_to_i8(x0 + 16.5).min(31) as u8;
            let xi1 = c_f32_to_i8(x1 + 16.5).min(31) as u8;
            qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= (((xi0 & 0x10) as u32) >> 4) << j;
            qh |= (((xi1 & 0x10) as u32) >> 4) << (j + QK / 2);
        }
        Ok(Self {
            d: scale_to_fp16(d, "d")?,
            qh: qh.to_le_bytes(),
            qs,
        })
    }
}

impl BlockQ5_0 {
    /// ggml's `quantize_row_q5_0_impl` with an importance matrix:
    /// `make_qx_quants(16)` under weights `qw * sqrt(sigma2 + x^2)`.
    fn quantize_weighted(
        x: &[f32; QK],
        qw: &[f32; QK],
        sigma2: f32,
    ) -> Result<Self, FieldOverflow> {
        let weight = importance_weights(x, qw, sigma2);
        let mut l = [0i8; QK];
        let d = make_qx_quants(16, x, &mut l, Some(&weight));
        let d = scale_to_fp16(d, "d")?;
        let (qs, qh) = pack_5bit(&l.map(|v| v as u8));
        Ok(Self { d, qh, qs })
    }
}

/// Marker for the Q5_0 format.
#[derive(Debug, Clone, Copy)]
pub struct Q5_0;
impl_block_format!(Q5_0, BlockQ5_0, GgmlType::Q5_0, QK, 22; d, qh, qs);
impl_weighted_block_format!(Q5_0, BlockQ5_0, GgmlType::Q5_0, QK);

// ---------------------------------------------------------------- Q5_1

/// `block_q5_1`: fp16 scale and min, 32 high bits, 32 low nibbles.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ5_1 {
    /// Scale (fp16, little-endian).
    pub d: [u8; 2],
    /// Min (fp16, little-endian).
    pub m: [u8; 2],
    /// Fifth bits, a little-endian u32: bit j = weight j.
    pub qh: [u8; 4],
    /// Low nibbles: low = weight j, high = weight j + 16.
    pub qs: [u8; QK / 2],
}

impl BlockQ5_1 {
    fn dequantize(&self, y: &mut [f32; QK]) {
        let d = fp16_to_f32(self.d);
        let m = fp16_to_f32(self.m);
        let qh = u32::from_le_bytes(self.qh);
        for j in 0..QK / 2 {
            let xh_0 = (((qh >> j) << 4) & 0x10) as u8;
            let xh_1 = ((qh >> (j + 12)) & 0x10) as u8;
            let x0 = ((self.qs[j] & 0x0F) | xh_0) as i32;
            let x1 = ((self.qs[j] >> 4) | xh_1) as i32;
            y[j] = x0 as f32 * d + m;
            y[j + QK / 2] = x1 as f32 * d + m;
        }
    }

    fn quantize(x: &[f32; QK]) -> Result<Self, FieldOverflow> {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inverse_or_zero(d);
        let mut qs = [0u8; QK / 2];
        let mut qh = 0u32;
        for j in 0..QK / 2 {
            let x0 = (x[j] - min) * id;
            let x1 = (x[QK / 2 + j] - min) * id;
            let xi0 = c_f32_to_u8(x0 + 0.5);
            let xi1 = c_f32_to_u8(x1 + 0.5);
            qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= (((xi0 & 0x10) as u32) >> 4) << j;
            qh |= (((xi1 & 0x10) as u32) >> 4) << (j + QK / 2);
        }
        Ok(Self {
            d: scale_to_fp16(d, "d")?,
            m: scale_to_fp16(min, "m")?,
            qh: qh.to_le_bytes(),
            qs,
        })
    }
}

impl BlockQ5_1 {
    /// ggml's `quantize_row_q5_1_impl` with an importance matrix:
    /// `make_qkx3_quants(31)` under weights `qw * sqrt(sigma2 + x^2)`.
    fn quantize_weighted(
        x: &[f32; QK],
        qw: &[f32; QK],
        sigma2: f32,
    ) -> Result<Self, FieldOverflow> {
        let weight = importance_weights(x, qw, sigma2);
        let mut l = [0u8; QK];
        let (d, the_min) = make_qkx_quants(Qkx::Three, 31, x, &weight, &mut l, Grid::QKX3);
        let d = scale_to_fp16(d, "d")?;
        let m = scale_to_fp16(-the_min, "m")?;
        let (qs, qh) = pack_5bit(&l);
        Ok(Self { d, m, qh, qs })
    }
}

/// Marker for the Q5_1 format.
#[derive(Debug, Clone, Copy)]
pub struct Q5_1;
impl_block_format!(Q5_1, BlockQ5_1, GgmlType::Q5_1, QK, 24; d, m, qh, qs);
impl_weighted_block_format!(Q5_1, BlockQ5_1, GgmlType::Q5_1, QK);

// ---------------------------------------------------------------- Q8_0

/// `block_q8_0`: fp16 scale, 32 signed 8-bit quants.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ8_0 {
    /// Scale (fp16, little-endian).
    pub d: [u8; 2],
    /// Quants.
    pub qs: [i8; QK],
}

impl BlockQ8_0 {
    fn dequantize(&self, y: &mut [f32; QK]) {
        let d = fp16_to_f32(self.d);
        for j in 0..QK {
            y[j] = self.qs[j] as f32 * d;
        }
    }

    fn quantize(x: &[f32; QK]) -> Result<Self, FieldOverflow> {
        let mut amax = 0.0f32;
        for &v in x {
            // ggml: MAX(amax, fabsf(v)) = amax > |v| ? amax : |v|
            amax = if amax > v.abs() { amax } else { v.abs() };
        }
        let d = amax / 127.0;
        let id = inverse_or_zero(d);
        let mut qs = [0i8; QK];
        for j in 0..QK {
            qs[j] = c_f32_to_i8((x[j] * id).round());
        }
        Ok(Self {
            d: scale_to_fp16(d, "d")?,
            qs,
        })
    }
}

/// Marker for the Q8_0 format.
#[derive(Debug, Clone, Copy)]
pub struct Q8_0;
impl_block_format!(Q8_0, BlockQ8_0, GgmlType::Q8_0, QK, 34; d, qs);
