//! NEON + dot-product (`sdot`) kernels: same signatures and bit-identical
//! results as [`crate::scalar`].
//!
//! `sdot` multiplies *signed* bytes by signed bytes, so no bias tricks are
//! needed: Q4_0, Q5_0 and Q6_K values are re-centred (`v - 8`, `v - 16`,
//! `v - 32`, all in i8 range) before the dot, k-quant and Q4_1 nibbles
//! (0..=31) are already valid i8.
//! Per 8-row group, each slot's partial sums land in one `int32x4_t`;
//! `reduce8` (pairwise adds, exact) makes one i32 lane per row, then the
//! f32 formula of [`crate::format`] runs lane-wise (two `float32x4_t` for
//! the 8 rows).
//!
//! CQ4: per 16 bytes of a kg-block (8 channels x 4 columns), nibbles are
//! split (`and` / `ushr`), looked up in the int8 codebook (`tbl`), zipped
//! so each i32 lane holds one channel's 4 weights, and dotted with `sdot`
//! by element against the 4 activations of that kg-block (one 16-byte
//! activation load serves 4 kg-blocks, lanes 0..4). 16 i32 accumulators
//! hold the 64 channels of a group in order; `rescale_group` applies the
//! f32 formula.

use core::arch::aarch64::*;

use super::{f16x4_high_to_f32, f16x4_to_f32, fp16_at8, prefetch, reduce8, sdot, sdot_lane, Slots};
use crate::act::{ActQ8_0, BlockQ8K, Cq4Act};
use crate::blocks::{
    iq4_nl, iq4_xs, iq4_xs_scales, q2_k, q3_k, q3_k_scales, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k,
    q6_k, q8_0, unpack_k4_scales, IQ4_LEVELS,
};
use crate::operands::RowGroup;
use crate::operands::{CbLut, PanelBlock, KG_BYTES, KG_PER_GROUP};

/// 16 bytes at `p` as i8.
///
/// # Safety
/// `p..p + 16` must be readable.
#[inline(always)]
pub(crate) unsafe fn ld_s8(p: *const u8) -> int8x16_t {
    // SAFETY: the caller guarantees 16 readable bytes; `ld1` has no
    // alignment requirement for byte elements.
    unsafe { vld1q_s8(p.cast()) }
}

/// 16 bytes at `p` as u8.
///
/// # Safety
/// `p..p + 16` must be readable.
#[inline(always)]
pub(crate) unsafe fn ld_u8(p: *const u8) -> uint8x16_t {
    // SAFETY: as in `ld_s8`.
    unsafe { vld1q_u8(p) }
}

/// `acc + (f32(isum) * (d * da))` per lane, the Q8_0 / Q4_0 / Q5_0 / Q6_K block
/// formula for 8 rows.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn add_scaled(
    acc: &mut [float32x4_t; 2],
    isum: [int32x4_t; 2],
    d: [float32x4_t; 2],
    da: float32x4_t,
) {
    for h in 0..2 {
        let c = vmulq_f32(vcvtq_f32_s32(isum[h]), vmulq_f32(d[h], da));
        acc[h] = vaddq_f32(acc[h], c);
    }
}

/// Store the 8 row results.
#[inline]
#[target_feature(enable = "neon")]
fn store8(acc: [float32x4_t; 2], out: &mut [f32; 8]) {
    // SAFETY: `out` is 8 f32: lanes 0..4 and 4..8.
    unsafe {
        vst1q_f32(out.as_mut_ptr(), acc[0]);
        vst1q_f32(out.as_mut_ptr().add(4), acc[1]);
    }
}

/// The 32 signed levels of the 16 index bytes at `qs` (an IQ4_NL block or
/// one IQ4_XS sub-block), in weight order: nibbles looked up in `table`
/// (the 16 levels) with `tbl`.
///
/// # Safety
/// `qs..qs + 16` must be readable.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) unsafe fn iq4_levels(qs: *const u8, table: int8x16_t) -> [int8x16_t; 2] {
    // SAFETY: the caller guarantees the 16 bytes.
    let v = unsafe { q4_values(qs) };
    [vqtbl1q_s8(table, v[0]), vqtbl1q_s8(table, v[1])]
}

/// The 16 IQ4 levels as a `tbl` table.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn iq4_table() -> int8x16_t {
    // SAFETY: IQ4_LEVELS is 16 bytes.
    unsafe { vld1q_s8(IQ4_LEVELS.as_ptr()) }
}

/// Shared Q8_0 / IQ4_NL body (`NL`: the blocks are IQ4_NL): 32 signed
/// weights per block (Q8_0's quants, or IQ4_NL's levels via `tbl`), two
/// `sdot` per block and row.
///
/// # Safety
/// NEON + dot product.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn signed32_group<const NL: bool>(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let (qs, d_off) = if NL {
        (iq4_nl::QS, iq4_nl::D)
    } else {
        (q8_0::QS, q8_0::D)
    };
    let table = iq4_table();
    let mut s = Slots::new(g);
    let mut acc = [vdupq_n_f32(0.0); 2];
    let zero = vdupq_n_s32(0);
    for a in &act[..g.nblocks()] {
        // SAFETY: `a.qs` is 32 bytes; by the RowGroup invariant the current
        // block of every slot is in bounds (Q8_0: 34 bytes, qs 32 at 2;
        // IQ4_NL: 18 bytes, qs 16 at 2).
        let (isum, d) = unsafe {
            let a0 = ld_s8(a.qs.as_ptr().cast());
            let a1 = ld_s8(a.qs.as_ptr().add(16).cast());
            let mut v = [zero; 8];
            for (r, vr) in v.iter_mut().enumerate() {
                let p = s.at(r).add(qs);
                let w = if NL {
                    iq4_levels(p, table)
                } else {
                    [ld_s8(p), ld_s8(p.add(16))]
                };
                *vr = sdot(sdot(zero, w[0], a0), w[1], a1);
            }
            (reduce8(&v), fp16_at8(&s, d_off))
        };
        add_scaled(&mut acc, isum, d, vdupq_n_f32(a.d));
        s.prefetch();
        s.advance();
    }
    store8(acc, out);
}

forward_pair!(
    "neon,dotprod",
    ActQ8_0,
    signed32_group,
    /// Q8_0 x Q8_0 group kernel.
    q8_0_group,
    /// IQ4_NL x Q8_0 group kernel.
    iq4_nl_group
);

/// IQ4_XS x Q8_K group kernel: per slot `dot_j` of the 8 sub-blocks (levels
/// via `tbl`, two `sdot` each), pairwise-reduced to `[dot_0..4]`,
/// `[dot_4..8]` and multiplied by the widened scales `ls - 32`.
///
/// # Safety
/// The CPU must support NEON and the dot-product extension.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn iq4_xs_group(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let table = iq4_table();
    let mut s = Slots::new(g);
    let mut acc = [vdupq_n_f32(0.0); 2];
    let zero = vdupq_n_s32(0);
    for a in &act[..g.nblocks()] {
        // SAFETY: `a.qs` is 256 bytes; by the RowGroup invariant the current
        // 136-byte block of every slot is in bounds (header 8 bytes, qs 128
        // at 8).
        let (sv, d) = unsafe {
            let aq = a.qs.as_ptr().cast::<u8>();
            let mut sv = [zero; 8];
            for (r, svr) in sv.iter_mut().enumerate() {
                let p = s.at(r);
                let sc = iq4_xs_scales(&*p.cast::<[u8; 8]>());
                let mut dots = [zero; 8];
                for (j, dj) in dots.iter_mut().enumerate() {
                    let w = iq4_levels(p.add(iq4_xs::QS + 16 * j), table);
                    let d0 = sdot(zero, w[0], ld_s8(aq.add(32 * j)));
                    *dj = sdot(d0, w[1], ld_s8(aq.add(32 * j + 16)));
                }
                let t = reduce8(&dots);
                let sc16 = vmovl_s8(vld1_s8(sc.as_ptr()));
                let scw = [vmovl_s16(vget_low_s16(sc16)), vmovl_high_s16(sc16)];
                *svr = vaddq_s32(vmulq_s32(t[0], scw[0]), vmulq_s32(t[1], scw[1]));
            }
            (reduce8(&sv), fp16_at8(&s, iq4_xs::D))
        };
        add_scaled(&mut acc, sv, d, vdupq_n_f32(a.d));
        s.prefetch();
        s.advance();
    }
    store8(acc, out);
}

/// The 32 nibbles (0..=15) of the 16 bytes at `qs` of a Q4_0 / Q4_1
/// block, in weight order: weights 0..16 (low nibbles), 16..32 (high).
///
/// # Safety
/// `qs..qs + 16` must be readable.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) unsafe fn q4_values(qs: *const u8) -> [uint8x16_t; 2] {
    // SAFETY: the caller guarantees the 16 bytes.
    let q = unsafe { ld_u8(qs) };
    [vandq_u8(q, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(q)]
}

/// `sum_i w_i a_i` of 8 rows, `w` the nibbles at `qs` of each slot's block
/// minus `offset` (8 for Q4_0, 0 for Q4_1; the results fit i8).
///
/// # Safety
/// NEON + dot product; `qs + 16` bytes of every slot's current block must
/// be readable.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn q4_isum8(s: &Slots, qs: usize, offset: i8, a: &ActQ8_0) -> [int32x4_t; 2] {
    let zero = vdupq_n_s32(0);
    let c = vdupq_n_s8(offset);
    // SAFETY: `a.qs` is 32 bytes; the nibbles by the caller.
    unsafe {
        let a0 = ld_s8(a.qs.as_ptr().cast());
        let a1 = ld_s8(a.qs.as_ptr().add(16).cast());
        let mut v = [zero; 8];
        for (r, vr) in v.iter_mut().enumerate() {
            let w = q4_values(s.at(r).add(qs));
            let w0 = vsubq_s8(vreinterpretq_s8_u8(w[0]), c);
            let w1 = vsubq_s8(vreinterpretq_s8_u8(w[1]), c);
            *vr = sdot(sdot(zero, w0, a0), w1, a1);
        }
        reduce8(&v)
    }
}

/// Q4_0 x Q8_0 group kernel.
///
/// # Safety
/// The CPU must support NEON and the dot-product extension.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn q4_0_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let mut s = Slots::new(g);
    let mut acc = [vdupq_n_f32(0.0); 2];
    for a in &act[..g.nblocks()] {
        // SAFETY: by the RowGroup invariant the current 18-byte block of
        // every slot is in bounds (qs: 16 bytes at 2, d at 0).
        let (isum, d) = unsafe { (q4_isum8(&s, q4_0::QS, 8, a), fp16_at8(&s, q4_0::D)) };
        add_scaled(&mut acc, isum, d, vdupq_n_f32(a.d));
        s.prefetch();
        s.advance();
    }
    store8(acc, out);
}

/// Q4_1 x Q8_0 group kernel: per lane `S * (d * da) - M * ((-m) * da)`,
/// `M` the activation block sum, as the scalar reference.
///
/// # Safety
/// The CPU must support NEON and the dot-product extension.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn q4_1_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let mut s = Slots::new(g);
    let mut acc = [vdupq_n_f32(0.0); 2];
    for a in &act[..g.nblocks()] {
        // SAFETY: by the RowGroup invariant the current 20-byte block of
        // every slot is in bounds (d, m at 0 and 2, qs: 16 bytes at 4).
        let (isum, d, m) = unsafe {
            (
                q4_isum8(&s, q4_1::QS, 0, a),
                fp16_at8(&s, q4_1::D),
                fp16_at8(&s, q4_1::M),
            )
        };
        let da = vdupq_n_f32(a.d);
        let sum = vdupq_n_f32(a.sum as f32);
        for h in 0..2 {
            let c = vsubq_f32(
                vmulq_f32(vcvtq_f32_s32(isum[h]), vmulq_f32(d[h], da)),
                vmulq_f32(sum, vmulq_f32(vnegq_f32(m[h]), da)),
            );
            acc[h] = vaddq_f32(acc[h], c);
        }
        s.prefetch();
        s.advance();
    }
    store8(acc, out);
}

/// The 32 values of a Q5_0 block at `p`, re-centred (`v - 16`, -16..=15),
/// in weight order: weights 0..16 (low nibbles), 16..32 (high nibbles),
/// bit 4 of weight `j` = bit `j` of `qh`.
///
/// # Safety
/// `p..p + 22` must be readable.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) unsafe fn q5_0_values(p: *const u8) -> [int8x16_t; 2] {
    // SAFETY: qs is 16 bytes at offset 6 and qh 4 bytes at offset 2 of the
    // 22-byte block the caller guarantees.
    unsafe { q5_values(p.add(q5_0::QH), p.add(q5_0::QS), 16) }
}

/// The 32 five-bit values of the fifth bits at `qh` (u32) and the nibbles
/// at `qs` (16 bytes) minus `offset` (16 for Q5_0, 0 for Q5_1), as i8.
///
/// # Safety
/// `qh..qh + 4` and `qs..qs + 16` must be readable.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) unsafe fn q5_values(qh: *const u8, qs: *const u8, offset: i8) -> [int8x16_t; 2] {
    // SAFETY: guaranteed by the caller.
    let (qs, qh) = unsafe { (ld_u8(qs), super::read_u32(qh)) };
    let m4 = vdupq_n_u8(0x0F);
    let qhv = vreinterpretq_u8_u32(vdupq_n_u32(qh));
    // Byte j of a spread vector = byte j / 8 of qh; test bit j % 8.
    const IDX: [[u8; 16]; 2] = [
        [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1],
        [2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3],
    ];
    const BITS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    // SAFETY: the constants are 16 bytes each.
    let (i0, i1, bits) = unsafe {
        (
            vld1q_u8(IDX[0].as_ptr()),
            vld1q_u8(IDX[1].as_ptr()),
            vld1q_u8(BITS.as_ptr()),
        )
    };
    let b16 = vdupq_n_u8(0x10);
    let h0 = vandq_u8(vtstq_u8(vqtbl1q_u8(qhv, i0), bits), b16);
    let h1 = vandq_u8(vtstq_u8(vqtbl1q_u8(qhv, i1), bits), b16);
    let v0 = vorrq_u8(vandq_u8(qs, m4), h0);
    let v1 = vorrq_u8(vshrq_n_u8::<4>(qs), h1);
    let c = vdupq_n_s8(offset);
    [
        vsubq_s8(vreinterpretq_s8_u8(v0), c),
        vsubq_s8(vreinterpretq_s8_u8(v1), c),
    ]
}

/// Q5_1 x Q8_0 group kernel: per lane `S * (d * da) - M * ((-m) * da)`,
/// `M` the activation block sum, as the scalar reference.
///
/// # Safety
/// The CPU must support NEON and the dot-product extension.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn q5_1_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let mut s = Slots::new(g);
    let mut acc = [vdupq_n_f32(0.0); 2];
    let zero = vdupq_n_s32(0);
    for a in &act[..g.nblocks()] {
        // SAFETY: `a.qs` is 32 bytes; by the RowGroup invariant the current
        // 24-byte block of every slot is in bounds (d, m at 0 and 2, qh 4
        // bytes at 4, qs 16 bytes at 8).
        let (isum, d, m) = unsafe {
            let a0 = ld_s8(a.qs.as_ptr().cast());
            let a1 = ld_s8(a.qs.as_ptr().add(16).cast());
            let mut v = [zero; 8];
            for (r, vr) in v.iter_mut().enumerate() {
                let p = s.at(r);
                let w = q5_values(p.add(q5_1::QH), p.add(q5_1::QS), 0);
                *vr = sdot(sdot(zero, w[0], a0), w[1], a1);
            }
            (reduce8(&v), fp16_at8(&s, q5_1::D), fp16_at8(&s, q5_1::M))
        };
        let da = vdupq_n_f32(a.d);
        let sum = vdupq_n_f32(a.sum as f32);
        for h in 0..2 {
            let c = vsubq_f32(
                vmulq_f32(vcvtq_f32_s32(isum[h]), vmulq_f32(d[h], da)),
                vmulq_f32(sum, vmulq_f32(vnegq_f32(m[h]), da)),
            );
            acc[h] = vaddq_f32(acc[h], c);
        }
        s.prefetch();
        s.advance();
    }
    store8(acc, out);
}

/// Q5_0 x Q8_0 group kernel.
///
/// # Safety
/// The CPU must support NEON and the dot-product extension.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn q5_0_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let mut s = Slots::new(g);
    let mut acc = [vdupq_n_f32(0.0); 2];
    let zero = vdupq_n_s32(0);
    for a in &act[..g.nblocks()] {
        // SAFETY: as in q8_0_group (22-byte blocks).
        let (isum, d) = unsafe {
            let a0 = ld_s8(a.qs.as_ptr().cast());
            let a1 = ld_s8(a.qs.as_ptr().add(16).cast());
            let mut v = [zero; 8];
            for (r, vr) in v.iter_mut().enumerate() {
                let w = q5_0_values(s.at(r));
                *vr = sdot(sdot(zero, w[0], a0), w[1], a1);
            }
            (reduce8(&v), fp16_at8(&s, q5_0::D))
        };
        add_scaled(&mut acc, isum, d, vdupq_n_f32(a.d));
        s.prefetch();
        s.advance();
    }
    store8(acc, out);
}

/// Eight u8 as two i32x4 (lanes 0-3, 4-7).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn widen_u8x8(b: &[u8; 8]) -> [int32x4_t; 2] {
    // SAFETY: `b` is 8 bytes.
    let w = vmovl_u8(unsafe { vld1_u8(b.as_ptr()) });
    [
        vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(w))),
        vreinterpretq_s32_u32(vmovl_high_u16(w)),
    ]
}

/// Shared Q4_K / Q5_K body (`Q5`: the blocks are Q5_K).
///
/// Per slot: `dot_j` (8 sub-blocks of 32) with `sdot`, pairwise-reduced to
/// `[dot_0..4]`, `[dot_4..8]`, multiplied by the widened 6-bit scales;
/// mins times the activation pair sums `bsum_2j + bsum_2j+1` with
/// `smull` / `smlal2`. Both i32x4 per slot are reduced across the 8 slots.
///
/// # Safety
/// NEON + dot product.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn k4_group<const Q5: bool>(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let (scales_off, qs_off) = if Q5 {
        (q5_k::SCALES, q5_k::QS)
    } else {
        (q4_k::SCALES, q4_k::QS)
    };
    let mut s = Slots::new(g);
    let mut acc = [vdupq_n_f32(0.0); 2];
    let zero = vdupq_n_s32(0);
    let m4 = vdupq_n_u8(0x0F);
    let b16 = vdupq_n_u8(0x10);
    for a in &act[..g.nblocks()] {
        // SAFETY: `a.qs` is 256 bytes and `a.bsums` 16 i16; by the RowGroup
        // invariant the current block (144 / 176 bytes) of every slot is in
        // bounds; the scales are 12 bytes at offset 4, qs 128 bytes at
        // 16 (Q4_K) / 48 (Q5_K), qh 32 bytes at 16 (Q5_K).
        let (sv, mv, d, dmin) = unsafe {
            let aq = a.qs.as_ptr().cast::<u8>();
            // bsum pairs: |bsum_2j + bsum_2j+1| <= 32 * 127, fits i16.
            let bp = vpaddq_s16(
                vld1q_s16(a.bsums.as_ptr()),
                vld1q_s16(a.bsums.as_ptr().add(8)),
            );
            let mut sv = [zero; 8];
            let mut mv = [zero; 8];
            for r in 0..8 {
                let p = s.at(r);
                let (sc, mins) = unpack_k4_scales(&*p.add(scales_off).cast::<[u8; 12]>());
                let (qh0, qh1) = if Q5 {
                    (ld_u8(p.add(q5_k::QH)), ld_u8(p.add(q5_k::QH + 16)))
                } else {
                    (vdupq_n_u8(0), vdupq_n_u8(0))
                };
                let mut dots = [zero; 8];
                for c in 0..4 {
                    let q0 = ld_u8(p.add(qs_off + 32 * c));
                    let q1 = ld_u8(p.add(qs_off + 32 * c + 16));
                    for (half, (w0, w1)) in [
                        (vandq_u8(q0, m4), vandq_u8(q1, m4)),
                        (vshrq_n_u8::<4>(q0), vshrq_n_u8::<4>(q1)),
                    ]
                    .into_iter()
                    .enumerate()
                    {
                        let j = 2 * c + half;
                        let (w0, w1) = if Q5 {
                            // Bit j of qh[l] is bit 4 of weight 32j + l.
                            let bit = vdupq_n_u8(1 << j);
                            (
                                vorrq_u8(w0, vandq_u8(vtstq_u8(qh0, bit), b16)),
                                vorrq_u8(w1, vandq_u8(vtstq_u8(qh1, bit), b16)),
                            )
                        } else {
                            (w0, w1)
                        };
                        let d0 = sdot(zero, vreinterpretq_s8_u8(w0), ld_s8(aq.add(32 * j)));
                        dots[j] = sdot(d0, vreinterpretq_s8_u8(w1), ld_s8(aq.add(32 * j + 16)));
                    }
                }
                let t = reduce8(&dots);
                let scw = widen_u8x8(&sc);
                sv[r] = vaddq_s32(vmulq_s32(t[0], scw[0]), vmulq_s32(t[1], scw[1]));
                // mins (0..=63) x pair sums, as i16 products widened to i32.
                let mw = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mins.as_ptr())));
                mv[r] = vmlal_high_s16(vmull_s16(vget_low_s16(mw), vget_low_s16(bp)), mw, bp);
            }
            let dd = fp16_at8(&s, q4_k::D);
            let dm = fp16_at8(&s, q4_k::DMIN);
            (reduce8(&sv), reduce8(&mv), dd, dm)
        };
        let da = vdupq_n_f32(a.d);
        for h in 0..2 {
            let c = vsubq_f32(
                vmulq_f32(vcvtq_f32_s32(sv[h]), vmulq_f32(d[h], da)),
                vmulq_f32(vcvtq_f32_s32(mv[h]), vmulq_f32(dmin[h], da)),
            );
            acc[h] = vaddq_f32(acc[h], c);
        }
        s.prefetch();
        s.advance();
    }
    store8(acc, out);
}

forward_pair!(
    "neon,dotprod",
    BlockQ8K,
    k4_group,
    /// Q4_K x Q8_K group kernel.
    q4_k_group,
    /// Q5_K x Q8_K group kernel.
    q5_k_group
);

/// `sum_j sc_j dot_j` over 16 sub-blocks as one i32x4 (lanes summed by
/// `reduce8`): the dots reduced to four `[dot_4m..4m+4]` vectors, times the
/// widened i8 scales.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn scaled16(dots: &[int32x4_t; 16], sc8: int8x16_t) -> int32x4_t {
    let sc16 = [vmovl_s8(vget_low_s8(sc8)), vmovl_high_s8(sc8)];
    let mut t = vdupq_n_s32(0);
    for m in 0..4 {
        let dm = vpaddq_s32(
            vpaddq_s32(dots[4 * m], dots[4 * m + 1]),
            vpaddq_s32(dots[4 * m + 2], dots[4 * m + 3]),
        );
        let scm = if m % 2 == 0 {
            vmovl_s16(vget_low_s16(sc16[m / 2]))
        } else {
            vmovl_high_s16(sc16[m / 2])
        };
        t = vaddq_s32(t, vmulq_s32(dm, scm));
    }
    t
}

/// Shared Q2_K / Q3_K body (`Q3`: the blocks are Q3_K). Per 16 bytes of
/// `qs` (half `hf` of run `n`) the four 2-bit fields are sub-blocks `8n + 2j
/// + hf`; Q3_K subtracts 4 where the `hmask` bit is clear (`cmtst`), so the
/// values are signed and go into `sdot` as they are. Q2_K's mins times the
/// 16 bsums with `smull` / `smlal2`.
///
/// # Safety
/// NEON + dot product.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn k16_group<const Q3: bool>(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let mut s = Slots::new(g);
    let mut acc = [vdupq_n_f32(0.0); 2];
    let zero = vdupq_n_s32(0);
    let m3 = vdupq_n_u8(0x03);
    let m4 = vdupq_n_u8(0x0F);
    let qs_off = if Q3 { q3_k::QS } else { q2_k::QS };
    for a in &act[..g.nblocks()] {
        // SAFETY: `a.qs` is 256 bytes and `a.bsums` 16 i16; the current
        // block of every slot is in bounds (RowGroup invariant): Q2_K 84
        // bytes (scales 16 at 0, qs 64 at 16), Q3_K 110 bytes (hmask 32 at
        // 0, qs 64 at 32, scales 12 at 96).
        let (sv, mv) = unsafe {
            let aq = a.qs.as_ptr().cast::<u8>();
            let b0 = vld1q_s16(a.bsums.as_ptr());
            let b1 = vld1q_s16(a.bsums.as_ptr().add(8));
            let mut sv = [zero; 8];
            let mut mv = [zero; 8];
            for r in 0..8 {
                let p = s.at(r);
                let mut dots = [zero; 16];
                for n in 0..2 {
                    for hf in 0..2 {
                        let q = ld_u8(p.add(qs_off + 32 * n + 16 * hf));
                        let hm = if Q3 {
                            ld_u8(p.add(q3_k::HMASK + 16 * hf))
                        } else {
                            vdupq_n_u8(0)
                        };
                        let f = [
                            vandq_u8(q, m3),
                            vandq_u8(vshrq_n_u8::<2>(q), m3),
                            vandq_u8(vshrq_n_u8::<4>(q), m3),
                            vshrq_n_u8::<6>(q),
                        ];
                        for (j, fj) in f.into_iter().enumerate() {
                            let w = if Q3 {
                                // v + 4 = field | 4 * (hmask bit 4n + j), then - 4.
                                let set = vtstq_u8(hm, vdupq_n_u8(1 << (4 * n + j)));
                                let u = vorrq_u8(fj, vandq_u8(set, vdupq_n_u8(4)));
                                vsubq_s8(vreinterpretq_s8_u8(u), vdupq_n_s8(4))
                            } else {
                                vreinterpretq_s8_u8(fj)
                            };
                            let sb = 8 * n + 2 * j + hf;
                            dots[sb] = sdot(zero, w, ld_s8(aq.add(16 * sb)));
                        }
                    }
                }
                let sc8 = if Q3 {
                    let sc = q3_k_scales(&*p.add(q3_k::SCALES).cast::<[u8; 12]>());
                    vld1q_s8(sc.as_ptr())
                } else {
                    let b = ld_u8(p.add(q2_k::SCALES));
                    let mins = vshrq_n_u8::<4>(b);
                    let mw = [
                        vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins))),
                        vreinterpretq_s16_u16(vmovl_high_u8(mins)),
                    ];
                    let lo =
                        vmlal_high_s16(vmull_s16(vget_low_s16(mw[0]), vget_low_s16(b0)), mw[0], b0);
                    mv[r] = vmlal_high_s16(
                        vmlal_s16(lo, vget_low_s16(mw[1]), vget_low_s16(b1)),
                        mw[1],
                        b1,
                    );
                    vreinterpretq_s8_u8(vandq_u8(b, m4))
                };
                sv[r] = scaled16(&dots, sc8);
            }
            (reduce8(&sv), reduce8(&mv))
        };
        let da = vdupq_n_f32(a.d);
        // SAFETY: as above (d / dmin fp16 inside each slot's block).
        let (d, dmin) = unsafe {
            if Q3 {
                let d = fp16_at8(&s, q3_k::D);
                (d, d)
            } else {
                (fp16_at8(&s, q2_k::D), fp16_at8(&s, q2_k::DMIN))
            }
        };
        for h in 0..2 {
            let c = vmulq_f32(vcvtq_f32_s32(sv[h]), vmulq_f32(d[h], da));
            let c = if Q3 {
                c
            } else {
                vsubq_f32(c, vmulq_f32(vcvtq_f32_s32(mv[h]), vmulq_f32(dmin[h], da)))
            };
            acc[h] = vaddq_f32(acc[h], c);
        }
        s.prefetch();
        s.advance();
    }
    store8(acc, out);
}

forward_pair!(
    "neon,dotprod",
    BlockQ8K,
    k16_group,
    /// Q2_K x Q8_K group kernel.
    q2_k_group,
    /// Q3_K x Q8_K group kernel.
    q3_k_group
);

/// Q6_K x Q8_K group kernel.
///
/// Each 16-byte vector of re-centred values (`v - 32`, -32..=31) is one
/// sub-block of 16 weights: `dot_j` for the 16 sub-blocks, reduced to four
/// `[dot_4m..4m+4]` vectors, multiplied by the widened i8 scales.
///
/// # Safety
/// The CPU must support NEON and the dot-product extension.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn q6_k_group(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let mut s = Slots::new(g);
    let mut acc = [vdupq_n_f32(0.0); 2];
    let zero = vdupq_n_s32(0);
    let m4 = vdupq_n_u8(0x0F);
    let m3 = vdupq_n_u8(0x03);
    let c32 = vdupq_n_s8(32);
    for a in &act[..g.nblocks()] {
        // SAFETY: `a.qs` is 256 bytes; the current 210-byte block of every
        // slot is in bounds (RowGroup invariant): ql 128 bytes at 0, qh 64
        // at 128, scales 16 at 192.
        let (sv, d) = unsafe {
            let aq = a.qs.as_ptr().cast::<u8>();
            let mut sv = [zero; 8];
            for (r, svr) in sv.iter_mut().enumerate() {
                let p = s.at(r);
                let mut dots = [zero; 16];
                for h in 0..2 {
                    for half in 0..2 {
                        // Weights 128h + 32t + 16 half + (0..16), t = 0..4.
                        let o = 16 * half;
                        let ql0 = ld_u8(p.add(q6_k::QL + 64 * h + o));
                        let ql1 = ld_u8(p.add(q6_k::QL + 64 * h + 32 + o));
                        let qh = ld_u8(p.add(q6_k::QH + 32 * h + o));
                        let v = [
                            vorrq_u8(vandq_u8(ql0, m4), vshlq_n_u8::<4>(vandq_u8(qh, m3))),
                            vorrq_u8(
                                vandq_u8(ql1, m4),
                                vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<2>(qh), m3)),
                            ),
                            vorrq_u8(
                                vshrq_n_u8::<4>(ql0),
                                vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<4>(qh), m3)),
                            ),
                            vorrq_u8(vshrq_n_u8::<4>(ql1), vshlq_n_u8::<4>(vshrq_n_u8::<6>(qh))),
                        ];
                        for (t, vt) in v.into_iter().enumerate() {
                            let j = 8 * h + 2 * t + half;
                            let w = vsubq_s8(vreinterpretq_s8_u8(vt), c32);
                            dots[j] = sdot(zero, w, ld_s8(aq.add(16 * j)));
                        }
                    }
                }
                *svr = scaled16(&dots, vld1q_s8(p.add(q6_k::SCALES).cast()));
            }
            (reduce8(&sv), fp16_at8(&s, q6_k::D))
        };
        add_scaled(&mut acc, sv, d, vdupq_n_f32(a.d));
        s.prefetch();
        s.advance();
    }
    store8(acc, out);
}

/// One group's f32 update of a CQ4 super-block (shared with the SME2
/// kernel, so both tiers round identically): for each channel `c`,
/// `out[c] = out[c] + (f32(isum[c]) * scale) * folded[c]`.
///
/// # Safety
/// `folded..folded + 256` must be readable (64 fp32 LE, any alignment).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) unsafe fn rescale_group(
    isum: &[int32x4_t; 16],
    scale: f32,
    folded: *const u8,
    out: &mut [f32; 64],
) {
    let sc = vdupq_n_f32(scale);
    for (i, v) in isum.iter().enumerate() {
        // SAFETY: 16 bytes of folded norms per i (the caller guarantees 256);
        // `out` is 64 f32 and 4i + 4 <= 64.
        unsafe {
            let f = vreinterpretq_f32_u8(ld_u8(folded.add(16 * i)));
            let o = out.as_mut_ptr().add(4 * i);
            let y = vaddq_f32(vld1q_f32(o), vmulq_f32(vmulq_f32(vcvtq_f32_s32(*v), sc), f));
            vst1q_f32(o, y);
        }
    }
}

/// Expand one kg-block (128 bytes at `blk`: 64 channels x 4 columns) and
/// add `sdot` by element `L` of `qv` into the 16 channel accumulators.
///
/// # Safety
/// `blk..blk + 128` must be readable.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn cq4_kg_block<const L: i32>(
    blk: *const u8,
    table: int8x16_t,
    qv: int8x16_t,
    acc: &mut [int32x4_t; 16],
) {
    let m4 = vdupq_n_u8(0x0F);
    for h in 0..8 {
        // SAFETY: 16 bytes at 16h < 128 (caller guarantees 128).
        let bytes = unsafe { ld_u8(blk.add(16 * h)) };
        // bytes: [c0 (k0|k1), c0 (k2|k3), c1 ...] for channels 8h..8h+8.
        let lo = vqtbl1q_s8(table, vandq_u8(bytes, m4)); // c0k0 c0k2 c1k0 ..
        let hi = vqtbl1q_s8(table, vshrq_n_u8::<4>(bytes)); // c0k1 c0k3 c1k1 ..
        let w0 = vzip1q_s8(lo, hi); // channels 8h..8h+4, 4 columns each
        let w1 = vzip2q_s8(lo, hi); // channels 8h+4..8h+8
        acc[2 * h] = sdot_lane::<L>(acc[2 * h], w0, qv);
        acc[2 * h + 1] = sdot_lane::<L>(acc[2 * h + 1], w1, qv);
    }
}

/// CQ4 super-block kernel (64 channels): see the module docs.
///
/// # Safety
/// The CPU must support NEON and the dot-product extension.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn cq4_superblock(
    b: &PanelBlock<'_>,
    act: &Cq4Act<'_>,
    lut: &CbLut,
    out: &mut [f32; 64],
) {
    let ng = b.groups();
    assert!(
        act.q.len() >= ng * 128 && act.scale.len() >= ng,
        "activations"
    );
    // SAFETY: cb_i8 is 16 bytes.
    let table = unsafe { vld1q_s8(lut.cb_i8().as_ptr()) };
    let panels = b.panels().as_ptr();
    let folded = b.folded_bytes().as_ptr();
    let q = act.q.as_ptr().cast::<u8>();
    out.fill(0.0);
    for g in 0..ng {
        let mut acc = [vdupq_n_s32(0); 16];
        for m in 0..KG_PER_GROUP / 4 {
            // SAFETY: PanelBlock::new checked panels = ng * 32 * 128 bytes and
            // the assert above q >= ng * 128 bytes: kg-blocks (g, 4m..4m+4)
            // and their 16 activations are in bounds.
            unsafe {
                let qv = ld_s8(q.add(g * 128 + 16 * m));
                let blk = panels.add((g * KG_PER_GROUP + 4 * m) * KG_BYTES);
                // Hints only: never fault, even past the end of the data.
                for l in 0..8 {
                    prefetch(blk.wrapping_add(super::CQ4_PREFETCH_BYTES + 64 * l));
                }
                cq4_kg_block::<0>(blk, table, qv, &mut acc);
                cq4_kg_block::<1>(blk.add(KG_BYTES), table, qv, &mut acc);
                cq4_kg_block::<2>(blk.add(2 * KG_BYTES), table, qv, &mut acc);
                cq4_kg_block::<3>(blk.add(3 * KG_BYTES), table, qv, &mut acc);
            }
        }
        // SAFETY: folded holds ng * 64 f32; group g's 256 bytes.
        unsafe { rescale_group(&acc, act.scale[g], folded.add(g * 256), out) };
    }
}

/// The orthogonal activation transform ([`crate::scalar::orthogonal_rotate`]),
/// 8 columns per step (two vectors), R widened with `fcvtl` / `fcvtl2`;
/// four `k` per pass over `z` (each `z_j` still receives its products in
/// `k` order, `fmul` then `fadd`).
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn orthogonal_rotate(x: &[f32], recip: &[f32], r: &[u8], z: &mut [f32]) {
    let kp = x.len();
    assert!(
        recip.len() == kp && z.len() == kp && r.len() == 2 * kp * kp && kp.is_multiple_of(8),
        "shapes"
    );
    z.fill(0.0);
    let zp = z.as_mut_ptr();
    let rp = r.as_ptr();
    let mut k = 0;
    while k < kp {
        let nk = 4.min(kp - k);
        let mut a = [vdupq_n_f32(0.0); 4];
        for (t, at) in a.iter_mut().enumerate().take(nk) {
            *at = vdupq_n_f32(x[k + t] * recip[k + t]);
        }
        for j in (0..kp).step_by(8) {
            // SAFETY: j + 8 <= kp (kp % 8 == 0); rows k..k+nk of R hold
            // 2 * kp bytes each inside `r` (length checked above).
            unsafe {
                let mut lo = vld1q_f32(zp.add(j));
                let mut hi = vld1q_f32(zp.add(j + 4));
                for (t, at) in a.iter().enumerate().take(nk) {
                    let h = vreinterpretq_u16_u8(ld_u8(rp.add(2 * ((k + t) * kp + j))));
                    lo = vaddq_f32(lo, vmulq_f32(*at, f16x4_to_f32(vget_low_u16(h))));
                    hi = vaddq_f32(hi, vmulq_f32(*at, f16x4_high_to_f32(h)));
                }
                vst1q_f32(zp.add(j), lo);
                vst1q_f32(zp.add(j + 4), hi);
            }
        }
        k += nk;
    }
}
