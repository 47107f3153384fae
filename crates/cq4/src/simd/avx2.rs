//! The filter tile on x86-64 AVX2 + FMA: `MR` rows x `NR` = 16 columns as
//! 8 accumulators of 8 f32 lanes, one fused multiply-add per product (one
//! rounding per term, the arithmetic `E` is derived for), each block of
//! `KB` terms converted to f64 and added to the f64 sums.
#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::{APack, BRow, Tile, KB, MR, NR};
use crate::hadamard_quant::{Batch, BatchIdx, HadamardQuant, LANES};

/// Safe entry: checks the CPU, then runs the kernel.
pub(super) fn tile(a: &[APack], b: &[BRow]) -> Tile {
    assert!(
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    );
    // SAFETY: AVX2 and FMA were detected on this CPU just above.
    unsafe { tile_avx2(a, b) }
}

#[target_feature(enable = "avx2,fma")]
fn tile_avx2(a: &[APack], b: &[BRow]) -> Tile {
    let mut out = [[_mm256_setzero_pd(); NR / 4]; MR];
    for (ab, bb) in a.chunks_exact(KB).zip(b.chunks_exact(KB)) {
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        for (x, y) in ab.iter().zip(bb) {
            // SAFETY: `y` is a `[f32; 16]`: both 8-lane unaligned loads read
            // inside it.
            let (b0, b1) = unsafe {
                (
                    _mm256_loadu_ps(y.as_ptr()),
                    _mm256_loadu_ps(y.as_ptr().add(8)),
                )
            };
            for r in 0..MR {
                let av = _mm256_set1_ps(x[r]);
                acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
            }
        }
        for r in 0..MR {
            for h in 0..2 {
                let v = acc[r][h];
                let lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
                let hi = _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v));
                out[r][2 * h] = _mm256_add_pd(out[r][2 * h], lo);
                out[r][2 * h + 1] = _mm256_add_pd(out[r][2 * h + 1], hi);
            }
        }
    }
    let mut res = [[0.0f64; NR]; MR];
    for r in 0..MR {
        for (q, v) in out[r].iter().enumerate() {
            // SAFETY: `res[r][4q .. 4q + 4]` is inside the `[f64; 16]` row
            // (q < 4); unaligned store.
            unsafe { _mm256_storeu_pd(res[r].as_mut_ptr().add(4 * q), *v) };
        }
    }
    res
}

/// The Hadamard batch quantizer compiled with AVX2 (the portable body,
/// 4 f64 lanes per register; no FMA, no reassociation: the same values).
pub(super) fn hadamard_batch(q: &HadamardQuant, x: &mut Batch, idx: &mut BatchIdx) -> [f64; LANES] {
    assert!(std::arch::is_x86_feature_detected!("avx2"));
    // SAFETY: AVX2 was detected on this CPU just above.
    unsafe { hadamard_batch_avx2(q, x, idx) }
}

#[target_feature(enable = "avx2")]
fn hadamard_batch_avx2(q: &HadamardQuant, x: &mut Batch, idx: &mut BatchIdx) -> [f64; LANES] {
    let norm = q.transform(x);
    let s = q.refine(x, idx);
    std::array::from_fn(|l| norm[l] * s[l])
}
