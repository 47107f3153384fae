//! AVX-512 (F, BW, VL) + VNNI kernels: same signatures and bit-identical
//! results as [`crate::scalar`].
//!
//! `vpdpbusd` multiplies an *unsigned* byte by a signed byte. Signed weights
//! are made unsigned exactly by XOR 0x80 (`w + 128`), and the excess
//! `128 * sum(a)` is subtracted with the activation sums computed at
//! quantization time (`ActQ8_0::sum`, `Cq4Act::qsum`); unsigned weights
//! (Q4_0, Q4_1, Q5_0, k-quant nibbles, Q2_K / Q3_K fields) go in directly.
//! `vpdpbusd` / `vpdpwssd` do not saturate, and every partial sum is far
//! below 2^31 (see [`crate::format`]), so the integer parts equal the
//! scalar ones.

use core::arch::x86_64::*;

use super::{
    add_scaled, add_scaled_mins, fp16x8_rows, fp16x8x2_rows, i8x8, iq4_levels, iq4_table,
    iq4_xs_scales_at, k4_scale_bytes, load128, load256, mins_terms, q4_1_contrib, q4_values,
    q5_0_values, q5_1_values, read_u16, read_u32, reduce8, with_rows, Rows,
};
use crate::act::{ActQ8_0, BlockQ8K, Cq4Act};
use crate::blocks::{iq4_nl, iq4_xs, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0};
use crate::operands::RowGroup;
use crate::operands::{CbLut, PanelBlock, KG_PER_GROUP};

/// Shared Q8_0 / IQ4_NL body (`NL`: the blocks are IQ4_NL): 32 signed
/// weights per block (Q8_0's quants, or IQ4_NL's levels looked up with
/// `pshufb`) made unsigned by XOR 0x80, then `vpdpbusd`.
///
/// # Safety
/// AVX2, F16C, AVX-512 F/BW/VL, VNNI; the current and later blocks of
/// every slot as [`Rows`] promises for `act.len()` blocks.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn signed32_rows<const NL: bool, R: Rows>(mut s: R, act: &[ActQ8_0], out: &mut [f32; 8]) {
    let (qs, d_off) = if NL {
        (iq4_nl::QS, iq4_nl::D)
    } else {
        (q8_0::QS, q8_0::D)
    };
    let table = iq4_table();
    let mut acc = _mm256_setzero_ps();
    let bias = _mm256_set1_epi8(-128);
    for a in act {
        // SAFETY: `a.qs` is 32 bytes; by the RowGroup invariant the current
        // block of every slot is in bounds (Q8_0: 34 bytes, qs 32 at 2;
        // IQ4_NL: 18 bytes, qs 16 at 2).
        let (raw, d) = unsafe {
            let av = load256(a.qs.as_ptr().cast());
            let mut v = [_mm256_setzero_si256(); 8];
            for (r, vr) in v.iter_mut().enumerate() {
                let p = s.at(r).add(qs);
                let w = if NL { iq4_levels(p, table) } else { load256(p) };
                *vr = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_xor_si256(w, bias), av);
            }
            (reduce8(&v), fp16x8_rows(&s, d_off))
        };
        // sum (w + 128) a - 128 sum a.
        let isum = _mm256_sub_epi32(raw, _mm256_set1_epi32(128 * a.sum));
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
/// AVX2, F16C, AVX-512 F/BW/VL, VNNI.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn signed32_group<const NL: bool>(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let act = &act[..g.nblocks()];
    if NL {
        // SAFETY: the RowGroup invariant covers every block of every slot.
        with_rows!(g, iq4_nl::BYTES, |s| unsafe {
            signed32_rows::<NL, _>(s, act, out)
        })
    } else {
        // SAFETY: as above.
        with_rows!(g, q8_0::BYTES, |s| unsafe {
            signed32_rows::<NL, _>(s, act, out)
        })
    }
}

forward_pair!(
    "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    ActQ8_0,
    signed32_group,
    /// Q8_0 x Q8_0 group kernel.
    q8_0_group,
    /// IQ4_NL x Q8_0 group kernel.
    iq4_nl_group
);

/// IQ4_XS x Q8_K group kernel. Two sub-blocks `2e, 2e + 1` per 512-bit
/// vector: levels XOR 0x80 into `vpdpbusd` against activations
/// `64e..64e + 64`, each 256-bit half times its scale `ls - 32`
/// (`vpmulld`; |partial| < 2^22), and the excess `128 sum_j sc_j (bsum_2j +
/// bsum_2j+1)` subtracted (`madd` of the pair-duplicated scales with the
/// bsums, shifted by 7).
///
/// # Safety
/// The CPU must support AVX2, F16C, AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn iq4_xs_group(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let act = &act[..g.nblocks()];
    // SAFETY: the RowGroup invariant covers every block of every slot.
    with_rows!(g, iq4_xs::BYTES, |s| unsafe { iq4_xs_rows(s, act, out) })
}

/// [`iq4_xs_group`]'s body over any [`Rows`].
///
/// # Safety
/// The AVX-512 VNNI tier's features; every slot's blocks for `act.len()`
/// steps in bounds.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn iq4_xs_rows<R: Rows>(mut s: R, act: &[BlockQ8K], out: &mut [f32; 8]) {
    let table = iq4_table();
    let bias = _mm512_set1_epi8(-128);
    let mut acc = _mm256_setzero_ps();
    for a in act {
        // SAFETY: `a.qs` is 256 bytes and `a.bsums` 32 bytes; by the RowGroup
        // invariant the current 136-byte block of every slot is in bounds
        // (header 8 bytes, qs 128 at 8).
        let (sv, d) = unsafe {
            let q = a.qs.as_ptr().cast::<u8>();
            let bsums = load256(a.bsums.as_ptr().cast());
            let mut sv = [_mm256_setzero_si256(); 8];
            for (r, svr) in sv.iter_mut().enumerate() {
                let p = s.at(r);
                let sc = iq4_xs_scales_at(p);
                let mut t = _mm512_setzero_si512();
                for e in 0..4 {
                    let w = join(
                        iq4_levels(p.add(iq4_xs::QS + 32 * e), table),
                        iq4_levels(p.add(iq4_xs::QS + 32 * e + 16), table),
                    );
                    let av = load512(q.add(64 * e));
                    let dot =
                        _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_xor_si512(w, bias), av);
                    let scv = join(
                        _mm256_set1_epi32(sc[2 * e] as i32),
                        _mm256_set1_epi32(sc[2 * e + 1] as i32),
                    );
                    t = _mm512_add_epi32(t, _mm512_mullo_epi32(dot, scv));
                }
                // [sc0 sc0 sc1 sc1 .. sc7 sc7] as 16 i16.
                let pairs = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(i8x8(sc), i8x8(sc)));
                let excess = _mm256_slli_epi32::<7>(_mm256_madd_epi16(pairs, bsums));
                *svr = _mm256_sub_epi32(fold(t), excess);
            }
            (reduce8(&sv), fp16x8_rows(&s, iq4_xs::D))
        };
        acc = add_scaled(acc, sv, d, a.d);
        s.prefetch();
        s.advance();
    }
    // SAFETY: `out` is 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// `sum_i v_i a_i` of 8 rows of Q4_0 / Q4_1 blocks (nibbles at `qs` of
/// each slot's block, unsigned, straight into `vpdpbusd`).
///
/// # Safety
/// AVX-512 VNNI tier; `qs + 16` bytes of every slot's current block must be
/// readable.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4_raw8<R: Rows>(s: &R, qs: usize, a: &ActQ8_0) -> __m256i {
    // SAFETY: `a.qs` is 32 bytes; the nibbles by the caller.
    unsafe {
        let av = load256(a.qs.as_ptr().cast());
        let mut v = [_mm256_setzero_si256(); 8];
        for (r, vr) in v.iter_mut().enumerate() {
            let w = q4_values(s.at(r).add(qs));
            *vr = _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, av);
        }
        reduce8(&v)
    }
}

/// Q4_0 x Q8_0 group kernel.
///
/// # Safety
/// The CPU must support AVX2, F16C, AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q4_0_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let act = &act[..g.nblocks()];
    // SAFETY: the RowGroup invariant covers every block of every slot.
    with_rows!(g, q4_0::BYTES, |s| unsafe { q4_0_rows(s, act, out) })
}

/// [`q4_0_group`]'s body over any [`Rows`].
///
/// # Safety
/// The AVX-512 VNNI tier's features; every slot's blocks for `act.len()`
/// steps in bounds.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4_0_rows<R: Rows>(mut s: R, act: &[ActQ8_0], out: &mut [f32; 8]) {
    let mut acc = _mm256_setzero_ps();
    for a in act {
        // SAFETY: by the RowGroup invariant the current 18-byte block of
        // every slot is in bounds (qs: 16 bytes at 2, d at 0).
        let (raw, d) = unsafe { (q4_raw8(&s, q4_0::QS, a), fp16x8_rows(&s, q4_0::D)) };
        let isum = _mm256_sub_epi32(raw, _mm256_set1_epi32(8 * a.sum));
        acc = add_scaled(acc, isum, d, a.d);
        s.prefetch();
        s.advance();
    }
    // SAFETY: `out` is 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// Q4_1 x Q8_0 group kernel.
///
/// # Safety
/// The CPU must support AVX2, F16C, AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q4_1_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let act = &act[..g.nblocks()];
    // SAFETY: the RowGroup invariant covers every block of every slot.
    with_rows!(g, q4_1::BYTES, |s| unsafe { q4_1_rows(s, act, out) })
}

/// [`q4_1_group`]'s body over any [`Rows`].
///
/// # Safety
/// The AVX-512 VNNI tier's features; every slot's blocks for `act.len()`
/// steps in bounds.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4_1_rows<R: Rows>(mut s: R, act: &[ActQ8_0], out: &mut [f32; 8]) {
    let mut acc = _mm256_setzero_ps();
    for a in act {
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

/// Q5_0 x Q8_0 group kernel.
///
/// # Safety
/// The CPU must support AVX2, F16C, AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q5_0_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let act = &act[..g.nblocks()];
    // SAFETY: the RowGroup invariant covers every block of every slot.
    with_rows!(g, q5_0::BYTES, |s| unsafe { q5_0_rows(s, act, out) })
}

/// [`q5_0_group`]'s body over any [`Rows`].
///
/// # Safety
/// The AVX-512 VNNI tier's features; every slot's blocks for `act.len()`
/// steps in bounds.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q5_0_rows<R: Rows>(mut s: R, act: &[ActQ8_0], out: &mut [f32; 8]) {
    let mut acc = _mm256_setzero_ps();
    for a in act {
        // SAFETY: as in q8_0_group (22-byte blocks).
        let (raw, d) = unsafe {
            let av = load256(a.qs.as_ptr().cast());
            let mut v = [_mm256_setzero_si256(); 8];
            for (r, vr) in v.iter_mut().enumerate() {
                *vr = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q5_0_values(s.at(r)), av);
            }
            (reduce8(&v), fp16x8_rows(&s, q5_0::D))
        };
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
/// The CPU must support AVX2, F16C, AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q5_1_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let act = &act[..g.nblocks()];
    // SAFETY: the RowGroup invariant covers every block of every slot.
    with_rows!(g, q5_1::BYTES, |s| unsafe { q5_1_rows(s, act, out) })
}

/// [`q5_1_group`]'s body over any [`Rows`].
///
/// # Safety
/// The AVX-512 VNNI tier's features; every slot's blocks for `act.len()`
/// steps in bounds.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q5_1_rows<R: Rows>(mut s: R, act: &[ActQ8_0], out: &mut [f32; 8]) {
    let mut acc = _mm256_setzero_ps();
    for a in act {
        // SAFETY: `a.qs` is 32 bytes; by the RowGroup invariant the current
        // 24-byte block of every slot is in bounds (d, m at 0 and 2).
        let (raw, (d, m)) = unsafe {
            let av = load256(a.qs.as_ptr().cast());
            let mut v = [_mm256_setzero_si256(); 8];
            for (r, vr) in v.iter_mut().enumerate() {
                *vr = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q5_1_values(s.at(r)), av);
            }
            (reduce8(&v), fp16x8x2_rows(&s, q5_1::D))
        };
        acc = _mm256_add_ps(acc, q4_1_contrib(raw, d, m, a));
        s.prefetch();
        s.advance();
    }
    // SAFETY: `out` is 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// Two 256-bit halves as one 512-bit vector.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// The two 256-bit halves added (8 i32 partial sums).
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn fold(v: __m512i) -> __m256i {
    _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v))
}

/// `acc + madd(a, b)` as one `vpdpwssd` (exactly the intrinsic
/// `_mm512_dpwssd_epi32`). Written out because LLVM rewrites a chain of
/// those intrinsics into `vpmaddwd` + `vpaddd` pairs (two uops for one on
/// the ports these kernels saturate).
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn dpwssd(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    let mut acc = acc;
    // SAFETY: one AVX-512 VNNI instruction on registers (the callers run
    // only in the VNNI tier); it reads and writes nothing else.
    unsafe {
        core::arch::asm!(
            "vpdpwssd {acc}, {a}, {b}",
            acc = inout(zmm_reg) acc,
            a = in(zmm_reg) a,
            b = in(zmm_reg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// Lane `r` = the sum of the 16 i32 lanes of `t[r]` (exact in wrapping
/// i32 as every caller's sums are): an unpack-and-add transpose in 512
/// bits (16 shuffles, 8 adds for 8 rows) instead of folding each vector to
/// 256 bits and a `vphaddd` tree.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn reduce8x16(t: &[__m512i; 8]) -> __m256i {
    // Per 128-bit lane: [a0 + a2, b0 + b2, a1 + a3, b1 + b3].
    let two = |a: __m512i, b: __m512i| {
        _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b))
    };
    // Per 128-bit lane: the lane sums of a, b, c, d.
    let four = |ab: __m512i, cd: __m512i| {
        _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd))
    };
    let a = four(two(t[0], t[1]), two(t[2], t[3]));
    let b = four(two(t[4], t[5]), two(t[6], t[7]));
    // [a.L0 + a.L1, a.L2 + a.L3, b.L0 + b.L1, b.L2 + b.L3].
    let z = _mm512_add_epi32(
        _mm512_shuffle_i64x2::<0b10_00_10_00>(a, b),
        _mm512_shuffle_i64x2::<0b11_01_11_01>(a, b),
    );
    // [a, a, b, b] totals; then lanes 0 and 2.
    let w = _mm512_add_epi32(z, _mm512_shuffle_i64x2::<0b10_11_00_01>(z, z));
    _mm512_castsi512_si256(_mm512_shuffle_i64x2::<0b00_00_10_00>(w, w))
}

/// `t` plus two vectors of unsigned values times their activations, scaled:
/// `vpdpbusd` of each (4 products per i32 lane; the caller's values keep
/// every lane within i16), the two packed to i16 (`vpackssdw`: per 128-bit
/// lane the first vector's 4 sums, then the second's, exact at that bound)
/// and multiplied by the i16 scales `sc` in one `vpdpwssd`.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn dot_pair_scaled(t: __m512i, v: [__m512i; 2], a: [__m512i; 2], sc: __m512i) -> __m512i {
    let zero = _mm512_setzero_si512();
    let x = _mm512_dpbusd_epi32(zero, v[0], a[0]);
    let y = _mm512_dpbusd_epi32(zero, v[1], a[1]);
    dpwssd(t, _mm512_packs_epi32(x, y), sc)
}

/// The 256 activations of a Q8_K block as four 512-bit vectors, in order.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn act512(a: &BlockQ8K) -> [__m512i; 4] {
    let q = a.qs.as_ptr().cast::<u8>();
    // SAFETY: `a.qs` is 256 bytes: four 64-byte loads inside it.
    unsafe {
        [
            load512(q),
            load512(q.add(64)),
            load512(q.add(128)),
            load512(q.add(192)),
        ]
    }
}

/// 64 bytes at `p`.
///
/// # Safety
/// `p..p + 64` must be readable.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn load512(p: *const u8) -> __m512i {
    // SAFETY: the caller guarantees 64 readable bytes; loadu is unaligned.
    unsafe { _mm512_loadu_si512(p.cast()) }
}

/// Shared Q4_K / Q5_K body (`Q5`: the blocks are Q5_K), two sub-blocks per
/// 512-bit vector: vector `i` (`e = i / 2`, `h = i % 2`) holds sub-blocks
/// `4e + h` (low half) and `4e + 2 + h` (high half), i.e. the low (`h = 0`)
/// or high nibbles of `qs[64e..64e + 64]`; the activations are gathered to
/// match once per block.
///
/// # Safety
/// AVX2, F16C, AVX-512 F/BW/VL, VNNI; every slot's blocks for `act.len()`
/// steps in bounds.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k4_rows<const Q5: bool, R: Rows>(mut s: R, act: &[BlockQ8K], out: &mut [f32; 8]) {
    let mut acc = _mm256_setzero_ps();
    let k = K4Consts::new();
    for a in act {
        // SAFETY: `a`'s arrays are in bounds; the current block of every
        // slot is in bounds (RowGroup invariant).
        let (sv, mv, d, dmin) = unsafe {
            let (av, b4) = k4_act(a);
            let mut sv = [_mm512_setzero_si512(); 8];
            let mut scm = [_mm_setzero_si128(); 8];
            for r in 0..8 {
                (sv[r], scm[r]) = k4_block::<Q5>(s.at(r), &av, &k);
            }
            let (d, dmin) = fp16x8x2_rows(&s, q4_k::D);
            (reduce8x16(&sv), k4_mins8(&scm, b4, b4), d, dmin)
        };
        acc = add_scaled_mins(acc, sv, mv, d, dmin, a.d);
        s.prefetch();
        s.advance();
    }
    // SAFETY: `out` is 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// The constants of [`k4_block`]: the scale shuffles and Q5_K's bit masks.
struct K4Consts {
    /// i16 lane k of 128-bit lane L of the packed sums of vectors (2e, 2e +
    /// 1): sub-block 4e (L < 2) / 4e + 2 (L >= 2) for k < 4 (vector 2e), one
    /// more for k >= 4 (vector 2e + 1): the pshufb masks of those scales.
    smask: [__m512i; 2],
    /// Q5_K: the fifth bit of each vector's values in `qh`.
    hmask: [__m512i; 4],
    m4: __m512i,
    b16: __m512i,
}

impl K4Consts {
    #[inline]
    #[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    fn new() -> K4Consts {
        let pairs = [(0, 2), (1, 3), (4, 6), (5, 7)];
        let smask = [0usize, 4].map(|b| {
            let m = |j: usize| {
                let (x, y) = ((2 * j) as i8, (2 * j + 2) as i8);
                _mm_setr_epi8(
                    x,
                    x + 1,
                    x,
                    x + 1,
                    x,
                    x + 1,
                    x,
                    x + 1,
                    y,
                    y + 1,
                    y,
                    y + 1,
                    y,
                    y + 1,
                    y,
                    y + 1,
                )
            };
            join(
                _mm256_set_m128i(m(b), m(b)),
                _mm256_set_m128i(m(b + 2), m(b + 2)),
            )
        });
        let hmask = pairs.map(|(a, b)| {
            join(
                _mm256_set1_epi8(1 << a),
                _mm256_set1_epi8((1i32 << b) as i8),
            )
        });
        K4Consts {
            smask,
            hmask,
            m4: _mm512_set1_epi8(0x0F),
            b16: _mm512_set1_epi8(0x10),
        }
    }
}

/// A Q8_K block's activations gathered for [`k4_block`] (vector `i` =
/// activations of sub-blocks `4e + h` and `4e + 2 + h`, `e = i / 2`, `h = i
/// % 2`), and its 8 sums of 32 activations as i16 in every 128-bit lane
/// (pairs of bsums; |x| <= 4064, exact in i16).
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn k4_act(a: &BlockQ8K) -> ([__m512i; 4], __m512i) {
    let q = a.qs.as_ptr().cast::<u8>();
    // SAFETY: `a.qs` is 256 bytes and `a.bsums` 32 bytes.
    unsafe {
        let av = [
            join(load256(q), load256(q.add(64))),
            join(load256(q.add(32)), load256(q.add(96))),
            join(load256(q.add(128)), load256(q.add(192))),
            join(load256(q.add(160)), load256(q.add(224))),
        ];
        let bsums = load256(a.bsums.as_ptr().cast());
        let b32 = _mm256_madd_epi16(bsums, _mm256_set1_epi16(1));
        let b4 = _mm512_broadcast_i32x4(_mm_packs_epi32(
            _mm256_castsi256_si128(b32),
            _mm256_extracti128_si256::<1>(b32),
        ));
        (av, b4)
    }
}

/// One Q4_K / Q5_K block at `p` against activations `av` ([`k4_act`]): the
/// scaled sums as 16 i32 partials (their total is the block's `sum sc_j
/// dot_j`), and the block's scale bytes `[sc0..8 | m0..8]` (for
/// [`k4_mins8`]).
///
/// # Safety
/// The block (`q4_k::BYTES` / `q5_k::BYTES` at `p`) must be readable.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k4_block<const Q5: bool>(
    p: *const u8,
    av: &[__m512i; 4],
    k: &K4Consts,
) -> (__m512i, __m128i) {
    let qs_off = if Q5 { q5_k::QS } else { q4_k::QS };
    // SAFETY: qs is 128 bytes at `qs_off`, qh 32 bytes at 16 (Q5_K), the
    // header 16 bytes at 0: inside the block the caller vouches for.
    unsafe {
        let scm = k4_scale_bytes(p);
        let sc4 = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(scm));
        let z0 = load512(p.add(qs_off));
        let z1 = load512(p.add(qs_off + 64));
        let mut v = [
            _mm512_and_si512(z0, k.m4),
            _mm512_and_si512(_mm512_srli_epi16::<4>(z0), k.m4),
            _mm512_and_si512(z1, k.m4),
            _mm512_and_si512(_mm512_srli_epi16::<4>(z1), k.m4),
        ];
        if Q5 {
            let qh2 = _mm512_broadcast_i64x4(load256(p.add(q5_k::QH)));
            for (vi, hm) in v.iter_mut().zip(&k.hmask) {
                let m = _mm512_test_epi8_mask(qh2, *hm);
                *vi = _mm512_or_si512(*vi, _mm512_maskz_mov_epi8(m, k.b16));
            }
        }
        // Per pair of vectors (dot_pair_scaled): at most
        // 4 * 31 * 128 = 15872 per i32 lane, exact as i16.
        let mut t = _mm512_setzero_si512();
        for e in 0..2 {
            let sc = _mm512_shuffle_epi8(sc4, k.smask[e]);
            let (vv, aa) = ([v[2 * e], v[2 * e + 1]], [av[2 * e], av[2 * e + 1]]);
            t = dot_pair_scaled(t, vv, aa, sc);
        }
        (t, scm)
    }
}

/// One R4 unit of Q4_K / Q5_K blocks (4 rows, block `b` of row `r` at
/// `p + (4b + r) * B`) against `act`, walked in memory order: two blocks
/// of the 4 rows at a time (8 sums side by side, slots 0 - 3 against the
/// first activation block, 4 - 7 against the second), then the 4 rows'
/// terms of the first block added, then those of the second: each row's
/// sum in block order, as the scalar kernel adds ([`k4_rows`]'s
/// arithmetic per slot).
///
/// # Safety
/// AVX2, F16C, AVX-512 F/BW/VL, VNNI; `p .. p + 4 * B * act.len()` readable.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k4_walk_unit<const Q5: bool>(p: *const u8, act: &[BlockQ8K]) -> __m128 {
    let b = if Q5 { q5_k::BYTES } else { q4_k::BYTES };
    let k = K4Consts::new();
    let mut acc = _mm_setzero_ps();
    let mut p = p;
    let mut pairs = act.chunks_exact(2);
    for a2 in pairs.by_ref() {
        super::lines::<_MM_HINT_T0>(p.wrapping_add(super::K4_WALK_AHEAD), 8 * b);
        let (av0, b40) = k4_act(&a2[0]);
        let (av1, b41) = k4_act(&a2[1]);
        let pp = super::Ptrs::blocks(p, b, 8);
        let mut sv = [_mm512_setzero_si512(); 8];
        let mut scm = [_mm_setzero_si128(); 8];
        for i in 0..8 {
            let av = if i < 4 { &av0 } else { &av1 };
            // SAFETY: slot `i`'s block is in the unit (caller).
            (sv[i], scm[i]) = unsafe { k4_block::<Q5>(pp.0[i], av, &k) };
        }
        // SAFETY: the 8 blocks' headers (caller).
        let (d, dmin) = unsafe { fp16x8x2_rows(&pp, q4_k::D) };
        let (sv, mv) = (reduce8x16(&sv), k4_mins8(&scm, b40, b41));
        let (d0, d1) = (a2[0].d, a2[1].d);
        let da = _mm256_setr_ps(d0, d0, d0, d0, d1, d1, d1, d1);
        let c = mins_terms(sv, mv, d, dmin, da);
        acc = _mm_add_ps(acc, _mm256_castps256_ps128(c));
        acc = _mm_add_ps(acc, _mm256_extractf128_ps::<1>(c));
        p = p.wrapping_add(8 * b);
    }
    if let [a] = pairs.remainder() {
        let (av, b4) = k4_act(a);
        let pp = super::Ptrs::blocks(p, b, 4);
        let mut sv = [_mm512_setzero_si512(); 8];
        let mut scm = [_mm_setzero_si128(); 8];
        for i in 0..4 {
            // SAFETY: slot `i`'s block is in the unit (caller).
            (sv[i], scm[i]) = unsafe { k4_block::<Q5>(pp.0[i], &av, &k) };
        }
        // SAFETY: the 4 blocks' headers; slots 4 - 7 repeat block 0's.
        let (d, dmin) = unsafe { fp16x8x2_rows(&pp, q4_k::D) };
        let (sv, mv) = (reduce8x16(&sv), k4_mins8(&scm, b4, b4));
        let c = mins_terms(sv, mv, d, dmin, _mm256_set1_ps(a.d));
        acc = _mm_add_ps(acc, _mm256_castps256_ps128(c));
    }
    acc
}

/// Activation blocks a plain row walk prepares at a time
/// ([`k4_walk_rows`]): 64 blocks' vectors are 16 KiB, in L1 beside the
/// rows' stream.
const K4_PREP: usize = 64;

/// A plain group of 8 contiguous Q4_K / Q5_K rows from `p` (block `b` of
/// row `r` at `p + (r * act.len() + b) * B`) against `act`, walked in
/// memory order a row at a time: each run of up to [`K4_PREP`] activation
/// blocks is prepared once ([`k4_act`], shared by the 8 rows as in the
/// lockstep kernel), then each row's blocks of that run are summed eight
/// at a time ([`k4_row_step`]) and their terms added to the row's sum in
/// block order, as the scalar kernel adds them: the same bits.
///
/// # Safety
/// AVX2, F16C, AVX-512 F/BW/VL, VNNI; `p .. p + 8 * B * act.len()` readable.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k4_walk_rows<const Q5: bool>(p: *const u8, act: &[BlockQ8K], out: &mut [f32; 8]) {
    let b = if Q5 { q5_k::BYTES } else { q4_k::BYTES };
    let span = b * act.len();
    let k = K4Consts::new();
    let mut prep = K4Prep {
        av: [const { core::mem::MaybeUninit::uninit() }; K4_PREP],
        b4: [_mm_setzero_si128(); K4_PREP + 8],
        da: [0f32; K4_PREP + 8],
    };
    *out = [0f32; 8];
    for (c, run) in act.chunks(K4_PREP).enumerate() {
        for (i, a) in run.iter().enumerate() {
            let (v, b4) = k4_act(a);
            prep.av[i].write(v);
            prep.b4[i] = _mm512_castsi512_si128(b4);
            prep.da[i] = a.d;
        }
        let n = run.len();
        for (r, o) in out.iter_mut().enumerate() {
            let mut q = p.wrapping_add(r * span + c * K4_PREP * b);
            let mut acc = _mm_set_ss(*o);
            let mut j = 0;
            while j + 8 <= n {
                // SAFETY: blocks `j .. j + 8` of this run of row `r`
                // (caller); `prep` holds the run's `n` blocks.
                let t = unsafe { k4_row_step::<Q5, true>(q, &prep, j, 8, &k) };
                acc = add_lanes_in_order(acc, t);
                q = q.wrapping_add(8 * b);
                j += 8;
            }
            if j < n {
                // SAFETY: as above, the run's last `n - j` blocks.
                let t = unsafe { k4_row_step::<Q5, false>(q, &prep, j, n - j, &k) };
                let mut a = [0f32; 8];
                // SAFETY: `a` is 8 f32.
                unsafe { _mm256_storeu_ps(a.as_mut_ptr(), t) };
                for &x in &a[..n - j] {
                    acc = _mm_add_ss(acc, _mm_set_ss(x));
                }
            }
            *o = _mm_cvtss_f32(acc);
        }
    }
}

/// `acc + t[0] + t[1] + .. + t[7]` in lane 0, one `addss` after the
/// other in lane order (the scalar kernel's order of a row's terms), the
/// lanes moved down in registers.
#[inline]
#[target_feature(enable = "avx2")]
fn add_lanes_in_order(acc: __m128, t: __m256) -> __m128 {
    let mut acc = acc;
    for h in [_mm256_castps256_ps128(t), _mm256_extractf128_ps::<1>(t)] {
        acc = _mm_add_ss(acc, h);
        acc = _mm_add_ss(acc, _mm_movehdup_ps(h));
        acc = _mm_add_ss(acc, _mm_movehl_ps(h, h));
        acc = _mm_add_ss(acc, _mm_shuffle_ps::<0b11_11_11_11>(h, h));
    }
    acc
}

/// The activations of a run of blocks, prepared for a row walk
/// ([`k4_walk_rows`]): [`k4_act`]'s vectors (the first `n` of a run
/// written), their sums `b4` as one 128-bit lane each and the blocks' `d`
/// (both padded, so that a step reads 8 whatever its length).
struct K4Prep {
    av: [core::mem::MaybeUninit<[__m512i; 4]>; K4_PREP],
    b4: [__m128i; K4_PREP + 8],
    da: [f32; K4_PREP + 8],
}

/// The terms `f32(s) * (d * da) - f32(m) * (dmin * da)` of blocks `j ..
/// j + m` (`m <= 8`; 8 when `FULL`) of one row, the first at `q`, lane
/// `i` for block `j + i` (lanes past `m` are not meaningful): each block's
/// sums by [`k4_block`] against its own prepared activations, the mins'
/// sums by [`k4_mins8`] with each lane's own activation sums.
///
/// # Safety
/// AVX2, F16C, AVX-512 F/BW/VL, VNNI; the `m` blocks at `q` readable;
/// `prep.av[j .. j + m]` written.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k4_row_step<const Q5: bool, const FULL: bool>(
    q: *const u8,
    prep: &K4Prep,
    j: usize,
    m: usize,
    k: &K4Consts,
) -> __m256 {
    let b = if Q5 { q5_k::BYTES } else { q4_k::BYTES };
    let m = if FULL { 8 } else { m };
    super::lines::<_MM_HINT_T0>(q.wrapping_add(super::K4_WALK_AHEAD), 8 * b);
    let pp = super::Ptrs::blocks(q, b, m);
    // Slots past `m` repeat block `j` (read, then ignored). Written out
    // eight times: as a loop, the compiler kept it a loop with the sums
    // spilled to the stack (-15 % hot).
    // SAFETY: `prep.av[x]` is written and the slot's block readable
    // (caller; `Ptrs::blocks`).
    let one = |i: usize| unsafe {
        let x = if FULL || i < m { j + i } else { j };
        k4_block::<Q5>(pp.0[i], prep.av[x].assume_init_ref(), k)
    };
    let (s0, m0) = one(0);
    let (s1, m1) = one(1);
    let (s2, m2) = one(2);
    let (s3, m3) = one(3);
    let (s4, m4) = one(4);
    let (s5, m5) = one(5);
    let (s6, m6) = one(6);
    let (s7, m7) = one(7);
    let sv = [s0, s1, s2, s3, s4, s5, s6, s7];
    let scm = [m0, m1, m2, m3, m4, m5, m6, m7];
    // SAFETY: the slots' block headers (as above); `b4` / `da` have 8
    // entries from `j` (padded).
    unsafe {
        let (d, dmin) = fp16x8x2_rows(&pp, q4_k::D);
        let b4 = prep.b4.as_ptr().add(j).cast::<__m512i>();
        let (b4_lo, b4_hi) = (_mm512_loadu_si512(b4), _mm512_loadu_si512(b4.add(1)));
        let (sv, mv) = (reduce8x16(&sv), k4_mins8(&scm, b4_lo, b4_hi));
        mins_terms(sv, mv, d, dmin, _mm256_loadu_ps(prep.da.as_ptr().add(j)))
    }
}

/// `sum_j m_j b_j` of each of 8 rows (lane `r`), from the rows' scale
/// bytes `scm[r]` = `[sc0..8 | m0..8]` (mins <= 63) and the 8 sums of 32
/// activations as i16 in every 128-bit lane (`b4_lo` for rows 0 - 3,
/// `b4_hi` for rows 4 - 7; [`k4_act`]): the rows' mins as i16,
/// two rows per 256 bits and four per 512, one `vpdpwssd` per four rows
/// (128-bit lane `L` of the first vector: row `L`, of the second: row
/// `L + 4`; |sum| <= 8 * 63 * 4064 < 2^22), then each lane's four i32
/// summed and the 8 totals put in row order.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn k4_mins8(scm: &[__m128i; 8], b4_lo: __m512i, b4_hi: __m512i) -> __m256i {
    let m2 = |r: usize| _mm256_cvtepu8_epi16(_mm_unpackhi_epi64(scm[r], scm[r + 1]));
    let lo = join(m2(0), m2(2));
    let hi = join(m2(4), m2(6));
    let dl = _mm512_dpwssd_epi32(_mm512_setzero_si512(), lo, b4_lo);
    let dh = _mm512_dpwssd_epi32(_mm512_setzero_si512(), hi, b4_hi);
    // Lane L: [A0 + A2, B0 + B2, A1 + A3, B1 + B3] (A = row L, B = row L + 4).
    let u = _mm512_add_epi32(_mm512_unpacklo_epi32(dl, dh), _mm512_unpackhi_epi32(dl, dh));
    // Lane L: [A, B, A, B] (the row totals).
    let w = _mm512_add_epi32(u, _mm512_shuffle_epi32::<0b01_00_11_10>(u));
    let idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm512_castsi512_si256(_mm512_permutexvar_epi32(idx, w))
}

/// Q4_K / Q5_K group kernel body: [`k4_rows`] with the group's addressing.
///
/// # Safety
/// AVX2, F16C, AVX-512 F/BW/VL, VNNI.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k4_group<const Q5: bool>(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let act = &act[..g.nblocks()];
    let b = if Q5 { q5_k::BYTES } else { q4_k::BYTES };
    match super::walk(g, b) {
        // SAFETY: the RowGroup invariant covers the 8 contiguous rows.
        Some(super::Walk::Rows(p)) => return unsafe { k4_walk_rows::<Q5>(p, act, out) },
        Some(super::Walk::Units(p)) => {
            let span = 4 * b * act.len();
            for (u, o) in out.chunks_exact_mut(4).enumerate() {
                // SAFETY: the RowGroup invariant covers both units (`span`
                // bytes each, the second right after the first); `o` is 4 f32.
                unsafe {
                    let v = k4_walk_unit::<Q5>(p.wrapping_add(u * span), act);
                    _mm_storeu_ps(o.as_mut_ptr(), v);
                }
            }
            return;
        }
        None => {}
    }
    if Q5 {
        // SAFETY: the RowGroup invariant covers every block of every slot.
        with_rows!(g, q5_k::BYTES, |s| unsafe { k4_rows::<Q5, _>(s, act, out) })
    } else {
        // SAFETY: as above.
        with_rows!(g, q4_k::BYTES, |s| unsafe { k4_rows::<Q5, _>(s, act, out) })
    }
}

forward_pair!(
    "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    BlockQ8K,
    k4_group,
    /// Q4_K x Q8_K group kernel.
    q4_k_group,
    /// Q5_K x Q8_K group kernel.
    q5_k_group
);

/// Q6_K x Q8_K group kernel. Per half `h` of the block, one 512-bit vector
/// holds weights `128h .. 128h + 64` (low nibbles of `ql[64h..64h + 64]`)
/// and another `128h + 64 .. 128h + 128` (high nibbles); the 2 high bits come
/// from `qh[32h..32h + 32]` with a per-half variable shift; each 128-bit lane
/// (16 weights) has its own scale (see `q6_k_block` for the sums). Plain
/// groups of contiguous rows are walked a row at a time where
/// [`super::RowPrefetch::Linear`] is on (`walk`), any other group's 8
/// slots in lockstep.
///
/// # Safety
/// The CPU must support AVX2, F16C, AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q6_k_group(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let act = &act[..g.nblocks()];
    if let Some(w) = super::walk(g, q6_k::BYTES) {
        // SAFETY: the RowGroup invariant covers the group's bytes.
        return unsafe { q6_k_rows_walk(w, act, out) };
    }
    // SAFETY: the RowGroup invariant covers every block of every slot.
    with_rows!(g, q6_k::BYTES, |s| unsafe { q6_k_rows(s, act, out) })
}

/// [`q6_k_group`] with the 6-bit values assembled by GFNI affine byte
/// transforms (`vgf2p8affineqb`: each output bit a chosen input bit of the
/// same byte) instead of shifts and masks: five vector operations per half
/// block instead of seven. The same values, so the same sums bit for bit.
///
/// # Safety
/// The CPU must support AVX2, F16C, AVX-512 F/BW/VL, VNNI and GFNI.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni,gfni")]
pub unsafe fn q6_k_group_gfni(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let act = &act[..g.nblocks()];
    if let Some(w) = super::walk(g, q6_k::BYTES) {
        // SAFETY: the RowGroup invariant covers the group's bytes.
        return unsafe { q6_k_rows_gfni_walk(w, act, out) };
    }
    // SAFETY: the RowGroup invariant covers every block of every slot.
    with_rows!(g, q6_k::BYTES, |s| unsafe { q6_k_rows_gfni(s, act, out) })
}

/// A GF(2) affine-transform matrix (the `vgf2p8affineqb` qword) that sets
/// output bit `o` of each byte to its input bit `i` for every `(o, i)` of
/// `map`, and every other output bit to 0: the row of output bit `o` is
/// byte `7 - o` of the qword.
const fn bit_matrix(map: &[(u32, u32)]) -> i64 {
    let mut m = 0u64;
    let mut k = 0;
    while k < map.len() {
        let (o, i) = map[k];
        m |= (1u64 << i) << (8 * (7 - o));
        k += 1;
    }
    m as i64
}

/// The Q6_K body shared by [`q6_k_rows`] and [`q6_k_rows_gfni`]; `$unpack`
/// maps `(z, qh)` (64 bytes of `ql`, the 32 bytes of `qh` broadcast to both
/// 256-bit halves) to the two vectors of 6-bit values `(v12, v34)`.
///
/// Per half `h` of the block: `vpdpbusd` of each vector of values against
/// its 64 activations (4 products per i32 lane, at most `4 * 63 * 128 =
/// 32256` in magnitude: exact as i16), the two packed to i16
/// (`vpackssdw`: per 128-bit lane the 4 sums of `v12`, then the 4 of
/// `v34`) and multiplied by their i16 scales (spread with one `vpermw`) in
/// one `vpdpwssd`. The integers are those of the scalar kernel: every
/// product and sum is exact.
macro_rules! q6_k_body {
    ($s:ident, $act:ident, $out:ident, $unpack:expr) => {{
        let mut acc = _mm256_setzero_ps();
        let sidx = q6_k_scale_index();
        for a in $act {
            // SAFETY: activation arrays are 256 / 32 bytes; the current
            // 210-byte block of every slot is in bounds (RowGroup invariant).
            let (sv, d) = unsafe {
                let av = act512(a);
                let bsums = load256(a.bsums.as_ptr().cast());
                let mut sv = [_mm256_setzero_si256(); 8];
                for (r, v) in sv.iter_mut().enumerate() {
                    *v = q6_k_block($s.at(r), &av, bsums, &sidx, &$unpack);
                }
                (reduce8(&sv), fp16x8_rows(&$s, q6_k::D))
            };
            acc = add_scaled(acc, sv, d, a.d);
            $s.prefetch();
            $s.advance();
        }
        // SAFETY: `out` is 8 f32.
        unsafe { _mm256_storeu_ps($out.as_mut_ptr(), acc) };
    }};
}

/// The i16 lane -> scale index vectors of the two halves of a Q6_K block:
/// i16 lane `k` of 128-bit lane `L` of half `h` takes sub-block `8h + L`
/// (the sums of `v12`, `k < 4`) or `8h + 4 + L` (`v34`, `k >= 4`).
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn q6_k_scale_index() -> [__m512i; 2] {
    core::array::from_fn(|h| {
        let lane = |l: i16| {
            let b = 8 * h as i16 + l;
            _mm_setr_epi16(b, b, b, b, b + 4, b + 4, b + 4, b + 4)
        };
        join(
            _mm256_set_m128i(lane(1), lane(0)),
            _mm256_set_m128i(lane(3), lane(2)),
        )
    })
}

/// One Q6_K block's sum against its activations `av` / `bsums`, as 8 i32
/// partial sums (their total is the block's integer sum). Per half `h`:
/// `vpdpbusd` of each vector of values against its 64 activations (4
/// products per i32 lane, at most `4 * 63 * 128 = 32256` in magnitude:
/// exact as i16), the two packed to i16 (`vpackssdw`: per 128-bit lane
/// the 4 sums of `v12`, then the 4 of `v34`) and multiplied by their i16
/// scales (spread with one `vpermw`) in one `vpdpwssd`; then
/// `sum sc_j (v - 32) a = sum sc_j v a - 32 sum sc_j bsum_j`. The
/// integers are those of the scalar kernel: every product and sum is exact.
///
/// # Safety
/// `p..p + 210` (one Q6_K block) must be readable.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q6_k_block<U: Fn(__m512i, __m512i) -> (__m512i, __m512i)>(
    p: *const u8,
    av: &[__m512i; 4],
    bsums: __m256i,
    sidx: &[__m512i; 2],
    unpack: &U,
) -> __m256i {
    // SAFETY: ql 128 bytes at 0, qh 64 at 128, scales 16 at 192: inside
    // the block the caller vouches for.
    unsafe {
        let sc_all = _mm256_cvtepi8_epi16(load128(p.add(q6_k::SCALES)));
        let scz = _mm512_castsi256_si512(sc_all);
        let mut t = _mm512_setzero_si512();
        for h in 0..2 {
            let z = load512(p.add(q6_k::QL + 64 * h));
            let qh = _mm512_broadcast_i64x4(load256(p.add(q6_k::QH + 32 * h)));
            let (v12, v34) = unpack(z, qh);
            let sc = _mm512_permutexvar_epi16(sidx[h], scz);
            t = dot_pair_scaled(t, [v12, v34], [av[2 * h], av[2 * h + 1]], sc);
        }
        let bias = _mm256_madd_epi16(sc_all, bsums);
        _mm256_sub_epi32(fold(t), _mm256_slli_epi32::<5>(bias))
    }
}

/// One row of Q6_K blocks at `p` against `act`, walked in memory order:
/// eight blocks at a time (their integer sums side by side), then their
/// terms `f32(s) * (d * da)` added to the row's sum one after the other,
/// in block order, as the scalar kernel adds them: the same bits. The
/// reads ahead are one stream ([`super::WALK_AHEAD`] down the row and on
/// into the next rows, which the caller's rows are).
///
/// # Safety
/// `p .. p + 210 * act.len()` must be readable.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q6_k_walk_row<U: Fn(__m512i, __m512i) -> (__m512i, __m512i)>(
    p: *const u8,
    act: &[BlockQ8K],
    sidx: &[__m512i; 2],
    unpack: &U,
) -> f32 {
    const B: usize = q6_k::BYTES;
    let mut acc = 0f32;
    let mut chunks = act.chunks_exact(8);
    let mut p = p;
    for a8 in chunks.by_ref() {
        super::lines::<_MM_HINT_T0>(p.wrapping_add(super::WALK_AHEAD), 8 * B);
        // SAFETY: blocks `p .. p + 8B` are in the row (caller).
        let (s, d) = unsafe {
            let mut sv = [_mm256_setzero_si256(); 8];
            for (i, (v, a)) in sv.iter_mut().zip(a8).enumerate() {
                let av = act512(a);
                let bsums = load256(a.bsums.as_ptr().cast());
                *v = q6_k_block(p.add(i * B), &av, bsums, sidx, unpack);
            }
            let d = fp16x8_rows(&super::Ptrs::blocks(p, B, 8), q6_k::D);
            (reduce8(&sv), d)
        };
        let da = _mm256_setr_ps(
            a8[0].d, a8[1].d, a8[2].d, a8[3].d, a8[4].d, a8[5].d, a8[6].d, a8[7].d,
        );
        let c = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, da));
        let mut t = [0f32; 8];
        // SAFETY: `t` is 8 f32.
        unsafe { _mm256_storeu_ps(t.as_mut_ptr(), c) };
        for x in t {
            acc += x;
        }
        p = p.wrapping_add(8 * B);
    }
    for a in chunks.remainder() {
        // SAFETY: the block at `p` is in the row (caller).
        let (s, d) = unsafe {
            let av = act512(a);
            let bsums = load256(a.bsums.as_ptr().cast());
            let v = q6_k_block(p, &av, bsums, sidx, unpack);
            let v = _mm256_hadd_epi32(v, v);
            let v = _mm256_hadd_epi32(v, v);
            let s = _mm256_extract_epi32::<0>(v) + _mm256_extract_epi32::<4>(v);
            let d = _mm_cvtss_f32(_mm_cvtph_ps(
                _mm_set1_epi16(read_u16(p.add(q6_k::D)) as i16),
            ));
            (s, d)
        };
        acc += s as f32 * (d * a.d);
        p = p.wrapping_add(B);
    }
    acc
}

/// A walked group ([`super::Walk`]): plain rows one after another
/// ([`q6_k_walk_row`]), or R4's two units one after the other
/// ([`q6_k_walk_unit`]).
///
/// # Safety
/// The group's bytes (8 rows or 2 units of `act.len()` blocks) readable.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q6_k_walk<U: Fn(__m512i, __m512i) -> (__m512i, __m512i)>(
    w: super::Walk,
    act: &[BlockQ8K],
    sidx: &[__m512i; 2],
    unpack: &U,
    out: &mut [f32; 8],
) {
    let span = q6_k::BYTES * act.len();
    match w {
        super::Walk::Rows(p) => {
            for (r, o) in out.iter_mut().enumerate() {
                // SAFETY: row `r` is inside the caller's span.
                *o = unsafe { q6_k_walk_row(p.wrapping_add(r * span), act, sidx, unpack) };
            }
        }
        super::Walk::Units(p) => {
            for (u, o) in out.chunks_exact_mut(4).enumerate() {
                // SAFETY: unit `u` (4 rows) is inside the caller's span.
                let v = unsafe { q6_k_walk_unit(p.wrapping_add(u * 4 * span), act, sidx, unpack) };
                // SAFETY: `o` is 4 f32.
                unsafe { _mm_storeu_ps(o.as_mut_ptr(), v) };
            }
        }
    }
}

/// One R4 unit (4 rows, block `b` of rows 0..4 at `p + (4b + r) * 210`)
/// against `act`, walked in memory order: two blocks of the 4 rows at a
/// time (8 integer sums side by side, each against its own activation
/// block), then the 4 rows' terms of the first block added, then those of
/// the second: each row's sum in block order, as the scalar kernel adds.
///
/// # Safety
/// `p .. p + 4 * 210 * act.len()` must be readable.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q6_k_walk_unit<U: Fn(__m512i, __m512i) -> (__m512i, __m512i)>(
    p: *const u8,
    act: &[BlockQ8K],
    sidx: &[__m512i; 2],
    unpack: &U,
) -> __m128 {
    const B: usize = q6_k::BYTES;
    let mut acc = _mm_setzero_ps();
    let mut pairs = act.chunks_exact(2);
    let mut p = p;
    for a2 in pairs.by_ref() {
        super::lines::<_MM_HINT_T0>(p.wrapping_add(super::WALK_AHEAD), 8 * B);
        // SAFETY: the 8 blocks at `p` are in the unit (caller).
        let (s, d) = unsafe {
            let av = [act512(&a2[0]), act512(&a2[1])];
            let bs = [
                load256(a2[0].bsums.as_ptr().cast()),
                load256(a2[1].bsums.as_ptr().cast()),
            ];
            let mut sv = [_mm256_setzero_si256(); 8];
            for (i, v) in sv.iter_mut().enumerate() {
                *v = q6_k_block(p.add(i * B), &av[i / 4], bs[i / 4], sidx, unpack);
            }
            let d = fp16x8_rows(&super::Ptrs::blocks(p, B, 8), q6_k::D);
            (reduce8(&sv), d)
        };
        let (d0, d1) = (a2[0].d, a2[1].d);
        let da = _mm256_setr_ps(d0, d0, d0, d0, d1, d1, d1, d1);
        let c = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, da));
        acc = _mm_add_ps(acc, _mm256_castps256_ps128(c));
        acc = _mm_add_ps(acc, _mm256_extractf128_ps::<1>(c));
        p = p.wrapping_add(8 * B);
    }
    if let [a] = pairs.remainder() {
        // SAFETY: the last 4 blocks at `p` are in the unit (caller).
        let (s, d) = unsafe {
            let av = act512(a);
            let bs = load256(a.bsums.as_ptr().cast());
            let mut sv = [_mm256_setzero_si256(); 8];
            for (i, v) in sv.iter_mut().take(4).enumerate() {
                *v = q6_k_block(p.add(i * B), &av, bs, sidx, unpack);
            }
            let d = fp16x8_rows(&super::Ptrs::blocks(p, B, 4), q6_k::D);
            (
                _mm256_castsi256_si128(reduce8(&sv)),
                _mm256_castps256_ps128(d),
            )
        };
        let c = _mm_mul_ps(_mm_cvtepi32_ps(s), _mm_mul_ps(d, _mm_set1_ps(a.d)));
        acc = _mm_add_ps(acc, c);
    }
    acc
}

/// The shift-and-mask unpack of [`q6_k_rows`] (a closure over its constants).
macro_rules! q6_k_unpack_shift {
    () => {{
        let m4 = _mm512_set1_epi8(0x0F);
        let m30 = _mm512_set1_epi8(0x30);
        let shl = join(_mm256_set1_epi16(4), _mm256_set1_epi16(2));
        let shr = join(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
        move |z: __m512i, qh: __m512i| {
            let v12 = _mm512_or_si512(
                _mm512_and_si512(z, m4),
                _mm512_and_si512(_mm512_sllv_epi16(qh, shl), m30),
            );
            let v34 = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16::<4>(z), m4),
                _mm512_and_si512(_mm512_srlv_epi16(qh, shr), m30),
            );
            (v12, v34)
        }
    }};
}

/// The GFNI unpack of [`q6_k_rows_gfni`] (a closure over its constants).
macro_rules! q6_k_unpack_gfni {
    () => {{
        let m4 = _mm512_set1_epi8(0x0F);
        let halves = |lo: i64, hi: i64| join(_mm256_set1_epi64x(lo), _mm256_set1_epi64x(hi));
        let a = halves(bit_matrix(&[(4, 0), (5, 1)]), bit_matrix(&[(4, 2), (5, 3)]));
        let b = halves(bit_matrix(&[(4, 4), (5, 5)]), bit_matrix(&[(4, 6), (5, 7)]));
        let c = _mm512_set1_epi64(bit_matrix(&[(0, 4), (1, 5), (2, 6), (3, 7)]));
        move |z: __m512i, qh: __m512i| {
            // 0xCA: bitwise select, m4 ? z : A(qh).
            let v12 =
                _mm512_ternarylogic_epi32::<0xCA>(m4, z, _mm512_gf2p8affine_epi64_epi8::<0>(qh, a));
            let v34 = _mm512_or_si512(
                _mm512_gf2p8affine_epi64_epi8::<0>(z, c),
                _mm512_gf2p8affine_epi64_epi8::<0>(qh, b),
            );
            (v12, v34)
        }
    }};
}

/// [`q6_k_rows`] for a group that `walk` names.
///
/// # Safety
/// The AVX-512 VNNI tier's features; the group's bytes readable.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q6_k_rows_walk(w: super::Walk, act: &[BlockQ8K], out: &mut [f32; 8]) {
    let unpack = q6_k_unpack_shift!();
    let sidx = q6_k_scale_index();
    // SAFETY: `w`'s rows or units are inside the caller's span.
    unsafe { q6_k_walk(w, act, &sidx, &unpack, out) }
}

/// [`q6_k_rows_gfni`] for a group that `walk` names.
///
/// # Safety
/// The AVX-512 VNNI tier's features and GFNI; the group's bytes readable.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni,gfni")]
unsafe fn q6_k_rows_gfni_walk(w: super::Walk, act: &[BlockQ8K], out: &mut [f32; 8]) {
    let unpack = q6_k_unpack_gfni!();
    let sidx = q6_k_scale_index();
    // SAFETY: `w`'s rows or units are inside the caller's span.
    unsafe { q6_k_walk(w, act, &sidx, &unpack, out) }
}

/// [`q6_k_group`]'s body over any [`Rows`]: the values by shifts and masks.
/// In the low 256-bit half of `qh` (weights `128h + 0..32`, `+64..96`)
/// the fifth and sixth bits of `v12` are `qh` bits 0-1 and of `v34` bits
/// 4-5; in the high half (`+32..64`, `+96..128`) bits 2-3 and 6-7: a
/// per-half variable shift of `qh`, then the mask `0x30`.
///
/// # Safety
/// The AVX-512 VNNI tier's features; every slot's blocks for `act.len()`
/// steps in bounds.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q6_k_rows<R: Rows>(mut s: R, act: &[BlockQ8K], out: &mut [f32; 8]) {
    let unpack = q6_k_unpack_shift!();
    q6_k_body!(s, act, out, unpack)
}

/// [`q6_k_group_gfni`]'s body over any [`Rows`]: the values by affine byte
/// transforms. `v12 = select(0x0F: z, A(qh))` with `A` moving `qh` bits
/// 0-1 (low half) / 2-3 (high half) to bits 4-5; `v34 = C(z) | B(qh)`
/// with `C` moving `z` bits 4-7 to 0-3 and `B` moving `qh` bits 4-5 /
/// 6-7 to 4-5 (the matrices are per qword: the low half's in qwords 0-3,
/// the high half's in 4-7). Every other output bit is 0.
///
/// # Safety
/// The AVX-512 VNNI tier's features and GFNI; every slot's blocks for
/// `act.len()` steps in bounds.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni,gfni")]
unsafe fn q6_k_rows_gfni<R: Rows>(mut s: R, act: &[BlockQ8K], out: &mut [f32; 8]) {
    let unpack = q6_k_unpack_gfni!();
    q6_k_body!(s, act, out, unpack)
}

/// The 16 signed scales (-32..=31) of the Q3_K block at `p` as 16 i8
/// ([`crate::blocks::q3_k_scales`] in one vector). With `s` the 12 scale
/// bytes, scale `j` is `(low_j | high_j << 4) - 32`: `low_j` = the low
/// (`j < 8`: `s[j] & 15`) or high (`s[j - 8] >> 4`) nibble, `high_j` = bits
/// `2 (j / 4)` of `s[8 + j % 4]`, i.e. `[s8 s9 s10 s11]` repeated in the four
/// i32 lanes, lane `j / 4` shifted right by `2 (j / 4)`, masked with 3 (bits
/// shifted in from the next byte land above the mask).
///
/// # Safety
/// `p..p + 110` (a Q3_K block) must be readable.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q3_k_scales_at(p: *const u8) -> __m128i {
    // SAFETY: the 12 scale bytes are at 96..108 of the 110-byte block; no
    // read goes past them.
    let (lo8, hi4) = unsafe {
        let q = p.add(q3_k::SCALES);
        (q.cast::<u64>().read_unaligned(), read_u32(q.add(8)))
    };
    let m4 = _mm_set1_epi8(0x0F);
    let x = _mm_set1_epi64x(lo8 as i64);
    let low = _mm_unpacklo_epi64(
        _mm_and_si128(x, m4),
        _mm_and_si128(_mm_srli_epi16::<4>(x), m4),
    );
    let h = _mm_srlv_epi32(_mm_set1_epi32(hi4 as i32), _mm_setr_epi32(0, 2, 4, 6));
    let high = _mm_slli_epi16::<4>(_mm_and_si128(h, _mm_set1_epi8(3)));
    _mm_sub_epi8(_mm_or_si128(low, high), _mm_set1_epi8(32))
}

/// Shared Q2_K / Q3_K body (`Q3`: the blocks are Q3_K), laid out as
/// [`q6_k_group`]: per half `h` of the block the 32 bytes `qs[32h..32h +
/// 32]` are broadcast to both 256-bit halves, and vector `(h, u)` takes the
/// 2-bit fields at shifts `4u` (low half: weights `128h + 64u .. +32`) and
/// `4u + 2` (high half: the next 32), a per-half variable shift; Q3_K's bit
/// 2 is bit `4h + 2u` (low) / `4h + 2u + 1` (high) of `hmask[l]`, set with
/// a mask test as Q5_K's fifth bit. The unsigned values (Q2_K 0..=3, Q3_K
/// `v + 4` in 0..=7) go straight into `vpdpbusd` against the activations
/// (each 128-bit lane is one sub-block of 16; an i32 lane sums 4 products,
/// at most `4 * 7 * 127` in magnitude), the two vectors of a half are
/// packed to i16 (`vpackssdw`, exact at that bound) and multiplied by their
/// i16 scales (spread with `vpermw`) in one `vpdpwssd`: one scale
/// multiplication and one `vpermw` per half instead of one per vector
/// (`maddubs` + `vpdpwssd`). Q2_K's mins are `madd(mins, bsums)`, Q3_K's
/// offset is removed as `4 sum_j sc_j bsum_j` (as in [`crate::x86::avx2`]).
///
/// # Safety
/// AVX2, F16C, AVX-512 F/BW/VL, VNNI.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k16_group<const Q3: bool>(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let act = &act[..g.nblocks()];
    if Q3 {
        // SAFETY: the RowGroup invariant covers every block of every slot.
        with_rows!(g, q3_k::BYTES, |s| unsafe {
            k16_rows::<Q3, _>(s, act, out)
        })
    } else {
        // SAFETY: as above.
        with_rows!(g, q2_k::BYTES, |s| unsafe {
            k16_rows::<Q3, _>(s, act, out)
        })
    }
}

/// [`k16_group`]'s body over any [`Rows`].
///
/// # Safety
/// AVX2, F16C, AVX-512 F/BW/VL, VNNI; every slot's blocks for `act.len()`
/// steps in bounds.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k16_rows<const Q3: bool, R: Rows>(mut s: R, act: &[BlockQ8K], out: &mut [f32; 8]) {
    let mut acc = _mm256_setzero_ps();
    let m4 = _mm_set1_epi8(0x0F);
    let m3 = _mm512_set1_epi8(0x03);
    let b4 = _mm512_set1_epi8(0x04);
    // Shifts of vector u: run 2u in the low half, 2u + 1 in the high half.
    let shr = [
        join(_mm256_set1_epi16(0), _mm256_set1_epi16(2)),
        join(_mm256_set1_epi16(4), _mm256_set1_epi16(6)),
    ];
    // The hmask bit of vector (h, u): run 4h + 2u (low), 4h + 2u + 1 (high).
    let hbit: [[__m512i; 2]; 2] = core::array::from_fn(|h| {
        core::array::from_fn(|u| {
            let i = 4 * h + 2 * u;
            join(
                _mm256_set1_epi8((1i32 << i) as i8),
                _mm256_set1_epi8((1i32 << (i + 1)) as i8),
            )
        })
    });
    // Lane L of vector (h, u) is sub-block 8h + 4u + L; after `packs` of
    // the vectors (h, 0) and (h, 1), i16 element e (lane L = e / 8) belongs
    // to sub-block 8h + L + 4 ((e % 8) / 4).
    let sidx: [__m512i; 2] = core::array::from_fn(|h| {
        let idx: [i16; 32] = core::array::from_fn(|e| (8 * h + e / 8 + 4 * ((e % 8) / 4)) as i16);
        // SAFETY: `idx` is 64 bytes.
        unsafe { load512(idx.as_ptr().cast()) }
    });
    let qs_off = if Q3 { q3_k::QS } else { q2_k::QS };
    for a in act {
        // SAFETY: `a.qs` is 256 bytes and `a.bsums` 32 bytes; the current
        // block of every slot is in bounds (RowGroup invariant): Q2_K 84
        // bytes (scales 16 at 0, qs 64 at 16), Q3_K 110 bytes (hmask 32 at
        // 0, qs 64 at 32, scales 12 at 96).
        let (sv, mv, d, dmin) = unsafe {
            let av = act512(a);
            let bsums = load256(a.bsums.as_ptr().cast());
            let mut sv = [_mm256_setzero_si256(); 8];
            let mut mv = [_mm256_setzero_si256(); 8];
            for r in 0..8 {
                let p = s.at(r);
                let sc8 = if Q3 {
                    q3_k_scales_at(p)
                } else {
                    let b = load128(p.add(q2_k::SCALES));
                    let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(b), m4));
                    mv[r] = _mm256_madd_epi16(mins, bsums);
                    _mm_and_si128(b, m4)
                };
                let sc_all = _mm256_cvtepi8_epi16(sc8);
                let scz = _mm512_castsi256_si512(sc_all);
                let hm = if Q3 {
                    _mm512_broadcast_i64x4(load256(p.add(q3_k::HMASK)))
                } else {
                    _mm512_setzero_si512()
                };
                let mut t = _mm512_setzero_si512();
                for h in 0..2 {
                    let z = _mm512_broadcast_i64x4(load256(p.add(qs_off + 32 * h)));
                    let v: [__m512i; 2] = core::array::from_fn(|u| {
                        // epi16 shifts: bits crossing a byte boundary land
                        // outside the mask.
                        let v = _mm512_and_si512(_mm512_srlv_epi16(z, shr[u]), m3);
                        if Q3 {
                            let k = _mm512_test_epi8_mask(hm, hbit[h][u]);
                            _mm512_or_si512(v, _mm512_maskz_mov_epi8(k, b4))
                        } else {
                            v
                        }
                    });
                    // |dot| <= 4 * 7 * 127 per i32 lane: the i16 pack is exact.
                    let sc = _mm512_permutexvar_epi16(sidx[h], scz);
                    t = dot_pair_scaled(t, v, [av[2 * h], av[2 * h + 1]], sc);
                }
                sv[r] = if Q3 {
                    // sum sc_j v a = sum sc_j (v + 4) a - 4 sum sc_j bsum_j.
                    let bias = _mm256_madd_epi16(sc_all, bsums);
                    _mm256_sub_epi32(fold(t), _mm256_slli_epi32::<2>(bias))
                } else {
                    fold(t)
                };
            }
            if Q3 {
                let d = fp16x8_rows(&s, q3_k::D);
                (reduce8(&sv), reduce8(&mv), d, d)
            } else {
                // d, dmin adjacent (DMIN = D + 2): one load per slot.
                let (d, dmin) = fp16x8x2_rows(&s, q2_k::D);
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
    "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    BlockQ8K,
    k16_group,
    /// Q2_K x Q8_K group kernel.
    q2_k_group,
    /// Q3_K x Q8_K group kernel.
    q3_k_group
);

/// The biased codebook `cb_i8 ^ 0x80 = cb + 128` (u8) in every 128-bit
/// lane: the `pshufb` table of `cq4_kg_weights`.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) fn cq4_biased_table(lut: &CbLut) -> __m512i {
    let mut biased = [0u8; 16];
    for (d, &c) in biased.iter_mut().zip(lut.cb_i8()) {
        *d = (c as u8) ^ 0x80;
    }
    // SAFETY: `biased` is 16 bytes.
    _mm512_broadcast_i32x4(unsafe { load128(biased.as_ptr()) })
}

/// The 256 weights of the kg-block at `blk` (64 channels x 4 columns) as
/// biased codebook values (`table` of [`cq4_biased_table`]), one channel's
/// 4 weights per i32 lane: vectors `2h`, `2h + 1` hold the unpacked low /
/// high halves of the 64 bytes at `blk + 64 h`, i.e. channels `{0-3, 8-11,
/// 16-19, 24-27}` / `{4-7, 12-15, ..}` of those 32 (put back in order by
/// `cq4_group_terms`).
///
/// # Safety
/// The `avx512` tier's features; `blk..blk + 128` readable.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn cq4_kg_weights(blk: *const u8, table: __m512i) -> [__m512i; 4] {
    let m4 = _mm512_set1_epi8(0x0F);
    let mut w = [_mm512_setzero_si512(); 4];
    for h in 0..2 {
        // SAFETY: as the caller guarantees (64 h + 64 <= 128).
        let bytes = unsafe { load512(blk.add(64 * h)) };
        let lo = _mm512_shuffle_epi8(table, _mm512_and_si512(bytes, m4));
        let hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16::<4>(bytes), m4));
        w[2 * h] = _mm512_unpacklo_epi8(lo, hi);
        w[2 * h + 1] = _mm512_unpackhi_epi8(lo, hi);
    }
    w
}

/// A group's contribution per 16 channels, in channel order, from its
/// `vpdpbusd` sums `acc` (lane order of `cq4_kg_weights`) and the
/// activation row's group `qsum` and `scale`: `(f32(acc - 128 qsum) *
/// scale) * folded` (the scalar kernel's f32 order; the caller adds it).
///
/// # Safety
/// The `avx512` tier's features; `folded..folded + 256` readable (the
/// group's 64 f32).
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn cq4_group_terms(
    acc: &[__m512i; 4],
    qsum: i32,
    scale: f32,
    folded: *const u8,
) -> [__m512; 4] {
    let idx_a = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    let idx_b = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    let bias = _mm512_set1_epi32(128 * qsum);
    let sc = _mm512_set1_ps(scale);
    let mut terms = [_mm512_setzero_ps(); 4];
    for h in 0..2 {
        let (u, v) = (
            _mm512_sub_epi32(acc[2 * h], bias),
            _mm512_sub_epi32(acc[2 * h + 1], bias),
        );
        let first = _mm512_permutex2var_epi32(u, idx_a, v);
        let second = _mm512_permutex2var_epi32(u, idx_b, v);
        for (i, iv) in [(2 * h, first), (2 * h + 1, second)] {
            // SAFETY: as the caller guarantees (channels 16i..16i + 16).
            let f = unsafe { _mm512_loadu_ps(folded.add(16 * i * 4).cast()) };
            terms[i] = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(iv), sc), f);
        }
    }
    terms
}

/// CQ4 super-block kernel (64 channels), `vpdpbusd` on 512-bit vectors.
///
/// Per kg-block: the 128 bytes looked up in the biased codebook
/// (`cq4_kg_weights`) and `vpdpbusd` against the 4 activations, which
/// accumulates `sum (cb + 128) q = isum + 128 * qsum[g]`; per group
/// `cq4_group_terms` removes the bias, restores the channel order and
/// scales.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn cq4_superblock(
    b: &PanelBlock<'_>,
    act: &Cq4Act<'_>,
    lut: &CbLut,
    out: &mut [f32; 64],
) {
    let ng = b.groups();
    assert!(
        act.q.len() >= ng * 128 && act.scale.len() >= ng && act.qsum.len() >= ng,
        "activations"
    );
    let table = cq4_biased_table(lut);
    let panels = b.panels().as_ptr();
    let folded = b.folded_bytes().as_ptr();
    let q = act.q.as_ptr().cast::<u8>();
    let mut accf = [_mm512_setzero_ps(); 4];
    for g in 0..ng {
        let mut acc = [_mm512_setzero_si512(); 4];
        for kg in 0..KG_PER_GROUP {
            // SAFETY: PanelBlock::new checked panels = ng * 32 * 128 bytes and
            // the assert above q >= ng * 128: kg-block (g, kg) and its 4
            // activations are in bounds.
            unsafe {
                let qd = _mm512_set1_epi32(read_u32(q.add(g * 128 + kg * 4)) as i32);
                let blk = panels.add((g * KG_PER_GROUP + kg) * 128);
                // A hint only: never faults, even past the end of the data.
                let ahead = blk.wrapping_add(super::CQ4_PREFETCH_BYTES);
                _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64).cast());
                let w = cq4_kg_weights(blk, table);
                for (a, wj) in acc.iter_mut().zip(&w) {
                    *a = _mm512_dpbusd_epi32(*a, *wj, qd);
                }
            }
        }
        // SAFETY: folded holds ng * 64 f32; group g's are at 256 g.
        let terms =
            unsafe { cq4_group_terms(&acc, act.qsum[g], act.scale[g], folded.add(g * 256)) };
        for (a, t) in accf.iter_mut().zip(terms) {
            *a = _mm512_add_ps(*a, t);
        }
    }
    for (i, a) in accf.iter().enumerate() {
        // SAFETY: `out` is 64 f32; 16i + 16 <= 64.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(16 * i), *a) };
    }
}

/// The orthogonal activation transform ([`crate::scalar::orthogonal_rotate`]),
/// 16 columns per vector, R widened with F16C; four `k` per pass over `z`
/// (each `z_j` still receives its products in `k` order).
///
/// # Safety
/// The CPU must support AVX-512 F.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn orthogonal_rotate(x: &[f32], recip: &[f32], r: &[u8], z: &mut [f32]) {
    let kp = x.len();
    assert!(
        recip.len() == kp && z.len() == kp && r.len() == 2 * kp * kp && kp.is_multiple_of(16),
        "shapes"
    );
    z.fill(0.0);
    let zp = z.as_mut_ptr();
    let rp = r.as_ptr();
    let mut k = 0;
    while k < kp {
        let nk = 4.min(kp - k);
        let mut a = [_mm512_setzero_ps(); 4];
        for (t, at) in a.iter_mut().enumerate().take(nk) {
            *at = _mm512_set1_ps(x[k + t] * recip[k + t]);
        }
        for j in (0..kp).step_by(16) {
            // SAFETY: j + 16 <= kp (kp % 16 == 0); rows k..k+nk of R hold
            // 2 * kp bytes each inside `r` (length checked above).
            unsafe {
                let mut acc = _mm512_loadu_ps(zp.add(j));
                for (t, at) in a.iter().enumerate().take(nk) {
                    let w = _mm512_cvtph_ps(load256(rp.add(2 * ((k + t) * kp + j))));
                    acc = _mm512_add_ps(acc, _mm512_mul_ps(*at, w));
                }
                _mm512_storeu_ps(zp.add(j), acc);
            }
        }
        k += nk;
    }
}
