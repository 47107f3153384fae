//! The filter tile on aarch64 Advanced SIMD: `MR` rows x `NR` = 16 columns
//! as 16 accumulators of 4 f32 lanes, one fused multiply-add (`fmla` by
//! lane) per product (one rounding per term, the arithmetic `E` is derived
//! for), each block of `KB` terms converted to f64 and added to the f64 sums.
#![allow(unsafe_code)]

use std::arch::aarch64::*;

use super::{APack, BRow, Tile, KB, MR, NR};

/// Safe entry: checks the CPU, then runs the kernel.
pub(super) fn tile(a: &[APack], b: &[BRow]) -> Tile {
    assert!(std::arch::is_aarch64_feature_detected!("neon"));
    // SAFETY: NEON was detected on this CPU just above.
    unsafe { tile_neon(a, b) }
}

#[target_feature(enable = "neon")]
fn tile_neon(a: &[APack], b: &[BRow]) -> Tile {
    let mut res = [[0.0f64; NR]; MR];
    for (ab, bb) in a.chunks_exact(KB).zip(b.chunks_exact(KB)) {
        let mut acc = [[vdupq_n_f32(0.0); NR / 4]; MR];
        for (x, y) in ab.iter().zip(bb) {
            // SAFETY: `x` is a `[f32; 4]` and `y` a `[f32; 16]`: every
            // 4-lane load reads inside them.
            let (av, bv) = unsafe {
                (
                    vld1q_f32(x.as_ptr()),
                    [
                        vld1q_f32(y.as_ptr()),
                        vld1q_f32(y.as_ptr().add(4)),
                        vld1q_f32(y.as_ptr().add(8)),
                        vld1q_f32(y.as_ptr().add(12)),
                    ],
                )
            };
            for q in 0..NR / 4 {
                acc[0][q] = vfmaq_laneq_f32::<0>(acc[0][q], bv[q], av);
                acc[1][q] = vfmaq_laneq_f32::<1>(acc[1][q], bv[q], av);
                acc[2][q] = vfmaq_laneq_f32::<2>(acc[2][q], bv[q], av);
                acc[3][q] = vfmaq_laneq_f32::<3>(acc[3][q], bv[q], av);
            }
        }
        for r in 0..MR {
            for q in 0..NR / 4 {
                let lo = vcvt_f64_f32(vget_low_f32(acc[r][q]));
                let hi = vcvt_high_f64_f32(acc[r][q]);
                let o = &mut res[r][4 * q..4 * q + 4];
                // SAFETY: `o` has 4 f64: both 2-lane loads and stores stay
                // inside it.
                unsafe {
                    let s0 = vaddq_f64(vld1q_f64(o.as_ptr()), lo);
                    let s1 = vaddq_f64(vld1q_f64(o.as_ptr().add(2)), hi);
                    vst1q_f64(o.as_mut_ptr(), s0);
                    vst1q_f64(o.as_mut_ptr().add(2), s1);
                }
            }
        }
    }
    res
}
