//! AVX-512 VNNI multi-row (GEMM) kernel for CQ4 panels: one super-block's
//! group decoded once per run of [`CQ4_ROWS`] activation rows and dotted
//! with each of them while it sits in registers. Same signature as the
//! table's `PanelGemmFn`; row `i` of a result is, bit for bit, the tier's
//! GEMV kernel ([`super::avx512::cq4_superblock`]) on row `i`: the same
//! exact integer sums and, per row, the same f32 operations in the same
//! order.
//!
//! Per kg-block (64 channels x 4 columns, 128 bytes): the two 64-byte
//! halves are looked up in the biased codebook `cb_i8 ^ 0x80 = cb + 128`
//! (u8) and re-interleaved so an i32 lane holds one channel's 4 weights,
//! exactly as the GEMV does; then for each row the 4 activations of the
//! kg-block are broadcast (a load) and four `vpdpbusd` add
//! `sum (cb + 128) q` into the row's 4 accumulators (64 channels). After the
//! group, `128 * qsum` is subtracted (the bias of the unsigned operand),
//! the lanes are put back in channel order and the GEMV's f32 step runs:
//! `out += (f32(isum) * scale) * folded`. Per row that is 1 load and 4
//! `vpdpbusd` per 256 weights, where the GEMV also spends 14 operations on
//! decoding them.
//!
//! The ggml formats have no kernel here: the `avx512` tier runs their GEMV
//! kernel per row (KERNELS.md §GEMM).

use core::arch::x86_64::*;

use super::read_u32;
use crate::act::{Cq4Rows, CQ4_TILE_ROWS};
use crate::operands::{CbLut, PanelBlock, KG_BYTES, KG_PER_GROUP};

/// Activation rows the kernel keeps in registers against one decoded
/// kg-block (4 accumulators each: 16 of the 32 zmm registers).
pub const CQ4_ROWS: usize = 4;

/// `MT` rows (`i0..i0 + MT`, inside one 16-row tile of `rows`) against
/// group `g` of the super-block, added into `out[64 i + c]`.
///
/// # Safety
/// The `avx512` tier's features; `g < b.groups() == rows.groups()`,
/// `i0 + MT <= rows.rows()`, `i0 % 16 + MT <= 16`, `out.len() == 64 *
/// rows.rows()`.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn cq4_rows<const MT: usize>(
    b: &PanelBlock<'_>,
    rows: &Cq4Rows<'_>,
    g: usize,
    i0: usize,
    table: __m512i,
    out: &mut [f32],
) {
    let m4 = _mm512_set1_epi8(0x0F);
    // The unpacks leave lanes {0-3, 8-11, 16-19, 24-27} / {4-7, 12-15, ..}
    // of each 32 channels (as in the GEMV kernel).
    let idx_a = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    let idx_b = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    let kp = rows.cols();
    let panels = b.panels().as_ptr();
    let folded = b.folded_bytes().as_ptr();
    let tile = rows.packed()[(i0 / CQ4_TILE_ROWS) * CQ4_TILE_ROWS * kp..]
        .as_ptr()
        .cast::<u8>();
    let r0 = i0 % CQ4_TILE_ROWS;
    let mut acc = [[_mm512_setzero_si512(); 4]; MT];
    for kg in 0..KG_PER_GROUP {
        let s = g * KG_PER_GROUP + kg;
        // SAFETY: PanelBlock::new checked panels = ng * 32 * 128 bytes
        // (s < ng * 32); the packed tile holds Kp / 4 steps of 64 bytes
        // (s < Kp / 4, r0 + r < 16).
        unsafe {
            let blk = panels.add(s * KG_BYTES);
            if i0 == 0 {
                // Hints only (the next group's lines): never fault.
                let ahead = blk.wrapping_add(KG_PER_GROUP * KG_BYTES);
                _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64).cast());
            }
            let mut w = [_mm512_setzero_si512(); 4];
            for h in 0..2 {
                let bytes = _mm512_loadu_si512(blk.add(64 * h).cast());
                let lo = _mm512_shuffle_epi8(table, _mm512_and_si512(bytes, m4));
                let hi =
                    _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16::<4>(bytes), m4));
                w[2 * h] = _mm512_unpacklo_epi8(lo, hi);
                w[2 * h + 1] = _mm512_unpackhi_epi8(lo, hi);
            }
            for (r, ar) in acc.iter_mut().enumerate() {
                let qd = _mm512_set1_epi32(read_u32(tile.add(64 * s + 4 * (r0 + r))) as i32);
                for (a, wj) in ar.iter_mut().zip(&w) {
                    *a = _mm512_dpbusd_epi32(*a, *wj, qd);
                }
            }
        }
    }
    for (r, ar) in acc.iter().enumerate() {
        let i = i0 + r;
        let bias = _mm512_set1_epi32(128 * rows.qsum(i, g));
        let sc = _mm512_set1_ps(rows.scale(i, g));
        for h in 0..2 {
            let (u, v) = (
                _mm512_sub_epi32(ar[2 * h], bias),
                _mm512_sub_epi32(ar[2 * h + 1], bias),
            );
            let first = _mm512_permutex2var_epi32(u, idx_a, v);
            let second = _mm512_permutex2var_epi32(u, idx_b, v);
            for (j, iv) in [(2 * h, first), (2 * h + 1, second)] {
                // SAFETY: folded holds ng * 64 f32 (channels 16j..16j + 16
                // of group g); out holds 64 per row (i < rows.rows()).
                unsafe {
                    let f = _mm512_loadu_ps(folded.add((g * 64 + 16 * j) * 4).cast());
                    let o = out.as_mut_ptr().add(64 * i + 16 * j);
                    let y = _mm512_add_ps(
                        _mm512_loadu_ps(o),
                        _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(iv), sc), f),
                    );
                    _mm512_storeu_ps(o, y);
                }
            }
        }
    }
}

/// CQ4 super-block against every row of `rows` (`out[64 i + c]`), bit for
/// bit [`super::avx512::cq4_superblock`] per row: groups in order, and in
/// each group the rows in runs of [`CQ4_ROWS`] (module docs).
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL and VNNI (and AVX2, F16C).
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
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
    let mut biased = [0u8; 16];
    for (d, &c) in biased.iter_mut().zip(lut.cb_i8()) {
        *d = (c as u8) ^ 0x80;
    }
    // SAFETY: `biased` is 16 bytes.
    let table = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(biased.as_ptr().cast()) });
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

const _: () = assert!(CQ4_TILE_ROWS.is_multiple_of(CQ4_ROWS));
