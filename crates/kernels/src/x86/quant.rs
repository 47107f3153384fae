//! AVX2 activation quantizers, byte-identical to the scalar ones in
//! [`crate::act`] (ggml's `quantize_row_q8_0_ref` and
//! `quantize_row_q8_K_ref`): every step is either exact (maxima, integer
//! sums, sign flips, `trunc`) or the very f32 operation the scalar code
//! performs on the same operands (one multiplication per value, the
//! per-block scalar divisions done in scalar code), so only the speed
//! differs. A GEMV quantizes its activations once per call, before the
//! rows are split over threads; with K = 8192 the scalar quantizer took
//! about 10% of a whole Q4_0 GEMV on the 2-core bench machine.

use core::arch::x86_64::*;

use crate::act::{ActQ8_0, BlockQ8K};

/// Lanes of `|v|` (the sign bit cleared; exact).
#[inline]
#[target_feature(enable = "avx2")]
fn abs_ps(v: __m256) -> __m256 {
    _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff)))
}

/// The largest lane of `v` (exact).
#[inline]
#[target_feature(enable = "avx2")]
fn hmax_ps(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_shuffle_ps::<0b01>(m, m));
    _mm_cvtss_f32(m)
}

/// `round(v)` with ties away from zero (Rust's `f32::round`, C's `roundf`),
/// exactly: `t = trunc(v)`, `v - t` is exact, and one step away from zero
/// when `|v - t| >= 0.5`.
#[inline]
#[target_feature(enable = "avx2")]
fn round_away_ps(v: __m256) -> __m256 {
    let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
    let f = abs_ps(_mm256_sub_ps(v, t));
    let away = _mm256_cmp_ps::<_CMP_GE_OQ>(f, _mm256_set1_ps(0.5));
    let one = _mm256_or_ps(_mm256_set1_ps(1.0), _mm256_and_ps(v, _mm256_set1_ps(-0.0)));
    _mm256_add_ps(t, _mm256_and_ps(away, one))
}

/// `v as i8 as i32` lane-wise: the low byte, sign-extended (what the
/// scalar code's `as i8` keeps of any i32).
#[inline]
#[target_feature(enable = "avx2")]
fn low_i8(v: __m256i) -> __m256i {
    _mm256_srai_epi32::<24>(_mm256_slli_epi32::<24>(v))
}

/// 32 i32 (`q[0..4]`, 8 each, all in -128..=127) as 32 bytes in order.
#[inline]
#[target_feature(enable = "avx2")]
fn pack_i8(q: &[__m256i; 4]) -> __m256i {
    // packs interleave 128-bit lanes: [q0 lo, q1 lo, q2 lo, q3 lo | q0 hi,
    // q1 hi, q2 hi, q3 hi] in 4-byte pieces; vpermd puts them in order.
    let w01 = _mm256_packs_epi32(q[0], q[1]);
    let w23 = _mm256_packs_epi32(q[2], q[3]);
    let b = _mm256_packs_epi16(w01, w23);
    _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

/// The sum of the 8 i32 lanes of `v`.
#[inline]
#[target_feature(enable = "avx2")]
fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01>(s));
    _mm_cvtsi128_si32(s)
}

/// The quants of one Q8_0 block (as [`crate::act::quantize_q8_0`]), and
/// the block's f32 scale `d = amax / 127` before its fp16 rounding, which
/// the caller does in scalar code. `x` holds 32 finite values.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn q8_0_block(x: &[f32; 32], out: &mut ActQ8_0) -> f32 {
    let p = x.as_ptr();
    // SAFETY: `x` is 32 f32.
    let v = unsafe {
        [
            _mm256_loadu_ps(p),
            _mm256_loadu_ps(p.add(8)),
            _mm256_loadu_ps(p.add(16)),
            _mm256_loadu_ps(p.add(24)),
        ]
    };
    let m = _mm256_max_ps(
        _mm256_max_ps(abs_ps(v[0]), abs_ps(v[1])),
        _mm256_max_ps(abs_ps(v[2]), abs_ps(v[3])),
    );
    // ggml: amax = MAX(amax, |x|) from 0, d = amax / 127, id = 1 / d (or 0).
    let amax = hmax_ps(m);
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let idv = _mm256_set1_ps(id);
    // cvttps2dq is the scalar `c_f32_to_i32` (truncation; NaN and out of
    // range give i32::MIN), then `as i8`.
    let q = v.map(|vi| low_i8(_mm256_cvttps_epi32(round_away_ps(_mm256_mul_ps(vi, idv)))));
    let sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    // SAFETY: `qs` is 32 bytes.
    unsafe { _mm256_storeu_si256(out.qs.as_mut_ptr().cast(), pack_i8(&q)) };
    out.sum = hsum_epi32(sum);
    d
}

/// One Q8_K block (as [`crate::act::quantize_q8_k`]); `x` holds 256
/// finite values.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn q8_k_block(x: &[f32; 256], out: &mut BlockQ8K) {
    let p = x.as_ptr();
    // SAFETY: `x` is 256 f32 (32 vectors of 8).
    let ld = |i: usize| unsafe { _mm256_loadu_ps(p.add(8 * i)) };
    let mut m = _mm256_setzero_ps();
    for i in 0..32 {
        m = _mm256_max_ps(m, abs_ps(ld(i)));
    }
    let amax = hmax_ps(m);
    if amax == 0.0 {
        *out = BlockQ8K::default();
        return;
    }
    // The first value of largest magnitude: its sign decides the scale's.
    let target = _mm256_set1_ps(amax);
    let mut max = 0.0f32;
    for i in 0..32 {
        let hit = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(abs_ps(ld(i)), target));
        if hit != 0 {
            max = x[8 * i + hit.trailing_zeros() as usize];
            break;
        }
    }
    let iscale = -127.0f32 / max;
    let isv = _mm256_set1_ps(iscale);
    let top = _mm256_set1_epi32(127);
    let magic = _mm256_set1_ps(12_582_912.0);
    let mant = _mm256_set1_epi32(0x007f_ffff);
    let ones = _mm256_set1_epi16(1);
    for c in 0..8 {
        // ggml's nearest_int literally (`v + 1.5 * 2^23`, the low 23 bits
        // minus 2^22: the same f32 addition, so the same bits even for
        // an infinite scale), then min(127, q) and `as i8`.
        let q = [0, 1, 2, 3].map(|j| {
            let v = _mm256_add_ps(_mm256_mul_ps(ld(4 * c + j), isv), magic);
            let n = _mm256_sub_epi32(
                _mm256_and_si256(_mm256_castps_si256(v), mant),
                _mm256_set1_epi32(0x0040_0000),
            );
            low_i8(_mm256_min_epi32(n, top))
        });
        let bytes = pack_i8(&q);
        // SAFETY: 32 bytes at 32c of the 256-byte `qs`.
        unsafe { _mm256_storeu_si256(out.qs.as_mut_ptr().add(32 * c).cast(), bytes) };
        // bsums 2c, 2c + 1: the 16 quants of each half of `bytes`, summed
        // as i16 (|sum| <= 16 * 128).
        let w = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(bytes)), ones);
        let w2 = _mm256_madd_epi16(
            _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(bytes)),
            ones,
        );
        out.bsums[2 * c] = hsum_epi32(w) as i16;
        out.bsums[2 * c + 1] = hsum_epi32(w2) as i16;
    }
    out.d = 1.0 / iscale;
}
