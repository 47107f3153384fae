//! The filter tiles on x86-64 AVX2 + FMA: up to 6 rows x `NR` = 16
//! columns per pass as accumulators of 8 f32 lanes, one fused multiply-add
//! per product (one rounding per term, the arithmetic `E` is derived for),
//! each block of `KB` terms converted to f64 and added to the f64 sums.
#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::{APack, BRow, Buckets, Nibbles, Tile, KB, MR, NR, TABLE_BUCKETS, UNCERTAIN};
use crate::hadamard::FIXED_MAGIC;
use crate::hadamard_quant::{
    Batch, BatchIdx, HadamardQuant, Positions, Rotated, Row, SearchTable, BUCKETS, LANES, SCAN,
};

/// `N` tiles over one R panel: `[tile(a[0], b), .., tile(a[N-1], b)]` bit
/// for bit. Safe entry: checks the CPU, then runs the kernel.
pub(super) fn tiles<const N: usize>(a: [&[APack]; N], b: &[BRow]) -> [Tile; N] {
    assert!(
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    );
    // SAFETY: AVX2 and FMA were detected on this CPU just above.
    unsafe { tiles_by_rows(a, b) }
}

/// `N` tiles over one R panel in passes of up to 6 of their `N * MR` rows,
/// each pass over all 16 columns: 6 rows x 16 columns = 12 accumulators of
/// 8 lanes, 2 registers of R and the broadcast (15 of the 16 registers).
/// Per term, 6 broadcasts of `uf` and 2 loads of R for 12 FMAs (8
/// load-port operations, 9 with the prefetch, against the 12 FMAs' 6
/// cycles), where a pass over half the panel's columns for 3 tiles did 12
/// broadcasts and 1 load for 12 FMAs (the loads, not the FMAs, bound it).
/// Each output's chain is the same whatever the pass shape: the block's
/// FMAs in `k` order from zero, the block sum converted to f64 and added in
/// block order, so the bits are too (tests: `simd::tests`, every grid
/// shape against single tiles).
#[target_feature(enable = "avx2,fma")]
fn tiles_by_rows<const N: usize>(a: [&[APack]; N], b: &[BRow]) -> [Tile; N] {
    let mut out = [[[_mm256_setzero_pd(); NR / 4]; MR]; N];
    let (bblocks, _) = b.as_chunks::<KB>();
    let ablocks: [&[[APack; KB]]; N] = a.map(|x| x.as_chunks::<KB>().0);
    for (blk, bb) in bblocks.iter().enumerate() {
        let ab: [&[APack; KB]; N] = std::array::from_fn(|t| &ablocks[t][blk]);
        // The R row PREFETCH_ROWS ahead of each term into L1 (in the
        // block's first pass; the others find its rows there).
        let ahead = b.as_ptr().wrapping_add(blk * KB + super::PREFETCH_ROWS);
        // Rows A0 .. A0 + NA of tile `ta`, then rows 0 .. NB of tile `tb`.
        macro_rules! pass {
            ($a0:literal, $na:literal, $nb:literal, $ta:expr, $tb:expr, $first:expr) => {{
                let (x, y) = rows_pass::<$a0, $na, $nb>(ab[$ta], ab[$tb], bb, $first, ahead);
                add_block(&mut out[$ta], $a0, &x);
                add_block(&mut out[$tb], 0, &y);
            }};
        }
        match N {
            2 => {
                pass!(0, 4, 2, 0, 1, true);
                pass!(2, 2, 0, 1, 1, false);
            }
            3 => {
                pass!(0, 4, 2, 0, 1, true);
                pass!(2, 2, 4, 1, 2, false);
            }
            4 => {
                pass!(0, 4, 2, 0, 1, true);
                pass!(2, 2, 4, 1, 2, false);
                pass!(0, 4, 0, 3, 3, false);
            }
            _ => {
                for t in 0..N {
                    pass!(0, 4, 0, t, t, t == 0);
                }
            }
        }
    }
    let mut res = [[[0.0f64; NR]; MR]; N];
    for (res_t, out_t) in res.iter_mut().zip(&out) {
        for r in 0..MR {
            for (q, v) in out_t[r].iter().enumerate() {
                // SAFETY: `res_t[r][4q .. 4q + 4]` is inside the `[f64; 16]`
                // row (q < 4); unaligned store.
                unsafe { _mm256_storeu_pd(res_t[r].as_mut_ptr().add(4 * q), *v) };
            }
        }
    }
    res
}

/// One pass of [`tiles_by_rows`] over a block of `KB` terms, all 16
/// columns: the block sums of rows `A0 .. A0 + NA` of `ta` and of rows
/// `0 .. NB` of `tb` (every row index a constant: the broadcasts read
/// fixed offsets).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn rows_pass<const A0: usize, const NA: usize, const NB: usize>(
    ta: &[APack; KB],
    tb: &[APack; KB],
    bb: &[BRow; KB],
    prefetch: bool,
    ahead: *const BRow,
) -> ([[__m256; 2]; NA], [[__m256; 2]; NB]) {
    const { assert!(A0 + NA <= MR && NB <= MR && NA + NB <= 6) };
    let mut acc_a = [[_mm256_setzero_ps(); 2]; NA];
    let mut acc_b = [[_mm256_setzero_ps(); 2]; NB];
    for (k, y) in bb.iter().enumerate() {
        if prefetch {
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(k).cast());
        }
        // SAFETY: `y` is a `[f32; 16]`: both 8-lane unaligned loads read
        // inside it.
        let (b0, b1) = unsafe {
            (
                _mm256_loadu_ps(y.as_ptr()),
                _mm256_loadu_ps(y.as_ptr().add(8)),
            )
        };
        for (i, acc) in acc_a.iter_mut().enumerate() {
            let av = _mm256_set1_ps(ta[k][A0 + i]);
            acc[0] = _mm256_fmadd_ps(av, b0, acc[0]);
            acc[1] = _mm256_fmadd_ps(av, b1, acc[1]);
        }
        for (i, acc) in acc_b.iter_mut().enumerate() {
            let av = _mm256_set1_ps(tb[k][i]);
            acc[0] = _mm256_fmadd_ps(av, b0, acc[0]);
            acc[1] = _mm256_fmadd_ps(av, b1, acc[1]);
        }
    }
    (acc_a, acc_b)
}

/// Add the block sums of rows `r0 ..` of one tile to its f64 sums.
#[target_feature(enable = "avx2")]
#[inline]
fn add_block(out: &mut [[__m256d; NR / 4]; MR], r0: usize, acc: &[[__m256; 2]]) {
    for (o, acc) in out[r0..].iter_mut().zip(acc) {
        for h in 0..2 {
            let lo = _mm256_cvtps_pd(_mm256_castps256_ps128(acc[h]));
            let hi = _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(acc[h]));
            o[2 * h] = _mm256_add_pd(o[2 * h], lo);
            o[2 * h + 1] = _mm256_add_pd(o[2 * h + 1], hi);
        }
    }
}

/// [`super::all_finite`] compiled with AVX2 (the portable scan, 8 lanes).
pub(super) fn all_finite(values: &[f32]) -> bool {
    assert!(std::arch::is_x86_feature_detected!("avx2"));
    // SAFETY: AVX2 was detected on this CPU just above.
    unsafe { all_finite_avx2(values) }
}

#[target_feature(enable = "avx2")]
fn all_finite_avx2(values: &[f32]) -> bool {
    super::portable_all_finite(values)
}

/// [`super::pow2_scaling_is_exact`] compiled with AVX2 (the portable scan,
/// 8 lanes).
pub(super) fn pow2_scaling_is_exact(e: i32, values: &[f32]) -> bool {
    assert!(std::arch::is_x86_feature_detected!("avx2"));
    // SAFETY: AVX2 was detected on this CPU just above.
    unsafe { pow2_scaling_is_exact_avx2(e, values) }
}

#[target_feature(enable = "avx2")]
fn pow2_scaling_is_exact_avx2(e: i32, values: &[f32]) -> bool {
    super::portable_pow2_scaling_is_exact(e, values)
}

/// [`super::gather_batch`] of four full groups: four values of each group
/// transposed into the four lanes (as [`columns4`] does for rows), each
/// widened to f64 and stored as one `x[i]`. Safe entry: checks the CPU
/// and the lengths, then runs the kernel.
pub(super) fn gather_batch(src: [&[f32]; LANES], x: &mut Batch) {
    assert!(std::arch::is_x86_feature_detected!("avx2"));
    assert!(src.iter().all(|s| s.len() == x.len()));
    // SAFETY: AVX2 was detected just above; every group has `x.len()` values.
    unsafe { gather_batch_avx2(src, x) }
}

#[target_feature(enable = "avx2")]
fn gather_batch_avx2(src: [&[f32]; LANES], x: &mut Batch) {
    const _: () = assert!(LANES == MR);
    for i in (0..x.len()).step_by(4) {
        // SAFETY: every group has `x.len()` values and `i + 4 <= x.len()`
        // (HADAMARD_N is a multiple of 4).
        let cols = unsafe { columns4(&src, i) };
        for (c, v) in cols.iter().enumerate() {
            // SAFETY: `x[i + c]` is a `[f64; 4]`; unaligned 4-lane store.
            unsafe { _mm256_storeu_pd(x[i + c].as_mut_ptr(), _mm256_cvtps_pd(*v)) };
        }
    }
}

/// [`super::column_squares`] compiled with AVX2 (the portable body, 4 f64
/// lanes per register; the same operations column by column), the next
/// rows prefetched into L1.
pub(super) fn column_squares(sums: &mut [f64], rows: &[f32], k: usize, c0: usize) {
    assert!(std::arch::is_x86_feature_detected!("avx2"));
    // SAFETY: AVX2 was detected on this CPU just above.
    unsafe { column_squares_avx2(sums, rows, k, c0) }
}

#[target_feature(enable = "avx2")]
fn column_squares_avx2(sums: &mut [f64], rows: &[f32], k: usize, c0: usize) {
    // The closure inherits this function's target features.
    super::portable_column_squares(sums, rows, k, c0, |p| _mm_prefetch::<_MM_HINT_T0>(p.cast()))
}

/// [`super::apply_reflector`] compiled with AVX2 (the portable body, 4
/// f64 columns per instruction; no FMA: the same values).
pub(super) fn apply_reflector<const W: usize>(
    panel: &mut [[f64; W]],
    j: usize,
    q0: usize,
    v: &[f64],
    beta: f64,
) {
    assert!(std::arch::is_x86_feature_detected!("avx2"));
    // SAFETY: AVX2 was detected on this CPU just above.
    unsafe { apply_reflector_avx2(panel, j, q0, v, beta) }
}

#[target_feature(enable = "avx2")]
fn apply_reflector_avx2<const W: usize>(
    panel: &mut [[f64; W]],
    j: usize,
    q0: usize,
    v: &[f64],
    beta: f64,
) {
    super::portable_apply_reflector(panel, j, q0, v, beta)
}

/// The Hadamard batch quantizer compiled with AVX2 (the portable body,
/// 4 f64 lanes per register; no FMA, no reassociation: the same values).
pub(super) fn hadamard_batch(q: &HadamardQuant, x: &mut Batch, idx: &mut BatchIdx) -> [f64; LANES] {
    assert!(
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("popcnt")
    );
    // SAFETY: AVX2 and POPCNT were detected on this CPU just above.
    unsafe { hadamard_batch_avx2(q, x, idx) }
}

#[target_feature(enable = "avx2,popcnt")]
fn hadamard_batch_avx2(q: &HadamardQuant, x: &mut Batch, idx: &mut BatchIdx) -> [f64; LANES] {
    let norm = q.transform(x);
    // The closures inherit this function's target features.
    let s = q.refine(
        x,
        idx,
        |st, rot, pos| positions_avx2(st, rot, pos),
        |st, rot, pos, l| sums_avx2(st, rot, pos, l),
    );
    std::array::from_fn(|l| norm[l] * s[l])
}

/// [`crate::hadamard_quant::positions`]: each lane's bucket from the same
/// f64 add, multiply, range tests and truncation as
/// [`SearchTable::position`], then the count of the [`SCAN`] thresholds
/// from the bucket's start below the value as one 4-lane compare (the
/// table holds `+inf` past its end, and counting past `steps` adds nothing).
/// A table with more than [`SCAN`] steps takes the portable scan.
#[cfg(test)]
pub(super) fn positions(st: &SearchTable, rot: &Rotated, pos: &mut Positions) {
    assert!(
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("popcnt")
    );
    // SAFETY: AVX2 and POPCNT were detected on this CPU just above.
    unsafe { positions_avx2(st, rot, pos) }
}

#[target_feature(enable = "avx2,popcnt")]
fn positions_avx2(st: &SearchTable, rot: &Rotated, pos: &mut Positions) {
    const _: () = assert!(SCAN == 4 && LANES == 4);
    // The starts ascend with the bucket: the last is the largest.
    let fits = |last: &u8| *last as usize + SCAN <= st.thr.len();
    if st.steps > SCAN || st.start.len() != BUCKETS || !st.start.last().is_some_and(fits) {
        return crate::hadamard_quant::positions(st, rot, pos);
    }
    let range = _mm256_set1_pd(st.range);
    let inv_w = _mm256_set1_pd(st.inv_w);
    let nb = _mm256_set1_pd(BUCKETS as f64);
    let last = _mm_set1_epi32(BUCKETS as i32 - 1);
    let zero = _mm256_setzero_pd();
    // The low 32 bits of each 64-bit mask lane.
    let low_halves = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    let half = |m: __m256d| {
        _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(
            _mm256_castpd_si256(m),
            low_halves,
        ))
    };
    for (d, r) in pos.iter_mut().zip(rot) {
        // SAFETY: `r` is `[f64; 4]`; unaligned load.
        let v = unsafe { _mm256_loadu_pd(r.as_ptr()) };
        let t = _mm256_mul_pd(_mm256_add_pd(v, range), inv_w);
        let inside = _mm256_and_pd(
            _mm256_cmp_pd::<_CMP_GE_OQ>(t, zero),
            _mm256_cmp_pd::<_CMP_LT_OQ>(t, nb),
        );
        let below = _mm256_cmp_pd::<_CMP_LT_OQ>(t, zero);
        // Outside: 0 below the buckets, the last one above and for NaN.
        let outside = _mm_andnot_si128(half(below), last);
        let b = _mm_blendv_epi8(outside, _mm256_cvttpd_epi32(t), half(inside));
        let mut bs = [0i32; 4];
        // SAFETY: 4 i32 into the 4-element array; unaligned store.
        unsafe { _mm_storeu_si128(bs.as_mut_ptr().cast(), b) };
        for l in 0..LANES {
            // Every lane of `b` is in 0..BUCKETS (a truncation inside the
            // range or one of its ends), so the index is in bounds.
            let s = st.start[bs[l] as usize] as usize;
            // `s` is at most the last start, which leaves `SCAN` entries
            // (checked above).
            let th = &st.thr[s..s + SCAN];
            // SAFETY: `th` has SCAN = 4 values: one 4-lane unaligned load.
            let v = unsafe { _mm256_loadu_pd(th.as_ptr()) };
            let m = _mm256_movemask_pd(_mm256_cmp_pd::<_CMP_LT_OQ>(v, _mm256_set1_pd(r[l])));
            d[l] = (s + (m as u32).count_ones() as usize) as u8;
        }
    }
}

/// [`crate::hadamard_quant::sums`] with the candidate slots in vectors:
/// slots 0-7 in two 4-lane vectors, slots 8-9 in a 2-lane one (slots
/// 10-11 are padding and stay 0). Each slot's product is rounded, then
/// added (no FMA), in `j` order: the portable function's values.
#[target_feature(enable = "avx2")]
fn sums_avx2(st: &SearchTable, rot: &Rotated, pos: &Positions, l: usize) -> (Row, Row) {
    const _: () = assert!(crate::hadamard_quant::SCALE_CANDIDATES <= 10);
    let (mut n0, mut n1, mut n2) = (_mm256_setzero_pd(), _mm256_setzero_pd(), _mm_setzero_pd());
    let (mut d0, mut d1, mut d2) = (_mm256_setzero_pd(), _mm256_setzero_pd(), _mm_setzero_pd());
    for (rj, pj) in rot.iter().zip(pos) {
        let q = pj[l] as usize;
        let (c, c2) = (&st.cb[q], &st.cb2[q]);
        let r = _mm256_set1_pd(rj[l]);
        // SAFETY: `c` and `c2` are `[[f64; 4]; 3]`: every load below reads
        // inside one of their rows (4 lanes at [0] and [1], 2 at [2]).
        unsafe {
            n0 = _mm256_add_pd(n0, _mm256_mul_pd(r, _mm256_loadu_pd(c[0].as_ptr())));
            n1 = _mm256_add_pd(n1, _mm256_mul_pd(r, _mm256_loadu_pd(c[1].as_ptr())));
            n2 = _mm_add_pd(
                n2,
                _mm_mul_pd(_mm256_castpd256_pd128(r), _mm_loadu_pd(c[2].as_ptr())),
            );
            d0 = _mm256_add_pd(d0, _mm256_loadu_pd(c2[0].as_ptr()));
            d1 = _mm256_add_pd(d1, _mm256_loadu_pd(c2[1].as_ptr()));
            d2 = _mm_add_pd(d2, _mm_loadu_pd(c2[2].as_ptr()));
        }
    }
    let mut num = [[0.0f64; 4]; 3];
    let mut den = [[0.0f64; 4]; 3];
    // SAFETY: each store writes inside one `[f64; 4]` row (4 or 2 lanes).
    unsafe {
        _mm256_storeu_pd(num[0].as_mut_ptr(), n0);
        _mm256_storeu_pd(num[1].as_mut_ptr(), n1);
        _mm_storeu_pd(num[2].as_mut_ptr(), n2);
        _mm256_storeu_pd(den[0].as_mut_ptr(), d0);
        _mm256_storeu_pd(den[1].as_mut_ptr(), d1);
        _mm_storeu_pd(den[2].as_mut_ptr(), d2);
    }
    (num, den)
}

/// [`Buckets::lookup`] of 16 estimates: the same f64 add, multiply and
/// range test per lane, the truncated buckets' entries loaded one by one;
/// and the mask of the [`UNCERTAIN`] ones. Safe entry: checks the CPU,
/// then runs the kernel.
pub(super) fn lookup_row(t: Buckets<'_>, est: &[f64; NR]) -> (Nibbles, u32) {
    assert!(std::arch::is_x86_feature_detected!("avx2"));
    // SAFETY: AVX2 was detected on this CPU just above.
    unsafe { lookup_row_avx2(t, est) }
}

#[target_feature(enable = "avx2")]
fn lookup_row_avx2(t: Buckets<'_>, est: &[f64; NR]) -> (Nibbles, u32) {
    let range = _mm256_set1_pd(t.range);
    let inv_w = _mm256_set1_pd(t.inv_w);
    let nb = _mm256_set1_pd(TABLE_BUCKETS as f64);
    let outside = _mm_set1_epi32(TABLE_BUCKETS as i32);
    // The low 32 bits of each 64-bit mask lane.
    let low_halves = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    // The buckets (TABLE_BUCKETS for the first tail entry), then the
    // entries by one scalar load each: four 4-lane gathers cost twice as
    // much here (perf, `throughput -- orthogonal-640-262144` at this tier,
    // 1 thread: 981 against 521 samples of this function).
    let mut idx = [0u32; NR];
    for q in 0..NR / 4 {
        // SAFETY: lanes `4q .. 4q + 4` of the 16 (q < 4); unaligned load.
        let v = unsafe { _mm256_loadu_pd(est.as_ptr().add(4 * q)) };
        let x = _mm256_mul_pd(_mm256_add_pd(v, range), inv_w);
        let m = _mm256_and_pd(
            _mm256_cmp_pd::<_CMP_GE_OQ>(x, _mm256_setzero_pd()),
            _mm256_cmp_pd::<_CMP_LT_OQ>(x, nb),
        );
        let m32 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(
            _mm256_castpd_si256(m),
            low_halves,
        ));
        let b = _mm_blendv_epi8(outside, _mm256_cvttpd_epi32(x), m32);
        // SAFETY: lanes `4q .. 4q + 4` of the 16 (q < 4); unaligned store.
        unsafe { _mm_storeu_si128(idx.as_mut_ptr().add(4 * q).cast(), b) };
    }
    let table = &t.table[..=TABLE_BUCKETS];
    let (mut lo, mut hi) = (0u64, 0u64);
    for i in 0..NR / 2 {
        lo |= u64::from(table[idx[i] as usize]) << (8 * i);
        hi |= u64::from(table[idx[NR / 2 + i] as usize]) << (8 * i);
    }
    let bytes = _mm_set_epi64x(hi as i64, lo as i64);
    let unsure = _mm_movemask_epi8(_mm_cmpeq_epi8(bytes, _mm_set1_epi8(UNCERTAIN as i8)));
    // Per 16-bit lane i: column 2i's nibble in bits 0..4, column 2i + 1's
    // in bits 8..12, shifted down to bits 4..8; then the low bytes.
    let e = _mm_and_si128(bytes, _mm_set1_epi8(15));
    let pairs = _mm_and_si128(
        _mm_or_si128(e, _mm_srli_epi16::<4>(e)),
        _mm_set1_epi16(0xFF),
    );
    let mut out: Nibbles = [0; NR / 2];
    // SAFETY: 8 bytes into the 8-byte array; unaligned store.
    unsafe { _mm_storel_epi64(out.as_mut_ptr().cast(), _mm_packus_epi16(pairs, pairs)) };
    (out, unsure as u32)
}

/// Four consecutive values of each of the `MR` = 4 rows at `kk`, as the
/// four columns `[x_0[kk + c], .., x_3[kk + c]]`, `c = 0..4`.
///
/// # Safety
/// Every row has at least `kk + 4` values.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn columns4(rr: &[&[f32]; MR], kk: usize) -> [__m128; 4] {
    // SAFETY: the caller guarantees 4 values from `kk` in every row.
    let v: [__m128; 4] = std::array::from_fn(|r| unsafe { _mm_loadu_ps(rr[r].as_ptr().add(kk)) });
    let t0 = _mm_unpacklo_ps(v[0], v[1]);
    let t1 = _mm_unpacklo_ps(v[2], v[3]);
    let t2 = _mm_unpackhi_ps(v[0], v[1]);
    let t3 = _mm_unpackhi_ps(v[2], v[3]);
    [
        _mm_movelh_ps(t0, t1),
        _mm_movehl_ps(t1, t0),
        _mm_movelh_ps(t2, t3),
        _mm_movehl_ps(t3, t2),
    ]
}

/// [`super::sum_squares`]: lane `r` of one f64 vector is row `r`'s chain,
/// fed its values in order (four at a time, transposed from four row
/// loads); the product is rounded, then added (no FMA). Safe entry:
/// checks the CPU, then runs the kernel.
pub(super) fn sum_squares(rr: &[&[f32]; MR]) -> [f64; MR] {
    assert!(std::arch::is_x86_feature_detected!("avx2"));
    assert!(rr.iter().all(|r| r.len() == rr[0].len()));
    // SAFETY: AVX2 was detected just above; the rows have one length.
    unsafe { sum_squares_avx2(rr) }
}

#[target_feature(enable = "avx2")]
fn sum_squares_avx2(rr: &[&[f32]; MR]) -> [f64; MR] {
    const _: () = assert!(MR == 4);
    let k = rr[0].len();
    let mut acc = _mm256_setzero_pd();
    let mut kk = 0;
    while kk + 4 <= k {
        // SAFETY: every row has `k >= kk + 4` values.
        for c in unsafe { columns4(rr, kk) } {
            let x = _mm256_cvtps_pd(c);
            acc = _mm256_add_pd(acc, _mm256_mul_pd(x, x));
        }
        kk += 4;
    }
    let mut ss = [0.0f64; MR];
    // SAFETY: 4 f64 into the 4-element array; unaligned store.
    unsafe { _mm256_storeu_pd(ss.as_mut_ptr(), acc) };
    #[allow(clippy::needless_range_loop)] // MR interleaved chains
    for kk in kk..k {
        for r in 0..MR {
            let x = rr[r][kk] as f64;
            ss[r] += x * x;
        }
    }
    ss
}

/// [`super::row_energies`]: four vectors of four lanes, lane `r` of vector
/// `v` row `4v + r`'s chain, fed its values in order (four at a time,
/// transposed from four row loads); each product rounded, then the next,
/// then the add (no FMA). Four independent chains side by side. Safe entry:
/// checks the CPU and the lengths, then runs the kernel.
pub(super) fn row_energies(
    rows: &[&[f32]; super::ENERGY_ROWS],
    x: &[f64],
) -> [f64; super::ENERGY_ROWS] {
    assert!(std::arch::is_x86_feature_detected!("avx2"));
    assert!(rows.iter().all(|r| r.len() == x.len()));
    // SAFETY: AVX2 was detected just above; every row has `x.len()` values.
    unsafe { row_energies_avx2(rows, x) }
}

#[target_feature(enable = "avx2")]
fn row_energies_avx2(rows: &[&[f32]; super::ENERGY_ROWS], x: &[f64]) -> [f64; super::ENERGY_ROWS] {
    const G: usize = super::ENERGY_ROWS / MR;
    let k = x.len();
    let groups: [[&[f32]; MR]; G] =
        std::array::from_fn(|g| std::array::from_fn(|r| rows[g * MR + r]));
    let mut acc = [_mm256_setzero_pd(); G];
    let mut kk = 0;
    while kk + 4 <= k {
        // SAFETY: every row has `k >= kk + 4` values.
        let cols: [[__m128; 4]; G] = std::array::from_fn(|g| unsafe { columns4(&groups[g], kk) });
        for c in 0..4 {
            let xk = _mm256_set1_pd(x[kk + c]);
            for g in 0..G {
                let w = _mm256_cvtps_pd(cols[g][c]);
                acc[g] = _mm256_add_pd(acc[g], _mm256_mul_pd(_mm256_mul_pd(w, w), xk));
            }
        }
        kk += 4;
    }
    let mut e = [0.0f64; super::ENERGY_ROWS];
    for (g, a) in acc.iter().enumerate() {
        // SAFETY: 4 f64 into `e[4g .. 4g + 4]` (g < G); unaligned store.
        unsafe { _mm256_storeu_pd(e.as_mut_ptr().add(MR * g), *a) };
    }
    for kk in kk..k {
        for (ei, r) in e.iter_mut().zip(rows) {
            let w = r[kk] as f64;
            *ei += (w * w) * x[kk];
        }
    }
    e
}

/// [`super::pack_fixed`]. Per value the quotient `q = x / n` is estimated
/// as `p = x * y` with `y = 1 / n` (one division per row): `y = (1/n)(1 + e1)`
/// and `p = (x/n)(1 + e1)(1 + e2)`, `|e1|, |e2| <= 2^-53`, so `p` and the
/// rounded quotient `RN(x/n)` differ by at most `3.01 * 2^-53 |p|` (no
/// underflow: `|x| >= 2^-149` as f32, `n` is at least `NORM_FLOOR` and at
/// most `sqrt(k) * 2^128`). `g(v) = (v + MAGIC) - MAGIC` is monotone (a
/// rounding, then an exact subtraction), and `lo = p - |p| 2^-48`,
/// `hi = p + |p| 2^-48` as computed (the product by 2^-48 is exact and each
/// sum rounds by at most `2^-53 |p| (1 + 2^-48)`) bracket `RN(x/n)`. So when
/// `g(lo) == g(hi)`, that is `g(RN(x/n)) = fixed(x, n)`; when not (a
/// quotient within ~2^-48 relative of a rounding boundary of the 2^-28 grid),
/// the four values are divided as the contract says. Safe entry: checks the
/// CPU, then runs the kernel.
pub(super) fn pack_fixed(rr: &[&[f32]; MR], nr: &[f64; MR], out: &mut [APack]) {
    assert!(std::arch::is_x86_feature_detected!("avx2"));
    assert!(rr.iter().all(|r| r.len() == out.len()));
    // SAFETY: AVX2 was detected just above; the rows and `out` have one length.
    unsafe { pack_fixed_avx2(rr, nr, out) }
}

/// `fixed(x, n)` of four values, `y = 1 / n` (see [`pack_fixed`]).
#[inline]
#[target_feature(enable = "avx2")]
fn fixed4(x: __m256d, n: __m256d, y: __m256d) -> __m256d {
    let magic = _mm256_set1_pd(FIXED_MAGIC);
    let slack = _mm256_set1_pd(2f64.powi(-48));
    let abs = _mm256_castsi256_pd(_mm256_set1_epi64x(i64::MAX));
    let g = |v: __m256d| _mm256_sub_pd(_mm256_add_pd(v, magic), magic);
    let p = _mm256_mul_pd(x, y);
    let d = _mm256_mul_pd(_mm256_and_pd(p, abs), slack);
    let lo = g(_mm256_sub_pd(p, d));
    let hi = g(_mm256_add_pd(p, d));
    if _mm256_movemask_pd(_mm256_cmp_pd::<_CMP_EQ_OQ>(lo, hi)) == 0xF {
        lo
    } else {
        g(_mm256_div_pd(x, n))
    }
}

#[target_feature(enable = "avx2")]
fn pack_fixed_avx2(rr: &[&[f32]; MR], nr: &[f64; MR], out: &mut [APack]) {
    let k = out.len();
    // SAFETY: 4 f64 from the 4-element array; unaligned load.
    let n = unsafe { _mm256_loadu_pd(nr.as_ptr()) };
    let y = _mm256_div_pd(_mm256_set1_pd(1.0), n);
    let mut kk = 0;
    while kk + 4 <= k {
        // SAFETY: every row has `k >= kk + 4` values.
        let cols = unsafe { columns4(rr, kk) };
        for (c, col) in cols.into_iter().enumerate() {
            let u = fixed4(_mm256_cvtps_pd(col), n, y);
            // SAFETY: `out[kk + c]` is a `[f32; 4]` (kk + c < k = out.len());
            // unaligned 16-byte store.
            unsafe { _mm_storeu_ps(out[kk + c].as_mut_ptr(), _mm256_cvtpd_ps(u)) };
        }
        kk += 4;
    }
    for (kk, a) in out.iter_mut().enumerate().skip(kk) {
        *a = std::array::from_fn(|r| super::fixed_f32(rr[r][kk], nr[r]));
    }
}

/// [`super::fixed_row`]: four values at a time as in [`pack_fixed`]. Safe
/// entry: checks the CPU, then runs the kernel.
pub(super) fn fixed_row(x: &[f32], n: f64, out: &mut [f64]) {
    assert!(std::arch::is_x86_feature_detected!("avx2"));
    assert_eq!(x.len(), out.len());
    // SAFETY: AVX2 was detected just above.
    unsafe { fixed_row_avx2(x, n, out) }
}

#[target_feature(enable = "avx2")]
fn fixed_row_avx2(x: &[f32], n: f64, out: &mut [f64]) {
    let nv = _mm256_set1_pd(n);
    let y = _mm256_div_pd(_mm256_set1_pd(1.0), nv);
    let (xc, xt) = x.as_chunks::<4>();
    let (oc, ot) = out.as_chunks_mut::<4>();
    for (o, v) in oc.iter_mut().zip(xc) {
        // SAFETY: `v` is `[f32; 4]` and `o` `[f64; 4]`: one 16-byte load,
        // one 32-byte store, unaligned.
        unsafe {
            let u = fixed4(_mm256_cvtps_pd(_mm_loadu_ps(v.as_ptr())), nv, y);
            _mm256_storeu_pd(o.as_mut_ptr(), u);
        }
    }
    super::scalar_fixed_row(xt, n, ot);
}

/// [`super::exact_dot`] with 4 vectors of 4 accumulators (any association
/// gives the exact sum; no FMA is needed, none is used). Safe entry: checks
/// the CPU, then runs the kernel.
pub(super) fn exact_dot(u: &[f64], r: &[f32]) -> f64 {
    assert!(std::arch::is_x86_feature_detected!("avx2"));
    // SAFETY: AVX2 was detected just above.
    unsafe { exact_dot_avx2(u, r) }
}

#[target_feature(enable = "avx2")]
fn exact_dot_avx2(u: &[f64], r: &[f32]) -> f64 {
    let len = u.len().min(r.len());
    let (u, r) = (&u[..len], &r[..len]);
    let mut acc = [_mm256_setzero_pd(); 4];
    let (uc, ut) = u.as_chunks::<16>();
    let (rc, rt) = r.as_chunks::<16>();
    for (a, b) in uc.iter().zip(rc) {
        for (q, acc) in acc.iter_mut().enumerate() {
            // SAFETY: lanes 4q .. 4q + 4 (q < 4) of the 16-element arrays;
            // unaligned loads.
            unsafe {
                let x = _mm256_loadu_pd(a.as_ptr().add(4 * q));
                let y = _mm256_cvtps_pd(_mm_loadu_ps(b.as_ptr().add(4 * q)));
                *acc = _mm256_add_pd(*acc, _mm256_mul_pd(x, y));
            }
        }
    }
    let v = _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3]));
    let mut lanes = [0.0f64; 4];
    // SAFETY: 4 f64 into the 4-element array; unaligned store.
    unsafe { _mm256_storeu_pd(lanes.as_mut_ptr(), v) };
    let mut s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    for (&a, &b) in ut.iter().zip(rt) {
        s += a * b as f64;
    }
    s
}
