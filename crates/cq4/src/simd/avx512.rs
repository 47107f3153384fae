//! The filter tile on x86-64 AVX-512F: `MR` rows x `NR` = 16 columns as
//! 4 accumulators of 16 f32 lanes, one fused multiply-add per product (one
//! rounding per term, the arithmetic `E` is derived for), each block of
//! `KB` terms converted to f64 and added to the f64 sums.
#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::{APack, BRow, Buckets, Tile, KB, MR, NR, TABLE_BUCKETS, UNCERTAIN};

/// `N` tiles over one R panel in one pass: `[tile(a[0], b), .., tile(a[N-1], b)]`
/// bit for bit (each output's chain of FMAs is the same; only more chains
/// run side by side). Safe entry: checks the CPU, then runs the kernel.
pub(super) fn tiles<const N: usize>(a: [&[APack]; N], b: &[BRow]) -> [Tile; N] {
    assert!(std::arch::is_x86_feature_detected!("avx512f"));
    // SAFETY: AVX-512F was detected on this CPU just above.
    unsafe { tile_n(a, b) }
}

/// `N` tiles sharing each loaded row of R: `N * MR` independent
/// accumulator chains and one load of R per `N * MR` fused multiply-adds.
/// One tile alone (4 chains, a load of R per 4 FMAs) waits on the loads of
/// R, which stream from L2 (a 640-wide R is 1.6 MB); four tiles measured
/// best on the one AVX-512 guest (docs/BENCHMARKS.md, issue 13). The rows
/// of R are prefetched into L1 [`super::PREFETCH_ROWS`] ahead: the panel
/// (40 KB at Kp = 640) and the four tiles' rows (as much again) do not both
/// stay in a 48 KB L1, and the hardware prefetchers left the loop at about
/// 70 % of its in-L1 rate (docs/BENCHMARKS.md, session 19). The caller
/// gives every `a[i]` the length of `b`, a multiple of `KB`.
#[target_feature(enable = "avx512f")]
fn tile_n<const N: usize>(a: [&[APack]; N], b: &[BRow]) -> [Tile; N] {
    let mut out = [[[_mm512_setzero_pd(); NR / 8]; MR]; N];
    let (bblocks, _) = b.as_chunks::<KB>();
    let ablocks: [&[[APack; KB]]; N] = a.map(|x| x.as_chunks::<KB>().0);
    for (blk, bb) in bblocks.iter().enumerate() {
        let ab: [&[APack; KB]; N] = std::array::from_fn(|t| &ablocks[t][blk]);
        let mut acc = [[_mm512_setzero_ps(); MR]; N];
        for k in 0..KB {
            // The row PREFETCH_ROWS ahead into L1 (past the panel's end: the
            // next panel's start, which the caller's next pass reads; a
            // prefetch of any address is harmless, so wrapping arithmetic).
            _mm_prefetch::<_MM_HINT_T0>(
                b.as_ptr()
                    .wrapping_add(blk * KB + k + super::PREFETCH_ROWS)
                    .cast(),
            );
            // SAFETY: `bb[k]` is a `[f32; 16]`: the 16-lane unaligned load
            // reads exactly it.
            let bv = unsafe { _mm512_loadu_ps(bb[k].as_ptr()) };
            for (acc_t, a_t) in acc.iter_mut().zip(&ab) {
                let x = &a_t[k];
                for r in 0..MR {
                    acc_t[r] = _mm512_fmadd_ps(_mm512_set1_ps(x[r]), bv, acc_t[r]);
                }
            }
        }
        for (out_t, acc_t) in out.iter_mut().zip(&acc) {
            for r in 0..MR {
                let v = acc_t[r];
                let lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
                let hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                    _mm512_castps_pd(v),
                )));
                out_t[r][0] = _mm512_add_pd(out_t[r][0], lo);
                out_t[r][1] = _mm512_add_pd(out_t[r][1], hi);
            }
        }
    }
    let mut res = [[[0.0f64; NR]; MR]; N];
    for (res_t, out_t) in res.iter_mut().zip(&out) {
        for r in 0..MR {
            for (q, v) in out_t[r].iter().enumerate() {
                // SAFETY: `res_t[r][8q .. 8q + 8]` is inside the `[f64; 16]`
                // row (q < 2); unaligned store.
                unsafe { _mm512_storeu_pd(res_t[r].as_mut_ptr().add(8 * q), *v) };
            }
        }
    }
    res
}

/// [`Buckets::lookup`] of 16 estimates: the same f64 add, multiply and
/// range test per lane, the truncated buckets' entries gathered; and the
/// mask of the [`UNCERTAIN`] ones. Safe entry: checks the CPU and the
/// table's length, then runs the kernel.
pub(super) fn lookup_row(t: Buckets<'_>, est: &[f64; NR]) -> ([u8; NR], u32) {
    assert!(std::arch::is_x86_feature_detected!("avx512f"));
    assert!(t.table.len() >= TABLE_BUCKETS + 4);
    // SAFETY: AVX-512F was detected on this CPU just above; the table
    // length was checked for the gather.
    unsafe { lookup_row_avx512(t, est) }
}

/// # Safety
/// The CPU has AVX-512F; `t.table` has at least `TABLE_BUCKETS + 4` bytes.
#[target_feature(enable = "avx512f")]
unsafe fn lookup_row_avx512(t: Buckets<'_>, est: &[f64; NR]) -> ([u8; NR], u32) {
    let range = _mm512_set1_pd(t.range);
    let inv_w = _mm512_set1_pd(t.inv_w);
    let nb = _mm512_set1_pd(TABLE_BUCKETS as f64);
    let mut inside = 0u16;
    let mut half = [_mm256_setzero_si256(); 2];
    for (h, d) in half.iter_mut().enumerate() {
        // SAFETY: lanes `8h .. 8h + 8` of the 16 (h < 2); unaligned load.
        let v = unsafe { _mm512_loadu_pd(est.as_ptr().add(8 * h)) };
        let x = _mm512_mul_pd(_mm512_add_pd(v, range), inv_w);
        let m = _mm512_cmp_pd_mask::<_CMP_GE_OQ>(x, _mm512_setzero_pd())
            & _mm512_cmp_pd_mask::<_CMP_LT_OQ>(x, nb);
        inside |= u16::from(m) << (8 * h);
        *d = _mm512_cvttpd_epi32(x);
    }
    let all = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(half[0]), half[1]);
    let b = _mm512_mask_blend_epi32(inside, _mm512_set1_epi32(TABLE_BUCKETS as i32), all);
    // SAFETY: every lane of `b` is at most TABLE_BUCKETS, so each 4-byte
    // read at `table + b` is inside the table (checked length).
    let g = unsafe { _mm512_i32gather_epi32::<1>(b, t.table.as_ptr().cast()) };
    let entries = _mm512_and_si512(g, _mm512_set1_epi32(0xFF));
    let unsure = _mm512_cmpeq_epi32_mask(entries, _mm512_set1_epi32(i32::from(UNCERTAIN)));
    let mut out = [0u8; NR];
    // SAFETY: 16 bytes into the 16-byte array; unaligned store.
    unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), _mm512_cvtepi32_epi8(entries)) };
    (out, u32::from(unsure))
}
