//! The k-quant 256-weight super-block formats: Q4_K, Q5_K, Q6_K.
//!
//! Decoding follows ggml's `dequantize_row_q{4,5,6}_K` and encoding ggml's
//! `quantize_row_q{4,5,6}_K_ref` (the path llama-quantize takes without an
//! importance matrix), including the helpers `make_qx_quants`,
//! `make_qkx2_quants`, `nearest_int` and `get_scale_min_k4`, operation for
//! operation in f32 so the bytes match ggml's.
#![allow(clippy::needless_range_loop)]

use crate::block::{impl_block_format, ByteReader, ByteWriter};
use crate::float::{fp16_to_f32, scale_to_fp16, FieldOverflow};
use crate::types::GgmlType;

/// Weights per super-block (`QK_K`).
pub const QK_K: usize = 256;
/// Bytes of the packed 6-bit scales/mins of Q4_K and Q5_K (`K_SCALE_SIZE`).
pub const K_SCALE_SIZE: usize = 12;

/// ggml's `GROUP_MAX_EPS`: below this absolute max a group counts as all zero.
const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int`: round to nearest (ties to even) through the
/// 1.5 * 2^23 magic constant. Exact for |v| <= 4194303; larger inputs give
/// the same (meaningless) bits ggml computes, never a panic.
#[inline]
pub(crate) fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12_582_912.0f32;
    let i = val.to_bits() as i32;
    (i & 0x007f_ffff) - 0x0040_0000
}

/// ggml's `make_qx_quants` for `qw == NULL` and `rmse_type == 1` (weights
/// x^2), the only form the reference quantizers call. Writes `L` (biased by
/// `nmax`) and returns the scale.
fn make_qx_quants_rmse1(nmax: i32, x: &[f32; 16], out_l: &mut [i8; 16]) -> f32 {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        *out_l = [0; 16];
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    let mut iscale = -nmaxf / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for i in 0..16 {
        let l = clamp(nearest_int(iscale * x[i]));
        out_l[i] = (l + nmax) as i8;
        let w = x[i] * x[i];
        let lf = l as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmaxf + 0.1f32 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for i in 0..16 {
            let l = clamp(nearest_int(iscale * x[i]));
            let w = x[i] * x[i];
            let lf = l as f32;
            sumlx += w * x[i] * lf;
            suml2 += w * lf * lf;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..16 {
                let l = nearest_int(iscale * x[i]);
                out_l[i] = (nmax + clamp(l)) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// ggml's `make_qkx2_quants` for 32 weights with `use_mad == false`.
/// Writes `L` (0..=nmax) and returns `(scale, the_min)` where `the_min = -min >= 0`.
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32; 32],
    weights: &[f32; 32],
    out_l: &mut [u8; 32],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> (f32, f32) {
    let n = 32;
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        *out_l = [0; 32];
        return (0.0, -min);
    }
    let nmaxf = nmax as f32;
    let mut iscale = nmaxf / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min));
        out_l[i] = l.clamp(0, nmax) as u8;
        let diff = scale * out_l[i] as f32 + min - x[i];
        let diff = diff * diff;
        best_error += weights[i] * diff;
    }
    if nstep < 1 {
        return (scale, -min);
    }
    let mut laux = [0u8; 32];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmaxf) / (max - min);
        let mut sum_l = 0.0f32;
        let mut sum_l2 = 0.0f32;
        let mut sum_xl = 0.0f32;
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let big_d = sum_w * sum_l2 - sum_l * sum_l;
        if big_d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / big_d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / big_d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                let diff = diff * diff;
                cur_error += weights[i] * diff;
            }
            if cur_error < best_error {
                *out_l = laux;
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

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
        let (scale, the_min) =
            make_qkx2_quants(nmax, &xs, &weights, &mut l_sub, rmin, rdelta, nstep);
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
    let mut sc = [0u8; K_SCALE_SIZE];
    for j in 0..QK_K / 32 {
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0x0F) | ((lm & 0x0F) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    let d = scale_to_fp16(max_scale / 63.0, "d")?;
    let dmin = scale_to_fp16(max_min / 63.0, "dmin")?;

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
    Ok(ScalesMins {
        d,
        dmin,
        scales: sc,
        l: l_all,
    })
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
    fn from_bytes(b: &[u8; 144]) -> Self {
        let mut r = ByteReader::new(b);
        Self {
            d: r.take(),
            dmin: r.take(),
            scales: r.take(),
            qs: r.take(),
        }
    }

    fn to_bytes(self) -> [u8; 144] {
        let mut out = [0u8; 144];
        let mut w = ByteWriter::new(&mut out);
        w.put(&self.d);
        w.put(&self.dmin);
        w.put(&self.scales);
        w.put(&self.qs);
        out
    }

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
        let ScalesMins { d, dmin, scales, l } = quantize_scales_mins(x, 15, -1.0, 0.1, 20)?;
        let mut qs = [0u8; QK_K / 2];
        for (j, q) in (0..QK_K).step_by(64).zip(qs.chunks_exact_mut(32)) {
            for (i, qb) in q.iter_mut().enumerate() {
                *qb = l[j + i] | (l[j + i + 32] << 4);
            }
        }
        Ok(Self {
            d,
            dmin,
            scales,
            qs,
        })
    }
}

/// Marker for the Q4_K format.
#[derive(Debug, Clone, Copy)]
pub struct Q4K;
impl_block_format!(Q4K, BlockQ4K, GgmlType::Q4_K, QK_K, 144);

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
    fn from_bytes(b: &[u8; 176]) -> Self {
        let mut r = ByteReader::new(b);
        Self {
            d: r.take(),
            dmin: r.take(),
            scales: r.take(),
            qh: r.take(),
            qs: r.take(),
        }
    }

    fn to_bytes(self) -> [u8; 176] {
        let mut out = [0u8; 176];
        let mut w = ByteWriter::new(&mut out);
        w.put(&self.d);
        w.put(&self.dmin);
        w.put(&self.scales);
        w.put(&self.qh);
        w.put(&self.qs);
        out
    }

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
        let ScalesMins { d, dmin, scales, l } = quantize_scales_mins(x, 31, -0.5, 0.1, 15)?;
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
        Ok(Self {
            d,
            dmin,
            scales,
            qh,
            qs,
        })
    }
}

/// Marker for the Q5_K format.
#[derive(Debug, Clone, Copy)]
pub struct Q5K;
impl_block_format!(Q5K, BlockQ5K, GgmlType::Q5_K, QK_K, 176);

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
    fn from_bytes(b: &[u8; 210]) -> Self {
        let mut r = ByteReader::new(b);
        Self {
            ql: r.take(),
            qh: r.take(),
            scales: r.take_i8(),
            d: r.take(),
        }
    }

    fn to_bytes(self) -> [u8; 210] {
        let mut out = [0u8; 210];
        let mut w = ByteWriter::new(&mut out);
        w.put(&self.ql);
        w.put(&self.qh);
        w.put_i8(&self.scales);
        w.put(&self.d);
        out
    }

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
        let mut l_all = [0i8; QK_K];
        let mut scales = [0.0f32; QK_K / 16];
        let mut max_scale = 0.0f32;
        let mut max_abs_scale = 0.0f32;
        for ib in 0..QK_K / 16 {
            let mut xs = [0.0f32; 16];
            xs.copy_from_slice(&x[16 * ib..16 * ib + 16]);
            let mut l_sub = [0i8; 16];
            let scale = make_qx_quants_rmse1(32, &xs, &mut l_sub);
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
impl_block_format!(Q6K, BlockQ6K, GgmlType::Q6_K, QK_K, 210);
