//! The filter tile on x86-64 AVX-512F: `MR` rows x `NR` = 16 columns as
//! 4 accumulators of 16 f32 lanes, one fused multiply-add per product (one
//! rounding per term, the arithmetic `E` is derived for), each block of
//! `KB` terms converted to f64 and added to the f64 sums.
#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::{APack, BRow, Tile, KB, MR, NR};

/// Safe entry: checks the CPU, then runs the kernel.
pub(super) fn tile(a: &[APack], b: &[BRow]) -> Tile {
    assert!(std::arch::is_x86_feature_detected!("avx512f"));
    // SAFETY: AVX-512F was detected on this CPU just above.
    let [t] = unsafe { tile_n([a], b) };
    t
}

/// Two tiles over one R panel in one pass: `(tile(a0, b), tile(a1, b))`,
/// bit for bit (each output's chain of FMAs is the same; only more chains
/// run side by side).
pub(super) fn tile2(a0: &[APack], a1: &[APack], b: &[BRow]) -> (Tile, Tile) {
    assert!(std::arch::is_x86_feature_detected!("avx512f"));
    // SAFETY: AVX-512F was detected on this CPU just above.
    let [t0, t1] = unsafe { tile_n([a0, a1], b) };
    (t0, t1)
}

/// `N` tiles sharing each loaded row of R: `N * MR` independent
/// accumulator chains. One tile alone has only `MR` = 4 chains, fewer than
/// two 512-bit FMA units times the FMA latency would need; on the one
/// AVX-512 guest measured (docs/BENCHMARKS.md, issue 13 session 10) the
/// tile already ran at about one 512-bit FMA per cycle and two tiles gained
/// 6 %. The caller gives every `a[i]` the length of `b`, a multiple of
/// `KB`.
#[target_feature(enable = "avx512f")]
fn tile_n<const N: usize>(a: [&[APack]; N], b: &[BRow]) -> [Tile; N] {
    let mut out = [[[_mm512_setzero_pd(); NR / 8]; MR]; N];
    for (blk, bb) in b.chunks_exact(KB).enumerate() {
        let mut acc = [[_mm512_setzero_ps(); MR]; N];
        for (k, y) in bb.iter().enumerate() {
            // SAFETY: `y` is a `[f32; 16]`: the 16-lane unaligned load reads
            // exactly it.
            let bv = unsafe { _mm512_loadu_ps(y.as_ptr()) };
            for (acc_t, a_t) in acc.iter_mut().zip(&a) {
                let x = &a_t[blk * KB + k];
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
