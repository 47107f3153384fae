//! AVX2 (+ F16C) multi-row (GEMM) kernels: one weight group against
//! several activation rows, each weight vector decoded once and dotted
//! with every row while it sits in registers. Same signatures as the
//! table's `GroupGemmFn` / `PanelGemmFn`; row `i` of a result is, bit for
//! bit, the tier's GEMV kernel ([`super::avx2`]) on row `i`: the integer
//! parts are the same exact sums (only the order in which exact integers
//! are added changes) and each row's f32 operations run in the GEMV's
//! order.
//!
//! CQ4 panels: per group and 16-channel stripe (32 bytes of each kg-block),
//! the nibbles are looked up in the int8 codebook once (`pshufb`) and
//! re-interleaved so an i32 lane holds one channel's 4 weights, as in the
//! GEMV; then for each of up to [`CQ4_ROWS`] activation rows the 4
//! activations of the kg-block are broadcast and dotted
//! (`maddubs(abs(w), sign(a, w))`, `madd` to i32). Per row that is 8
//! operations per 64 weights where the GEMV also spends 9 on decoding.

use core::arch::x86_64::*;

use super::load256;
use crate::act::{Cq4Rows, CQ4_TILE_ROWS};
use crate::operands::{CbLut, PanelBlock, KG_BYTES, KG_PER_GROUP};

/// Activation rows the CQ4 kernel keeps in registers against one decoded
/// stripe (2 accumulators each: 8 of the 16 ymm registers).
pub const CQ4_ROWS: usize = 4;

/// The 4 packed activations of row `r` (of its 16-row tile) at 4-column
/// step `s`, broadcast to every i32 lane.
///
/// # Safety
/// `tile + 64 s + 4 r + 4` must be readable.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn act4(tile: *const i8, s: usize, r: usize) -> __m256i {
    // SAFETY: guaranteed by the caller; read_unaligned has no alignment
    // requirement.
    let v = unsafe { tile.add(64 * s + 4 * r).cast::<i32>().read_unaligned() };
    _mm256_set1_epi32(v)
}

/// `MT` rows (`i0..i0 + MT`, inside one 16-row tile of `rows`) against
/// group `g` of the super-block: for each 16-channel stripe, the integer
/// sums of the group, then `out[64 i + c] += (f32(isum) * scale) *
/// folded[g][c]` (the GEMV's f32 step).
///
/// # Safety
/// AVX2 + F16C; `g < b.groups() == rows.groups()`, `i0 + MT <= rows.rows()`,
/// `i0 % 16 + MT <= 16`, `out.len() == 64 * rows.rows()`.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn cq4_rows<const MT: usize>(
    b: &PanelBlock<'_>,
    rows: &Cq4Rows<'_>,
    g: usize,
    i0: usize,
    tables: (__m256i, __m256i),
    out: &mut [f32],
) {
    let (table, m4) = tables;
    let kp = rows.cols();
    let panels = b.panels().as_ptr();
    let folded = b.folded_bytes().as_ptr();
    let tile = rows.packed()[(i0 / CQ4_TILE_ROWS) * CQ4_TILE_ROWS * kp..].as_ptr();
    let r0 = i0 % CQ4_TILE_ROWS;
    let ones = _mm256_set1_epi16(1);
    for h in 0..4 {
        let mut acc = [[_mm256_setzero_si256(); 2]; MT];
        for kg in 0..KG_PER_GROUP {
            let s = g * KG_PER_GROUP + kg;
            // SAFETY: PanelBlock::new checked panels = ng * 32 * 128 bytes
            // (g < ng, 32h + 32 <= 128); the packed tile holds Kp / 4 steps
            // of 64 bytes (s < ng * 32 = Kp / 4, r0 + r < 16).
            unsafe {
                let blk = panels.add(s * KG_BYTES);
                if h == 0 && i0 == 0 {
                    // Hints only (the next group's lines): never fault.
                    let ahead = blk.wrapping_add(KG_PER_GROUP * KG_BYTES);
                    _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64).cast());
                }
                let bytes = load256(blk.add(32 * h));
                let lo = _mm256_shuffle_epi8(table, _mm256_and_si256(bytes, m4));
                let hi =
                    _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16::<4>(bytes), m4));
                let w0 = _mm256_unpacklo_epi8(lo, hi);
                let w1 = _mm256_unpackhi_epi8(lo, hi);
                let (a0, a1) = (_mm256_abs_epi8(w0), _mm256_abs_epi8(w1));
                for (r, ar) in acc.iter_mut().enumerate() {
                    let qd = act4(tile, s, r0 + r);
                    let p0 = _mm256_maddubs_epi16(a0, _mm256_sign_epi8(qd, w0));
                    let p1 = _mm256_maddubs_epi16(a1, _mm256_sign_epi8(qd, w1));
                    ar[0] = _mm256_add_epi32(ar[0], _mm256_madd_epi16(p0, ones));
                    ar[1] = _mm256_add_epi32(ar[1], _mm256_madd_epi16(p1, ones));
                }
            }
        }
        for (r, ar) in acc.iter().enumerate() {
            let i = i0 + r;
            let sc = _mm256_set1_ps(rows.scale(i, g));
            let first = _mm256_permute2x128_si256::<0x20>(ar[0], ar[1]);
            let second = _mm256_permute2x128_si256::<0x31>(ar[0], ar[1]);
            for (half, v) in [(0, first), (1, second)] {
                let c = 16 * h + 8 * half;
                // SAFETY: folded holds ng * 64 f32 (channels c..c+8 of group
                // g); out holds 64 per row (i < rows.rows()).
                unsafe {
                    let f = _mm256_loadu_ps(folded.add((g * 64 + c) * 4).cast());
                    let o = out.as_mut_ptr().add(64 * i + c);
                    let y = _mm256_add_ps(
                        _mm256_loadu_ps(o),
                        _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(v), sc), f),
                    );
                    _mm256_storeu_ps(o, y);
                }
            }
        }
    }
}

/// CQ4 super-block against every row of `rows` (`out[64 i + c]`), bit for
/// bit [`super::avx2::cq4_superblock`] per row: groups in order, and in
/// each group the rows in runs of [`CQ4_ROWS`] (module docs).
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
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
    let table =
        _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(lut.cb_i8().as_ptr().cast()) });
    let tables = (table, _mm256_set1_epi8(0x0F));
    out.fill(0.0);
    for g in 0..ng {
        let mut i0 = 0;
        while i0 < m {
            // Runs never cross a 16-row tile (CQ4_ROWS divides 16).
            let mt = CQ4_ROWS.min(m - i0);
            // SAFETY: g < ng; i0 + mt <= m, and i0 % 16 + mt <= 16 because
            // i0 is a multiple of CQ4_ROWS; out is 64 m.
            unsafe {
                match mt {
                    4 => cq4_rows::<4>(b, rows, g, i0, tables, out),
                    3 => cq4_rows::<3>(b, rows, g, i0, tables, out),
                    2 => cq4_rows::<2>(b, rows, g, i0, tables, out),
                    _ => cq4_rows::<1>(b, rows, g, i0, tables, out),
                }
            }
            i0 += mt;
        }
    }
}
