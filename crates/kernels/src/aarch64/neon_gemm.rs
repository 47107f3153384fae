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

use super::sdot_lane;
use crate::act::{Cq4Rows, CQ4_TILE_ROWS};
use crate::operands::{CbLut, PanelBlock, KG_BYTES, KG_PER_GROUP};

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
