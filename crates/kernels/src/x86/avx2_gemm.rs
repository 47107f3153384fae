//! AVX2 (+ F16C) multi-row (GEMM) kernels: one weight group against
//! several activation rows, each weight vector decoded once and dotted
//! with every row while it sits in registers. Same signatures as the
//! table's `GroupGemmFn` / `PanelGemmFn`; row `i` of a result is, bit for
//! bit, the tier's GEMV kernel ([`super::avx2`]) on row `i`: the integer
//! parts are the same exact sums (only the order in which exact integers
//! are added changes) and each row's f32 operations run in the GEMV's
//! order.
//!
//! CQ4 panels: per group and 16-channel stripe (32 bytes of each kg-block),
//! the nibbles are looked up in the int8 codebook once (`pshufb`) and
//! re-interleaved so an i32 lane holds one channel's 4 weights, as in the
//! GEMV; then for each of up to [`CQ4_ROWS`] activation rows the 4
//! activations of the kg-block are broadcast and dotted
//! (`maddubs(abs(w), sign(a, w))`, `madd` to i32). Per row that is 8
//! operations per 64 weights where the GEMV also spends 9 on decoding.

use core::arch::x86_64::*;

use super::{
    add_scaled, add_scaled_mins, bcast16_mask, d_dmin8, fp16_at8, i8x8, iq4_levels, iq4_table,
    iq4_xs_scales_at, k4_scales, load128, load256, pair16_mask, q3_k_values, q4_1_contrib,
    q4_k_values, q4_values, q5_0_values, q5_1_values, q5_k_values, q6_k_values, reduce8,
    two_bit_values, Slots,
};
use crate::act::{ActQ8_0, BlockQ8K, Cq4Rows, CQ4_TILE_ROWS};
use crate::blocks::{iq4_nl, iq4_xs, q2_k, q3_k, q4_0, q4_1, q5_0, q6_k, q8_0};
use crate::operands::{CbLut, PanelBlock, RowGroup, GROUP_ROWS, KG_BYTES, KG_PER_GROUP};

/// Activation rows the CQ4 kernel keeps in registers against one decoded
/// stripe (2 accumulators each: 8 of the 16 ymm registers).
pub const CQ4_ROWS: usize = 4;

/// The 4 packed activations of row `r` (of its 16-row tile) at 4-column
/// step `s`, broadcast to every i32 lane.
///
/// # Safety
/// `tile + 64 s + 4 r + 4` must be readable.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn act4(tile: *const i8, s: usize, r: usize) -> __m256i {
    // SAFETY: guaranteed by the caller; read_unaligned has no alignment
    // requirement.
    let v = unsafe { tile.add(64 * s + 4 * r).cast::<i32>().read_unaligned() };
    _mm256_set1_epi32(v)
}

/// `MT` rows (`i0..i0 + MT`, inside one 16-row tile of `rows`) against
/// group `g` of the super-block: for each 16-channel stripe, the integer
/// sums of the group, then `out[64 i + c] += (f32(isum) * scale) *
/// folded[g][c]` (the GEMV's f32 step).
///
/// # Safety
/// AVX2 + F16C; `g < b.groups() == rows.groups()`, `i0 + MT <= rows.rows()`,
/// `i0 % 16 + MT <= 16`, `out.len() == 64 * rows.rows()`.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn cq4_rows<const MT: usize>(
    b: &PanelBlock<'_>,
    rows: &Cq4Rows<'_>,
    g: usize,
    i0: usize,
    tables: (__m256i, __m256i),
    out: &mut [f32],
) {
    let (table, m4) = tables;
    let kp = rows.cols();
    let panels = b.panels().as_ptr();
    let folded = b.folded_bytes().as_ptr();
    let tile = rows.packed()[(i0 / CQ4_TILE_ROWS) * CQ4_TILE_ROWS * kp..].as_ptr();
    let r0 = i0 % CQ4_TILE_ROWS;
    let ones = _mm256_set1_epi16(1);
    for h in 0..4 {
        let mut acc = [[_mm256_setzero_si256(); 2]; MT];
        for kg in 0..KG_PER_GROUP {
            let s = g * KG_PER_GROUP + kg;
            // SAFETY: PanelBlock::new checked panels = ng * 32 * 128 bytes
            // (g < ng, 32h + 32 <= 128); the packed tile holds Kp / 4 steps
            // of 64 bytes (s < ng * 32 = Kp / 4, r0 + r < 16).
            unsafe {
                let blk = panels.add(s * KG_BYTES);
                if h == 0 && i0 == 0 {
                    // Hints only (the next group's lines): never fault.
                    let ahead = blk.wrapping_add(KG_PER_GROUP * KG_BYTES);
                    _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64).cast());
                }
                let bytes = load256(blk.add(32 * h));
                let lo = _mm256_shuffle_epi8(table, _mm256_and_si256(bytes, m4));
                let hi =
                    _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16::<4>(bytes), m4));
                let w0 = _mm256_unpacklo_epi8(lo, hi);
                let w1 = _mm256_unpackhi_epi8(lo, hi);
                let (a0, a1) = (_mm256_abs_epi8(w0), _mm256_abs_epi8(w1));
                for (r, ar) in acc.iter_mut().enumerate() {
                    let qd = act4(tile, s, r0 + r);
                    let p0 = _mm256_maddubs_epi16(a0, _mm256_sign_epi8(qd, w0));
                    let p1 = _mm256_maddubs_epi16(a1, _mm256_sign_epi8(qd, w1));
                    ar[0] = _mm256_add_epi32(ar[0], _mm256_madd_epi16(p0, ones));
                    ar[1] = _mm256_add_epi32(ar[1], _mm256_madd_epi16(p1, ones));
                }
            }
        }
        for (r, ar) in acc.iter().enumerate() {
            let i = i0 + r;
            let sc = _mm256_set1_ps(rows.scale(i, g));
            let first = _mm256_permute2x128_si256::<0x20>(ar[0], ar[1]);
            let second = _mm256_permute2x128_si256::<0x31>(ar[0], ar[1]);
            for (half, v) in [(0, first), (1, second)] {
                let c = 16 * h + 8 * half;
                // SAFETY: folded holds ng * 64 f32 (channels c..c+8 of group
                // g); out holds 64 per row (i < rows.rows()).
                unsafe {
                    let f = _mm256_loadu_ps(folded.add((g * 64 + c) * 4).cast());
                    let o = out.as_mut_ptr().add(64 * i + c);
                    let y = _mm256_add_ps(
                        _mm256_loadu_ps(o),
                        _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(v), sc), f),
                    );
                    _mm256_storeu_ps(o, y);
                }
            }
        }
    }
}

/// CQ4 super-block against every row of `rows` (`out[64 i + c]`), bit for
/// bit [`super::avx2::cq4_superblock`] per row: groups in order, and in
/// each group the rows in runs of [`CQ4_ROWS`] (module docs).
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
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
    // SAFETY: cb_i8 is 16 bytes.
    let table =
        _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(lut.cb_i8().as_ptr().cast()) });
    let tables = (table, _mm256_set1_epi8(0x0F));
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
                    4 => cq4_rows::<4>(b, rows, g, i0, tables, out),
                    3 => cq4_rows::<3>(b, rows, g, i0, tables, out),
                    2 => cq4_rows::<2>(b, rows, g, i0, tables, out),
                    _ => cq4_rows::<1>(b, rows, g, i0, tables, out),
                }
            }
            i0 += mt;
        }
    }
}

// ---------------------------------------------------------------------------
// ggml formats
// ---------------------------------------------------------------------------

/// One ggml format as the multi-row AVX2 kernel ([`group_gemm`]) runs it:
/// the block decoding of the tier's GEMV kernel split from its per-row
/// work. `decode` and `scales` run once per block (every slot), `prep`
/// once per block and activation row, `ints` per slot and row, `update`
/// per row: together exactly the GEMV kernel's operations for that row.
///
/// Every method is an AVX2 + F16C `#[target_feature]` function (so
/// `unsafe`: it may only run on a CPU with both, with the pointers and
/// blocks in bounds as stated), inlined into [`group_gemm`].
trait Avx2Block {
    /// The activation block type.
    type Act: Copy;
    /// One activation block loaded for the integer dots.
    type A: Copy;
    /// One slot's decoded block (weights, broadcast scales).
    type W: Copy;
    /// The block has a second integer part (`M`, mins).
    const MINS: bool;
    /// Decode the block at `p` (the whole block is readable).
    unsafe fn decode(p: *const u8) -> Self::W;
    /// Load an activation block.
    unsafe fn prep(a: &Self::Act) -> Self::A;
    /// One slot's i32 partial sums against one activation block: `(S, M)`
    /// (the 8 lanes of each sum to the block's integer part).
    unsafe fn ints(w: &Self::W, a: &Self::A) -> (__m256i, __m256i);
    /// The 8 slots' `(d, dmin)` (every current block readable).
    unsafe fn scales(s: &Slots) -> (__m256, __m256);
    /// `acc` plus the 8 rows' block contributions from the reduced
    /// integer parts, in the GEMV kernel's f32 order.
    unsafe fn update(
        acc: __m256,
        s: __m256i,
        m: __m256i,
        d: __m256,
        dmin: __m256,
        a: &Self::Act,
    ) -> __m256;
}

/// One 8-row group against `m = out.len() / 8` activation rows
/// (`act`: `m` rows of `g.nblocks()` blocks): per block, every slot is
/// decoded once, then each row takes its integer dots, the exact `reduce8`
/// and the f32 update of its 8 accumulators (kept in `out`, in block
/// order from 0.0, as the GEMV kernel's register accumulator).
///
/// # Safety
/// AVX2 + F16C.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn group_gemm<F: Avx2Block>(g: &RowGroup<'_>, act: &[F::Act], out: &mut [f32]) {
    let nb = g.nblocks();
    let m = out.len() / GROUP_ROWS;
    assert!(
        out.len() == GROUP_ROWS * m && act.len() >= m * nb,
        "GEMM tile shape"
    );
    out.fill(0.0);
    let mut s = Slots::new(g);
    let zero = _mm256_setzero_si256();
    for b in 0..nb {
        // SAFETY: by the RowGroup invariant the current block of every
        // slot is in bounds; the activation index is < m * nb; `out`
        // holds 8 f32 per row. The trait methods need AVX2 + F16C (this
        // function's features).
        unsafe {
            // (Loops, not array::from_fn: a closure would be a function of
            // its own without this function's target features.)
            let w0 = F::decode(s.at(0));
            let mut w = [w0; GROUP_ROWS];
            for (r, wr) in w.iter_mut().enumerate().skip(1) {
                *wr = F::decode(s.at(r));
            }
            let (d, dmin) = F::scales(&s);
            for i in 0..m {
                let a = &act[i * nb + b];
                let ap = F::prep(a);
                let mut sv = [zero; GROUP_ROWS];
                let mut mv = [zero; GROUP_ROWS];
                for r in 0..GROUP_ROWS {
                    (sv[r], mv[r]) = F::ints(&w[r], &ap);
                }
                let si = reduce8(&sv);
                let mi = if F::MINS { reduce8(&mv) } else { zero };
                let o = out.as_mut_ptr().add(GROUP_ROWS * i);
                let y = F::update(_mm256_loadu_ps(o), si, mi, d, dmin, a);
                _mm256_storeu_ps(o, y);
            }
        }
        s.prefetch();
        s.advance();
    }
}

/// `sum w a` of 32 signed bytes against prepared `(|w|, w)`: 8 i32 partials.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn dot_signed(absw: __m256i, w: __m256i, a: __m256i) -> __m256i {
    _mm256_madd_epi16(
        _mm256_maddubs_epi16(absw, _mm256_sign_epi8(a, w)),
        _mm256_set1_epi16(1),
    )
}

/// `sum v a` of 32 unsigned values (<= 63) against signed activations.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn dot_unsigned(v: __m256i, a: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(v, a), _mm256_set1_epi16(1))
}

/// The 32 quants of a Q8_0 activation block.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn q8_0_act(a: &ActQ8_0) -> __m256i {
    // SAFETY: `qs` is 32 bytes; AVX2 (the caller's contract).
    unsafe { load256(a.qs.as_ptr().cast()) }
}

/// Q8_0 (`NL = false`) and IQ4_NL (`NL = true`): 32 signed weights.
#[derive(Clone, Copy)]
struct Signed32<const NL: bool>;

impl<const NL: bool> Avx2Block for Signed32<NL> {
    type Act = ActQ8_0;
    type A = __m256i;
    type W = (__m256i, __m256i);
    const MINS: bool = false;
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn decode(p: *const u8) -> Self::W {
        // SAFETY: a whole Q8_0 (qs 32 bytes at 2) or IQ4_NL (qs 16 bytes
        // at 2) block is readable; AVX2.
        unsafe {
            let w = if NL {
                iq4_levels(p.add(iq4_nl::QS), iq4_table())
            } else {
                load256(p.add(q8_0::QS))
            };
            (_mm256_abs_epi8(w), w)
        }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn prep(a: &ActQ8_0) -> __m256i {
        // SAFETY: the caller's contract.
        unsafe { q8_0_act(a) }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn ints(w: &Self::W, a: &__m256i) -> (__m256i, __m256i) {
        // SAFETY: the caller's contract.
        unsafe { (dot_signed(w.0, w.1, *a), _mm256_setzero_si256()) }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn scales(s: &Slots) -> (__m256, __m256) {
        // SAFETY: d at 0 of both block types.
        let d = unsafe { fp16_at8(s, if NL { iq4_nl::D } else { q8_0::D }) };
        (d, d)
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn update(
        acc: __m256,
        s: __m256i,
        _: __m256i,
        d: __m256,
        _: __m256,
        a: &ActQ8_0,
    ) -> __m256 {
        add_scaled(acc, s, d, a.d)
    }
}

/// Q4_0 / Q5_0 (`Q5`): unsigned values, offset 8 / 16 removed with the
/// activation sum.
#[derive(Clone, Copy)]
struct Offset32<const Q5: bool>;

impl<const Q5: bool> Avx2Block for Offset32<Q5> {
    type Act = ActQ8_0;
    type A = __m256i;
    type W = __m256i;
    const MINS: bool = false;
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn decode(p: *const u8) -> __m256i {
        // SAFETY: a whole Q4_0 / Q5_0 block is readable; AVX2.
        unsafe {
            if Q5 {
                q5_0_values(p)
            } else {
                q4_values(p.add(q4_0::QS))
            }
        }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn prep(a: &ActQ8_0) -> __m256i {
        // SAFETY: the caller's contract.
        unsafe { q8_0_act(a) }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn ints(w: &__m256i, a: &__m256i) -> (__m256i, __m256i) {
        // SAFETY: the caller's contract.
        unsafe { (dot_unsigned(*w, *a), _mm256_setzero_si256()) }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn scales(s: &Slots) -> (__m256, __m256) {
        // SAFETY: d at 0 of both block types.
        let d = unsafe { fp16_at8(s, if Q5 { q5_0::D } else { q4_0::D }) };
        (d, d)
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn update(
        acc: __m256,
        s: __m256i,
        _: __m256i,
        d: __m256,
        _: __m256,
        a: &ActQ8_0,
    ) -> __m256 {
        // sum (v - o) a = sum v a - o sum a.
        let o = if Q5 { 16 } else { 8 };
        add_scaled(
            acc,
            _mm256_sub_epi32(s, _mm256_set1_epi32(o * a.sum)),
            d,
            a.d,
        )
    }
}

/// Q4_1 / Q5_1 (`Q5`): unsigned values, the min term from the activation
/// sum.
#[derive(Clone, Copy)]
struct Min32<const Q5: bool>;

impl<const Q5: bool> Avx2Block for Min32<Q5> {
    type Act = ActQ8_0;
    type A = __m256i;
    type W = __m256i;
    const MINS: bool = false;
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn decode(p: *const u8) -> __m256i {
        // SAFETY: a whole Q4_1 / Q5_1 block is readable; AVX2.
        unsafe {
            if Q5 {
                q5_1_values(p)
            } else {
                q4_values(p.add(q4_1::QS))
            }
        }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn prep(a: &ActQ8_0) -> __m256i {
        // SAFETY: the caller's contract.
        unsafe { q8_0_act(a) }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn ints(w: &__m256i, a: &__m256i) -> (__m256i, __m256i) {
        // SAFETY: the caller's contract.
        unsafe { (dot_unsigned(*w, *a), _mm256_setzero_si256()) }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn scales(s: &Slots) -> (__m256, __m256) {
        // SAFETY: d and m at 0 and 2 of both block types.
        unsafe { d_dmin8(s) }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn update(
        acc: __m256,
        s: __m256i,
        _: __m256i,
        d: __m256,
        m: __m256,
        a: &ActQ8_0,
    ) -> __m256 {
        _mm256_add_ps(acc, q4_1_contrib(s, d, m, a))
    }
}

/// The 8 runs of 32 quants of a Q8_K block, and its 16 bsums.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn q8_k_act(a: &BlockQ8K) -> ([__m256i; 8], __m256i) {
    // SAFETY: `qs` is 256 bytes, `bsums` 32; AVX2 (the caller's contract).
    unsafe {
        let mut v = [_mm256_setzero_si256(); 8];
        for (j, vj) in v.iter_mut().enumerate() {
            *vj = load256(a.qs.as_ptr().add(32 * j).cast());
        }
        (v, load256(a.bsums.as_ptr().cast()))
    }
}

/// Q4_K / Q5_K (`Q5`): 8 sub-blocks of 32 unsigned values, their scales
/// broadcast per sub-block (`madd`), mins against the bsums.
#[derive(Clone, Copy)]
struct K4<const Q5: bool>;

impl<const Q5: bool> Avx2Block for K4<Q5> {
    type Act = BlockQ8K;
    type A = ([__m256i; 8], __m256i);
    type W = ([__m256i; 8], [__m256i; 8], __m256i);
    const MINS: bool = true;
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn decode(p: *const u8) -> Self::W {
        // SAFETY: a whole Q4_K / Q5_K block is readable; AVX2.
        unsafe {
            let (sc, mins) = k4_scales(p);
            let v = if Q5 { q5_k_values(p) } else { q4_k_values(p) };
            let mut scj = [_mm256_setzero_si256(); 8];
            for (j, s) in scj.iter_mut().enumerate() {
                *s = _mm256_shuffle_epi8(sc, bcast16_mask(j));
            }
            (v, scj, mins)
        }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn prep(a: &BlockQ8K) -> Self::A {
        // SAFETY: the caller's contract.
        unsafe { q8_k_act(a) }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn ints(w: &Self::W, a: &Self::A) -> (__m256i, __m256i) {
        let mut t = _mm256_setzero_si256();
        for j in 0..8 {
            let pj = _mm256_maddubs_epi16(w.0[j], a.0[j]);
            t = _mm256_add_epi32(t, _mm256_madd_epi16(pj, w.1[j]));
        }
        (t, _mm256_madd_epi16(w.2, a.1))
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn scales(s: &Slots) -> (__m256, __m256) {
        // SAFETY: d, dmin at 0 and 2 of both block types.
        unsafe { d_dmin8(s) }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn update(
        acc: __m256,
        s: __m256i,
        m: __m256i,
        d: __m256,
        dmin: __m256,
        a: &BlockQ8K,
    ) -> __m256 {
        // SAFETY: the caller's contract.
        add_scaled_mins(acc, s, m, d, dmin, a.d)
    }
}

/// The two per-half i16 scale vectors of 16 i8 scales (Q6_K, Q2_K, Q3_K),
/// arranged for run `i` (`pair16_mask(i % 4)` of half `i / 4`).
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn k16_scales(sc8: __m128i) -> [__m256i; 8] {
    let sc_h = [
        _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8)),
        _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128::<8>(sc8))),
    ];
    let mut v = [_mm256_setzero_si256(); 8];
    for (i, vi) in v.iter_mut().enumerate() {
        *vi = _mm256_shuffle_epi8(sc_h[i / 4], pair16_mask(i % 4));
    }
    v
}

/// `sum_i madd(maddubs(v_i, a_i), sc_i)`: 8 runs of 32 unsigned values,
/// each half-run with its own i16 scale.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn scaled_runs(v: &[__m256i; 8], sc: &[__m256i; 8], a: &[__m256i; 8]) -> __m256i {
    let mut t = _mm256_setzero_si256();
    for i in 0..8 {
        let pi = _mm256_maddubs_epi16(v[i], a[i]);
        t = _mm256_add_epi32(t, _mm256_madd_epi16(pi, sc[i]));
    }
    t
}

/// Q6_K: 16 sub-blocks of 16 six-bit values, offset 32 removed as `32 sum_j
/// sc_j bsum_j`.
#[derive(Clone, Copy)]
struct Q6;

impl Avx2Block for Q6 {
    type Act = BlockQ8K;
    type A = ([__m256i; 8], __m256i);
    type W = ([__m256i; 8], [__m256i; 8], __m256i);
    const MINS: bool = false;
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn decode(p: *const u8) -> Self::W {
        // SAFETY: a whole Q6_K block is readable (scales 16 bytes at 192);
        // AVX2.
        unsafe {
            let sc8 = load128(p.add(q6_k::SCALES));
            (q6_k_values(p), k16_scales(sc8), _mm256_cvtepi8_epi16(sc8))
        }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn prep(a: &BlockQ8K) -> Self::A {
        // SAFETY: the caller's contract.
        unsafe { q8_k_act(a) }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn ints(w: &Self::W, a: &Self::A) -> (__m256i, __m256i) {
        // SAFETY: AVX2 (the caller's contract).
        unsafe {
            let t = scaled_runs(&w.0, &w.1, &a.0);
            // sum sc_j (v - 32) a = sum sc_j v a - 32 sum sc_j bsum_j.
            let bias = _mm256_madd_epi16(w.2, a.1);
            (
                _mm256_sub_epi32(t, _mm256_slli_epi32::<5>(bias)),
                _mm256_setzero_si256(),
            )
        }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn scales(s: &Slots) -> (__m256, __m256) {
        // SAFETY: d at 208 of the block.
        let d = unsafe { fp16_at8(s, q6_k::D) };
        (d, d)
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn update(
        acc: __m256,
        s: __m256i,
        _: __m256i,
        d: __m256,
        _: __m256,
        a: &BlockQ8K,
    ) -> __m256 {
        add_scaled(acc, s, d, a.d)
    }
}

/// Q2_K / Q3_K (`Q3`): 16 sub-blocks of 16 (Q2_K: 0..=3 with 4-bit
/// scales and mins; Q3_K: `v + 4` in 0..=7 with signed 6-bit scales, the
/// +4 removed as `4 sum_j sc_j bsum_j`).
#[derive(Clone, Copy)]
struct K16<const Q3: bool>;

impl<const Q3: bool> Avx2Block for K16<Q3> {
    type Act = BlockQ8K;
    type A = ([__m256i; 8], __m256i);
    /// Values, run scales, and Q2_K's mins / Q3_K's widened scales.
    type W = ([__m256i; 8], [__m256i; 8], __m256i);
    const MINS: bool = !Q3;
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn decode(p: *const u8) -> Self::W {
        // SAFETY: a whole Q2_K (scales 16 at 0, qs 64 at 16) or Q3_K
        // (hmask 32 at 0, qs 64 at 32, scales 12 at 96) block is
        // readable; AVX2.
        unsafe {
            if Q3 {
                let sc = crate::blocks::q3_k_scales(&*p.add(q3_k::SCALES).cast::<[u8; 12]>());
                let sc8 = load128(sc.as_ptr().cast());
                (q3_k_values(p), k16_scales(sc8), _mm256_cvtepi8_epi16(sc8))
            } else {
                let m4 = _mm_set1_epi8(0x0F);
                let b = load128(p.add(q2_k::SCALES));
                let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(b), m4));
                let sc8 = _mm_and_si128(b, m4);
                (two_bit_values(p.add(q2_k::QS)), k16_scales(sc8), mins)
            }
        }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn prep(a: &BlockQ8K) -> Self::A {
        // SAFETY: the caller's contract.
        unsafe { q8_k_act(a) }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn ints(w: &Self::W, a: &Self::A) -> (__m256i, __m256i) {
        // SAFETY: AVX2 (the caller's contract).
        unsafe {
            let t = scaled_runs(&w.0, &w.1, &a.0);
            let e = _mm256_madd_epi16(w.2, a.1);
            if Q3 {
                // sum sc_j v a = sum sc_j (v + 4) a - 4 sum sc_j bsum_j.
                (
                    _mm256_sub_epi32(t, _mm256_slli_epi32::<2>(e)),
                    _mm256_setzero_si256(),
                )
            } else {
                (t, e)
            }
        }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn scales(s: &Slots) -> (__m256, __m256) {
        // SAFETY: Q3_K: d at 108; Q2_K: d, dmin at 80, 82.
        unsafe {
            if Q3 {
                let d = fp16_at8(s, q3_k::D);
                (d, d)
            } else {
                (fp16_at8(s, q2_k::D), fp16_at8(s, q2_k::DMIN))
            }
        }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn update(
        acc: __m256,
        s: __m256i,
        m: __m256i,
        d: __m256,
        dmin: __m256,
        a: &BlockQ8K,
    ) -> __m256 {
        if Q3 {
            add_scaled(acc, s, d, a.d)
        } else {
            add_scaled_mins(acc, s, m, d, dmin, a.d)
        }
    }
}

/// IQ4_XS: 8 sub-blocks of 32 levels (`pshufb`), signed x signed, times
/// the broadcast `ls_j - 32`.
#[derive(Clone, Copy)]
struct Iq4Xs;

impl Avx2Block for Iq4Xs {
    type Act = BlockQ8K;
    type A = [__m256i; 8];
    /// Levels, their absolute values, the run scales.
    type W = ([__m256i; 8], [__m256i; 8], [__m256i; 8]);
    const MINS: bool = false;
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn decode(p: *const u8) -> Self::W {
        // SAFETY: a whole 136-byte block is readable (header 8 bytes, qs
        // 128 at 8); AVX2.
        unsafe {
            let table = iq4_table();
            let sc = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(i8x8(iq4_xs_scales_at(p))));
            let mut w = (
                [_mm256_setzero_si256(); 8],
                [_mm256_setzero_si256(); 8],
                [_mm256_setzero_si256(); 8],
            );
            for j in 0..8 {
                w.0[j] = iq4_levels(p.add(iq4_xs::QS + 16 * j), table);
                w.1[j] = _mm256_abs_epi8(w.0[j]);
                w.2[j] = _mm256_shuffle_epi8(sc, bcast16_mask(j));
            }
            w
        }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn prep(a: &BlockQ8K) -> Self::A {
        // SAFETY: the caller's contract.
        unsafe { q8_k_act(a).0 }
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn ints(w: &Self::W, a: &Self::A) -> (__m256i, __m256i) {
        let mut t = _mm256_setzero_si256();
        for (j, aj) in a.iter().enumerate() {
            let pj = _mm256_maddubs_epi16(w.1[j], _mm256_sign_epi8(*aj, w.0[j]));
            t = _mm256_add_epi32(t, _mm256_madd_epi16(pj, w.2[j]));
        }
        (t, _mm256_setzero_si256())
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn scales(s: &Slots) -> (__m256, __m256) {
        // SAFETY: d at 0.
        let d = unsafe { fp16_at8(s, iq4_xs::D) };
        (d, d)
    }
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn update(
        acc: __m256,
        s: __m256i,
        _: __m256i,
        d: __m256,
        _: __m256,
        a: &BlockQ8K,
    ) -> __m256 {
        add_scaled(acc, s, d, a.d)
    }
}

macro_rules! gemm_kernel {
    ($(#[$doc:meta])* $name:ident, $act:ty, $fmt:ty) => {
        $(#[$doc])*
        ///
        /// Row `i` of `out` (8 values) is bit for bit the AVX2 group kernel
        /// of the same format on activation row `i` (module docs).
        ///
        /// # Safety
        /// The CPU must support AVX2 and F16C.
        #[target_feature(enable = "avx2,f16c")]
        pub unsafe fn $name(g: &RowGroup<'_>, act: &[$act], out: &mut [f32]) {
            // SAFETY: same features.
            unsafe { group_gemm::<$fmt>(g, act, out) }
        }
    };
}

gemm_kernel!(
    /// Q8_0 multi-row group kernel.
    q8_0_gemm, ActQ8_0, Signed32<false>
);
gemm_kernel!(
    /// IQ4_NL multi-row group kernel.
    iq4_nl_gemm, ActQ8_0, Signed32<true>
);
gemm_kernel!(
    /// Q4_0 multi-row group kernel.
    q4_0_gemm, ActQ8_0, Offset32<false>
);
gemm_kernel!(
    /// Q5_0 multi-row group kernel.
    q5_0_gemm, ActQ8_0, Offset32<true>
);
gemm_kernel!(
    /// Q4_1 multi-row group kernel.
    q4_1_gemm, ActQ8_0, Min32<false>
);
gemm_kernel!(
    /// Q5_1 multi-row group kernel.
    q5_1_gemm, ActQ8_0, Min32<true>
);
gemm_kernel!(
    /// Q4_K multi-row group kernel.
    q4_k_gemm, BlockQ8K, K4<false>
);
gemm_kernel!(
    /// Q5_K multi-row group kernel.
    q5_k_gemm, BlockQ8K, K4<true>
);
gemm_kernel!(
    /// Q6_K multi-row group kernel.
    q6_k_gemm, BlockQ8K, Q6
);
gemm_kernel!(
    /// Q2_K multi-row group kernel.
    q2_k_gemm, BlockQ8K, K16<false>
);
gemm_kernel!(
    /// Q3_K multi-row group kernel.
    q3_k_gemm, BlockQ8K, K16<true>
);
gemm_kernel!(
    /// IQ4_XS multi-row group kernel.
    iq4_xs_gemm, BlockQ8K, Iq4Xs
);
