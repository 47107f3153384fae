//! The filter tile on x86-64 AVX-512F (+VL): `MR` rows x `NR` = 16 columns
//! as 4 accumulators of 16 f32 lanes per tile, run as grids of tiles x
//! panels (`grid`), one fused multiply-add per product (one
//! rounding per term, the arithmetic `E` is derived for), each block of
//! `KB` terms converted to f64 and added to the f64 sums.
#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::{APack, BRow, Buckets, Nibbles, Tile, KB, MR, NR, TABLE_BUCKETS, UNCERTAIN};

/// `T x P` tiles in one pass, `T` row tiles against `P` R panels:
/// `out[t][p]` is `tile(a[t], b[p])` bit for bit (each output's chain of
/// FMAs is the same; only more chains run side by side). Safe entry:
/// checks the CPU, then runs the kernel.
pub(super) fn grid<const T: usize, const P: usize>(
    a: [&[APack]; T],
    b: [&[BRow]; P],
) -> [[Tile; P]; T] {
    assert!(
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
    );
    // SAFETY: AVX-512F and AVX-512VL were detected on this CPU just above.
    unsafe { grid_avx512(a, b) }
}

/// `T` tiles (of `MR` rows) against `P` panels: `T * MR * P` independent
/// accumulator chains, per term `P` vector loads of R and `T * MR`
/// broadcasts of `uf`, each broadcast feeding `P` FMAs. The broadcasts are
/// loads (an FMA's memory operand), so the shape sets the loads per FMA:
/// 4 tiles x 1 panel (the kernel until session 20: 17 loads per 16 FMAs)
/// ran at 42 G multiply-adds/s per core on an Ice Lake Xeon, 2 tiles x 3
/// panels (24 chains, 11 loads per 24 FMAs, the shape of BLIS-like SGEMM
/// kernels) at 72, against the core's 77 (C models of both;
/// docs/BENCHMARKS.md, session 20). The rows of each panel are prefetched
/// into L1 [`super::PREFETCH_ROWS`] ahead (session 19: the hardware
/// prefetchers alone left the loop at ~70 % of its in-L1 rate). The caller
/// gives every `a[t]` and `b[p]` one length, a
/// multiple of `KB`.
///
/// AVX-512VL is enabled for the registers, not for an instruction: with
/// AVX-512F alone LLVM zeroes and copies vectors with VEX-encoded
/// instructions, which reach only registers 0 - 15, and the 24 chains
/// were spilled to the stack (the kernel ran at a quarter of its speed).
#[target_feature(enable = "avx512f,avx512vl")]
fn grid_avx512<const T: usize, const P: usize>(
    a: [&[APack]; T],
    b: [&[BRow]; P],
) -> [[Tile; P]; T] {
    // The f64 sums live in memory (`res`): they are touched once per
    // block, and as registers (48 of them) they crowded the chains out.
    let mut res = [[[[0.0f64; NR]; MR]; P]; T];
    let bblocks: [&[[BRow; KB]]; P] = b.map(|x| x.as_chunks::<KB>().0);
    let ablocks: [&[[APack; KB]]; T] = a.map(|x| x.as_chunks::<KB>().0);
    for blk in 0..ablocks[0].len() {
        let ab: [&[APack; KB]; T] = std::array::from_fn(|t| &ablocks[t][blk]);
        let bb: [&[BRow; KB]; P] = std::array::from_fn(|p| &bblocks[p][blk]);
        let mut acc = [[[_mm512_setzero_ps(); P]; MR]; T];
        for k in 0..KB {
            let mut bv = [_mm512_setzero_ps(); P];
            for p in 0..P {
                // The row PREFETCH_ROWS ahead into L1 (past the panel's
                // end: the next panel's start, which a later pass reads; a
                // prefetch of any address is harmless, so wrapping
                // arithmetic).
                _mm_prefetch::<_MM_HINT_T0>(
                    b[p].as_ptr()
                        .wrapping_add(blk * KB + k + super::PREFETCH_ROWS)
                        .cast(),
                );
                // SAFETY: `bb[p][k]` is a `[f32; 16]`: the 16-lane
                // unaligned load reads exactly it.
                bv[p] = unsafe { _mm512_loadu_ps(bb[p][k].as_ptr()) };
            }
            for (acc_t, a_t) in acc.iter_mut().zip(&ab) {
                let x = &a_t[k];
                for r in 0..MR {
                    let xv = _mm512_set1_ps(x[r]);
                    for p in 0..P {
                        acc_t[r][p] = _mm512_fmadd_ps(xv, bv[p], acc_t[r][p]);
                    }
                }
            }
        }
        for (res_t, acc_t) in res.iter_mut().zip(&acc) {
            for (res_p, p) in res_t.iter_mut().zip(0..P) {
                for r in 0..MR {
                    let v = acc_t[r][p];
                    let halves = [
                        _mm512_cvtps_pd(_mm512_castps512_ps256(v)),
                        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                            _mm512_castps_pd(v),
                        ))),
                    ];
                    for (q, h) in halves.into_iter().enumerate() {
                        let dst = res_p[r][8 * q..8 * q + 8].as_mut_ptr();
                        // SAFETY: `dst` is 8 f64 inside the `[f64; 16]`
                        // row (q < 2); unaligned load and store.
                        unsafe { _mm512_storeu_pd(dst, _mm512_add_pd(_mm512_loadu_pd(dst), h)) };
                    }
                }
            }
        }
    }
    res
}

/// [`Buckets::lookup`] of 16 estimates: the same f64 add, multiply and
/// range test per lane, the truncated buckets' entries gathered and packed
/// as [`Nibbles`]; and the mask of the [`UNCERTAIN`] ones. Safe entry: checks the CPU and the
/// table's length, then runs the kernel.
pub(super) fn lookup_row(t: Buckets<'_>, est: &[f64; NR]) -> (Nibbles, u32) {
    assert!(std::arch::is_x86_feature_detected!("avx512f"));
    assert!(t.table.len() >= TABLE_BUCKETS + 4);
    // SAFETY: AVX-512F was detected on this CPU just above; the table
    // length was checked for the gather.
    unsafe { lookup_row_avx512(t, est) }
}

/// # Safety
/// The CPU has AVX-512F; `t.table` has at least `TABLE_BUCKETS + 4` bytes.
#[target_feature(enable = "avx512f")]
unsafe fn lookup_row_avx512(t: Buckets<'_>, est: &[f64; NR]) -> (Nibbles, u32) {
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
    // Column 2i's nibble and column 2i + 1's shifted by 4, in the low byte
    // of 64-bit lane i, then the 8 low bytes.
    let e = _mm512_and_si512(entries, _mm512_set1_epi32(15));
    let pairs = _mm512_or_si512(e, _mm512_srli_epi64::<28>(e));
    let mut out: Nibbles = [0; NR / 2];
    // SAFETY: 8 bytes into the 8-byte array; unaligned store.
    unsafe { _mm_storel_epi64(out.as_mut_ptr().cast(), _mm512_cvtepi64_epi8(pairs)) };
    (out, u32::from(unsure))
}
