//! NEON + dot-product multi-row (GEMM) kernels: one weight group against
//! several activation rows, each weight vector decoded once and dotted
//! with every row while it sits in registers. Same signatures as the
//! table's `GroupGemmFn` / `PanelGemmFn`; row `i` of a result is, bit for
//! bit, the tier's GEMV kernel ([`super::neon`]) on row `i`: the integer
//! parts are the same exact sums and each row's f32 operations run in the
//! GEMV's order.
//!
//! CQ4 panels: per group and 8-channel slice (16 bytes of each kg-block),
//! the nibbles are split, looked up (`tbl`) and zipped once, exactly as in
//! the GEMV, so each i32 lane holds one channel's 4 weights; the packed
//! activations ([`crate::act::Cq4Rows`]) give the 4 quants of 4 rows per
//! 16-byte load, and `sdot` by element `r` dots the slice with row `r`.
//! Up to [`CQ4_ROWS`] rows share one decode: 16 `sdot` per 9 other
//! instructions, where the GEMV spends 6 on decoding every 2 `sdot`.

use core::arch::aarch64::*;

use super::neon::{
    add_scaled, iq4_levels, iq4_table, ld_s8, ld_u8, q4_values, q5_0_values, q5_values, scaled16,
    widen_u8x8,
};
use super::{fp16_at8, reduce8, sdot, sdot_lane, Slots};
use crate::act::{ActQ8_0, BlockQ8K, Cq4Rows, CQ4_TILE_ROWS};
use crate::blocks::{
    iq4_nl, iq4_xs, iq4_xs_scales, q2_k, q3_k, q3_k_scales, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k,
    q6_k, q8_0, unpack_k4_scales,
};
use crate::operands::{CbLut, PanelBlock, RowGroup, GROUP_ROWS, KG_BYTES, KG_PER_GROUP};

/// Activation rows the CQ4 kernel keeps in registers against one decoded
/// slice (2 accumulators each: 16 of the 32 vector registers).
pub const CQ4_ROWS: usize = 8;

/// `acc + sdot(w, qv[lane r % 4])`: row `r`'s 4 activations are element
/// `r % 4` of its 16-byte load.
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn sdot_row(acc: int32x4_t, w: int8x16_t, qv: int8x16_t, r: usize) -> int32x4_t {
    match r % 4 {
        0 => sdot_lane::<0>(acc, w, qv),
        1 => sdot_lane::<1>(acc, w, qv),
        2 => sdot_lane::<2>(acc, w, qv),
        _ => sdot_lane::<3>(acc, w, qv),
    }
}

/// `out[c] = out[c] + (f32(isum[c]) * scale) * folded[c]` for the 8
/// channels of one slice (the f32 step of `neon::rescale_group`, lane for
/// lane).
///
/// # Safety
/// `folded..folded + 32` readable, `out..out + 8` writable.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn rescale8(isum: &[int32x4_t; 2], scale: f32, folded: *const u8, out: *mut f32) {
    let sc = vdupq_n_f32(scale);
    for (h, v) in isum.iter().enumerate() {
        // SAFETY: guaranteed by the caller (h < 2).
        unsafe {
            let f = vreinterpretq_f32_u8(vld1q_u8(folded.add(16 * h)));
            let o = out.add(4 * h);
            let y = vaddq_f32(vld1q_f32(o), vmulq_f32(vmulq_f32(vcvtq_f32_s32(*v), sc), f));
            vst1q_f32(o, y);
        }
    }
}

/// `MT` rows (`i0..i0 + MT`, inside one 16-row tile) against group `g`:
/// per 8-channel slice the group's integer sums, then the f32 step.
///
/// # Safety
/// NEON + dot product; `g < b.groups() == rows.groups()`, `i0 + MT <=
/// rows.rows()`, `i0 % 16 + MT <= 16`, `out.len() == 64 * rows.rows()`.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn cq4_rows<const MT: usize>(
    b: &PanelBlock<'_>,
    rows: &Cq4Rows<'_>,
    g: usize,
    i0: usize,
    table: int8x16_t,
    out: &mut [f32],
) {
    let kp = rows.cols();
    let panels = b.panels().as_ptr();
    let folded = b.folded_bytes().as_ptr();
    let tile = rows.packed()[(i0 / CQ4_TILE_ROWS) * CQ4_TILE_ROWS * kp..].as_ptr();
    let r0 = i0 % CQ4_TILE_ROWS;
    let m4 = vdupq_n_u8(0x0F);
    for h in 0..8 {
        let mut acc = [[vdupq_n_s32(0); 2]; MT];
        for kg in 0..KG_PER_GROUP {
            let s = g * KG_PER_GROUP + kg;
            // SAFETY: PanelBlock::new checked panels = ng * 32 * 128 bytes
            // (g < ng, 16h + 16 <= 128); the packed tile holds Kp / 4 steps
            // of 64 bytes (s < Kp / 4) and r0 + MT <= 16, so the loads at
            // 4 r0 and 4 r0 + 16 stay inside step s when MT > 4 (then
            // r0 = 0 or 8).
            unsafe {
                let blk = panels.add(s * KG_BYTES);
                if h == 0 && i0 == 0 {
                    // A hint only (the next group's lines): never faults.
                    super::prefetch(blk.wrapping_add(KG_PER_GROUP * KG_BYTES));
                    super::prefetch(blk.wrapping_add(KG_PER_GROUP * KG_BYTES + 64));
                }
                let bytes = vld1q_u8(blk.add(16 * h));
                let lo = vqtbl1q_s8(table, vandq_u8(bytes, m4));
                let hi = vqtbl1q_s8(table, vshrq_n_u8::<4>(bytes));
                let w0 = vzip1q_s8(lo, hi);
                let w1 = vzip2q_s8(lo, hi);
                let act = tile.add(64 * s + 4 * r0);
                let qv = [
                    vld1q_s8(act),
                    if MT > 4 {
                        vld1q_s8(act.add(16))
                    } else {
                        vdupq_n_s8(0)
                    },
                ];
                for (r, ar) in acc.iter_mut().enumerate() {
                    ar[0] = sdot_row(ar[0], w0, qv[r / 4], r);
                    ar[1] = sdot_row(ar[1], w1, qv[r / 4], r);
                }
            }
        }
        for (r, ar) in acc.iter().enumerate() {
            let i = i0 + r;
            // SAFETY: folded holds ng * 64 f32 (channels 8h..8h+8 of group
            // g); out holds 64 per row (i < rows.rows()).
            unsafe {
                rescale8(
                    ar,
                    rows.scale(i, g),
                    folded.add((g * 64 + 8 * h) * 4),
                    out.as_mut_ptr().add(64 * i + 8 * h),
                )
            };
        }
    }
}

/// CQ4 super-block against every row of `rows` (`out[64 i + c]`), bit for
/// bit [`super::neon::cq4_superblock`] per row: groups in order, and in
/// each group the rows in runs of up to [`CQ4_ROWS`] (module docs).
///
/// # Safety
/// The CPU must support NEON and the dot-product extension.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn cq4_superblock_gemm(
    b: &PanelBlock<'_>,
    rows: &Cq4Rows<'_>,
    lut: &CbLut,
    out: &mut [f32],
) {
    let (m, ng) = (rows.rows(), b.groups());
    assert!(
        rows.groups() == ng && out.len() == 64 * m,
        "GEMM tile shape"
    );
    // SAFETY: cb_i8 is 16 bytes.
    let table = unsafe { vld1q_s8(lut.cb_i8().as_ptr()) };
    out.fill(0.0);
    for g in 0..ng {
        let mut i0 = 0;
        while i0 < m {
            // Runs start at multiples of 8 and never cross a 16-row tile.
            let mt = CQ4_ROWS.min(m - i0);
            // SAFETY: g < ng; i0 + mt <= m; i0 % 16 is 0 or 8, so
            // i0 % 16 + mt <= 16; out is 64 m.
            unsafe {
                match mt {
                    8 => cq4_rows::<8>(b, rows, g, i0, table, out),
                    7 => cq4_rows::<7>(b, rows, g, i0, table, out),
                    6 => cq4_rows::<6>(b, rows, g, i0, table, out),
                    5 => cq4_rows::<5>(b, rows, g, i0, table, out),
                    4 => cq4_rows::<4>(b, rows, g, i0, table, out),
                    3 => cq4_rows::<3>(b, rows, g, i0, table, out),
                    2 => cq4_rows::<2>(b, rows, g, i0, table, out),
                    _ => cq4_rows::<1>(b, rows, g, i0, table, out),
                }
            }
            i0 += mt;
        }
    }
}

// ---------------------------------------------------------------------------
// ggml formats
// ---------------------------------------------------------------------------

/// One ggml format as the multi-row NEON kernel ([`group_gemm`]) runs it:
/// the GEMV kernel's block decoding split from its per-row work.
/// `decode` and `scales` run once per block (every slot), `ints` per slot
/// and activation row, `update` per row: together exactly the GEMV
/// kernel's operations for that row. Every method is a NEON + dot-product
/// `#[target_feature]` function (so `unsafe`: only on such a CPU, with the
/// blocks in bounds as stated), inlined into [`group_gemm`].
trait NeonBlock {
    /// The activation block type.
    type Act: Copy;
    /// One slot's decoded block (re-centred int8 values, widened scales).
    type W: Copy;
    /// The block has a second integer part (`M`, mins).
    const MINS: bool;
    /// Decode the block at `p` (the whole block is readable).
    unsafe fn decode(p: *const u8) -> Self::W;
    /// One slot's i32 partial sums against one activation block: `(S, M)`
    /// (the 4 lanes of each sum to the block's integer part).
    unsafe fn ints(w: &Self::W, a: &Self::Act) -> (int32x4_t, int32x4_t);
    /// The 8 slots' `(d, dmin)` (every current block readable).
    unsafe fn scales(s: &Slots) -> ([float32x4_t; 2], [float32x4_t; 2]);
    /// `acc` plus the 8 rows' block contributions from the reduced
    /// integer parts, in the GEMV kernel's f32 order.
    unsafe fn update(
        acc: &mut [float32x4_t; 2],
        s: [int32x4_t; 2],
        m: [int32x4_t; 2],
        d: [float32x4_t; 2],
        dmin: [float32x4_t; 2],
        a: &Self::Act,
    );
}

/// One 8-row group against `m = out.len() / 8` activation rows
/// (`act`: `m` rows of `g.nblocks()` blocks): per block every slot is
/// decoded once, then each row takes its integer dots, the exact
/// `reduce8` and the f32 update of its 8 accumulators (kept in `out`, in
/// block order from 0.0, as the GEMV kernel's registers).
///
/// # Safety
/// NEON + dot product.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn group_gemm<F: NeonBlock>(g: &RowGroup<'_>, act: &[F::Act], out: &mut [f32]) {
    let nb = g.nblocks();
    let m = out.len() / GROUP_ROWS;
    assert!(
        out.len() == GROUP_ROWS * m && act.len() >= m * nb,
        "GEMM tile shape"
    );
    out.fill(0.0);
    let mut s = Slots::new(g);
    let zero = vdupq_n_s32(0);
    for b in 0..nb {
        // SAFETY: by the RowGroup invariant the current block of every
        // slot is in bounds; the activation index is < m * nb; `out`
        // holds 8 f32 per row. The trait methods need NEON + dot product
        // (this function's features).
        unsafe {
            let w0 = F::decode(s.at(0));
            let mut w = [w0; GROUP_ROWS];
            for (r, wr) in w.iter_mut().enumerate().skip(1) {
                *wr = F::decode(s.at(r));
            }
            let (d, dmin) = F::scales(&s);
            for i in 0..m {
                let a = &act[i * nb + b];
                let mut sv = [zero; GROUP_ROWS];
                let mut mv = [zero; GROUP_ROWS];
                for r in 0..GROUP_ROWS {
                    (sv[r], mv[r]) = F::ints(&w[r], a);
                }
                let si = reduce8(&sv);
                let mi = if F::MINS { reduce8(&mv) } else { [zero; 2] };
                let o = out.as_mut_ptr().add(GROUP_ROWS * i);
                let mut acc = [vld1q_f32(o), vld1q_f32(o.add(4))];
                F::update(&mut acc, si, mi, d, dmin, a);
                vst1q_f32(o, acc[0]);
                vst1q_f32(o.add(4), acc[1]);
            }
        }
        s.prefetch();
        s.advance();
    }
}

/// `sum w a` of 32 values (two vectors) against a Q8_0 activation block.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn dot32(w: &[int8x16_t; 2], a: &ActQ8_0) -> int32x4_t {
    // SAFETY: `qs` is 32 bytes.
    let (a0, a1) = unsafe {
        (
            ld_s8(a.qs.as_ptr().cast()),
            ld_s8(a.qs.as_ptr().add(16).cast()),
        )
    };
    sdot(sdot(vdupq_n_s32(0), w[0], a0), w[1], a1)
}

/// `acc + (S * (d * da) - M * ((-m) * da))` per lane, `M` the activation
/// block sum (Q4_1 / Q5_1, as the GEMV kernels).
#[inline]
#[target_feature(enable = "neon")]
fn min_update(
    acc: &mut [float32x4_t; 2],
    isum: [int32x4_t; 2],
    d: [float32x4_t; 2],
    m: [float32x4_t; 2],
    a: &ActQ8_0,
) {
    let da = vdupq_n_f32(a.d);
    let sum = vdupq_n_f32(a.sum as f32);
    for h in 0..2 {
        let c = vsubq_f32(
            vmulq_f32(vcvtq_f32_s32(isum[h]), vmulq_f32(d[h], da)),
            vmulq_f32(sum, vmulq_f32(vnegq_f32(m[h]), da)),
        );
        acc[h] = vaddq_f32(acc[h], c);
    }
}

/// `acc + (S * (d * da) - M * (dmin * da))` per lane (the k-quants with
/// mins: Q4_K, Q5_K, Q2_K).
#[inline]
#[target_feature(enable = "neon")]
fn mins_update(
    acc: &mut [float32x4_t; 2],
    s: [int32x4_t; 2],
    m: [int32x4_t; 2],
    d: [float32x4_t; 2],
    dmin: [float32x4_t; 2],
    da: f32,
) {
    let da = vdupq_n_f32(da);
    for h in 0..2 {
        let c = vsubq_f32(
            vmulq_f32(vcvtq_f32_s32(s[h]), vmulq_f32(d[h], da)),
            vmulq_f32(vcvtq_f32_s32(m[h]), vmulq_f32(dmin[h], da)),
        );
        acc[h] = vaddq_f32(acc[h], c);
    }
}

/// Q8_0 (`NL = false`), IQ4_NL (`NL = true`): 32 signed weights.
#[derive(Clone, Copy)]
struct Signed32<const NL: bool>;

impl<const NL: bool> NeonBlock for Signed32<NL> {
    type Act = ActQ8_0;
    type W = [int8x16_t; 2];
    const MINS: bool = false;
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn decode(p: *const u8) -> Self::W {
        // SAFETY: a whole Q8_0 (qs 32 bytes at 2) or IQ4_NL (qs 16 bytes
        // at 2) block is readable.
        unsafe {
            if NL {
                iq4_levels(p.add(iq4_nl::QS), iq4_table())
            } else {
                [ld_s8(p.add(q8_0::QS)), ld_s8(p.add(q8_0::QS + 16))]
            }
        }
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn ints(w: &Self::W, a: &ActQ8_0) -> (int32x4_t, int32x4_t) {
        // SAFETY: same features.
        (unsafe { dot32(w, a) }, vdupq_n_s32(0))
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn scales(s: &Slots) -> ([float32x4_t; 2], [float32x4_t; 2]) {
        // SAFETY: d at 0 of both block types.
        let d = unsafe { fp16_at8(s, if NL { iq4_nl::D } else { q8_0::D }) };
        (d, d)
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn update(
        acc: &mut [float32x4_t; 2],
        s: [int32x4_t; 2],
        _: [int32x4_t; 2],
        d: [float32x4_t; 2],
        _: [float32x4_t; 2],
        a: &ActQ8_0,
    ) {
        add_scaled(acc, s, d, vdupq_n_f32(a.d));
    }
}

/// Q4_0 / Q5_0 (`Q5`): values re-centred to i8 (`v - 8`, `v - 16`).
#[derive(Clone, Copy)]
struct Offset32<const Q5: bool>;

impl<const Q5: bool> NeonBlock for Offset32<Q5> {
    type Act = ActQ8_0;
    type W = [int8x16_t; 2];
    const MINS: bool = false;
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn decode(p: *const u8) -> Self::W {
        // SAFETY: a whole Q4_0 / Q5_0 block is readable.
        unsafe {
            if Q5 {
                q5_0_values(p)
            } else {
                let v = q4_values(p.add(q4_0::QS));
                let c = vdupq_n_s8(8);
                [
                    vsubq_s8(vreinterpretq_s8_u8(v[0]), c),
                    vsubq_s8(vreinterpretq_s8_u8(v[1]), c),
                ]
            }
        }
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn ints(w: &Self::W, a: &ActQ8_0) -> (int32x4_t, int32x4_t) {
        // SAFETY: same features.
        (unsafe { dot32(w, a) }, vdupq_n_s32(0))
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn scales(s: &Slots) -> ([float32x4_t; 2], [float32x4_t; 2]) {
        // SAFETY: d at 0 of both block types.
        let d = unsafe { fp16_at8(s, if Q5 { q5_0::D } else { q4_0::D }) };
        (d, d)
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn update(
        acc: &mut [float32x4_t; 2],
        s: [int32x4_t; 2],
        _: [int32x4_t; 2],
        d: [float32x4_t; 2],
        _: [float32x4_t; 2],
        a: &ActQ8_0,
    ) {
        add_scaled(acc, s, d, vdupq_n_f32(a.d));
    }
}

/// Q4_1 / Q5_1 (`Q5`): unsigned values (valid i8), the min term from the
/// activation sum.
#[derive(Clone, Copy)]
struct Min32<const Q5: bool>;

impl<const Q5: bool> NeonBlock for Min32<Q5> {
    type Act = ActQ8_0;
    type W = [int8x16_t; 2];
    const MINS: bool = false;
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn decode(p: *const u8) -> Self::W {
        // SAFETY: a whole Q4_1 (qs 16 at 4) / Q5_1 (qh 4 at 4, qs 16 at 8)
        // block is readable.
        unsafe {
            if Q5 {
                q5_values(p.add(q5_1::QH), p.add(q5_1::QS), 0)
            } else {
                let v = q4_values(p.add(q4_1::QS));
                [vreinterpretq_s8_u8(v[0]), vreinterpretq_s8_u8(v[1])]
            }
        }
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn ints(w: &Self::W, a: &ActQ8_0) -> (int32x4_t, int32x4_t) {
        // SAFETY: same features.
        (unsafe { dot32(w, a) }, vdupq_n_s32(0))
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn scales(s: &Slots) -> ([float32x4_t; 2], [float32x4_t; 2]) {
        // SAFETY: d and m at 0 and 2 of both block types.
        unsafe {
            if Q5 {
                (fp16_at8(s, q5_1::D), fp16_at8(s, q5_1::M))
            } else {
                (fp16_at8(s, q4_1::D), fp16_at8(s, q4_1::M))
            }
        }
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn update(
        acc: &mut [float32x4_t; 2],
        s: [int32x4_t; 2],
        _: [int32x4_t; 2],
        d: [float32x4_t; 2],
        m: [float32x4_t; 2],
        a: &ActQ8_0,
    ) {
        min_update(acc, s, d, m, a);
    }
}

/// Q4_K / Q5_K (`Q5`): 8 sub-blocks of 32 values (valid i8), the widened
/// 6-bit scales and mins.
#[derive(Clone, Copy)]
struct K4<const Q5: bool>;

impl<const Q5: bool> NeonBlock for K4<Q5> {
    type Act = BlockQ8K;
    /// Values (sub-block `j`: vectors `2j`, `2j + 1`), scales as i32, mins
    /// as i16.
    type W = ([int8x16_t; 16], [int32x4_t; 2], int16x8_t);
    const MINS: bool = true;
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn decode(p: *const u8) -> Self::W {
        let (scales_off, qs_off) = if Q5 {
            (q5_k::SCALES, q5_k::QS)
        } else {
            (q4_k::SCALES, q4_k::QS)
        };
        let m4 = vdupq_n_u8(0x0F);
        let b16 = vdupq_n_u8(0x10);
        // SAFETY: a whole Q4_K (144) / Q5_K (176) block is readable: scales
        // 12 bytes at 4, qs 128 at 16 / 48, qh 32 at 16 (Q5_K).
        unsafe {
            let (sc, mins) = unpack_k4_scales(&*p.add(scales_off).cast::<[u8; 12]>());
            let (qh0, qh1) = if Q5 {
                (ld_u8(p.add(q5_k::QH)), ld_u8(p.add(q5_k::QH + 16)))
            } else {
                (vdupq_n_u8(0), vdupq_n_u8(0))
            };
            let mut v = [vdupq_n_s8(0); 16];
            for c in 0..4 {
                let q0 = ld_u8(p.add(qs_off + 32 * c));
                let q1 = ld_u8(p.add(qs_off + 32 * c + 16));
                for half in 0..2 {
                    let (w0, w1) = if half == 0 {
                        (vandq_u8(q0, m4), vandq_u8(q1, m4))
                    } else {
                        (vshrq_n_u8::<4>(q0), vshrq_n_u8::<4>(q1))
                    };
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
                    v[2 * j] = vreinterpretq_s8_u8(w0);
                    v[2 * j + 1] = vreinterpretq_s8_u8(w1);
                }
            }
            let mw = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mins.as_ptr())));
            (v, widen_u8x8(&sc), mw)
        }
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn ints(w: &Self::W, a: &BlockQ8K) -> (int32x4_t, int32x4_t) {
        let zero = vdupq_n_s32(0);
        let aq = a.qs.as_ptr().cast::<u8>();
        let mut dots = [zero; 8];
        // SAFETY: `qs` is 256 bytes, `bsums` 16 i16.
        unsafe {
            for (j, dj) in dots.iter_mut().enumerate() {
                let d0 = sdot(zero, w.0[2 * j], ld_s8(aq.add(32 * j)));
                *dj = sdot(d0, w.0[2 * j + 1], ld_s8(aq.add(32 * j + 16)));
            }
            let t = reduce8(&dots);
            let sv = vaddq_s32(vmulq_s32(t[0], w.1[0]), vmulq_s32(t[1], w.1[1]));
            // bsum pairs: |bsum_2j + bsum_2j+1| <= 32 * 127, fits i16.
            let bp = vpaddq_s16(
                vld1q_s16(a.bsums.as_ptr()),
                vld1q_s16(a.bsums.as_ptr().add(8)),
            );
            let mv = vmlal_high_s16(vmull_s16(vget_low_s16(w.2), vget_low_s16(bp)), w.2, bp);
            (sv, mv)
        }
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn scales(s: &Slots) -> ([float32x4_t; 2], [float32x4_t; 2]) {
        // SAFETY: d, dmin at 0 and 2 of both block types.
        unsafe { (fp16_at8(s, q4_k::D), fp16_at8(s, q4_k::DMIN)) }
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn update(
        acc: &mut [float32x4_t; 2],
        s: [int32x4_t; 2],
        m: [int32x4_t; 2],
        d: [float32x4_t; 2],
        dmin: [float32x4_t; 2],
        a: &BlockQ8K,
    ) {
        mins_update(acc, s, m, d, dmin, a.d);
    }
}

/// The 16 sub-block dots of one slot against a Q8_K block (`w[j]` is
/// sub-block `j`'s 16 values) scaled by the i8 scales `sc8`, as
/// `neon::scaled16`.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn dots16_scaled(w: &[int8x16_t; 16], sc8: int8x16_t, a: &BlockQ8K) -> int32x4_t {
    let zero = vdupq_n_s32(0);
    let aq = a.qs.as_ptr().cast::<u8>();
    let mut dots = [zero; 16];
    for (j, dj) in dots.iter_mut().enumerate() {
        // SAFETY: `qs` is 256 bytes (16j + 16 <= 256).
        *dj = sdot(zero, w[j], unsafe { ld_s8(aq.add(16 * j)) });
    }
    scaled16(&dots, sc8)
}

/// Q6_K: 16 sub-blocks of 16 re-centred values (`v - 32`), i8 scales.
#[derive(Clone, Copy)]
struct Q6;

impl NeonBlock for Q6 {
    type Act = BlockQ8K;
    type W = ([int8x16_t; 16], int8x16_t);
    const MINS: bool = false;
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn decode(p: *const u8) -> Self::W {
        let m4 = vdupq_n_u8(0x0F);
        let m3 = vdupq_n_u8(0x03);
        let c32 = vdupq_n_s8(32);
        let mut w = [vdupq_n_s8(0); 16];
        // SAFETY: a whole 210-byte block is readable: ql 128 bytes at 0, qh
        // 64 at 128, scales 16 at 192.
        unsafe {
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
                        w[8 * h + 2 * t + half] = vsubq_s8(vreinterpretq_s8_u8(vt), c32);
                    }
                }
            }
            (w, vld1q_s8(p.add(q6_k::SCALES).cast()))
        }
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn ints(w: &Self::W, a: &BlockQ8K) -> (int32x4_t, int32x4_t) {
        // SAFETY: same features.
        (unsafe { dots16_scaled(&w.0, w.1, a) }, vdupq_n_s32(0))
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn scales(s: &Slots) -> ([float32x4_t; 2], [float32x4_t; 2]) {
        // SAFETY: d at 208.
        let d = unsafe { fp16_at8(s, q6_k::D) };
        (d, d)
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn update(
        acc: &mut [float32x4_t; 2],
        s: [int32x4_t; 2],
        _: [int32x4_t; 2],
        d: [float32x4_t; 2],
        _: [float32x4_t; 2],
        a: &BlockQ8K,
    ) {
        add_scaled(acc, s, d, vdupq_n_f32(a.d));
    }
}

/// Q2_K / Q3_K (`Q3`): 16 sub-blocks of 16 (Q2_K: 0..=3, 4-bit scales and
/// mins; Q3_K: `v` in -4..=3, signed 6-bit scales).
#[derive(Clone, Copy)]
struct K16<const Q3: bool>;

impl<const Q3: bool> NeonBlock for K16<Q3> {
    type Act = BlockQ8K;
    /// Values per sub-block, the i8 scales, Q2_K's mins as two i16x8.
    type W = ([int8x16_t; 16], int8x16_t, [int16x8_t; 2]);
    const MINS: bool = !Q3;
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn decode(p: *const u8) -> Self::W {
        let m3 = vdupq_n_u8(0x03);
        let m4 = vdupq_n_u8(0x0F);
        let qs_off = if Q3 { q3_k::QS } else { q2_k::QS };
        let mut w = [vdupq_n_s8(0); 16];
        // SAFETY: a whole Q2_K (84 bytes: scales 16 at 0, qs 64 at 16) or
        // Q3_K (110 bytes: hmask 32 at 0, qs 64 at 32, scales 12 at 96)
        // block is readable.
        unsafe {
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
                        w[8 * n + 2 * j + hf] = if Q3 {
                            // v + 4 = field | 4 * (hmask bit 4n + j), then - 4.
                            let set = vtstq_u8(hm, vdupq_n_u8(1 << (4 * n + j)));
                            let u = vorrq_u8(fj, vandq_u8(set, vdupq_n_u8(4)));
                            vsubq_s8(vreinterpretq_s8_u8(u), vdupq_n_s8(4))
                        } else {
                            vreinterpretq_s8_u8(fj)
                        };
                    }
                }
            }
            if Q3 {
                let sc = q3_k_scales(&*p.add(q3_k::SCALES).cast::<[u8; 12]>());
                (w, vld1q_s8(sc.as_ptr()), [vdupq_n_s16(0); 2])
            } else {
                let b = ld_u8(p.add(q2_k::SCALES));
                let mins = vshrq_n_u8::<4>(b);
                let mw = [
                    vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins))),
                    vreinterpretq_s16_u16(vmovl_high_u8(mins)),
                ];
                (w, vreinterpretq_s8_u8(vandq_u8(b, m4)), mw)
            }
        }
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn ints(w: &Self::W, a: &BlockQ8K) -> (int32x4_t, int32x4_t) {
        // SAFETY: same features; `bsums` is 16 i16.
        unsafe {
            let sv = dots16_scaled(&w.0, w.1, a);
            if Q3 {
                return (sv, vdupq_n_s32(0));
            }
            let b0 = vld1q_s16(a.bsums.as_ptr());
            let b1 = vld1q_s16(a.bsums.as_ptr().add(8));
            let mw = w.2;
            let lo = vmlal_high_s16(vmull_s16(vget_low_s16(mw[0]), vget_low_s16(b0)), mw[0], b0);
            let mv = vmlal_high_s16(
                vmlal_s16(lo, vget_low_s16(mw[1]), vget_low_s16(b1)),
                mw[1],
                b1,
            );
            (sv, mv)
        }
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn scales(s: &Slots) -> ([float32x4_t; 2], [float32x4_t; 2]) {
        // SAFETY: Q3_K: d at 108; Q2_K: d, dmin at 80, 82.
        unsafe {
            if Q3 {
                let d = fp16_at8(s, q3_k::D);
                (d, d)
            } else {
                (fp16_at8(s, q2_k::D), fp16_at8(s, q2_k::DMIN))
            }
        }
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn update(
        acc: &mut [float32x4_t; 2],
        s: [int32x4_t; 2],
        m: [int32x4_t; 2],
        d: [float32x4_t; 2],
        dmin: [float32x4_t; 2],
        a: &BlockQ8K,
    ) {
        if Q3 {
            let da = vdupq_n_f32(a.d);
            for h in 0..2 {
                let c = vmulq_f32(vcvtq_f32_s32(s[h]), vmulq_f32(d[h], da));
                acc[h] = vaddq_f32(acc[h], c);
            }
        } else {
            mins_update(acc, s, m, d, dmin, a.d);
        }
    }
}

/// IQ4_XS: 8 sub-blocks of 32 levels, times the widened `ls_j - 32`.
#[derive(Clone, Copy)]
struct Iq4Xs;

impl NeonBlock for Iq4Xs {
    type Act = BlockQ8K;
    type W = ([int8x16_t; 16], [int32x4_t; 2]);
    const MINS: bool = false;
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn decode(p: *const u8) -> Self::W {
        let table = iq4_table();
        let mut w = [vdupq_n_s8(0); 16];
        // SAFETY: a whole 136-byte block is readable (header 8 bytes, qs 128
        // at 8).
        unsafe {
            let sc = iq4_xs_scales(&*p.cast::<[u8; 8]>());
            for j in 0..8 {
                let l = iq4_levels(p.add(iq4_xs::QS + 16 * j), table);
                w[2 * j] = l[0];
                w[2 * j + 1] = l[1];
            }
            let sc16 = vmovl_s8(vld1_s8(sc.as_ptr()));
            (w, [vmovl_s16(vget_low_s16(sc16)), vmovl_high_s16(sc16)])
        }
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn ints(w: &Self::W, a: &BlockQ8K) -> (int32x4_t, int32x4_t) {
        let zero = vdupq_n_s32(0);
        let aq = a.qs.as_ptr().cast::<u8>();
        let mut dots = [zero; 8];
        for (j, dj) in dots.iter_mut().enumerate() {
            // SAFETY: `qs` is 256 bytes.
            let (a0, a1) = unsafe { (ld_s8(aq.add(32 * j)), ld_s8(aq.add(32 * j + 16))) };
            *dj = sdot(sdot(zero, w.0[2 * j], a0), w.0[2 * j + 1], a1);
        }
        let t = reduce8(&dots);
        (
            vaddq_s32(vmulq_s32(t[0], w.1[0]), vmulq_s32(t[1], w.1[1])),
            zero,
        )
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn scales(s: &Slots) -> ([float32x4_t; 2], [float32x4_t; 2]) {
        // SAFETY: d at 0.
        let d = unsafe { fp16_at8(s, iq4_xs::D) };
        (d, d)
    }
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn update(
        acc: &mut [float32x4_t; 2],
        s: [int32x4_t; 2],
        _: [int32x4_t; 2],
        d: [float32x4_t; 2],
        _: [float32x4_t; 2],
        a: &BlockQ8K,
    ) {
        add_scaled(acc, s, d, vdupq_n_f32(a.d));
    }
}

macro_rules! gemm_kernel {
    ($(#[$doc:meta])* $name:ident, $act:ty, $fmt:ty) => {
        $(#[$doc])*
        ///
        /// Row `i` of `out` (8 values) is bit for bit the NEON group kernel
        /// of the same format on activation row `i` (module docs).
        ///
        /// # Safety
        /// The CPU must support NEON and the dot-product extension.
        #[target_feature(enable = "neon,dotprod")]
        pub unsafe fn $name(g: &RowGroup<'_>, act: &[$act], out: &mut [f32]) {
            // SAFETY: same features.
            unsafe { group_gemm::<$fmt>(g, act, out) }
        }
    };
}

gemm_kernel!(
    /// Q8_0 multi-row group kernel.
    q8_0_gemm, ActQ8_0, Signed32<false>
);
gemm_kernel!(
    /// IQ4_NL multi-row group kernel.
    iq4_nl_gemm, ActQ8_0, Signed32<true>
);
gemm_kernel!(
    /// Q4_0 multi-row group kernel.
    q4_0_gemm, ActQ8_0, Offset32<false>
);
gemm_kernel!(
    /// Q5_0 multi-row group kernel.
    q5_0_gemm, ActQ8_0, Offset32<true>
);
gemm_kernel!(
    /// Q4_1 multi-row group kernel.
    q4_1_gemm, ActQ8_0, Min32<false>
);
gemm_kernel!(
    /// Q5_1 multi-row group kernel.
    q5_1_gemm, ActQ8_0, Min32<true>
);
gemm_kernel!(
    /// Q4_K multi-row group kernel.
    q4_k_gemm, BlockQ8K, K4<false>
);
gemm_kernel!(
    /// Q5_K multi-row group kernel.
    q5_k_gemm, BlockQ8K, K4<true>
);
gemm_kernel!(
    /// Q6_K multi-row group kernel.
    q6_k_gemm, BlockQ8K, Q6
);
gemm_kernel!(
    /// Q2_K multi-row group kernel.
    q2_k_gemm, BlockQ8K, K16<false>
);
gemm_kernel!(
    /// Q3_K multi-row group kernel.
    q3_k_gemm, BlockQ8K, K16<true>
);
gemm_kernel!(
    /// IQ4_XS multi-row group kernel.
    iq4_xs_gemm, BlockQ8K, Iq4Xs
);
