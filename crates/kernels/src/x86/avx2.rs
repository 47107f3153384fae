//! AVX2 (+ F16C) kernels: same signatures and bit-identical results as
//! [`crate::scalar`].
//!
//! Integer tricks (all exact):
//! - signed x signed bytes: `maddubs(abs(w), sign(a, w))` = `w * a` per
//!   byte pair; with `|a| <= 127` and `|w| <= 128` a pair sum is at most
//!   `2 * 128 * 127 = 32512`, so the i16 saturation of `maddubs` never
//!   triggers (activations are always in -127..=127).
//! - unsigned weights (k-quant nibbles 0..=31, Q6_K 0..=63, Q5_0 0..=31,
//!   Q4_0 / Q4_1 0..=15) go straight into `maddubs` (pair sums <=
//!   `2 * 63 * 127 = 16002`); the offsets (-8, -16, -32) are removed with
//!   the activation block sums.
//! - per-sub-block scales are applied with `madd_epi16` (products < 2^23).

use core::arch::x86_64::*;

use super::{
    add_scaled, add_scaled_mins, bcast16_mask, d_dmin8, fold256, fp16_at8, fp16x8_rows,
    fp16x8x2_rows, hsum8x4, i8x8, iq4_levels, iq4_table, iq4_xs_scales_at, k4_scale_bytes,
    k4_scales, load128, load256, opaque128, pair16_mask, q3_k_values, q4_1_contrib, q4_k_values,
    q5_0_values, q5_1_values, q5_k_values, q6_k_values, q6_k_values_h, reduce8, two_bit_values,
    with_rows, Rows, Slots,
};
use crate::act::{ActQ8_0, BlockQ8K, Cq4Act};
use crate::blocks::{iq4_nl, iq4_xs, q2_k, q3_k, q4_0, q4_1, q4_k, q6_k, q8_0};
use crate::operands::RowGroup;
use crate::operands::{CbLut, PanelBlock, KG_PER_GROUP};

/// `sum_i w_i * a_i` of 32 signed bytes, as 8 i32 partial sums.
#[inline]
#[target_feature(enable = "avx2")]
fn dot_i8(w: __m256i, a: __m256i) -> __m256i {
    let p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(a, w));
    _mm256_madd_epi16(p, _mm256_set1_epi16(1))
}

/// Shared Q8_0 / IQ4_NL body (`NL`: the blocks are IQ4_NL): 32 signed
/// weights per block (Q8_0's quants, or IQ4_NL's levels looked up with
/// `pshufb`), `S = sum w a` with [`dot_i8`] (|w| <= 128), folded to 4
/// lanes per row and summed across the 8 rows with one `hadd` tree. `H`:
/// Q8_0 in 128-bit halves ([`super::halves`]).
///
/// # Safety
/// AVX2 + F16C; the current and later blocks of every slot as [`Rows`]
/// promises for `act.len()` blocks.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn signed32_rows<const NL: bool, const H: bool, R: Rows>(
    mut s: R,
    act: &[ActQ8_0],
    out: &mut [f32; 8],
) {
    let (qs, d_off) = if NL {
        (iq4_nl::QS, iq4_nl::D)
    } else {
        (q8_0::QS, q8_0::D)
    };
    let table = iq4_table();
    let ones = _mm_set1_epi16(1);
    let dot128 = |w: __m128i, a: __m128i| {
        _mm_madd_epi16(
            _mm_maddubs_epi16(_mm_abs_epi8(w), _mm_sign_epi8(a, w)),
            ones,
        )
    };
    let mut acc = _mm256_setzero_ps();
    for a in act {
        // SAFETY: `a.qs` is 32 bytes; by the RowGroup invariant the current
        // block of every slot is in bounds (Q8_0: 34 bytes, qs 32 at 2;
        // IQ4_NL: 18 bytes, qs 16 at 2).
        let (isum, d) = unsafe {
            let av = load256(a.qs.as_ptr().cast());
            let mut x = [_mm_setzero_si128(); 8];
            for (r, xr) in x.iter_mut().enumerate() {
                let p = s.at(r).add(qs);
                *xr = if NL {
                    fold256(dot_i8(iq4_levels(p, table), av))
                } else if H {
                    opaque128(_mm_add_epi32(
                        dot128(load128(p), _mm256_castsi256_si128(av)),
                        dot128(load128(p.add(16)), load128(a.qs.as_ptr().add(16).cast())),
                    ))
                } else {
                    fold256(dot_i8(load256(p), av))
                };
            }
            (hsum8x4(&x), fp16x8_rows(&s, d_off))
        };
        acc = add_scaled(acc, isum, d, a.d);
        s.prefetch();
        s.advance();
    }
    // SAFETY: `out` is 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// Q8_0 / IQ4_NL group kernel body: [`signed32_rows`] with the group's
/// addressing.
///
/// # Safety
/// AVX2 + F16C.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn signed32_group<const NL: bool, const H: bool>(
    g: &RowGroup<'_>,
    act: &[ActQ8_0],
    out: &mut [f32; 8],
) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let act = &act[..g.nblocks()];
    if NL {
        // SAFETY: the RowGroup invariant covers every block of every slot.
        with_rows!(g, iq4_nl::BYTES, |s| unsafe {
            signed32_rows::<NL, H, _>(s, act, out)
        })
    } else {
        // SAFETY: as above.
        with_rows!(g, q8_0::BYTES, |s| unsafe {
            signed32_rows::<NL, H, _>(s, act, out)
        })
    }
}

/// Q8_0 x Q8_0 group kernel.
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn q8_0_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    // SAFETY: same features.
    unsafe { signed32_group::<false, false>(g, act, out) }
}

/// [`q8_0_group`] in 128-bit halves ([`super::halves`]).
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn q8_0_group_h(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    // SAFETY: same features.
    unsafe { signed32_group::<false, true>(g, act, out) }
}

/// IQ4_NL x Q8_0 group kernel.
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn iq4_nl_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    // SAFETY: same features.
    unsafe { signed32_group::<true, false>(g, act, out) }
}

/// IQ4_XS x Q8_K group kernel: per sub-block `j` of 32, the levels
/// (`pshufb`) times the activations as signed x signed `maddubs` pairs,
/// `madd` with the broadcast scale `ls_j - 32` (products < 2^21).
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn iq4_xs_group(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let table = iq4_table();
    let mut s = Slots::new(g);
    let mut acc = _mm256_setzero_ps();
    for a in &act[..g.nblocks()] {
        // SAFETY: `a.qs` is 256 bytes; by the RowGroup invariant the current
        // 136-byte block of every slot is in bounds (header 8 bytes, qs 128
        // at 8).
        let (sv, d) = unsafe {
            let mut sv = [_mm256_setzero_si256(); 8];
            for (r, svr) in sv.iter_mut().enumerate() {
                let p = s.at(r);
                let sc = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(i8x8(iq4_xs_scales_at(p))));
                let mut t = _mm256_setzero_si256();
                for j in 0..8 {
                    let w = iq4_levels(p.add(iq4_xs::QS + 16 * j), table);
                    let aj = load256(a.qs.as_ptr().add(32 * j).cast());
                    let pj = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(aj, w));
                    let scj = _mm256_shuffle_epi8(sc, bcast16_mask(j));
                    t = _mm256_add_epi32(t, _mm256_madd_epi16(pj, scj));
                }
                *svr = t;
            }
            (reduce8(&sv), fp16_at8(&s, iq4_xs::D))
        };
        acc = add_scaled(acc, sv, d, a.d);
        s.prefetch();
        s.advance();
    }
    // SAFETY: `out` is 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// `sum_i v_i a_i` of 8 rows of Q4_0 / Q4_1 blocks (nibbles at `qs` of
/// each slot's block), one i32 lane per row.
///
/// All in 128-bit halves, with no multiply for the reduction: per row the
/// low nibbles (weights 0..16) and the high ones (16..32) go through
/// `maddubs` against the matching 16 activations, and the two i16 results
/// are added; an i16 `hadd` tree over the 8 rows then keeps adding
/// neighbours, and only the last level widens (`madd` by 1). Bounds, with
/// `v <= 15`, `|a| <= 127`: a `maddubs` pair `<= 3810`, the row sum of two
/// `<= 7620`, after the two `hadd` levels `<= 30480 < 2^15`: no i16
/// overflow, so every sum is exact.
///
/// # Safety
/// AVX2; `qs + 16` bytes of every slot's current block must be readable.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn q4_raw8<R: Rows>(s: &R, qs: usize, a: &ActQ8_0) -> __m256i {
    let m4 = _mm_set1_epi8(0x0F);
    // SAFETY: `a.qs` is 32 bytes; the nibbles by the caller.
    unsafe {
        let a_lo = load128(a.qs.as_ptr().cast());
        let a_hi = load128(a.qs.as_ptr().add(16).cast());
        let mut x = [_mm_setzero_si128(); 8];
        for (r, xr) in x.iter_mut().enumerate() {
            let q = load128(s.at(r).add(qs));
            let lo = _mm_and_si128(q, m4);
            let hi = _mm_and_si128(_mm_srli_epi16::<4>(q), m4);
            *xr = _mm_add_epi16(_mm_maddubs_epi16(lo, a_lo), _mm_maddubs_epi16(hi, a_hi));
        }
        hsum8x8_i16(&x)
    }
}

/// Lane `r` = the sum of the 8 i16 lanes of `x[r]`, as i32, when every
/// sum of 4 adjacent lanes fits in i16 (the callers' bounds).
#[inline]
#[target_feature(enable = "avx2")]
fn hsum8x8_i16(x: &[__m128i; 8]) -> __m256i {
    let ones = _mm_set1_epi16(1);
    let h01 = _mm_hadd_epi16(x[0], x[1]);
    let h23 = _mm_hadd_epi16(x[2], x[3]);
    let h45 = _mm_hadd_epi16(x[4], x[5]);
    let h67 = _mm_hadd_epi16(x[6], x[7]);
    // [r0 r0 r1 r1 r2 r2 r3 r3] (i16), then pairs widened to i32.
    let lo = _mm_madd_epi16(_mm_hadd_epi16(h01, h23), ones);
    let hi = _mm_madd_epi16(_mm_hadd_epi16(h45, h67), ones);
    _mm256_set_m128i(opaque128(hi), opaque128(lo))
}

/// Q4_0 x Q8_0 body over any [`Rows`].
///
/// # Safety
/// AVX2 + F16C; every slot's blocks for `act.len()` steps in bounds.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn q4_0_rows<R: Rows>(mut s: R, act: &[ActQ8_0], out: &mut [f32; 8]) {
    let mut acc = _mm256_setzero_ps();
    for a in act {
        // SAFETY: by the RowGroup invariant the current 18-byte block of
        // every slot is in bounds (qs: 16 bytes at 2, d at 0).
        let (raw, d) = unsafe { (q4_raw8(&s, q4_0::QS, a), fp16x8_rows(&s, q4_0::D)) };
        // sum (v - 8) a = sum v a - 8 sum a.
        let isum = _mm256_sub_epi32(raw, _mm256_set1_epi32(8 * a.sum));
        acc = add_scaled(acc, isum, d, a.d);
        s.prefetch();
        s.advance();
    }
    // SAFETY: `out` is 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// Q4_0 x Q8_0 group kernel.
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn q4_0_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let act = &act[..g.nblocks()];
    // SAFETY: the RowGroup invariant covers every block of every slot.
    with_rows!(g, q4_0::BYTES, |s| unsafe { q4_0_rows(s, act, out) })
}

/// Q4_1 x Q8_0 body over any [`Rows`].
///
/// # Safety
/// AVX2 + F16C; every slot's blocks for `act.len()` steps in bounds.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn q4_1_rows<R: Rows>(mut s: R, act: &[ActQ8_0], out: &mut [f32; 8]) {
    let mut acc = _mm256_setzero_ps();
    for a in act {
        const _: () = assert!(q4_1::M == q4_1::D + 2);
        // SAFETY: by the RowGroup invariant the current 20-byte block of
        // every slot is in bounds (d, m at 0 and 2, qs: 16 bytes at 4).
        let (raw, (d, m)) = unsafe { (q4_raw8(&s, q4_1::QS, a), fp16x8x2_rows(&s, q4_1::D)) };
        acc = _mm256_add_ps(acc, q4_1_contrib(raw, d, m, a));
        s.prefetch();
        s.advance();
    }
    // SAFETY: `out` is 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// Q4_1 x Q8_0 group kernel.
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn q4_1_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let act = &act[..g.nblocks()];
    // SAFETY: the RowGroup invariant covers every block of every slot.
    with_rows!(g, q4_1::BYTES, |s| unsafe { q4_1_rows(s, act, out) })
}

/// Q5_0 x Q8_0 group kernel.
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn q5_0_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let mut s = Slots::new(g);
    let mut acc = _mm256_setzero_ps();
    let ones = _mm256_set1_epi16(1);
    for a in &act[..g.nblocks()] {
        // SAFETY: as in q8_0_group (22-byte blocks).
        let (raw, d) = unsafe {
            let av = load256(a.qs.as_ptr().cast());
            let mut v = [_mm256_setzero_si256(); 8];
            for (r, vr) in v.iter_mut().enumerate() {
                let w = q5_0_values(s.at(r));
                *vr = _mm256_madd_epi16(_mm256_maddubs_epi16(w, av), ones);
            }
            (reduce8(&v), fp16_at8(&s, 0))
        };
        // sum (v - 16) a = sum v a - 16 sum a.
        let isum = _mm256_sub_epi32(raw, _mm256_set1_epi32(16 * a.sum));
        acc = add_scaled(acc, isum, d, a.d);
        s.prefetch();
        s.advance();
    }
    // SAFETY: `out` is 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// Q5_1 x Q8_0 group kernel.
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn q5_1_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let mut s = Slots::new(g);
    let mut acc = _mm256_setzero_ps();
    let ones = _mm256_set1_epi16(1);
    for a in &act[..g.nblocks()] {
        // SAFETY: `a.qs` is 32 bytes; by the RowGroup invariant the current
        // 24-byte block of every slot is in bounds (d, m at 0 and 2).
        let (raw, (d, m)) = unsafe {
            let av = load256(a.qs.as_ptr().cast());
            let mut v = [_mm256_setzero_si256(); 8];
            for (r, vr) in v.iter_mut().enumerate() {
                *vr = _mm256_madd_epi16(_mm256_maddubs_epi16(q5_1_values(s.at(r)), av), ones);
            }
            (reduce8(&v), d_dmin8(&s))
        };
        acc = _mm256_add_ps(acc, q4_1_contrib(raw, d, m, a));
        s.prefetch();
        s.advance();
    }
    // SAFETY: `out` is 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// Shared Q4_K / Q5_K body (`Q5`: the blocks are Q5_K).
///
/// # Safety
/// AVX2 + F16C.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn k4_group<const Q5: bool>(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let mut s = Slots::new(g);
    let mut acc = _mm256_setzero_ps();
    for a in &act[..g.nblocks()] {
        // SAFETY: `a.qs` is 256 bytes and `a.bsums` 32 bytes; by the RowGroup
        // invariant the current block of every slot is in bounds.
        let (sv, mv, d, dmin) = unsafe {
            let bsums = load256(a.bsums.as_ptr().cast());
            let mut sv = [_mm256_setzero_si256(); 8];
            let mut mv = [_mm256_setzero_si256(); 8];
            for r in 0..8 {
                let p = s.at(r);
                let (sc, mins) = k4_scales(p);
                let v = if Q5 { q5_k_values(p) } else { q4_k_values(p) };
                let mut t = _mm256_setzero_si256();
                for (j, vj) in v.iter().enumerate() {
                    let aj = load256(a.qs.as_ptr().add(32 * j).cast());
                    let pj = _mm256_maddubs_epi16(*vj, aj);
                    let scj = _mm256_shuffle_epi8(sc, bcast16_mask(j));
                    t = _mm256_add_epi32(t, _mm256_madd_epi16(pj, scj));
                }
                sv[r] = t;
                mv[r] = _mm256_madd_epi16(mins, bsums);
            }
            let (d, dmin) = d_dmin8(&s);
            (reduce8(&sv), reduce8(&mv), d, dmin)
        };
        acc = add_scaled_mins(acc, sv, mv, d, dmin, a.d);
        s.prefetch();
        s.advance();
    }
    // SAFETY: `out` is 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// Q5_K x Q8_K group kernel.
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn q5_k_group(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    // SAFETY: same features.
    unsafe { k4_group::<true>(g, act, out) }
}

/// Q4_K x Q8_K body over any [`Rows`] in 128-bit halves (for
/// [`super::halves`] CPUs; the others take [`q4_k_rows_wide`]). Per row
/// and sub-block `j` of 32: `maddubs` of the nibbles with the activations
/// (16 i16, each `<= 2 * 15 * 128 = 3840`), the two halves added (`<=
/// 7680`, no overflow), then one 128-bit `madd` with the broadcast scale
/// `sc_j`: half the multiplies of scaling the 256-bit products. `M` per row is
/// one `madd` of the 8 mins with the 8 activation pair sums `bsum_2j +
/// bsum_2j+1` (computed once per block, `|.| <= 4064`). Both are summed
/// across the rows with [`hsum8x4`].
///
/// # Safety
/// AVX2 + F16C; every slot's blocks for `act.len()` steps in bounds.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn q4_k_rows_h<R: Rows>(mut s: R, act: &[BlockQ8K], out: &mut [f32; 8]) {
    let m4x = _mm_set1_epi8(0x0F);
    let mut acc = _mm256_setzero_ps();
    for a in act {
        // SAFETY: `a.qs` is 256 bytes and `a.bsums` 32 bytes; by the RowGroup
        // invariant the current 144-byte block of every slot is in bounds
        // (header 16 bytes, qs 128 at 16).
        let (sv, mv, d, dmin) = unsafe {
            let aq = a.qs.as_ptr();
            let bp = _mm_hadd_epi16(
                load128(a.bsums.as_ptr().cast()),
                load128(a.bsums.as_ptr().add(8).cast()),
            );
            let mut sx = [_mm_setzero_si128(); 8];
            let mut mx = [_mm_setzero_si128(); 8];
            for r in 0..8 {
                let p = s.at(r);
                let (sc, mins) = k4_scales_mins(p);
                mx[r] = _mm_madd_epi16(mins, bp);
                // f[j]: sub-block j's 16 maddubs pair sums folded to 8 i16.
                let mut f = [_mm_setzero_si128(); 8];
                for c in 0..4 {
                    let (qs, a0) = (p.add(q4_k::QS + 32 * c), aq.add(64 * c));
                    // The two 16-byte halves of the 32 bytes separately.
                    let (q0, q1) = (load128(qs), load128(qs.add(16)));
                    let lo = |q: __m128i| _mm_and_si128(q, m4x);
                    let hi = |q: __m128i| _mm_and_si128(_mm_srli_epi16::<4>(q), m4x);
                    let dot =
                        |v: __m128i, o: usize| _mm_maddubs_epi16(v, load128(a0.add(o).cast()));
                    f[2 * c] = _mm_add_epi16(dot(lo(q0), 0), dot(lo(q1), 16));
                    f[2 * c + 1] = _mm_add_epi16(dot(hi(q0), 32), dot(hi(q1), 48));
                }
                // Two hadd levels: [f0 f0 f1 f1 f2 f2 f3 f3] (|.| <= 4 * 7680),
                // then each pair times its scale: sc_j * dot_j summed.
                let h03 = _mm_hadd_epi16(_mm_hadd_epi16(f[0], f[1]), _mm_hadd_epi16(f[2], f[3]));
                let h47 = _mm_hadd_epi16(_mm_hadd_epi16(f[4], f[5]), _mm_hadd_epi16(f[6], f[7]));
                let t = _mm_add_epi32(
                    _mm_madd_epi16(h03, _mm_unpacklo_epi16(sc, sc)),
                    _mm_madd_epi16(h47, _mm_unpackhi_epi16(sc, sc)),
                );
                sx[r] = opaque128(t);
            }
            const _: () = assert!(q4_k::DMIN == q4_k::D + 2);
            let (d, dmin) = fp16x8x2_rows(&s, q4_k::D);
            (hsum8x4(&sx), hsum8x4(&mx), d, dmin)
        };
        acc = add_scaled_mins(acc, sv, mv, d, dmin, a.d);
        s.prefetch();
        s.advance();
    }
    // SAFETY: `out` is 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// Q4_K x Q8_K in 256-bit vectors (the non-[`super::halves`] body of
/// [`q4_k_rows_h`]). Per row and sub-block `j` of 32: `maddubs` of the
/// nibbles with the activations (16 i16, each `<= 2 * 15 * 128 = 3840`),
/// then `madd` with `sc_j` in every i16 lane (8 i32, each `<= 2 * 3840 *
/// 63`), the 8 sub-blocks' vectors added (`<= 3.9e6`). The broadcast
/// scales come from memory (`vpbroadcastd` from a stack copy is a load,
/// where a register broadcast or `pshufb` is a shuffle: the shuffle port
/// is what bounded the `hadd` form of this kernel on Intel cores). The
/// rows' sums are reduced with [`reduce8`]; the mins as in [`q4_k_rows_h`].
/// The same integers, so the same bits.
///
/// # Safety
/// AVX2 + F16C; every slot's blocks for `act.len()` steps in bounds.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn q4_k_rows_wide<R: Rows>(mut s: R, act: &[BlockQ8K], out: &mut [f32; 8]) {
    let m4 = _mm256_set1_epi8(0x0F);
    let mut acc = _mm256_setzero_ps();
    // Row r's scale j as `sc | sc << 16` at `pairs[8r + j]`.
    let mut pairs = Pairs([0; 64]);
    for a in act {
        // SAFETY: `a.qs` is 256 bytes and `a.bsums` 32 bytes; by the RowGroup
        // invariant the current 144-byte block of every slot is in bounds
        // (header 16 bytes, qs 128 at 16); `pairs` is 64 u32, 32-aligned.
        let (sv, mv, d, dmin) = unsafe {
            let aq = a.qs.as_ptr();
            let bp = _mm_hadd_epi16(
                load128(a.bsums.as_ptr().cast()),
                load128(a.bsums.as_ptr().add(8).cast()),
            );
            let mut mx = [_mm_setzero_si128(); 8];
            for (r, m) in mx.iter_mut().enumerate() {
                let b = k4_scale_bytes(s.at(r));
                let w = _mm256_cvtepu8_epi32(b);
                let w = _mm256_or_si256(w, _mm256_slli_epi32::<16>(w));
                _mm256_store_si256(pairs.0.as_mut_ptr().add(8 * r).cast(), w);
                *m = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128::<8>(b)), bp);
            }
            // The compiler must not forward the stores above into the
            // loads below as shuffles (that is the point of the copy).
            let pp = std::hint::black_box(pairs.0.as_ptr());
            let mut sx = [_mm256_setzero_si256(); 8];
            for (r, sxr) in sx.iter_mut().enumerate() {
                let p = s.at(r);
                let sc = |j: usize| _mm256_set1_epi32(*pp.add(8 * r + j) as i32);
                let mut t = _mm256_setzero_si256();
                for c in 0..4 {
                    let q = load256(p.add(q4_k::QS + 32 * c));
                    let lo = _mm256_and_si256(q, m4);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                    let a0 = aq.add(64 * c).cast::<u8>();
                    let pl = _mm256_maddubs_epi16(lo, load256(a0));
                    let ph = _mm256_maddubs_epi16(hi, load256(a0.add(32)));
                    t = _mm256_add_epi32(t, _mm256_madd_epi16(pl, sc(2 * c)));
                    t = _mm256_add_epi32(t, _mm256_madd_epi16(ph, sc(2 * c + 1)));
                }
                *sxr = t;
            }
            const _: () = assert!(q4_k::DMIN == q4_k::D + 2);
            let (d, dmin) = fp16x8x2_rows(&s, q4_k::D);
            (reduce8(&sx), hsum8x4(&mx), d, dmin)
        };
        acc = add_scaled_mins(acc, sv, mv, d, dmin, a.d);
        s.prefetch();
        s.advance();
    }
    // SAFETY: `out` is 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// 64 u32, aligned for 256-bit stores.
#[repr(C, align(32))]
struct Pairs([u32; 64]);

/// Q4_K x Q8_K group kernel.
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn q4_k_group(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let act = &act[..g.nblocks()];
    // SAFETY: the RowGroup invariant covers every block of every slot.
    with_rows!(g, q4_k::BYTES, |s| unsafe { q4_k_rows_wide(s, act, out) })
}

/// [`q4_k_group`] in 128-bit halves ([`super::halves`]).
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn q4_k_group_h(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let act = &act[..g.nblocks()];
    // SAFETY: the RowGroup invariant covers every block of every slot.
    with_rows!(g, q4_k::BYTES, |s| unsafe { q4_k_rows_h(s, act, out) })
}

/// Q4_K / Q5_K scales and mins of the block at `p`: 8 i16 each.
///
/// # Safety
/// `p..p + 16` must be readable (the block header: d, dmin, scales).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn k4_scales_mins(p: *const u8) -> (__m128i, __m128i) {
    // SAFETY: as the caller guarantees.
    let r = unsafe { k4_scale_bytes(p) };
    (
        _mm_cvtepu8_epi16(r),
        _mm_cvtepu8_epi16(_mm_srli_si128::<8>(r)),
    )
}

/// Q6_K x Q8_K body over any [`Rows`]: per block step, each slot's
/// `sum_j sc_j sum_i (v_i - 32) a_i` in 256-bit vectors, or in 128-bit
/// halves ([`q6_k_row_h`]) when `H` ([`super::halves`]), then one fp16
/// scale per slot. The `-32` offset is removed with `32 * sum_j sc_j
/// bsum_j`.
///
/// # Safety
/// AVX2 + F16C; every slot's blocks for `act.len()` steps in bounds.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn q6_k_rows<const H: bool, R: Rows>(mut s: R, act: &[BlockQ8K], out: &mut [f32; 8]) {
    // pshufb masks (per 128-bit lane, over 8 i16 scales of one half h):
    // pair tp spreads [sc_4tp x4, sc_4tp+2 x4 | sc_4tp+1 x4, sc_4tp+3 x4].
    let spread = |tp: i16| {
        let e = |j: i16| ((2 * j + 1) << 8) | (2 * j);
        let (a, b, c, d) = (e(4 * tp), e(4 * tp + 2), e(4 * tp + 1), e(4 * tp + 3));
        _mm256_setr_epi16(a, a, a, a, b, b, b, b, c, c, c, c, d, d, d, d)
    };
    let masks = [spread(0), spread(1)];
    // Halves: run t of a half h spreads [sc_2t x4, sc_2t+1 x4].
    let spread_h = |t: i16| {
        let e = |j: i16| ((2 * j + 1) << 8) | (2 * j);
        let (a, b) = (e(2 * t), e(2 * t + 1));
        _mm_setr_epi16(a, a, a, a, b, b, b, b)
    };
    let masks_h = [spread_h(0), spread_h(1), spread_h(2), spread_h(3)];
    let mut acc = _mm256_setzero_ps();
    for a in act {
        // SAFETY: activation arrays are 256 / 32 bytes; the current 210-byte
        // block of every slot is in bounds (RowGroup invariant).
        let (sv, d) = unsafe {
            let aq = a.qs.as_ptr().cast::<u8>();
            let bs = a.bsums.as_ptr().cast::<u8>();
            let bsums = load256(bs);
            let bsums_h = [load128(bs), load128(bs.add(16))];
            let mut sx = [_mm_setzero_si128(); 8];
            for (r, sxr) in sx.iter_mut().enumerate() {
                let p = s.at(r);
                if H {
                    *sxr = q6_k_row_h(p, aq, bsums_h, &masks_h);
                    continue;
                }
                // Runs v[4h + t] ([`q6_k_values`]) hold two sub-blocks of 16
                // (their 128-bit halves, scales 8h + 2t and 8h + 2t + 1).
                // Two runs' `maddubs` results (i16 pairs, each <= 2 * 63 *
                // 127 = 16002) are combined by one `hadd` (<= 32004, no
                // overflow: each sum stays inside its sub-block), and one
                // `madd` with the four sub-blocks' scales spread to match
                // applies them: half the multiplies of scaling each product
                // vector.
                let sc8 = load128(p.add(q6_k::SCALES));
                let sc_h = [
                    _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8)),
                    _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128::<8>(sc8))),
                ];
                let v = q6_k_values(p);
                // sum sc_j (v - 32) a = sum sc_j v a - 32 sum sc_j bsum_j.
                let mut t =
                    _mm256_slli_epi32::<5>(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), bsums));
                t = _mm256_sub_epi32(_mm256_setzero_si256(), t);
                for (h, sch) in sc_h.iter().enumerate() {
                    for (tp, mask) in masks.iter().enumerate() {
                        let i = 4 * h + 2 * tp;
                        let pa = _mm256_maddubs_epi16(v[i], load256(aq.add(32 * i)));
                        let pb = _mm256_maddubs_epi16(v[i + 1], load256(aq.add(32 * i + 32)));
                        let sc = _mm256_shuffle_epi8(*sch, *mask);
                        t = _mm256_add_epi32(t, _mm256_madd_epi16(_mm256_hadd_epi16(pa, pb), sc));
                    }
                }
                *sxr = fold256(t);
            }
            (hsum8x4(&sx), fp16x8_rows(&s, q6_k::D))
        };
        acc = add_scaled(acc, sv, d, a.d);
        s.prefetch();
        s.advance();
    }
    // SAFETY: `out` is 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// One row's sums of [`q6_k_rows`] in 128-bit halves, as 4 i32 lanes to be
/// summed: each run's two sub-blocks are its two 16-byte halves
/// ([`q6_k_values_h`]), `maddubs`-ed apart (pairs <= 16002) and joined by
/// one `hadd` (<= 32004), then one `madd` with `[sc x4, sc' x4]` (`masks`).
/// `bsums` = the 16 activation sub-block sums as 2 x 8 i16.
///
/// # Safety
/// AVX2; `p..p + 210` and the 256 activation bytes at `aq` readable.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn q6_k_row_h(
    p: *const u8,
    aq: *const u8,
    bsums: [__m128i; 2],
    masks: &[__m128i; 4],
) -> __m128i {
    // SAFETY: as the caller guarantees (scales 16 bytes at SCALES).
    let sc8 = unsafe { load128(p.add(q6_k::SCALES)) };
    let sc = [
        _mm_cvtepi8_epi16(sc8),
        _mm_cvtepi8_epi16(_mm_srli_si128::<8>(sc8)),
    ];
    let off = _mm_add_epi32(
        _mm_madd_epi16(sc[0], bsums[0]),
        _mm_madd_epi16(sc[1], bsums[1]),
    );
    let mut t = _mm_sub_epi32(_mm_setzero_si128(), _mm_slli_epi32::<5>(off));
    for (h, sch) in sc.iter().enumerate() {
        // pd[half][t]: run 4h + t's half `half` (sub-block 8h + 2t + half).
        // Plain loops, not `array::from_fn`: with its closures this kernel
        // measured at half the speed.
        let mut pd = [[_mm_setzero_si128(); 4]; 2];
        for (half, pdh) in pd.iter_mut().enumerate() {
            // SAFETY: as the caller guarantees.
            let v = unsafe { q6_k_values_h(p, h, half) };
            for (tt, (vt, o)) in v.iter().zip(pdh.iter_mut()).enumerate() {
                // SAFETY: run 4h + tt < 8, half < 2: inside the 256 bytes.
                let a = unsafe { load128(aq.add(32 * (4 * h + tt) + 16 * half)) };
                *o = _mm_maddubs_epi16(*vt, a);
            }
        }
        for (tt, mask) in masks.iter().enumerate() {
            let hs = _mm_hadd_epi16(pd[0][tt], pd[1][tt]);
            t = _mm_add_epi32(t, _mm_madd_epi16(hs, _mm_shuffle_epi8(*sch, *mask)));
        }
    }
    opaque128(t)
}

/// Q6_K x Q8_K group kernel.
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn q6_k_group(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let act = &act[..g.nblocks()];
    // SAFETY: the RowGroup invariant covers every block of every slot.
    with_rows!(g, q6_k::BYTES, |s| unsafe {
        q6_k_rows::<false, _>(s, act, out)
    })
}

/// [`q6_k_group`] in 128-bit halves ([`super::halves`]).
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn q6_k_group_h(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let act = &act[..g.nblocks()];
    // SAFETY: the RowGroup invariant covers every block of every slot.
    with_rows!(g, q6_k::BYTES, |s| unsafe {
        q6_k_rows::<true, _>(s, act, out)
    })
}

/// Shared Q2_K / Q3_K body (`Q3`: the blocks are Q3_K): 16 sub-blocks of
/// 16 with i16 scales, arranged as Q6_K's (`pair16_mask`). The unsigned
/// values (Q2_K 0..=3, Q3_K `v + 4` in 0..=7) go straight into `maddubs`;
/// Q2_K's mins are `madd(mins, bsums)`, Q3_K's offset is removed as `4 *
/// sum_j sc_j bsum_j`.
///
/// # Safety
/// AVX2 + F16C.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn k16_group<const Q3: bool>(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let mut s = Slots::new(g);
    let mut acc = _mm256_setzero_ps();
    let m4 = _mm_set1_epi8(0x0F);
    for a in &act[..g.nblocks()] {
        // SAFETY: `a.qs` is 256 bytes and `a.bsums` 32 bytes; the current
        // block of every slot is in bounds (RowGroup invariant): Q2_K 84
        // bytes (scales 16 at 0, qs 64 at 16), Q3_K 110 bytes (hmask 32 at
        // 0, qs 64 at 32, scales 12 at 96).
        let (sv, mv, d, dmin) = unsafe {
            let bsums = load256(a.bsums.as_ptr().cast());
            let mut sv = [_mm256_setzero_si256(); 8];
            let mut mv = [_mm256_setzero_si256(); 8];
            for r in 0..8 {
                let p = s.at(r);
                let (sc8, v) = if Q3 {
                    let sc = crate::blocks::q3_k_scales(&*p.add(q3_k::SCALES).cast::<[u8; 12]>());
                    (load128(sc.as_ptr().cast()), q3_k_values(p))
                } else {
                    let b = load128(p.add(q2_k::SCALES));
                    let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(b), m4));
                    mv[r] = _mm256_madd_epi16(mins, bsums);
                    (_mm_and_si128(b, m4), two_bit_values(p.add(q2_k::QS)))
                };
                let sc_h = [
                    _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8)),
                    _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128::<8>(sc8))),
                ];
                let mut t = _mm256_setzero_si256();
                for (i, vi) in v.iter().enumerate() {
                    let ai = load256(a.qs.as_ptr().add(32 * i).cast());
                    let pi = _mm256_maddubs_epi16(*vi, ai);
                    let sci = _mm256_shuffle_epi8(sc_h[i / 4], pair16_mask(i % 4));
                    t = _mm256_add_epi32(t, _mm256_madd_epi16(pi, sci));
                }
                sv[r] = if Q3 {
                    // sum sc_j v a = sum sc_j (v + 4) a - 4 sum sc_j bsum_j.
                    let bias = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), bsums);
                    _mm256_sub_epi32(t, _mm256_slli_epi32::<2>(bias))
                } else {
                    t
                };
            }
            if Q3 {
                let d = fp16_at8(&s, q3_k::D);
                (reduce8(&sv), reduce8(&mv), d, d)
            } else {
                let (d, dmin) = (fp16_at8(&s, q2_k::D), fp16_at8(&s, q2_k::DMIN));
                (reduce8(&sv), reduce8(&mv), d, dmin)
            }
        };
        let da = _mm256_set1_ps(a.d);
        let c = _mm256_mul_ps(_mm256_cvtepi32_ps(sv), _mm256_mul_ps(d, da));
        let c = if Q3 {
            c
        } else {
            _mm256_sub_ps(
                c,
                _mm256_mul_ps(_mm256_cvtepi32_ps(mv), _mm256_mul_ps(dmin, da)),
            )
        };
        acc = _mm256_add_ps(acc, c);
        s.prefetch();
        s.advance();
    }
    // SAFETY: `out` is 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

forward_pair!(
    "avx2,f16c",
    BlockQ8K,
    k16_group,
    /// Q2_K x Q8_K group kernel.
    q2_k_group,
    /// Q3_K x Q8_K group kernel.
    q3_k_group
);

/// CQ4 super-block kernel (64 channels).
///
/// Per kg-block (128 bytes = 64 channels x 4 columns), each 32-byte vector
/// holds 16 channels; nibbles are split, looked up in `cb_i8` (`pshufb`),
/// and re-interleaved so that each i32 lane holds one channel's 4 weights;
/// `dot_i8` against the broadcast 4 activations gives that channel's
/// partial sum. The unpack leaves channels in the order
/// `{0-3, 8-11}`, `{4-7, 12-15}` per 16; two `permute2x128` restore it
/// once per group.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn cq4_superblock(
    b: &PanelBlock<'_>,
    act: &Cq4Act<'_>,
    lut: &CbLut,
    out: &mut [f32; 64],
) {
    let ng = b.groups();
    assert!(
        act.q.len() >= ng * 128 && act.scale.len() >= ng,
        "activations"
    );
    let m4 = _mm256_set1_epi8(0x0F);
    // SAFETY: cb_i8 is 16 bytes.
    let table = _mm256_broadcastsi128_si256(unsafe { load128(lut.cb_i8().as_ptr().cast()) });
    let panels = b.panels().as_ptr();
    let folded = b.folded_bytes().as_ptr();
    let q = act.q.as_ptr().cast::<u8>();
    let mut accf = [_mm256_setzero_ps(); 8];
    for g in 0..ng {
        let mut acc = [_mm256_setzero_si256(); 8];
        for kg in 0..KG_PER_GROUP {
            // SAFETY: PanelBlock::new checked panels = ng * 32 * 128 bytes and
            // the assert above q >= ng * 128 bytes: kg-block (g, kg) and its 4
            // activations are in bounds.
            unsafe {
                let qd = _mm256_set1_epi32(super::read_u32(q.add(g * 128 + kg * 4)) as i32);
                let blk = panels.add((g * KG_PER_GROUP + kg) * 128);
                // A hint only: never faults, even past the end of the data.
                let ahead = blk.wrapping_add(super::CQ4_PREFETCH_BYTES);
                _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64).cast());
                for h in 0..4 {
                    let bytes = load256(blk.add(32 * h));
                    let lo = _mm256_shuffle_epi8(table, _mm256_and_si256(bytes, m4));
                    let hi = _mm256_shuffle_epi8(
                        table,
                        _mm256_and_si256(_mm256_srli_epi16::<4>(bytes), m4),
                    );
                    let w0 = _mm256_unpacklo_epi8(lo, hi);
                    let w1 = _mm256_unpackhi_epi8(lo, hi);
                    acc[2 * h] = _mm256_add_epi32(acc[2 * h], dot_i8(w0, qd));
                    acc[2 * h + 1] = _mm256_add_epi32(acc[2 * h + 1], dot_i8(w1, qd));
                }
            }
        }
        let sc = _mm256_set1_ps(act.scale[g]);
        for h in 0..4 {
            let first = _mm256_permute2x128_si256::<0x20>(acc[2 * h], acc[2 * h + 1]);
            let second = _mm256_permute2x128_si256::<0x31>(acc[2 * h], acc[2 * h + 1]);
            for (i, v) in [(2 * h, first), (2 * h + 1, second)] {
                // SAFETY: folded holds ng * 64 f32; channels 8i..8i+8 of group g.
                let f = unsafe { _mm256_loadu_ps(folded.add((g * 64 + 8 * i) * 4).cast()) };
                accf[i] = _mm256_add_ps(
                    accf[i],
                    _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(v), sc), f),
                );
            }
        }
    }
    for (i, a) in accf.iter().enumerate() {
        // SAFETY: `out` is 64 f32; 8i + 8 <= 64.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(8 * i), *a) };
    }
}

/// The orthogonal activation transform ([`crate::scalar::orthogonal_rotate`]),
/// 8 columns per vector, R widened with F16C; four `k` per pass over `z`
/// (each `z_j` still receives its products in `k` order).
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn orthogonal_rotate(x: &[f32], recip: &[f32], r: &[u8], z: &mut [f32]) {
    let kp = x.len();
    assert!(
        recip.len() == kp && z.len() == kp && r.len() == 2 * kp * kp && kp.is_multiple_of(8),
        "shapes"
    );
    z.fill(0.0);
    let zp = z.as_mut_ptr();
    let rp = r.as_ptr();
    let mut k = 0;
    while k < kp {
        let nk = 4.min(kp - k);
        let mut a = [_mm256_setzero_ps(); 4];
        for (t, at) in a.iter_mut().enumerate().take(nk) {
            *at = _mm256_set1_ps(x[k + t] * recip[k + t]);
        }
        for j in (0..kp).step_by(8) {
            // SAFETY: j + 8 <= kp (kp % 8 == 0); rows k..k+nk of R hold
            // 2 * kp bytes each inside `r` (length checked above).
            unsafe {
                let mut acc = _mm256_loadu_ps(zp.add(j));
                for (t, at) in a.iter().enumerate().take(nk) {
                    let w = _mm256_cvtph_ps(load128(rp.add(2 * ((k + t) * kp + j))));
                    acc = _mm256_add_ps(acc, _mm256_mul_ps(*at, w));
                }
                _mm256_storeu_ps(zp.add(j), acc);
            }
        }
        k += nk;
    }
}
