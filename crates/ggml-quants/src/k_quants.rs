//! The k-quant 256-weight super-block formats: Q4_K, Q5_K, Q6_K.
//!
//! Decoding follows ggml's `dequantize_row_q{4,5,6}_K` and encoding ggml's
//! `quantize_row_q{4,5,6}_K_ref` (the path llama-quantize takes without an
//! importance matrix), including the helpers `make_qx_quants`,
//! `make_qkx2_quants`, `nearest_int` and `get_scale_min_k4`, operation for
//! operation in f32 so the bytes match ggml's.
#![allow(clippy::needless_range_loop)]

use crate::block::{impl_block_format, impl_weighted_block_format};
use crate::float::{fp16_to_f32, scale_to_fp16, FieldOverflow};
use crate::search::{
    make_q3_quants, make_qkx_quants, make_qp_quants, make_qx_quants, nearest_int, Grid, Qkx,
    GROUP_MAX_EPS,
};
use crate::types::GgmlType;

/// Weights per super-block (`QK_K`).
pub const QK_K: usize = 256;
/// Bytes of the packed 6-bit scales/mins of Q4_K and Q5_K (`K_SCALE_SIZE`).
pub const K_SCALE_SIZE: usize = 12;

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j`
/// (0..8; larger `j` wrap modulo 8 rather than panic).
#[inline]
pub fn get_scale_min_k4(j: usize, q: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    let j = j % 8;
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Shared first half of the Q4_K / Q5_K reference quantizers: per-sub-block
/// `make_qkx2_quants`, 6-bit scale/min packing, fp16 super-scales, then the
/// requantization of every weight with the stored scales.
fn quantize_scales_mins(
    x: &[f32; QK_K],
    nmax: i32,
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> Result<ScalesMins, FieldOverflow> {
    let mut l_all = [0u8; QK_K];
    let mut mins = [0.0f32; QK_K / 32];
    let mut scales = [0.0f32; QK_K / 32];
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    for j in 0..QK_K / 32 {
        let mut xs = [0.0f32; 32];
        xs.copy_from_slice(&x[32 * j..32 * j + 32]);
        let mut sum_x2 = 0.0f32;
        for l in 0..32 {
            sum_x2 += xs[l] * xs[l];
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let mut weights = [0.0f32; 32];
        for l in 0..32 {
            weights[l] = av_x + xs[l].abs();
        }
        let mut l_sub = [0u8; 32];
        let (scale, the_min) = make_qkx_quants(
            Qkx::Two,
            nmax,
            &xs,
            &weights,
            &mut l_sub,
            Grid {
                rmin,
                rdelta,
                nstep,
                use_mad: false,
            },
        );
        l_all[32 * j..32 * j + 32].copy_from_slice(&l_sub);
        scales[j] = scale;
        mins[j] = the_min;
        if scale > max_scale {
            max_scale = scale;
        }
        if the_min > max_min {
            max_min = the_min;
        }
    }

    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut ls = [0u8; QK_K / 32];
    let mut lm = [0u8; QK_K / 32];
    for j in 0..QK_K / 32 {
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    let sc = pack_scales_mins(&ls, &lm);
    let d = scale_to_fp16(max_scale / 63.0, "d")?;
    let dmin = scale_to_fp16(max_min / 63.0, "dmin")?;
    Ok(requantize_scales_mins(x, nmax, d, dmin, sc, l_all))
}

/// Packs the 6-bit sub-block scales `ls` and mins `lm` of Q4_K / Q5_K the
/// way ggml does (into `uint8_t`: values above 63 spill into the high bits,
/// as in ggml).
fn pack_scales_mins(ls: &[u8; QK_K / 32], lm: &[u8; QK_K / 32]) -> [u8; K_SCALE_SIZE] {
    let mut sc = [0u8; K_SCALE_SIZE];
    for j in 0..QK_K / 32 {
        let (ls, lm) = (ls[j], lm[j]);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0x0F) | ((lm & 0x0F) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    sc
}

/// The last step of every Q4_K / Q5_K quantizer: each weight of a sub-block
/// whose stored scale is not zero is quantized again with the stored
/// (fp16-rounded, 6-bit) scale and min; other sub-blocks keep `l_all`.
fn requantize_scales_mins(
    x: &[f32; QK_K],
    nmax: i32,
    d: [u8; 2],
    dmin: [u8; 2],
    sc: [u8; K_SCALE_SIZE],
    mut l_all: [u8; QK_K],
) -> ScalesMins {
    let df = fp16_to_f32(d);
    let dminf = fp16_to_f32(dmin);
    for j in 0..QK_K / 32 {
        let (s, m) = get_scale_min_k4(j, &sc);
        let dd = df * s as f32;
        if dd == 0.0 {
            continue;
        }
        let dm = dminf * m as f32;
        for ii in 0..32 {
            let l = nearest_int((x[32 * j + ii] + dm) / dd);
            l_all[32 * j + ii] = l.clamp(0, nmax) as u8;
        }
    }
    ScalesMins {
        d,
        dmin,
        scales: sc,
        l: l_all,
    }
}

/// ggml's `quantize_row_q4_K_impl` / `quantize_row_q5_K_impl` with an
/// importance matrix: weights `qw * sqrt(sigma2 + x^2)` with `sigma2 =
/// 2 * mean(x^2)` of the super-block, `make_qkx3_quants` per sub-block of 32,
/// then the 8 scales and the 8 mins through `make_qp_quants(63)` weighted by
/// each sub-block's total weight. `clamp_63`: Q5_K clamps the 6-bit values
/// to 63, Q4_K does not.
fn quantize_scales_mins_weighted(
    x: &[f32; QK_K],
    qw: &[f32; QK_K],
    nmax: i32,
    clamp_63: bool,
) -> Result<ScalesMins, FieldOverflow> {
    let mut sum_x2 = 0.0f32;
    for l in 0..QK_K {
        sum_x2 += x[l] * x[l];
    }
    let sigma2 = 2.0 * sum_x2 / QK_K as f32;
    let mut l_all = [0u8; QK_K];
    let mut sw = [0.0f32; QK_K / 32];
    let mut mins = [0.0f32; QK_K / 32];
    let mut scales = [0.0f32; QK_K / 32];
    for j in 0..QK_K / 32 {
        let xs = sub::<32>(x, 32 * j);
        let qws = sub::<32>(qw, 32 * j);
        let mut weights = [0.0f32; 32];
        for l in 0..32 {
            weights[l] = qws[l] * (sigma2 + xs[l] * xs[l]).sqrt();
        }
        let mut sumw = 0.0f32;
        for w in weights {
            sumw += w;
        }
        sw[j] = sumw;
        let mut l_sub = [0u8; 32];
        let (scale, the_min) =
            make_qkx_quants(Qkx::Three, nmax, &xs, &weights, &mut l_sub, Grid::QKX3);
        l_all[32 * j..32 * j + 32].copy_from_slice(&l_sub);
        scales[j] = scale;
        mins[j] = the_min;
    }
    let mut ls = [0u8; QK_K / 32];
    let mut lm = [0u8; QK_K / 32];
    let d_block = make_qp_quants(63, &scales, &mut ls, &sw);
    let m_block = make_qp_quants(63, &mins, &mut lm, &sw);
    if clamp_63 {
        ls = ls.map(|v| v.min(63));
        lm = lm.map(|v| v.min(63));
    }
    let sc = pack_scales_mins(&ls, &lm);
    let d = scale_to_fp16(d_block, "d")?;
    let dmin = scale_to_fp16(m_block, "dmin")?;
    Ok(requantize_scales_mins(x, nmax, d, dmin, sc, l_all))
}

/// The `N` values of `x` from `start` (a sub-block), as an array.
#[inline]
fn sub<const N: usize>(x: &[f32; QK_K], start: usize) -> [f32; N] {
    let mut out = [0.0f32; N];
    out.copy_from_slice(&x[start..start + N]);
    out
}

/// Output of [`quantize_scales_mins`]: the fields shared by Q4_K and Q5_K
/// plus the final quant of every weight (0..=nmax).
struct ScalesMins {
    d: [u8; 2],
    dmin: [u8; 2],
    scales: [u8; K_SCALE_SIZE],
    l: [u8; QK_K],
}

// ---------------------------------------------------------------- Q4_K

/// `block_q4_K`: fp16 super-scale and super-min, 8 packed 6-bit
/// scale/min pairs, 256 4-bit quants.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ4K {
    /// Super-block scale of the scales (fp16, little-endian).
    pub d: [u8; 2],
    /// Super-block scale of the mins (fp16, little-endian).
    pub dmin: [u8; 2],
    /// Packed 6-bit scales and mins (see [`get_scale_min_k4`]).
    pub scales: [u8; K_SCALE_SIZE],
    /// Nibbles: per 64 weights, low = first 32, high = next 32.
    pub qs: [u8; QK_K / 2],
}

impl BlockQ4K {
    fn dequantize(&self, y: &mut [f32; QK_K]) {
        let d = fp16_to_f32(self.d);
        let min = fp16_to_f32(self.dmin);
        for (chunk, (q, ys)) in self
            .qs
            .chunks_exact(32)
            .zip(y.chunks_exact_mut(64))
            .enumerate()
        {
            let is = 2 * chunk;
            let (sc, m) = get_scale_min_k4(is, &self.scales);
            let d1 = d * sc as f32;
            let m1 = min * m as f32;
            let (sc, m) = get_scale_min_k4(is + 1, &self.scales);
            let d2 = d * sc as f32;
            let m2 = min * m as f32;
            let (lo, hi) = ys.split_at_mut(32);
            for ((&qb, a), b) in q.iter().zip(lo).zip(hi) {
                *a = d1 * (qb & 0x0F) as f32 - m1;
                *b = d2 * (qb >> 4) as f32 - m2;
            }
        }
    }

    fn quantize(x: &[f32; QK_K]) -> Result<Self, FieldOverflow> {
        Ok(Self::pack(quantize_scales_mins(x, 15, -1.0, 0.1, 20)?))
    }

    /// ggml's `quantize_row_q4_K_impl` with an importance matrix.
    fn quantize_weighted(
        x: &[f32; QK_K],
        qw: &[f32; QK_K],
        _row_mean_square: f32,
    ) -> Result<Self, FieldOverflow> {
        Ok(Self::pack(quantize_scales_mins_weighted(x, qw, 15, false)?))
    }

    fn pack(sm: ScalesMins) -> Self {
        let ScalesMins { d, dmin, scales, l } = sm;
        let mut qs = [0u8; QK_K / 2];
        for (j, q) in (0..QK_K).step_by(64).zip(qs.chunks_exact_mut(32)) {
            for (i, qb) in q.iter_mut().enumerate() {
                *qb = l[j + i] | (l[j + i + 32] << 4);
            }
        }
        Self {
            d,
            dmin,
            scales,
            qs,
        }
    }
}

/// Marker for the Q4_K format.
#[derive(Debug, Clone, Copy)]
pub struct Q4K;
impl_block_format!(Q4K, BlockQ4K, GgmlType::Q4_K, QK_K, 144; d, dmin, scales, qs);
impl_weighted_block_format!(Q4K, BlockQ4K, GgmlType::Q4_K, QK_K);

// ---------------------------------------------------------------- Q5_K

/// `block_q5_K`: like Q4_K plus one high bit per weight.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ5K {
    /// Super-block scale of the scales (fp16, little-endian).
    pub d: [u8; 2],
    /// Super-block scale of the mins (fp16, little-endian).
    pub dmin: [u8; 2],
    /// Packed 6-bit scales and mins (see [`get_scale_min_k4`]).
    pub scales: [u8; K_SCALE_SIZE],
    /// Fifth bits: byte l, bits 2k and 2k+1 for weights 64k + l and 64k + 32 + l.
    pub qh: [u8; QK_K / 8],
    /// Low nibbles, laid out as in Q4_K.
    pub qs: [u8; QK_K / 2],
}

impl BlockQ5K {
    fn dequantize(&self, y: &mut [f32; QK_K]) {
        let d = fp16_to_f32(self.d);
        let min = fp16_to_f32(self.dmin);
        let mut u1 = 1u8;
        let mut u2 = 2u8;
        for (chunk, (ql, ys)) in self
            .qs
            .chunks_exact(32)
            .zip(y.chunks_exact_mut(64))
            .enumerate()
        {
            let is = 2 * chunk;
            let (sc, m) = get_scale_min_k4(is, &self.scales);
            let d1 = d * sc as f32;
            let m1 = min * m as f32;
            let (sc, m) = get_scale_min_k4(is + 1, &self.scales);
            let d2 = d * sc as f32;
            let m2 = min * m as f32;
            let (lo, hi) = ys.split_at_mut(32);
            for (l, (a, b)) in lo.iter_mut().zip(hi).enumerate() {
                let h1: i32 = if self.qh[l] & u1 != 0 { 16 } else { 0 };
                let h2: i32 = if self.qh[l] & u2 != 0 { 16 } else { 0 };
                *a = d1 * ((ql[l] & 0x0F) as i32 + h1) as f32 - m1;
                *b = d2 * ((ql[l] >> 4) as i32 + h2) as f32 - m2;
            }
            u1 = u1.wrapping_shl(2);
            u2 = u2.wrapping_shl(2);
        }
    }

    fn quantize(x: &[f32; QK_K]) -> Result<Self, FieldOverflow> {
        Ok(Self::pack(quantize_scales_mins(x, 31, -0.5, 0.1, 15)?))
    }

    /// ggml's `quantize_row_q5_K_impl` with an importance matrix.
    fn quantize_weighted(
        x: &[f32; QK_K],
        qw: &[f32; QK_K],
        _row_mean_square: f32,
    ) -> Result<Self, FieldOverflow> {
        Ok(Self::pack(quantize_scales_mins_weighted(x, qw, 31, true)?))
    }

    fn pack(sm: ScalesMins) -> Self {
        let ScalesMins { d, dmin, scales, l } = sm;
        let mut qs = [0u8; QK_K / 2];
        let mut qh = [0u8; QK_K / 8];
        let mut m1 = 1u8;
        let mut m2 = 2u8;
        for (n, ql) in (0..QK_K).step_by(64).zip(qs.chunks_exact_mut(32)) {
            for j in 0..32 {
                let mut l1 = l[n + j];
                if l1 > 15 {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                let mut l2 = l[n + j + 32];
                if l2 > 15 {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[j] = l1 | (l2 << 4);
            }
            m1 = m1.wrapping_shl(2);
            m2 = m2.wrapping_shl(2);
        }
        Self {
            d,
            dmin,
            scales,
            qh,
            qs,
        }
    }
}

/// Marker for the Q5_K format.
#[derive(Debug, Clone, Copy)]
pub struct Q5K;
impl_block_format!(Q5K, BlockQ5K, GgmlType::Q5_K, QK_K, 176; d, dmin, scales, qh, qs);
impl_weighted_block_format!(Q5K, BlockQ5K, GgmlType::Q5_K, QK_K);

// ---------------------------------------------------------------- Q6_K

/// `block_q6_K`: 256 6-bit quants (low nibbles + 2 high bits), 16 signed
/// 8-bit scales, fp16 super-scale (last).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ6K {
    /// Low 4 bits of the quants.
    pub ql: [u8; QK_K / 2],
    /// High 2 bits of the quants.
    pub qh: [u8; QK_K / 4],
    /// Scales of the 16 sub-blocks of 16 weights.
    pub scales: [i8; QK_K / 16],
    /// Super-block scale (fp16, little-endian).
    pub d: [u8; 2],
}

impl BlockQ6K {
    fn dequantize(&self, y: &mut [f32; QK_K]) {
        let d = fp16_to_f32(self.d);
        for (half, ys) in y.chunks_exact_mut(128).enumerate() {
            let ql = &self.ql[64 * half..64 * half + 64];
            let qh = &self.qh[32 * half..32 * half + 32];
            let sc = &self.scales[8 * half..8 * half + 8];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                ys[l] = d * sc[is] as f32 * q1 as f32;
                ys[l + 32] = d * sc[is + 2] as f32 * q2 as f32;
                ys[l + 64] = d * sc[is + 4] as f32 * q3 as f32;
                ys[l + 96] = d * sc[is + 6] as f32 * q4 as f32;
            }
        }
    }

    fn quantize(x: &[f32; QK_K]) -> Result<Self, FieldOverflow> {
        Self::quantize_with(x, None)
    }

    /// ggml's `quantize_row_q6_K_impl` with an importance matrix: the raw
    /// importance is the weight of `make_qx_quants` (no `sigma2` term).
    fn quantize_weighted(
        x: &[f32; QK_K],
        qw: &[f32; QK_K],
        _row_mean_square: f32,
    ) -> Result<Self, FieldOverflow> {
        Self::quantize_with(x, Some(qw))
    }

    fn quantize_with(x: &[f32; QK_K], qw: Option<&[f32; QK_K]>) -> Result<Self, FieldOverflow> {
        let mut l_all = [0i8; QK_K];
        let mut scales = [0.0f32; QK_K / 16];
        let mut max_scale = 0.0f32;
        let mut max_abs_scale = 0.0f32;
        for ib in 0..QK_K / 16 {
            let xs = sub::<16>(x, 16 * ib);
            let mut l_sub = [0i8; 16];
            let qws = qw.map(|q| sub::<16>(q, 16 * ib));
            let scale = make_qx_quants(32, &xs, &mut l_sub, qws.as_ref());
            l_all[16 * ib..16 * ib + 16].copy_from_slice(&l_sub);
            scales[ib] = scale;
            let abs_scale = scale.abs();
            if abs_scale > max_abs_scale {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }

        if max_abs_scale < GROUP_MAX_EPS {
            return Ok(Self {
                ql: [0; QK_K / 2],
                qh: [0; QK_K / 4],
                scales: [0; QK_K / 16],
                d: [0; 2],
            });
        }

        let iscale = -128.0f32 / max_scale;
        let d = scale_to_fp16(1.0 / iscale, "d")?;
        let mut sc = [0i8; QK_K / 16];
        for ib in 0..QK_K / 16 {
            sc[ib] = nearest_int(iscale * scales[ib]).min(127) as i8;
        }
        let df = fp16_to_f32(d);
        for j in 0..QK_K / 16 {
            let dd = df * sc[j] as f32;
            if dd == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let l = nearest_int(x[16 * j + ii] / dd).clamp(-32, 31);
                l_all[16 * j + ii] = (l + 32) as i8;
            }
        }

        let mut ql = [0u8; QK_K / 2];
        let mut qh = [0u8; QK_K / 4];
        for (half, j) in (0..QK_K).step_by(128).enumerate() {
            for l in 0..32 {
                let lv = |k: usize| l_all[j + l + k] as u8;
                let q1 = lv(0) & 0x0F;
                let q2 = lv(32) & 0x0F;
                let q3 = lv(64) & 0x0F;
                let q4 = lv(96) & 0x0F;
                ql[64 * half + l] = q1 | (q3 << 4);
                ql[64 * half + l + 32] = q2 | (q4 << 4);
                qh[32 * half + l] = (lv(0) >> 4)
                    | ((lv(32) >> 4) << 2)
                    | ((lv(64) >> 4) << 4)
                    | ((lv(96) >> 4) << 6);
            }
        }
        Ok(Self {
            ql,
            qh,
            scales: sc,
            d,
        })
    }
}

/// Marker for the Q6_K format.
#[derive(Debug, Clone, Copy)]
pub struct Q6K;
impl_block_format!(Q6K, BlockQ6K, GgmlType::Q6_K, QK_K, 210; ql, qh, scales, d);
impl_weighted_block_format!(Q6K, BlockQ6K, GgmlType::Q6_K, QK_K);

// ---------------------------------------------------------------- Q2_K

/// `block_q2_K`: 16 packed 4-bit scale/min pairs (scale low nibble, min
/// high nibble), 256 2-bit quants, fp16 super-scale and super-min (last).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ2K {
    /// Per sub-block of 16: scale (low nibble) and min (high nibble).
    pub scales: [u8; QK_K / 16],
    /// 2-bit quants: per 128 weights, byte `l` holds weights `l`, `l + 32`,
    /// `l + 64`, `l + 96` in bits 0-1, 2-3, 4-5, 6-7.
    pub qs: [u8; QK_K / 4],
    /// Super-block scale of the scales (fp16, little-endian).
    pub d: [u8; 2],
    /// Super-block scale of the mins (fp16, little-endian).
    pub dmin: [u8; 2],
}

/// Packs 256 2-bit values the way Q2_K and Q3_K store them.
fn pack_2bit(l: &[u8; QK_K]) -> [u8; QK_K / 4] {
    let mut qs = [0u8; QK_K / 4];
    for j in (0..QK_K).step_by(128) {
        for i in 0..32 {
            qs[j / 4 + i] =
                l[j + i] | (l[j + i + 32] << 2) | (l[j + i + 64] << 4) | (l[j + i + 96] << 6);
        }
    }
    qs
}

impl BlockQ2K {
    fn dequantize(&self, y: &mut [f32; QK_K]) {
        let d = fp16_to_f32(self.d);
        let min = fp16_to_f32(self.dmin);
        let mut is = 0;
        for (half, ys) in y.chunks_exact_mut(128).enumerate() {
            let q = &self.qs[32 * half..32 * half + 32];
            for (j, ys) in ys.chunks_exact_mut(32).enumerate() {
                let shift = 2 * j;
                for (part, ys) in ys.chunks_exact_mut(16).enumerate() {
                    let sc = self.scales[is];
                    is += 1;
                    let dl = d * (sc & 0x0F) as f32;
                    let ml = min * (sc >> 4) as f32;
                    for (l, v) in ys.iter_mut().enumerate() {
                        *v = dl * ((q[16 * part + l] >> shift) & 3) as f32 - ml;
                    }
                }
            }
        }
    }

    /// ggml's `quantize_row_q2_K_ref`.
    fn quantize(x: &[f32; QK_K]) -> Result<Self, FieldOverflow> {
        let mut l_all = [0u8; QK_K];
        let mut mins = [0.0f32; QK_K / 16];
        let mut scales = [0.0f32; QK_K / 16];
        let mut max_scale = 0.0f32;
        let mut max_min = 0.0f32;
        for j in 0..QK_K / 16 {
            let xs = sub::<16>(x, 16 * j);
            let weights = xs.map(f32::abs);
            let mut l_sub = [0u8; 16];
            let (scale, the_min) = make_qkx_quants(
                Qkx::Two,
                3,
                &xs,
                &weights,
                &mut l_sub,
                Grid {
                    rmin: -0.5,
                    rdelta: 0.1,
                    nstep: 15,
                    use_mad: true,
                },
            );
            l_all[16 * j..16 * j + 16].copy_from_slice(&l_sub);
            scales[j] = scale;
            mins[j] = the_min;
            if scale > max_scale {
                max_scale = scale;
            }
            if the_min > max_min {
                max_min = the_min;
            }
        }

        const Q4SCALE: f32 = 15.0;
        let mut sc = [0u8; QK_K / 16];
        let d = if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for j in 0..QK_K / 16 {
                sc[j] = nearest_int(iscale * scales[j]) as u8;
            }
            scale_to_fp16(max_scale / Q4SCALE, "d")?
        } else {
            scale_to_fp16(0.0, "d")?
        };
        let dmin = if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for j in 0..QK_K / 16 {
                sc[j] |= (nearest_int(iscale * mins[j]) << 4) as u8;
            }
            scale_to_fp16(max_min / Q4SCALE, "dmin")?
        } else {
            scale_to_fp16(0.0, "dmin")?
        };
        Ok(Self::requantize(x, sc, d, dmin, l_all))
    }

    /// ggml's `quantize_row_q2_K_impl` with an importance matrix: weights
    /// `qw * sqrt(sigma2 + x^2)` with `sigma2 = mean(x^2)` of the super-block,
    /// `make_qkx3_quants` per sub-block of 16, and the 16 scales and mins
    /// through `make_qp_quants(15)` weighted by each sub-block's total weight.
    fn quantize_weighted(
        x: &[f32; QK_K],
        qw: &[f32; QK_K],
        _row_mean_square: f32,
    ) -> Result<Self, FieldOverflow> {
        let mut sumx2 = 0.0f32;
        for v in x {
            sumx2 += v * v;
        }
        let sigma2 = sumx2 / QK_K as f32;
        let mut l_all = [0u8; QK_K];
        let mut sw = [0.0f32; QK_K / 16];
        let mut mins = [0.0f32; QK_K / 16];
        let mut scales = [0.0f32; QK_K / 16];
        for j in 0..QK_K / 16 {
            let xs = sub::<16>(x, 16 * j);
            let qws = sub::<16>(qw, 16 * j);
            let mut weight = [0.0f32; 16];
            for l in 0..16 {
                weight[l] = qws[l] * (sigma2 + xs[l] * xs[l]).sqrt();
            }
            for w in weight {
                sw[j] += w;
            }
            let mut l_sub = [0u8; 16];
            let (scale, the_min) =
                make_qkx_quants(Qkx::Three, 3, &xs, &weight, &mut l_sub, Grid::QKX3);
            l_all[16 * j..16 * j + 16].copy_from_slice(&l_sub);
            scales[j] = scale;
            mins[j] = the_min;
        }
        let mut ls = [0u8; QK_K / 16];
        let mut lm = [0u8; QK_K / 16];
        let dm = make_qp_quants(15, &scales, &mut ls, &sw);
        let mm = make_qp_quants(15, &mins, &mut lm, &sw);
        let d = scale_to_fp16(dm, "d")?;
        let dmin = scale_to_fp16(mm, "dmin")?;
        let mut sc = [0u8; QK_K / 16];
        for j in 0..QK_K / 16 {
            sc[j] = ls[j] | (lm[j] << 4);
        }
        Ok(Self::requantize(x, sc, d, dmin, l_all))
    }

    /// Quantizes every weight again with the stored scales (sub-blocks whose
    /// scale is zero keep `l_all`) and packs the block.
    fn requantize(
        x: &[f32; QK_K],
        sc: [u8; QK_K / 16],
        d: [u8; 2],
        dmin: [u8; 2],
        mut l_all: [u8; QK_K],
    ) -> Self {
        let df = fp16_to_f32(d);
        let dminf = fp16_to_f32(dmin);
        for j in 0..QK_K / 16 {
            let dd = df * (sc[j] & 0x0F) as f32;
            if dd == 0.0 {
                continue;
            }
            let dm = dminf * (sc[j] >> 4) as f32;
            for ii in 0..16 {
                let l = nearest_int((x[16 * j + ii] + dm) / dd);
                l_all[16 * j + ii] = l.clamp(0, 3) as u8;
            }
        }
        Self {
            scales: sc,
            qs: pack_2bit(&l_all),
            d,
            dmin,
        }
    }
}

/// Marker for the Q2_K format.
#[derive(Debug, Clone, Copy)]
pub struct Q2K;
impl_block_format!(Q2K, BlockQ2K, GgmlType::Q2_K, QK_K, 84; scales, qs, d, dmin);
impl_weighted_block_format!(Q2K, BlockQ2K, GgmlType::Q2_K, QK_K);

// ---------------------------------------------------------------- Q3_K

/// `block_q3_K`: 256 3-bit quants (2 low bits + a high-bit mask), 16
/// 6-bit signed scales (offset 32) packed into 12 bytes, fp16 super-scale.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ3K {
    /// High bits: bit `k` of byte `m` is the high bit of weight `32k + m`
    /// (set means the quant is `>= 0`, i.e. ggml subtracts 4 when it is clear).
    pub hmask: [u8; QK_K / 8],
    /// Low 2 bits, packed as in Q2_K.
    pub qs: [u8; QK_K / 4],
    /// 16 6-bit scales: low nibbles in bytes 0-7 (sub-blocks 0-7 low, 8-15
    /// high nibble), high 2-bit pairs in bytes 8-11 (see [`q3k_scale`]).
    pub scales: [u8; 12],
    /// Super-block scale (fp16, little-endian).
    pub d: [u8; 2],
}

/// The signed 6-bit scale (-32..=31) of sub-block `j` (0..16; larger `j`
/// wrap modulo 16) of a Q3_K block, as ggml unpacks it.
#[inline]
pub fn q3k_scale(j: usize, scales: &[u8; 12]) -> i8 {
    let j = j % 16;
    let low = if j < 8 {
        scales[j] & 0x0F
    } else {
        scales[j - 8] >> 4
    };
    let high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    (low | (high << 4)) as i8 - 32
}

impl BlockQ3K {
    fn dequantize(&self, y: &mut [f32; QK_K]) {
        let d_all = fp16_to_f32(self.d);
        let mut is = 0;
        for (half, ys) in y.chunks_exact_mut(128).enumerate() {
            let q = &self.qs[32 * half..32 * half + 32];
            for (j, ys) in ys.chunks_exact_mut(32).enumerate() {
                let shift = 2 * j;
                let m = 1u8 << (4 * half + j);
                for (part, ys) in ys.chunks_exact_mut(16).enumerate() {
                    let dl = d_all * (q3k_scale(is, &self.scales) as i32) as f32;
                    is += 1;
                    for (l, v) in ys.iter_mut().enumerate() {
                        let k = 16 * part + l;
                        let low = ((q[k] >> shift) & 3) as i32;
                        let sub = if self.hmask[k] & m != 0 { 0 } else { 4 };
                        *v = dl * (low - sub) as f32;
                    }
                }
            }
        }
    }

    /// ggml's `quantize_row_q3_K_ref`.
    fn quantize(x: &[f32; QK_K]) -> Result<Self, FieldOverflow> {
        let mut l_all = [0i8; QK_K];
        let mut scales = [0.0f32; QK_K / 16];
        let mut max_scale = 0.0f32;
        let mut amax = 0.0f32;
        for j in 0..QK_K / 16 {
            let xs = sub::<16>(x, 16 * j);
            let mut l_sub = [0i8; 16];
            scales[j] = make_q3_quants(4, &xs, &mut l_sub);
            l_all[16 * j..16 * j + 16].copy_from_slice(&l_sub);
            let scale = scales[j].abs();
            if scale > amax {
                amax = scale;
                max_scale = scales[j];
            }
        }
        // C: `if (max_scale)`, true for NaN too.
        let (sc, d) = if max_scale != 0.0 {
            let iscale = -32.0f32 / max_scale;
            let mut ls = [0i32; QK_K / 16];
            for j in 0..QK_K / 16 {
                // C: int8_t l = nearest_int(...); l = MAX(-32, MIN(31, l)) + 32;
                let l = nearest_int(iscale * scales[j]) as i8 as i32;
                ls[j] = l.clamp(-32, 31) + 32;
            }
            (Self::pack_scales(&ls), scale_to_fp16(1.0 / iscale, "d")?)
        } else {
            ([0u8; 12], scale_to_fp16(0.0, "d")?)
        };
        Ok(Self::requantize(x, sc, d, l_all))
    }

    /// ggml's `quantize_row_q3_K_impl` with an importance matrix: weights
    /// `qw * sqrt(sigma2 + x^2)` with `sigma2 = 2 * mean(x^2)` of the
    /// super-block, `make_qx_quants(4)` per sub-block of 16, and the 16
    /// scales through `make_qx_quants(32)` weighted by each sub-block's
    /// total weight.
    fn quantize_weighted(
        x: &[f32; QK_K],
        qw: &[f32; QK_K],
        _row_mean_square: f32,
    ) -> Result<Self, FieldOverflow> {
        let mut sumx2 = 0.0f32;
        for v in x {
            sumx2 += v * v;
        }
        let sigma2 = 2.0 * sumx2 / QK_K as f32;
        let mut l_all = [0i8; QK_K];
        let mut scales = [0.0f32; QK_K / 16];
        let mut sw = [0.0f32; QK_K / 16];
        for j in 0..QK_K / 16 {
            let xs = sub::<16>(x, 16 * j);
            let qws = sub::<16>(qw, 16 * j);
            let mut weight = [0.0f32; 16];
            for l in 0..16 {
                weight[l] = qws[l] * (sigma2 + xs[l] * xs[l]).sqrt();
            }
            let mut sumw = 0.0f32;
            for w in weight {
                sumw += w;
            }
            sw[j] = sumw;
            let mut l_sub = [0i8; 16];
            scales[j] = make_qx_quants(4, &xs, &mut l_sub, Some(&weight));
            l_all[16 * j..16 * j + 16].copy_from_slice(&l_sub);
        }
        let mut ls8 = [0i8; QK_K / 16];
        let d_block = make_qx_quants(32, &scales, &mut ls8, Some(&sw));
        let ls = ls8.map(|l| l as i32);
        let sc = Self::pack_scales(&ls);
        let d = scale_to_fp16(d_block, "d")?;
        Ok(Self::requantize(x, sc, d, l_all))
    }

    /// Packs 16 6-bit scales (0..=63, already offset by 32) as ggml does.
    pub(crate) fn pack_scales(ls: &[i32; QK_K / 16]) -> [u8; 12] {
        let mut sc = [0u8; 12];
        for j in 0..QK_K / 16 {
            let l = ls[j];
            if j < 8 {
                sc[j] = (l & 0x0F) as u8;
            } else {
                sc[j - 8] |= ((l & 0x0F) << 4) as u8;
            }
            let l = l >> 4;
            sc[j % 4 + 8] |= (l << (2 * (j / 4))) as u8;
        }
        sc
    }

    /// Quantizes every weight again with the stored scales (sub-blocks whose
    /// scale is zero keep `l_all`, biased by 4), then splits the high bits
    /// into `hmask` and packs the low bits.
    fn requantize(x: &[f32; QK_K], sc: [u8; 12], d: [u8; 2], mut l_all: [i8; QK_K]) -> Self {
        let df = fp16_to_f32(d);
        for j in 0..QK_K / 16 {
            let dd = df * q3k_scale(j, &sc) as f32;
            if dd == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let l = nearest_int(x[16 * j + ii] / dd).clamp(-4, 3);
                l_all[16 * j + ii] = (l + 4) as i8;
            }
        }
        let mut hmask = [0u8; QK_K / 8];
        let mut low = [0u8; QK_K];
        for j in 0..QK_K {
            let mut l = l_all[j] as u8;
            if l > 3 {
                hmask[j % (QK_K / 8)] |= 1 << (j / (QK_K / 8));
                l -= 4;
            }
            low[j] = l;
        }
        Self {
            hmask,
            qs: pack_2bit(&low),
            scales: sc,
            d,
        }
    }
}

/// Marker for the Q3_K format.
#[derive(Debug, Clone, Copy)]
pub struct Q3K;
impl_block_format!(Q3K, BlockQ3K, GgmlType::Q3_K, QK_K, 110; hmask, qs, scales, d);
impl_weighted_block_format!(Q3K, BlockQ3K, GgmlType::Q3_K, QK_K);
