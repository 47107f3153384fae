//! Activation quantization: computed once per GEMV call, shared by every
//! ISA (so every tier sees the very same integers).
//!
//! - Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 weights take Q8_0 activations: ggml's
//!   `quantize_row_q8_0_ref` (through `ggml_quants::quantize_rows`), stored
//!   as [`ActQ8_0`] (the fp16 scale widened to f32, plus the sum of the
//!   quants for the kernels' bias tricks).
//! - Q4_K / Q5_K / Q6_K weights take Q8_K activations, [`BlockQ8K`]:
//!   ggml's `quantize_row_q8_K_ref`, reproduced in [`quantize_q8_k`].
//! - CQ4 panels take per-128-group int8 activations ([`Cq4Act`]); the
//!   rotation is in [`crate::panel`], the group quantizer is
//!   [`quantize_groups`].

use core::mem::size_of;

use ggml_quants::{quantize_rows, GgmlType};

use crate::blocks::f16_at;
use crate::error::KernelError;

/// A Q8_0 activation block as the kernels read it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ActQ8_0 {
    /// Quants (ggml's `qs`).
    pub qs: [i8; 32],
    /// ggml's fp16 `d`, widened to f32 (exact).
    pub d: f32,
    /// `sum(qs)` (for the unsigned-operand bias corrections).
    pub sum: i32,
}
const _: () = assert!(size_of::<ActQ8_0>() == 40);

impl Default for ActQ8_0 {
    fn default() -> Self {
        ActQ8_0 {
            qs: [0; 32],
            d: 0.0,
            sum: 0,
        }
    }
}

/// ggml's `block_q8_K`: the activation type of the k-quants.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockQ8K {
    /// Scale (`1 / iscale`).
    pub d: f32,
    /// Quants, each in -127..=127.
    pub qs: [i8; 256],
    /// Sums of `qs` over each 16 consecutive quants.
    pub bsums: [i16; 16],
}
const _: () = assert!(size_of::<BlockQ8K>() == 292);

impl Default for BlockQ8K {
    fn default() -> Self {
        BlockQ8K {
            d: 0.0,
            qs: [0; 256],
            bsums: [0; 16],
        }
    }
}

pub(crate) fn first_non_finite(x: &[f32]) -> Result<(), KernelError> {
    match x.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(i) => Err(KernelError::Activation(format!(
            "x[{i}] = {} is not finite",
            x[i]
        ))),
    }
}

/// Q8_0 activations of `x` (`x.len() == 32 * out.len()`), byte-identical to
/// ggml's `quantize_row_q8_0_ref`.
pub fn quantize_q8_0(x: &[f32], out: &mut [ActQ8_0]) -> Result<(), KernelError> {
    crate::error::check_len("x (32 per Q8_0 block)", out.len() * 32, x.len())?;
    first_non_finite(x)?;
    let mut buf = [0u8; 34];
    for (b, (xs, o)) in x.chunks_exact(32).zip(out.iter_mut()).enumerate() {
        quantize_rows(GgmlType::Q8_0, xs, 32, &mut buf)
            .map_err(|e| KernelError::Activation(format!("Q8_0 block {b}: {e}")))?;
        let mut sum = 0i32;
        for (q, &byte) in o.qs.iter_mut().zip(&buf[2..]) {
            *q = byte as i8;
            sum += *q as i32;
        }
        o.d = f16_at(&buf, 0);
        o.sum = sum;
    }
    Ok(())
}

/// ggml's `nearest_int`: `fval + 1.5 * 2^23`, then the low mantissa bits
/// (round half to even for `|fval| <= 2^22`).
#[inline(always)]
fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12_582_912.0;
    ((val.to_bits() & 0x007f_ffff) as i32) - 0x0040_0000
}

/// Q8_K activations of `x` (`x.len() == 256 * out.len()`), exactly ggml's
/// `quantize_row_q8_K_ref`: per block of 256, `max` = the value of largest
/// magnitude (first one wins), `iscale = -127 / max`,
/// `qs = min(127, nearest_int(iscale * x))`, `bsums` = sums of 16,
/// `d = 1 / iscale`; an all-zero block gets `d = 0` and zero quants.
pub fn quantize_q8_k(x: &[f32], out: &mut [BlockQ8K]) -> Result<(), KernelError> {
    crate::error::check_len("x (256 per Q8_K block)", out.len() * 256, x.len())?;
    first_non_finite(x)?;
    for (xs, o) in x.chunks_exact(256).zip(out.iter_mut()) {
        let mut max = 0.0f32;
        let mut amax = 0.0f32;
        for &v in xs {
            let ax = v.abs();
            if ax > amax {
                amax = ax;
                max = v;
            }
        }
        if amax == 0.0 {
            *o = BlockQ8K::default();
            continue;
        }
        let iscale = -127.0f32 / max;
        for (q, &v) in o.qs.iter_mut().zip(xs) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for (s, qs) in o.bsums.iter_mut().zip(o.qs.chunks_exact(16)) {
            *s = qs.iter().map(|&q| q as i32).sum::<i32>() as i16;
        }
        o.d = 1.0 / iscale;
    }
    Ok(())
}

/// Quantized CQ4 activations: `q` (Kp int8), and per 128-group the scale
/// and `sum(q)`.
#[derive(Debug, Clone, Copy)]
pub struct Cq4Act<'a> {
    /// Quantized rotated activations, `Kp` values in -127..=127.
    pub q: &'a [i8],
    /// Per group: `max|z| / 127` (0 for an all-zero group).
    pub scale: &'a [f32],
    /// Per group: `sum(q)` (for the unsigned-operand bias correction).
    pub qsum: &'a [i32],
}

impl<'a> Cq4Act<'a> {
    /// The activations of `q` with per-group `scale` and `qsum`.
    pub const fn new(q: &'a [i8], scale: &'a [f32], qsum: &'a [i32]) -> Self {
        Cq4Act { q, scale, qsum }
    }
}

/// Activation rows per tile of [`Cq4Rows::packed`]: the `smopa` operand
/// of the SME2 GEMM (16 rows x 4 columns = one 512-bit vector per
/// 4-column step); the other tiers read it too.
pub const CQ4_TILE_ROWS: usize = 16;

/// The quantized CQ4 activations of `m` rows of `X`, as the GEMM kernels
/// read them: each row exactly as a GEMV quantizes it ([`Cq4Act`]: `q`,
/// per-group `scale` and `qsum`), plus `packed`, the same quants
/// interleaved for outer products: tiles of [`CQ4_TILE_ROWS`] rows, and in
/// a tile, for each 4-column step `s = k / 4` (in `0..Kp / 4`), the 4
/// quants of row 0, then of row 1, ..:
///
/// ```text
/// packed[((t * Kp / 4) + s) * 64 + 4 r + c] = q[16 t + r][4 s + c]   (0 for rows >= m)
/// ```
///
/// Built by [`Cq4Rows::pack`] from the row-major quants.
#[derive(Debug, Clone, Copy)]
pub struct Cq4Rows<'a> {
    m: usize,
    kp: usize,
    q: &'a [i8],
    scale: &'a [f32],
    qsum: &'a [i32],
    packed: &'a [i8],
}

impl<'a> Cq4Rows<'a> {
    /// Bytes of `packed` for `m` rows of `kp` quants.
    pub fn packed_len(m: usize, kp: usize) -> usize {
        m.div_ceil(CQ4_TILE_ROWS) * CQ4_TILE_ROWS * kp
    }

    /// Interleave `q` (`m` rows of `kp` quants, row-major) into `packed`
    /// ([`Cq4Rows::packed_len`] bytes), the layout of the type docs.
    pub fn pack(m: usize, kp: usize, q: &[i8], packed: &mut [i8]) -> Result<(), KernelError> {
        crate::error::check_len("q (m x Kp)", m * kp, q.len())?;
        crate::error::check_len("packed", Self::packed_len(m, kp), packed.len())?;
        if !kp.is_multiple_of(4) {
            return Err(KernelError::Shape(format!(
                "Kp = {kp} is not a multiple of 4"
            )));
        }
        for (t, tile) in packed.chunks_exact_mut(CQ4_TILE_ROWS * kp).enumerate() {
            for (s, step) in tile.chunks_exact_mut(4 * CQ4_TILE_ROWS).enumerate() {
                for (r, quad) in step.chunks_exact_mut(4).enumerate() {
                    let i = t * CQ4_TILE_ROWS + r;
                    if i < m {
                        quad.copy_from_slice(&q[i * kp + 4 * s..i * kp + 4 * s + 4]);
                    } else {
                        quad.fill(0);
                    }
                }
            }
        }
        Ok(())
    }

    /// `m >= 1` rows of `kp` (a multiple of 128) quants: `q` row-major
    /// (`m * kp`), `scale` and `qsum` row-major per group (`m * kp / 128`),
    /// `packed` from [`Cq4Rows::pack`] of `q`.
    pub fn new(
        m: usize,
        kp: usize,
        q: &'a [i8],
        scale: &'a [f32],
        qsum: &'a [i32],
        packed: &'a [i8],
    ) -> Result<Self, KernelError> {
        if m == 0 || kp == 0 || !kp.is_multiple_of(128) {
            return Err(KernelError::Shape(format!(
                "CQ4 activations: {m} rows of {kp} (want m >= 1, Kp a positive multiple of 128)"
            )));
        }
        let ng = kp / 128;
        crate::error::check_len("q (m x Kp)", m * kp, q.len())?;
        crate::error::check_len("scale (m x groups)", m * ng, scale.len())?;
        crate::error::check_len("qsum (m x groups)", m * ng, qsum.len())?;
        crate::error::check_len("packed", Self::packed_len(m, kp), packed.len())?;
        Ok(Cq4Rows {
            m,
            kp,
            q,
            scale,
            qsum,
            packed,
        })
    }

    /// Rows `m`.
    pub fn rows(&self) -> usize {
        self.m
    }
    /// Quants per row (`Kp`).
    pub fn cols(&self) -> usize {
        self.kp
    }
    /// Groups per row (`Kp / 128`).
    pub fn groups(&self) -> usize {
        self.kp / 128
    }
    /// Row `i` as a GEMV's activations.
    pub fn row(&self, i: usize) -> Cq4Act<'a> {
        let ng = self.groups();
        Cq4Act::new(
            &self.q[i * self.kp..(i + 1) * self.kp],
            &self.scale[i * ng..(i + 1) * ng],
            &self.qsum[i * ng..(i + 1) * ng],
        )
    }
    /// The scale of row `i`, group `g`.
    pub fn scale(&self, i: usize, g: usize) -> f32 {
        self.scale[i * self.groups() + g]
    }
    /// `sum(q)` of row `i`, group `g`.
    pub fn qsum(&self, i: usize, g: usize) -> i32 {
        self.qsum[i * self.groups() + g]
    }
    /// The interleaved quants (all tiles).
    pub fn packed(&self) -> &'a [i8] {
        self.packed
    }
    /// Rows `first..first + count` (`first` a multiple of [`CQ4_TILE_ROWS`],
    /// `count >= 1`, inside `rows()`).
    pub fn sub(&self, first: usize, count: usize) -> Cq4Rows<'a> {
        assert!(
            first.is_multiple_of(CQ4_TILE_ROWS) && count >= 1 && first + count <= self.m,
            "row range"
        );
        let ng = self.groups();
        let tiles = first / CQ4_TILE_ROWS..(first + count).div_ceil(CQ4_TILE_ROWS);
        let tb = CQ4_TILE_ROWS * self.kp;
        Cq4Rows {
            m: count,
            kp: self.kp,
            q: &self.q[first * self.kp..(first + count) * self.kp],
            scale: &self.scale[first * ng..(first + count) * ng],
            qsum: &self.qsum[first * ng..(first + count) * ng],
            packed: &self.packed[tiles.start * tb..tiles.end * tb],
        }
    }
}

/// Quantize rotated activations `z` per group of 128: `scale = max|z| / 127`
/// (f32 division); `q = clamp(round_half_even(z / scale), -127, 127)`;
/// a group with `scale == 0` gets `q = 0`.
pub fn quantize_groups(
    z: &[f32],
    q: &mut [i8],
    scale: &mut [f32],
    qsum: &mut [i32],
) -> Result<(), KernelError> {
    let ng = scale.len();
    crate::error::check_len("z (128 per group)", ng * 128, z.len())?;
    crate::error::check_len("q", ng * 128, q.len())?;
    crate::error::check_len("qsum", ng, qsum.len())?;
    first_non_finite(z)?;
    for (((zg, qg), s), qs) in z
        .chunks_exact(128)
        .zip(q.chunks_exact_mut(128))
        .zip(scale.iter_mut())
        .zip(qsum.iter_mut())
    {
        let mut amax = 0.0f32;
        for &v in zg {
            if v.abs() > amax {
                amax = v.abs();
            }
        }
        let sc = amax / 127.0;
        *s = sc;
        let mut sum = 0i32;
        if sc == 0.0 {
            qg.fill(0);
        } else {
            // |v / sc| <= 127 (1 + 2^-22) or so (larger only by the rounding
            // of a subnormal `sc`, never near 2^22), where `nearest_int` is
            // round-half-even exactly; unlike `round_ties_even` (a libm
            // call without SSE4.1) it lets the loop vectorize.
            for (qv, &v) in qg.iter_mut().zip(zg) {
                *qv = nearest_int(v / sc).clamp(-127, 127) as i8;
            }
        }
        for &qv in qg.iter() {
            sum += qv as i32;
        }
        *qs = sum;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_is_round_half_even() {
        for v in [
            0.5f32, 1.5, 2.5, -0.5, -1.5, 126.5, -126.5, 3.49, -3.51, 127.0,
        ] {
            assert_eq!(nearest_int(v), v.round_ties_even() as i32, "{v}");
        }
    }

    #[test]
    fn q8_k_block() {
        let x: Vec<f32> = (0..512).map(|i| ((i * 37) % 101) as f32 - 50.0).collect();
        let mut out = [BlockQ8K::default(); 2];
        quantize_q8_k(&x, &mut out).unwrap();
        for (b, xs) in out.iter().zip(x.chunks_exact(256)) {
            // -50 is the first value of largest magnitude: iscale = 127 / 50.
            assert_eq!(b.d, 1.0 / (-127.0f32 / -50.0));
            for (q, &v) in b.qs.iter().zip(xs) {
                assert!((*q as f32 * b.d - v).abs() <= b.d.abs() * 0.5 + 1e-5);
            }
            for j in 0..16 {
                let s: i32 = b.qs[16 * j..16 * j + 16].iter().map(|&q| q as i32).sum();
                assert_eq!(b.bsums[j] as i32, s);
            }
        }
        let zero = vec![0.0f32; 256];
        let mut o = [BlockQ8K::default()];
        quantize_q8_k(&zero, &mut o).unwrap();
        assert_eq!(o[0], BlockQ8K::default());
        assert!(quantize_q8_k(&[f32::NAN; 256], &mut o).is_err());
    }

    #[test]
    fn q8_0_matches_ggml_bytes() {
        let x: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut want = vec![0u8; 68];
        quantize_rows(GgmlType::Q8_0, &x, 64, &mut want).unwrap();
        let mut out = [ActQ8_0::default(); 2];
        quantize_q8_0(&x, &mut out).unwrap();
        for (o, w) in out.iter().zip(want.chunks_exact(34)) {
            assert_eq!(o.d, f16_at(w, 0));
            for (q, &b) in o.qs.iter().zip(&w[2..]) {
                assert_eq!(*q, b as i8);
            }
            assert_eq!(o.sum, o.qs.iter().map(|&q| q as i32).sum::<i32>());
        }
    }

    /// `nearest_int` in the group quantizer is `round_ties_even` on
    /// every quotient it can see: halves, values next to halves, the
    /// clamp, tiny and subnormal group maxima.
    #[test]
    fn group_quantizer_rounds_half_even() {
        // Groups whose maximum is 127, so sc = 1 and v / sc = v: every half
        // from -127 to 127 and its two neighbours.
        let mut vals = Vec::new();
        for i in -254..=254 {
            let h = i as f32 * 0.5;
            let up = if h == 0.0 {
                1e-30
            } else {
                f32::from_bits(h.to_bits() + 1)
            };
            vals.extend([h, up, -up]);
        }
        let mut z = Vec::new();
        for c in vals.chunks(127) {
            z.push(127.0);
            z.extend_from_slice(c);
            z.resize(z.len().div_ceil(128) * 128, 0.0);
        }
        // The same scaled into tiny (subnormal sc) and huge groups.
        let tiny: Vec<f32> = z.iter().map(|v| v * 1e-42).collect();
        let huge: Vec<f32> = z.iter().map(|v| v * 1e30).collect();
        for zs in [z, tiny, huge] {
            let ng = zs.len() / 128;
            let (mut q, mut s, mut qs) = (vec![0i8; zs.len()], vec![0f32; ng], vec![0i32; ng]);
            quantize_groups(&zs, &mut q, &mut s, &mut qs).unwrap();
            for (g, zg) in zs.chunks_exact(128).enumerate() {
                let sc = zg.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
                assert_eq!(s[g], sc);
                for (j, &v) in zg.iter().enumerate() {
                    let want = if sc == 0.0 {
                        0
                    } else {
                        (v / sc).round_ties_even().clamp(-127.0, 127.0) as i8
                    };
                    assert_eq!(q[128 * g + j], want, "{v} / {sc}");
                }
                let sum: i32 = q[128 * g..128 * g + 128].iter().map(|&v| v as i32).sum();
                assert_eq!(qs[g], sum);
            }
        }
    }

    #[test]
    fn group_quantizer() {
        let mut z = vec![0.0f32; 256];
        for (i, v) in z[..128].iter_mut().enumerate() {
            *v = i as f32 - 64.0;
        }
        let mut q = vec![0i8; 256];
        let mut s = vec![0f32; 2];
        let mut qs = vec![0i32; 2];
        quantize_groups(&z, &mut q, &mut s, &mut qs).unwrap();
        assert_eq!(s[0], 64.0 / 127.0);
        assert_eq!(q[0], -127);
        assert_eq!(s[1], 0.0);
        assert!(q[128..].iter().all(|&v| v == 0));
        assert_eq!(qs[0], q[..128].iter().map(|&v| v as i32).sum::<i32>());
    }
}
