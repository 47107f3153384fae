//! AVX-512 VNNI multi-row (GEMM) kernel for CQ4 panels: one super-block's
//! group decoded once per run of [`CQ4_ROWS`] activation rows and dotted
//! with each of them while it sits in registers. Same signature as the
//! table's `PanelGemmFn`; row `i` of a result is, bit for bit, the tier's
//! GEMV kernel ([`super::avx512::cq4_superblock`]) on row `i`: the same
//! exact integer sums and, per row, the same f32 operations in the same
//! order.
//!
//! Per kg-block (64 channels x 4 columns, 128 bytes): the weights are
//! decoded by the GEMV's own `cq4_kg_weights` (biased codebook `cb +
//! 128`, one channel's 4 weights per i32 lane); then for each row the 4 activations of the
//! kg-block are broadcast (a load) and four `vpdpbusd` add
//! `sum (cb + 128) q` into the row's 4 accumulators (64 channels). After the
//! group, the GEMV's `cq4_group_terms` subtracts `128 * qsum` (the bias
//! of the unsigned operand), puts the lanes back in channel order and
//! scales: `out += (f32(isum) * scale) * folded`. Per row that is 1 load and 4
//! `vpdpbusd` per 256 weights, where the GEMV also spends 14 operations on
//! decoding them.
//!
//! The ggml formats have no kernel here (the `avx512` table borrows the
//! `avx2` multi-row kernels of Q4_0 / Q4_K / Q6_K; KERNELS.md §GEMM).

use core::arch::x86_64::*;

use super::avx512::{cq4_biased_table, cq4_group_terms, cq4_kg_weights};
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
            let w = cq4_kg_weights(blk, table);
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
        // SAFETY: folded holds ng * 64 f32 (group g's at 256 g); out holds
        // 64 per row (i < rows.rows()).
        unsafe {
            let terms = cq4_group_terms(ar, rows.qsum(i, g), rows.scale(i, g), folded.add(g * 256));
            for (j, t) in terms.into_iter().enumerate() {
                let o = out.as_mut_ptr().add(64 * i + 16 * j);
                _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), t));
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
    let table = cq4_biased_table(lut);
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
