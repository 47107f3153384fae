//! The 4-bit non-linear formats IQ4_NL (32-weight blocks) and IQ4_XS
//! (256-weight super-blocks of 8 sub-blocks with 6-bit scales).
//!
//! Both index the 16-entry table [`KVALUES_IQ4NL`]. Decoding follows ggml's
//! `dequantize_row_iq4_nl` / `dequantize_row_iq4_xs`. Encoding follows what
//! `ggml_quantize_chunk` runs, `quantize_iq4_nl` / `quantize_iq4_xs`, that is
//! `quantize_row_iq4_nl_impl` with a scale search of 7 steps each way
//! (`ntry = 7`), with the importance matrix or, without one, weights `x^2`.
//! For IQ4_NL this is deliberately **not** `quantize_row_iq4_nl_ref`
//! (`ntry = -1`: no search, and an all-zero block keeps the quants of the
//! block before it): llama-quantize writes `quantize_iq4_nl`'s bytes. For
//! IQ4_XS, `quantize_row_iq4_xs_ref` is the same code.
#![allow(clippy::needless_range_loop)]

use crate::block::{impl_block_format, impl_weighted_block_format};
use crate::float::{fp16_to_f32, scale_to_fp16, FieldOverflow};
use crate::k_quants::QK_K;
use crate::search::{best_index_int8, nearest_int, GROUP_MAX_EPS};
use crate::types::GgmlType;

/// ggml's `kvalues_iq4nl`: the 16 levels of both IQ4 formats, sorted.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Weights per IQ4_NL block (`QK4_NL`).
pub const QK4_NL: usize = 32;

/// Steps of the scale search each way (`ntry` of `quantize_iq4_nl` / `_xs`).
const NTRY: i32 = 7;

/// The weights of `quantize_row_iq4_nl_impl` for one 32-weight block:
/// `qw * sqrt(sigma2 + x^2)` with an importance matrix, `x^2` without.
fn block_weights(xb: &[f32; 32], qw: Option<&[f32; 32]>, sigma2: f32) -> [f32; 32] {
    let mut w = [0.0f32; 32];
    for j in 0..32 {
        w[j] = match qw {
            Some(q) => q[j] * (sigma2 + xb[j] * xb[j]).sqrt(),
            None => xb[j] * xb[j],
        };
    }
    w
}

/// `sigma2` of `quantize_row_iq4_nl_impl`: `2 * mean(x^2)` of the
/// (super-)block, summed in order and then scaled by `2 / len`.
fn sigma2(x: &[f32]) -> f32 {
    let mut s = 0.0f32;
    for v in x {
        s += v * v;
    }
    s * (2.0 / x.len() as f32)
}

/// The per-32 scale search of `quantize_row_iq4_nl_impl` (`ntry > 0`):
/// the least-squares scale of the best of 15 candidate grids; 0 for an
/// all-zero block.
fn search_scale(xb: &[f32; 32], weight: &[f32; 32]) -> f32 {
    let values = &KVALUES_IQ4NL;
    let (max, amax) = crate::search::signed_absmax(xb);
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let v0 = values[0] as f32;
    let sums = |id: f32| {
        let mut sumqx = 0.0f32;
        let mut sumq2 = 0.0f32;
        for j in 0..32 {
            let q = values[best_index_int8(values, id * xb[j])] as f32;
            let w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    };
    let d = -max / v0;
    let (sumqx, sumq2) = sums(1.0 / d);
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -NTRY..=NTRY {
        let id = (itry + values[0] as i32) as f32 / max;
        let (sumqx, sumq2) = sums(id);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// The nibbles of 32 weights at inverse scale `id`, packed low = weight j,
/// high = weight j + 16.
fn quantize_nibbles(xb: &[f32; 32], id: f32) -> [u8; 16] {
    let mut l = [0u8; 32];
    for j in 0..32 {
        l[j] = best_index_int8(&KVALUES_IQ4NL, id * xb[j]) as u8;
    }
    let mut q = [0u8; 16];
    for j in 0..16 {
        q[j] = l[j] | (l[j + 16] << 4);
    }
    q
}

/// The 32 values from `start` of `x`, as an array.
#[inline]
fn sub32(x: &[f32], start: usize) -> [f32; 32] {
    let mut out = [0.0f32; 32];
    out.copy_from_slice(&x[start..start + 32]);
    out
}

// ---------------------------------------------------------------- IQ4_NL

/// `block_iq4_nl`: fp16 scale, 32 4-bit indices into [`KVALUES_IQ4NL`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockIq4Nl {
    /// Scale (fp16, little-endian).
    pub d: [u8; 2],
    /// Indices: low nibble = weight j, high nibble = weight j + 16.
    pub qs: [u8; QK4_NL / 2],
}

impl BlockIq4Nl {
    fn dequantize(&self, y: &mut [f32; QK4_NL]) {
        let d = fp16_to_f32(self.d);
        for j in 0..QK4_NL / 2 {
            y[j] = d * KVALUES_IQ4NL[(self.qs[j] & 0x0F) as usize] as f32;
            y[j + QK4_NL / 2] = d * KVALUES_IQ4NL[(self.qs[j] >> 4) as usize] as f32;
        }
    }

    fn quantize(x: &[f32; QK4_NL]) -> Result<Self, FieldOverflow> {
        Self::quantize_with(x, None)
    }

    fn quantize_weighted(
        x: &[f32; QK4_NL],
        qw: &[f32; QK4_NL],
        _row_mean_square: f32,
    ) -> Result<Self, FieldOverflow> {
        Self::quantize_with(x, Some(qw))
    }

    /// `quantize_row_iq4_nl_impl(QK4_NL, 32, ..., ntry = 7)`: one block is
    /// its own super-block, so the stored scale is the searched one and every
    /// weight is re-indexed with it.
    fn quantize_with(x: &[f32; QK4_NL], qw: Option<&[f32; QK4_NL]>) -> Result<Self, FieldOverflow> {
        let weight = block_weights(x, qw, sigma2(x));
        let scale = search_scale(x, &weight);
        let d = scale_to_fp16(scale, "d")?;
        let id = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        Ok(Self {
            d,
            qs: quantize_nibbles(x, id),
        })
    }
}

/// Marker for the IQ4_NL format.
#[derive(Debug, Clone, Copy)]
pub struct Iq4Nl;
impl_block_format!(Iq4Nl, BlockIq4Nl, GgmlType::IQ4_NL, QK4_NL, 18; d, qs);
impl_weighted_block_format!(Iq4Nl, BlockIq4Nl, GgmlType::IQ4_NL, QK4_NL);

// ---------------------------------------------------------------- IQ4_XS

/// `block_iq4_xs`: fp16 super-scale, 8 signed 6-bit sub-block scales
/// (offset 32; low nibbles in `scales_l`, high 2-bit pairs in `scales_h`),
/// 256 4-bit indices into [`KVALUES_IQ4NL`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockIq4Xs {
    /// Super-block scale (fp16, little-endian).
    pub d: [u8; 2],
    /// High 2 bits of the scales, a little-endian u16: bits 2k, 2k+1 = sub-block k.
    pub scales_h: [u8; 2],
    /// Low 4 bits of the scales: byte k/2, low nibble for even k, high for odd.
    pub scales_l: [u8; QK_K / 64],
    /// Indices: per 32 weights, 16 bytes, low nibble = weight j, high = j + 16.
    pub qs: [u8; QK_K / 2],
}

impl BlockIq4Xs {
    /// The 6-bit scale (0..=63, offset 32) of sub-block `ib` (0..8; larger
    /// values wrap modulo 8).
    pub fn scale(&self, ib: usize) -> u8 {
        let ib = ib % 8;
        let h = u16::from_le_bytes(self.scales_h);
        ((self.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) | ((((h >> (2 * ib)) & 3) as u8) << 4)
    }

    fn dequantize(&self, y: &mut [f32; QK_K]) {
        let d = fp16_to_f32(self.d);
        for (ib, (ys, qs)) in y
            .chunks_exact_mut(32)
            .zip(self.qs.chunks_exact(16))
            .enumerate()
        {
            let dl = d * (self.scale(ib) as i32 - 32) as f32;
            for j in 0..16 {
                ys[j] = dl * KVALUES_IQ4NL[(qs[j] & 0x0F) as usize] as f32;
                ys[j + 16] = dl * KVALUES_IQ4NL[(qs[j] >> 4) as usize] as f32;
            }
        }
    }

    fn quantize(x: &[f32; QK_K]) -> Result<Self, FieldOverflow> {
        Self::quantize_with(x, None)
    }

    fn quantize_weighted(
        x: &[f32; QK_K],
        qw: &[f32; QK_K],
        _row_mean_square: f32,
    ) -> Result<Self, FieldOverflow> {
        Self::quantize_with(x, Some(qw))
    }

    /// `quantize_row_iq4_nl_impl(QK_K, 32, ..., ntry = 7)`: a scale search
    /// per sub-block, then the scales quantized to 6 bits against
    /// `d = -max_scale / 32` and every weight re-indexed with its sub-block's
    /// stored scale `d * l` (`d` in f32, not its fp16 rounding, as in ggml).
    fn quantize_with(x: &[f32; QK_K], qw: Option<&[f32; QK_K]>) -> Result<Self, FieldOverflow> {
        let s2 = sigma2(x);
        let mut scales = [0.0f32; QK_K / 32];
        let mut max_scale = 0.0f32;
        let mut amax_scale = 0.0f32;
        for ib in 0..QK_K / 32 {
            let xb = sub32(x, 32 * ib);
            let qwb = qw.map(|q| sub32(q, 32 * ib));
            let weight = block_weights(&xb, qwb.as_ref(), s2);
            let d = search_scale(&xb, &weight);
            scales[ib] = d;
            let abs_d = d.abs();
            if abs_d > amax_scale {
                amax_scale = abs_d;
                max_scale = d;
            }
        }
        let d = -max_scale / 32.0;
        let dh = scale_to_fp16(d, "d")?;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut scales_h = 0u16;
        let mut scales_l = [0u8; QK_K / 64];
        let mut qs = [0u8; QK_K / 2];
        for ib in 0..QK_K / 32 {
            let l = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * l as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            let xb = sub32(x, 32 * ib);
            qs[16 * ib..16 * ib + 16].copy_from_slice(&quantize_nibbles(&xb, idl));
            let l = (l + 32) as u8;
            let (l_l, l_h) = (l & 0x0F, l >> 4);
            if ib % 2 == 0 {
                scales_l[ib / 2] = l_l;
            } else {
                scales_l[ib / 2] |= l_l << 4;
            }
            scales_h |= (l_h as u16) << (2 * ib);
        }
        Ok(Self {
            d: dh,
            scales_h: scales_h.to_le_bytes(),
            scales_l,
            qs,
        })
    }
}

/// Marker for the IQ4_XS format.
#[derive(Debug, Clone, Copy)]
pub struct Iq4Xs;
impl_block_format!(Iq4Xs, BlockIq4Xs, GgmlType::IQ4_XS, QK_K, 136; d, scales_h, scales_l, qs);
impl_weighted_block_format!(Iq4Xs, BlockIq4Xs, GgmlType::IQ4_XS, QK_K);
