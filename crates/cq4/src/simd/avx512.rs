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
    unsafe { tile_avx512(a, b) }
}

#[target_feature(enable = "avx512f")]
fn tile_avx512(a: &[APack], b: &[BRow]) -> Tile {
    let mut out = [[_mm512_setzero_pd(); NR / 8]; MR];
    for (ab, bb) in a.chunks_exact(KB).zip(b.chunks_exact(KB)) {
        let mut acc = [_mm512_setzero_ps(); MR];
        for (x, y) in ab.iter().zip(bb) {
            // SAFETY: `y` is a `[f32; 16]`: the 16-lane unaligned load reads
            // exactly it.
            let bv = unsafe { _mm512_loadu_ps(y.as_ptr()) };
            for r in 0..MR {
                acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(x[r]), bv, acc[r]);
            }
        }
        for r in 0..MR {
            let v = acc[r];
            let lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
            let hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                _mm512_castps_pd(v),
            )));
            out[r][0] = _mm512_add_pd(out[r][0], lo);
            out[r][1] = _mm512_add_pd(out[r][1], hi);
        }
    }
    let mut res = [[0.0f64; NR]; MR];
    for r in 0..MR {
        for (q, v) in out[r].iter().enumerate() {
            // SAFETY: `res[r][8q .. 8q + 8]` is inside the `[f64; 16]` row
            // (q < 2); unaligned store.
            unsafe { _mm512_storeu_pd(res[r].as_mut_ptr().add(8 * q), *v) };
        }
    }
    res
}
