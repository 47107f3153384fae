//! The quantizer's hot loops, one implementation per ISA tier, selected at
//! run time: the orthogonal family's f32 filter tile and the Hadamard
//! family's batch quantizer (`hadamard_quant`, exact arithmetic,
//! the same values on every tier).
//!
//! The tile computes, for `MR` rows of `uf` (rounded to f32) and the `NR`
//! columns of one packed panel of R, estimates of `rot_j = sum_k uf_k R[k][j]`:
//! products and sums in f32 within blocks of `KB` (64) consecutive `k`, block
//! sums added in f64. The estimate only *filters* (docs/FORMAT.md §CQ4.11):
//! an index is read from it only when no threshold lies within the proven
//! bound `E` of it, otherwise the exact f64 sum decides, so the bytes do not
//! depend on the tier. What the tiers share, and what `E` is derived for:
//! every f32 block sum has exactly `KB` terms, each accumulated with one
//! f32 rounding per product and per addition (scalar) or one per fused
//! multiply-add (AVX2+FMA, AVX-512F+VL, NEON), in any order; each block sum is
//! converted to f64 exactly and the `Kp / KB` block sums are added in f64.
//!
//! Tiers: [`EncodeIsa::Scalar`] (portable, the reference),
//! [`EncodeIsa::Avx2`] (x86-64 AVX2 + FMA), [`EncodeIsa::Avx512`] (x86-64
//! AVX-512F + VL), [`EncodeIsa::Neon`] (aarch64 Advanced SIMD). The best tier the
//! CPU has is used unless the environment variable [`FORCE_ENV`] (shared
//! with the `kernels` crate: `CONVERT_FORCE_ISA=scalar|avx2|avx512|neon`)
//! caps it.

use std::sync::OnceLock;

use crate::hadamard::FIXED_MAGIC;
use crate::hadamard_quant::{Batch, BatchIdx, HadamardQuant, LANES};

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;

// The kernels are written for these sizes.
const _: () = assert!(MR == 4 && NR == 16 && KB == 64);

/// Rows per tile.
pub(crate) const MR: usize = 4;
/// Columns per tile (the width of one packed panel of R).
pub(crate) const NR: usize = 16;
/// Terms per f32 block sum.
pub(crate) const KB: usize = 64;

/// How far ahead (in rows of a packed R panel, 64 bytes each) the x86
/// filter tiles prefetch R into L1: 2 KB, measured best of 16, 24, 32, 64
/// on the AVX-512 guest (16 was slower than none).
#[cfg(target_arch = "x86_64")]
pub(crate) const PREFETCH_ROWS: usize = 32;

/// `MR` rows of `uf` as f32, packed `[k][MR]`.
pub(crate) type APack = [f32; MR];
/// One row of a packed R panel: `R[k][p*NR .. p*NR + NR]` as f32.
pub(crate) type BRow = [f32; NR];
/// Estimates of one tile, `[row][column]`.
pub(crate) type Tile = [[f64; NR]; MR];

/// The environment variable that caps the tier (same as the kernels').
pub const FORCE_ENV: &str = "CONVERT_FORCE_ISA";

/// An implementation tier of the filter tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EncodeIsa {
    /// Portable code (the compiler's auto-vectorization for the build target).
    Scalar,
    /// x86-64 AVX2 + FMA (8-wide f32, fused multiply-add).
    Avx2,
    /// x86-64 AVX-512F + VL (16-wide f32, fused multiply-add; VL lets the
    /// compiler keep vectors in all 32 registers).
    Avx512,
    /// aarch64 Advanced SIMD (4-wide f32, fused multiply-add).
    Neon,
}

/// Every tier this crate knows.
pub const ALL_ENCODE_ISAS: [EncodeIsa; 4] = [
    EncodeIsa::Scalar,
    EncodeIsa::Avx2,
    EncodeIsa::Avx512,
    EncodeIsa::Neon,
];

impl EncodeIsa {
    /// Lower-case name (`scalar`, `avx2`, `avx512`, `neon`).
    pub fn name(self) -> &'static str {
        match self {
            EncodeIsa::Scalar => "scalar",
            EncodeIsa::Avx2 => "avx2",
            EncodeIsa::Avx512 => "avx512",
            EncodeIsa::Neon => "neon",
        }
    }

    /// Whether this CPU (and build) can run the tier, ignoring [`FORCE_ENV`].
    pub fn supported(self) -> bool {
        match self {
            EncodeIsa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            EncodeIsa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            // The tier also runs the AVX2 Hadamard kernel.
            EncodeIsa::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx2")
            }
            #[cfg(target_arch = "aarch64")]
            EncodeIsa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Tiers this CPU can run, lowest first (ignoring [`FORCE_ENV`]).
    pub fn available() -> Vec<EncodeIsa> {
        ALL_ENCODE_ISAS
            .into_iter()
            .filter(|t| t.supported())
            .collect()
    }

    /// The tier the encoder uses by default: the highest supported one, at
    /// or below the [`FORCE_ENV`] cap (an unknown value or a tier of the
    /// other architecture leaves `scalar`). Probed once.
    pub fn best() -> EncodeIsa {
        static BEST: OnceLock<EncodeIsa> = OnceLock::new();
        *BEST.get_or_init(|| {
            let cap = std::env::var(FORCE_ENV).ok();
            let allowed = |t: EncodeIsa| match cap.as_deref() {
                None | Some("") => true,
                Some(c) => matches!(
                    (c, t),
                    (_, EncodeIsa::Scalar)
                        | ("avx512", EncodeIsa::Avx2 | EncodeIsa::Avx512)
                        | ("avx2", EncodeIsa::Avx2)
                        | ("neon" | "sme2", EncodeIsa::Neon)
                ),
            };
            EncodeIsa::available()
                .into_iter()
                .filter(|&t| allowed(t))
                .max()
                .unwrap_or(EncodeIsa::Scalar)
        })
    }
}

/// The tile on `isa`: `a` and `b` have the same length, a multiple of
/// [`KB`]. `isa` must be [`EncodeIsa::supported`] (the encoder only stores a
/// supported tier); an unsupported one falls back to scalar.
#[inline]
pub(crate) fn tile(isa: EncodeIsa, a: &[APack], b: &[BRow]) -> Tile {
    assert!(a.len() == b.len() && a.len().is_multiple_of(KB));
    match isa {
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx2 if isa.supported() => {
            let [t] = avx2::tiles([a], b);
            t
        }
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx512 if isa.supported() => {
            let [[t]] = avx512::grid([a], [b]);
            t
        }
        #[cfg(target_arch = "aarch64")]
        EncodeIsa::Neon if isa.supported() => neon::tile(a, b),
        _ => scalar_tile(a, b),
    }
}

/// `T x P` tiles, `T` row tiles against `P` R panels: `out[t][p]` is
/// `tile(isa, a[t], b[p])`, bit for bit. The AVX-512 tier runs them in one
/// pass (`avx512::grid`: one broadcast of `uf` per `P` FMAs, one load of R
/// per `T * MR`); the AVX2 tier runs each panel's `T` tiles in passes of
/// 6 rows (`avx2::tiles_by_rows`); the others run them in turn.
#[inline]
pub(crate) fn grid<const T: usize, const P: usize>(
    isa: EncodeIsa,
    a: [&[APack]; T],
    b: [&[BRow]; P],
) -> [[Tile; P]; T] {
    assert!(b.iter().all(|x| x.len() == b[0].len()) && b[0].len().is_multiple_of(KB));
    assert!(a.iter().all(|x| x.len() == b[0].len()));
    match isa {
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx512 if isa.supported() => avx512::grid(a, b),
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx2 if isa.supported() => {
            let by_panel = b.map(|bp| avx2::tiles(a, bp));
            std::array::from_fn(|t| std::array::from_fn(|p| by_panel[p][t]))
        }
        _ => a.map(|at| b.map(|bp| tile(isa, at, bp))),
    }
}

/// The largest `(T, P)` for [`grid`] on `isa`: as many accumulator chains
/// as the registers hold, in the shape with the fewest loads per FMA
/// (AVX-512: 2 tiles x 3 panels = 24 chains of 16 lanes; AVX2: 3 tiles of
/// one panel, 6 rows x 16 columns at a time = 12 of 16 registers). 4 tiles
/// of one panel on the tiers that run tiles in turn (the row group that
/// shares the panel in L1).
pub(crate) fn grid_shape(isa: EncodeIsa) -> (usize, usize) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx512 => (2, 3),
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx2 => (3, 1),
        _ => (4, 1),
    }
}

/// Buckets of a decision table (`encode::DecisionTable`): entries
/// `0..TABLE_BUCKETS`, then [`TABLE_TAIL`] entries of "not known" (the
/// entry of every estimate outside the buckets, and padding so a 4-byte
/// gather at any entry index stays inside the table).
pub(crate) const TABLE_BUCKETS: usize = 16384;
/// Entries after the buckets (all "not known").
pub(crate) const TABLE_TAIL: usize = 4;
/// A decision table's entry "not known: decide with the thresholds".
pub(crate) const UNCERTAIN: u8 = 0xFF;

/// A decision table's view for the lookups: entry `b` covers estimates
/// `x` with `b <= (x + range) * inv_w < b + 1`.
#[derive(Clone, Copy)]
pub(crate) struct Buckets<'a> {
    pub table: &'a [u8],
    pub range: f64,
    pub inv_w: f64,
}

impl Buckets<'_> {
    /// The entry of estimate `est`: bucket `t = (est + range) * inv_w`
    /// (f64 add, then multiply), truncated, when `0 <= t < TABLE_BUCKETS`;
    /// otherwise (and for NaN) the first tail entry. The reference of every
    /// tier's [`lookup_row`].
    #[inline(always)]
    pub(crate) fn lookup(&self, est: f64) -> u8 {
        let t = (est + self.range) * self.inv_w;
        // Branch-free: a 32-bit truncation (exact for 0 <= t < 2^14) and a
        // select of the first tail entry for every other t.
        let inside = t >= 0.0 && t < TABLE_BUCKETS as f64;
        let b = if inside {
            t as i32 as usize
        } else {
            TABLE_BUCKETS
        };
        self.table[b.min(TABLE_BUCKETS)]
    }
}

/// A tile row's indices as stored (docs/FORMAT.md §CQ4.9): byte `i` holds
/// the index of column `2i` in its low nibble and of column `2i + 1` in its
/// high nibble.
pub(crate) type Nibbles = [u8; NR / 2];

/// [`Buckets::lookup`] of a tile row's `NR` estimates on `isa`, packed as
/// [`Nibbles`] (an [`UNCERTAIN`] entry leaves an arbitrary nibble), and the
/// mask of the entries that are [`UNCERTAIN`] (bit `q` for column `q`): the
/// same on every tier (the AVX2 and AVX-512 tiers compute the buckets with
/// the same f64 operations and pack the entries in vectors; AVX-512
/// gathers them, AVX2 loads them one by one).
#[inline]
pub(crate) fn lookup_row(isa: EncodeIsa, t: Buckets<'_>, est: &[f64; NR]) -> (Nibbles, u32) {
    assert!(t.table.len() == TABLE_BUCKETS + TABLE_TAIL);
    match isa {
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx2 if isa.supported() => avx2::lookup_row(t, est),
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx512 if isa.supported() => avx512::lookup_row(t, est),
        _ => {
            let idx: [u8; NR] = std::array::from_fn(|q| t.lookup(est[q]));
            let mut unsure = 0u32;
            for (q, &d) in idx.iter().enumerate() {
                unsure |= u32::from(d == UNCERTAIN) << q;
            }
            (
                std::array::from_fn(|i| (idx[2 * i] & 15) | (idx[2 * i + 1] << 4)),
                unsure,
            )
        }
    }
}

/// Sets column `q`'s index in `nib` to `idx` (< 16).
#[inline(always)]
pub(crate) fn set_nibble(nib: &mut Nibbles, q: usize, idx: u8) {
    let sh = 4 * (q % 2);
    nib[q / 2] = (nib[q / 2] & !(15 << sh)) | (idx << sh);
}

/// The Hadamard batch quantizer on `isa` (x86-64 tiers: the portable body
/// compiled with AVX2; elsewhere the portable body as built).
#[inline]
pub(crate) fn hadamard_batch(
    isa: EncodeIsa,
    q: &HadamardQuant,
    x: &mut Batch,
    idx: &mut BatchIdx,
) -> [f64; LANES] {
    match isa {
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx2 | EncodeIsa::Avx512 if isa.supported() => avx2::hadamard_batch(q, x, idx),
        _ => q.batch(x, idx),
    }
}

/// Sums of squares of the `MR` rows `rr` (of one length): for each row,
/// `ss = (..((0 + x_0 * x_0) + x_1 * x_1) ..)` over its values widened to
/// f64, each product rounded, then added, in order (the contract's norm,
/// docs/FORMAT.md §CQ4.7.2). The same on every tier (the x86 tiers run the
/// rows' four chains in the lanes of one vector, each in its order).
#[inline]
pub(crate) fn sum_squares(isa: EncodeIsa, rr: &[&[f32]; MR]) -> [f64; MR] {
    assert!(rr.iter().all(|r| r.len() == rr[0].len()));
    match isa {
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx2 | EncodeIsa::Avx512 if isa.supported() => avx2::sum_squares(rr),
        _ => scalar_sum_squares(rr),
    }
}

/// The portable [`sum_squares`] (the reference of the tiers).
pub(crate) fn scalar_sum_squares(rr: &[&[f32]; MR]) -> [f64; MR] {
    let mut ss = [0.0f64; MR];
    #[allow(clippy::needless_range_loop)] // MR interleaved chains
    for kk in 0..rr[0].len() {
        for r in 0..MR {
            let x = rr[r][kk] as f64;
            ss[r] += x * x;
        }
    }
    ss
}

/// Rows per call of [`row_energies`].
pub(crate) const ENERGY_ROWS: usize = 16;

/// Row energies of [`ENERGY_ROWS`] rows of one length `x.len()`: for each
/// row, `e = (..((0 + (w_0 * w_0) * x_0) + (w_1 * w_1) * x_1) ..)` with
/// `w = f64` of the row's value, each product rounded, then added, in
/// order (the importance estimate's contract). The same on every tier (the
/// x86 tiers run the rows' chains in the lanes of four vectors, each lane
/// in its order).
#[inline]
pub(crate) fn row_energies(
    isa: EncodeIsa,
    rows: &[&[f32]; ENERGY_ROWS],
    x: &[f64],
) -> [f64; ENERGY_ROWS] {
    assert!(rows.iter().all(|r| r.len() == x.len()));
    match isa {
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx2 | EncodeIsa::Avx512 if isa.supported() => avx2::row_energies(rows, x),
        _ => scalar_row_energies(rows, x),
    }
}

/// The portable [`row_energies`].
pub(crate) fn scalar_row_energies(rows: &[&[f32]; ENERGY_ROWS], x: &[f64]) -> [f64; ENERGY_ROWS] {
    let mut e = [0.0f64; ENERGY_ROWS];
    for (kk, &xk) in x.iter().enumerate() {
        for (ei, r) in e.iter_mut().zip(rows) {
            let w = r[kk] as f64;
            *ei += (w * w) * xk;
        }
    }
    e
}

/// True when every value is finite (no NaN, no infinity). The same answer
/// on every tier (the x86 tiers scan more values per instruction).
#[inline]
pub(crate) fn all_finite(isa: EncodeIsa, values: &[f32]) -> bool {
    match isa {
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx2 | EncodeIsa::Avx512 if isa.supported() => avx2::all_finite(values),
        _ => portable_all_finite(values),
    }
}

/// Whether `v * 2^e` (`e != 0`, `|e| < 127`) is exact in f32 for every
/// value: each is 0, non-finite, or of a magnitude whose image is finite
/// and, for `e < 0`, a normal f32 (`2^-126 <= |v| 2^e < 2^128`; a
/// subnormal scaled up only moves its bits). On the best tier (the x86
/// tiers scan 8 values per instruction), in parts of 1 MiB on rayon's
/// threads when there are several (the answer is each value's,
/// so any split gives it).
pub fn pow2_scaling_is_exact(e: i32, values: &[f32]) -> bool {
    let isa = EncodeIsa::best();
    if values.len() < 2 * PAR_SCAN_VALUES || rayon::current_num_threads() < 2 {
        return pow2_scaling_is_exact_on(isa, e, values);
    }
    use rayon::prelude::*;
    values
        .par_chunks(PAR_SCAN_VALUES)
        .all(|part| pow2_scaling_is_exact_on(isa, e, part))
}

/// Values per part of a parallel [`pow2_scaling_is_exact`] (1 MiB of f32).
pub(crate) const PAR_SCAN_VALUES: usize = 1 << 18;

/// [`pow2_scaling_is_exact`] on `isa`: the same answer on every tier.
pub(crate) fn pow2_scaling_is_exact_on(isa: EncodeIsa, e: i32, values: &[f32]) -> bool {
    assert!(e != 0 && e.abs() < 127, "scaling exponent {e}");
    match isa {
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx2 | EncodeIsa::Avx512 if isa.supported() => {
            avx2::pow2_scaling_is_exact(e, values)
        }
        _ => portable_pow2_scaling_is_exact(e, values),
    }
}

/// The body of [`pow2_scaling_is_exact`]: on the biased exponent `x` of
/// `|v|` (`v != 0` finite: `x < 255`) the image is finite when
/// `x < 255 - e` and, for `e < 0`, normal when `x >= 1 - e`; so the
/// smallest `x` of the non-zero values and the largest of the finite ones
/// decide. Branch-free min / max reductions (they vectorize).
#[inline(always)]
pub(crate) fn portable_pow2_scaling_is_exact(e: i32, values: &[f32]) -> bool {
    let lo = if e < 0 { (1 - e) as u32 } else { 0 };
    let hi = (255 - e.max(0)) as u32;
    let (mut least, mut most) = (255u32, 0u32);
    for v in values {
        let a = v.to_bits() & 0x7FFF_FFFF;
        let x = a >> 23;
        least = least.min(if a == 0 { 255 } else { x });
        most = most.max(if x == 255 { 0 } else { x });
    }
    least >= lo && most < hi
}

/// The body of [`all_finite`]: a branch-free scan (it vectorizes).
#[inline(always)]
pub(crate) fn portable_all_finite(values: &[f32]) -> bool {
    values.iter().fold(true, |ok, x| ok & x.is_finite())
}

/// The Hadamard batch's input: `x[i][l] = f64(src[l][i])` for `i <
/// src[l].len()`, `0.0` for the rest of the `HADAMARD_N` positions (each
/// `src[l]` at most that long). The same values on every tier (a widening
/// is exact); the x86 tiers transpose four groups of 128 at a time.
#[inline]
pub(crate) fn gather_batch(isa: EncodeIsa, src: [&[f32]; LANES], x: &mut Batch) {
    assert!(src.iter().all(|s| s.len() <= x.len()));
    match isa {
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx2 | EncodeIsa::Avx512
            if isa.supported() && src.iter().all(|s| s.len() == x.len()) =>
        {
            avx2::gather_batch(src, x)
        }
        _ => scalar_gather_batch(src, x),
    }
}

/// The portable [`gather_batch`].
pub(crate) fn scalar_gather_batch(src: [&[f32]; LANES], x: &mut Batch) {
    for (l, s) in src.iter().enumerate() {
        for (i, v) in x.iter_mut().enumerate() {
            v[l] = s.get(i).map_or(0.0, |&w| w as f64);
        }
    }
}

/// Per-column sums of squares: for every whole row of `rows` (rows of
/// `sums.len()` values, in order; a partial row at the end is ignored),
/// `sums[c] = sums[c] + f64(x[c]) * f64(x[c])`, each product rounded, then
/// added, row after row (the order of [`crate::awq::ColumnSums`] and of the
/// importance estimate's embedding pass). The same on every tier: the
/// columns are independent, so the x86 tiers only run more of them per
/// instruction (no fused multiply-add: Rust never contracts).
#[inline]
#[cfg(test)]
pub(crate) fn column_squares(isa: EncodeIsa, sums: &mut [f64], rows: &[f32]) {
    column_squares_of(isa, sums, rows, sums.len(), 0);
}

/// [`column_squares`] of the columns `c0 .. c0 + sums.len()` of rows of
/// `k` values (`sums[c]` is column `c0 + c`; a partial row at the end is
/// ignored): the same additions in the same order as the whole rows give
/// those columns, since every column's sum is its own chain.
#[inline]
pub(crate) fn column_squares_of(
    isa: EncodeIsa,
    sums: &mut [f64],
    rows: &[f32],
    k: usize,
    c0: usize,
) {
    assert!(c0 + sums.len() <= k, "columns outside the row");
    match isa {
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx2 | EncodeIsa::Avx512 if isa.supported() => {
            avx2::column_squares(sums, rows, k, c0)
        }
        // Advanced SIMD is the aarch64 baseline: the portable body as built.
        #[cfg(target_arch = "aarch64")]
        EncodeIsa::Neon if isa.supported() => portable_column_squares(sums, rows, k, c0, |_| {}),
        _ => scalar_column_squares_of(sums, rows, k, c0),
    }
}

/// Apply the Householder reflector `(j, v, beta)` to columns `q0..W` of a
/// row-major `Kp x W` column panel of the orthogonal rotation's
/// left-looking QR (`crate::orthogonal`): `s_q = sum_{i=j..Kp} v_{i-j} *
/// P[i][q]` (sequential in `i`), `t_q = beta * s_q`, `P[i][q] = P[i][q] -
/// v_{i-j} * t_q`, on `isa`. Every column is its own sequence of roundings
/// (a product rounded, then added; no FMA: Rust never contracts), so the
/// x86 tiers compile [`portable_apply_reflector`] for wider registers
/// (more columns per instruction) and get the same bits. The AVX-512 tier
/// runs the AVX2 build: the body compiled for AVX-512F took 2.7x as long
/// (0.058 against 0.022 s for Kp = 640 on Zen 5, `cargo bench -p cq4
/// --bench throughput`; docs/BENCHMARKS.md, session 28). An unsupported
/// tier runs the portable body as built.
#[inline]
pub(crate) fn apply_reflector<const W: usize>(
    isa: EncodeIsa,
    panel: &mut [[f64; W]],
    j: usize,
    q0: usize,
    v: &[f64],
    beta: f64,
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx2 | EncodeIsa::Avx512 if isa.supported() => {
            avx2::apply_reflector(panel, j, q0, v, beta)
        }
        _ => portable_apply_reflector(panel, j, q0, v, beta),
    }
}

/// The body of [`apply_reflector`], compiled once per tier. `q0 = 0` (every
/// reflector but the panel's own) gets a copy with constant bounds, which
/// the compiler vectorizes over the whole panel width.
#[inline(always)]
pub(crate) fn portable_apply_reflector<const W: usize>(
    panel: &mut [[f64; W]],
    j: usize,
    q0: usize,
    v: &[f64],
    beta: f64,
) {
    if q0 == 0 {
        reflect_columns(panel, j, 0, v, beta)
    } else {
        reflect_columns(panel, j, q0, v, beta)
    }
}

/// [`portable_apply_reflector`] on columns `q0..W`.
#[inline(always)]
fn reflect_columns<const W: usize>(
    panel: &mut [[f64; W]],
    j: usize,
    q0: usize,
    v: &[f64],
    beta: f64,
) {
    let rows = &mut panel[j..];
    let mut s = [0.0f64; W];
    let mut t = [0.0f64; W];
    for (row, &vi) in rows.iter().zip(v) {
        for q in q0..W {
            s[q] += vi * row[q];
        }
    }
    for q in q0..W {
        t[q] = beta * s[q];
    }
    for (row, &vi) in rows.iter_mut().zip(v) {
        for q in q0..W {
            row[q] -= vi * t[q];
        }
    }
}

/// Values per thread below which [`par_column_squares`] stays on one.
const PAR_COLUMN_VALUES: usize = 1 << 16;

/// [`column_squares`] with the columns split among rayon's threads: bit for
/// bit the same sums, each column's chain still its rows in order on one
/// thread ([`par_column_bands`]).
pub(crate) fn par_column_squares(isa: EncodeIsa, sums: &mut [f64], rows: &[f32]) {
    let k = sums.len();
    par_column_bands(sums, rows.len(), |c0, band| {
        column_squares_of(isa, band, rows, k, c0)
    });
}

/// `f(c0, band)` for bands of `sums` (columns `c0 .. c0 + band.len()`),
/// one band per rayon thread, each a multiple of 16 columns so no cache
/// line of f32 values is read by two; the whole of `sums` as one band when
/// `values` (the rows' values) are too few to share.
pub(crate) fn par_column_bands(
    sums: &mut [f64],
    values: usize,
    f: impl Fn(usize, &mut [f64]) + Sync,
) {
    let k = sums.len();
    let threads = rayon::current_num_threads();
    if threads < 2 || k < 32 || values < threads * PAR_COLUMN_VALUES {
        return f(0, sums);
    }
    let band = k.div_ceil(threads).next_multiple_of(16);
    use rayon::prelude::*;
    sums.par_chunks_mut(band)
        .enumerate()
        .for_each(|(i, part)| f(i * band, part));
}

/// Rows per pass of [`portable_column_squares`]: each column's sum stays in
/// a register across them.
const COLUMN_ROWS: usize = 8;

/// Columns per strip of [`portable_column_squares`].
const COLUMN_LANES: usize = 16;

/// The body of [`column_squares_of`], compiled once per tier: rows in
/// groups of [`COLUMN_ROWS`], each column's running sum kept across the
/// group (the same additions in the same order as one row at a time).
#[inline(always)]
pub(crate) fn portable_column_squares(
    sums: &mut [f64],
    rows: &[f32],
    k: usize,
    c0: usize,
    prefetch: impl Fn(*const f32),
) {
    if k == 0 || sums.is_empty() {
        return;
    }
    let whole = rows.len() / k * k;
    let mut groups = rows[..whole].chunks_exact(COLUMN_ROWS * k);
    for g in &mut groups {
        let cols: [&[f32]; COLUMN_ROWS] =
            std::array::from_fn(|r| &g[r * k + c0..r * k + c0 + sums.len()]);
        // COLUMN_LANES columns side by side: that many independent chains
        // (one column's chain alone waits on each add).
        let done = sums.len() / COLUMN_LANES * COLUMN_LANES;
        let mut strips = sums.chunks_exact_mut(COLUMN_LANES);
        for (i, strip) in (&mut strips).enumerate() {
            // The same strip of the next group's rows (`prefetch` is a hint
            // that never faults: an address past the end is fine): a
            // thread's band is a short run of each row, too short for the
            // hardware prefetcher to follow.
            for r in 0..COLUMN_ROWS {
                prefetch(
                    g.as_ptr()
                        .wrapping_add((COLUMN_ROWS + r) * k + c0 + i * COLUMN_LANES),
                );
            }
            let strip: &mut [f64; COLUMN_LANES] = strip.try_into().expect("a whole strip");
            let mut acc = *strip;
            for col in &cols {
                let x: &[f32; COLUMN_LANES] = col[i * COLUMN_LANES..(i + 1) * COLUMN_LANES]
                    .try_into()
                    .expect("a whole strip");
                for (a, &x) in acc.iter_mut().zip(x) {
                    let x = x as f64;
                    *a += x * x;
                }
            }
            *strip = acc;
        }
        for (c, s) in strips.into_remainder().iter_mut().enumerate() {
            let mut acc = *s;
            for col in &cols {
                let x = col[done + c] as f64;
                acc += x * x;
            }
            *s = acc;
        }
    }
    scalar_column_squares_of(sums, groups.remainder(), k, c0);
}

/// The reference of [`column_squares`]: one row at a time.
#[cfg(test)]
pub(crate) fn scalar_column_squares(sums: &mut [f64], rows: &[f32]) {
    scalar_column_squares_of(sums, rows, sums.len(), 0);
}

/// [`scalar_column_squares`] of columns `c0 .. c0 + sums.len()` of rows of
/// `k` values.
fn scalar_column_squares_of(sums: &mut [f64], rows: &[f32], k: usize, c0: usize) {
    if k == 0 {
        return;
    }
    for row in rows.chunks_exact(k) {
        for (s, &x) in sums.iter_mut().zip(&row[c0..]) {
            let x = x as f64;
            *s += x * x;
        }
    }
}

/// The filter's input of `MR` rows: `out[kk][r] = fixed(rr[r][kk], nr[r])`
/// rounded to f32 for every `kk < out.len()` (the rows' length), where
/// `fixed(x, n) = (x / n + FIXED_MAGIC) - FIXED_MAGIC` in f64 (§CQ4.7.2).
/// The same on every tier: the x86 tiers replace the division by a product
/// with the reciprocal where that provably rounds to the same multiple of
/// 2^-28, and divide where it might not (see `avx2::pack_fixed`).
#[inline]
pub(crate) fn pack_fixed(isa: EncodeIsa, rr: &[&[f32]; MR], nr: &[f64; MR], out: &mut [APack]) {
    assert!(rr.iter().all(|r| r.len() == out.len()));
    match isa {
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx2 | EncodeIsa::Avx512 if isa.supported() => avx2::pack_fixed(rr, nr, out),
        _ => scalar_pack_fixed(rr, nr, out),
    }
}

/// `fixed(x, n)` of [`pack_fixed`], rounded to f32.
#[inline(always)]
pub(crate) fn fixed_f32(x: f32, n: f64) -> f32 {
    ((x as f64 / n + FIXED_MAGIC) - FIXED_MAGIC) as f32
}

/// The portable [`pack_fixed`] (the reference of the tiers).
pub(crate) fn scalar_pack_fixed(rr: &[&[f32]; MR], nr: &[f64; MR], out: &mut [APack]) {
    for (kk, a) in out.iter_mut().enumerate() {
        *a = std::array::from_fn(|r| fixed_f32(rr[r][kk], nr[r]));
    }
}

/// `out[i] = fixed(x[i], n)` in f64 for one row (the exact fallback's `uf`):
/// the same on every tier (see [`pack_fixed`]).
#[inline]
pub(crate) fn fixed_row(isa: EncodeIsa, x: &[f32], n: f64, out: &mut [f64]) {
    assert_eq!(x.len(), out.len());
    match isa {
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx2 | EncodeIsa::Avx512 if isa.supported() => avx2::fixed_row(x, n, out),
        _ => scalar_fixed_row(x, n, out),
    }
}

/// The portable [`fixed_row`].
pub(crate) fn scalar_fixed_row(x: &[f32], n: f64, out: &mut [f64]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (v as f64 / n + FIXED_MAGIC) - FIXED_MAGIC;
    }
}

/// `sum_k u[k] * r[k]` in f64 over the shorter length. The contract defines
/// this sum sequentially in `k`; for CQ4 operands (`u` on the 2^-28 grid
/// with `||u|| <= 1 + 1e-6`, `r` fp16 values of magnitude <= 1 with column
/// norm < 1.9) every product and every partial sum is an exact multiple of
/// 2^-52 below 2 in magnitude, so any association gives the same value:
/// the tiers use as many accumulators as suit them.
#[inline]
pub(crate) fn exact_dot(isa: EncodeIsa, u: &[f64], r: &[f32]) -> f64 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx2 | EncodeIsa::Avx512 if isa.supported() => avx2::exact_dot(u, r),
        _ => scalar_exact_dot(u, r),
    }
}

/// The portable [`exact_dot`]: four accumulators.
#[inline(always)]
pub(crate) fn scalar_exact_dot(u: &[f64], r: &[f32]) -> f64 {
    let mut acc = [0.0f64; 4];
    let (uc, ut) = u.as_chunks::<4>();
    let (rc, rt) = r.as_chunks::<4>();
    for (a, b) in uc.iter().zip(rc) {
        for l in 0..4 {
            acc[l] += a[l] * b[l] as f64;
        }
    }
    let mut s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for (&a, &b) in ut.iter().zip(rt) {
        s += a * b as f64;
    }
    s
}

/// Half a tile's columns: the scalar tier works on `NR / 2` columns at a
/// time so its accumulators fit the baseline's 16 vector registers.
const HALF: usize = NR / 2;

/// One `KB`-term block of `MR x HALF` f32 sums (products and sums rounded
/// separately: Rust never contracts them into FMA).
#[inline(never)]
fn scalar_block(av: &[APack], bv: &[BRow], h: usize) -> [[f32; HALF]; MR] {
    let mut acc = [[0f32; HALF]; MR];
    for (x, y) in av.iter().zip(bv) {
        let y = &y[h * HALF..(h + 1) * HALF];
        for r in 0..MR {
            for q in 0..HALF {
                acc[r][q] += x[r] * y[q];
            }
        }
    }
    acc
}

/// The portable tier (the reference of the tier tests).
pub(crate) fn scalar_tile(a: &[APack], b: &[BRow]) -> Tile {
    let mut out = [[0.0f64; NR]; MR];
    for (ab, bb) in a.chunks_exact(KB).zip(b.chunks_exact(KB)) {
        for h in 0..2 {
            let acc = scalar_block(ab, bb, h);
            for r in 0..MR {
                for q in 0..HALF {
                    out[r][h * HALF + q] += acc[r][q] as f64;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{fill_gaussian, SplitMix64};

    /// Whether two sequences of f64 are the same bit for bit.
    fn same_bits<'a>(
        a: impl IntoIterator<Item = &'a f64>,
        b: impl IntoIterator<Item = &'a f64>,
    ) -> bool {
        a.into_iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits())
    }

    /// Every tier's row energies equal the portable sums bit for bit:
    /// lengths with tails of 1-3 values, values of mixed scales (the order
    /// of the additions shows), zeros, -0.0, subnormals, and weights `x`
    /// of mixed scales and signs.
    #[test]
    fn every_tier_row_energies_equal_the_portable_ones() {
        let mut rng = SplitMix64::new(31);
        for len in [0usize, 1, 3, 4, 5, 7, 64, 129, 640] {
            let mut g = vec![0f64; ENERGY_ROWS * len + len];
            fill_gaussian(&mut rng, &mut g);
            let mut v: Vec<f32> = g[..ENERGY_ROWS * len]
                .iter()
                .enumerate()
                .map(|(i, &t)| (t * 10f64.powi((i % 11) as i32 - 5)) as f32)
                .collect();
            for (i, s) in [0.0, -0.0, f32::from_bits(3), 1e30].iter().enumerate() {
                if let Some(t) = v.get_mut(i * 7) {
                    *t = *s;
                }
            }
            let x: Vec<f64> = g[ENERGY_ROWS * len..]
                .iter()
                .enumerate()
                .map(|(i, &t)| t.abs() * 10f64.powi((i % 5) as i32 - 2))
                .collect();
            let rows: [&[f32]; ENERGY_ROWS] = std::array::from_fn(|r| &v[r * len..(r + 1) * len]);
            let want = scalar_row_energies(&rows, &x);
            for isa in EncodeIsa::available() {
                let got = row_energies(isa, &rows, &x);
                assert!(
                    same_bits(&got, &want),
                    "{isa:?} len {len}: {got:?} != {want:?}"
                );
            }
        }
    }

    /// Every tier's finiteness scan answers as the portable one: lengths
    /// around the vector widths, one NaN, +inf or -inf at every position
    /// of short rows (and at a few of long ones), and finite extremes.
    #[test]
    fn every_tier_finiteness_scan_equals_the_portable_one() {
        let mut rng = SplitMix64::new(5);
        for len in [0usize, 1, 7, 8, 15, 16, 17, 31, 33, 640] {
            let mut g = vec![0f64; len];
            fill_gaussian(&mut rng, &mut g);
            let base: Vec<f32> = g.iter().map(|&x| x as f32).collect();
            let mut cases = vec![base.clone()];
            if let Some(x) = cases[0].first_mut() {
                *x = f32::MAX;
            }
            let at: Vec<usize> = if len <= 40 {
                (0..len).collect()
            } else {
                vec![0, 1, 15, 16, 17, len / 2, len - 1]
            };
            for &p in &at {
                for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                    let mut r = base.clone();
                    r[p] = bad;
                    cases.push(r);
                }
            }
            for r in &cases {
                let want = r.iter().all(|x| x.is_finite());
                assert_eq!(portable_all_finite(r), want);
                for isa in EncodeIsa::available() {
                    assert_eq!(all_finite(isa, r), want, "{isa:?} len {len}");
                }
            }
        }
    }

    /// Every tier tells exact power-of-two scalings as the definition does
    /// (the image `f64(v) * 2^e` is an f32 equal to it and, for `e < 0`,
    /// normal or zero), at the range edges, for one odd value anywhere in
    /// rows of many lengths (vector body and tail).
    #[test]
    fn pow2_scaling_exactness_is_the_same_on_every_tier() {
        let min = f32::MIN_POSITIVE;
        let edges = [
            0.0,
            -0.0,
            min,
            min.next_down(),
            16.0 * min,
            (16.0 * min).next_down(),
            -(16.0 * min).next_down(),
            f32::from_bits(1),
            f32::from_bits(0x123),
            f32::MAX,
            f32::MAX / 16.0,
            (f32::MAX / 16.0).next_up(),
            2f32.powi(124),
            -2f32.powi(124),
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1.0,
            -0.37,
        ];
        let definition = |e: i32, v: f32| -> bool {
            if !v.is_finite() || v == 0.0 {
                return true;
            }
            let image = f64::from(v) * 2f64.powi(e);
            let f = image as f32;
            f64::from(f) == image && f.is_finite() && (e > 0 || f.is_normal())
        };
        for e in [-4, 4, -1, 1, -100, 100] {
            for &v in &edges {
                let want = definition(e, v);
                assert_eq!(
                    portable_pow2_scaling_is_exact(e, &[v]),
                    want,
                    "e {e} v {v:e}"
                );
                for len in [1usize, 7, 8, 9, 33, 100] {
                    for p in [0, len / 2, len - 1] {
                        let mut r = vec![0.25f32; len];
                        r[p] = v;
                        for isa in EncodeIsa::available() {
                            assert_eq!(
                                pow2_scaling_is_exact_on(isa, e, &r),
                                want,
                                "{isa:?} e {e} v {v:e} len {len} at {p}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// The parallel scan gives the one-pass answer: a value that is not
    /// carried exactly in the first, a middle or the last part (or in none)
    /// of an input long enough to be split, on a pool of 2 threads.
    #[test]
    fn parallel_pow2_scan_is_the_one_pass_answer() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let len = 3 * PAR_SCAN_VALUES + 5;
        for bad in [None, Some(0), Some(PAR_SCAN_VALUES + 17), Some(len - 1)] {
            let mut v = vec![0.25f32; len];
            if let Some(at) = bad {
                v[at] = f32::MIN_POSITIVE;
            }
            for e in [-4, 4] {
                let want = portable_pow2_scaling_is_exact(e, &v);
                // 2^-126 * 2^-4 is not normal: only e > 0 carries it.
                assert_eq!(want, bad.is_none() || e > 0);
                assert_eq!(pool.install(|| pow2_scaling_is_exact(e, &v)), want);
            }
        }
    }

    /// Every tier's Hadamard batch input equals the portable gather: four
    /// full groups (the transposing path), and groups of uneven lengths and
    /// empty ones (zero-filled), values including -0.0 and subnormals.
    #[test]
    fn every_tier_gathers_the_portable_batch() {
        use crate::hadamard::HADAMARD_N;
        let mut g = vec![0f64; 4 * HADAMARD_N];
        fill_gaussian(&mut SplitMix64::new(9), &mut g);
        let mut v: Vec<f32> = g.iter().map(|&x| x as f32).collect();
        v[3] = -0.0;
        v[130] = f32::from_bits(1);
        v[511] = f32::MAX;
        let groups: Vec<&[f32]> = v.chunks_exact(HADAMARD_N).collect();
        let shapes: [[usize; LANES]; 3] = [[128; 4], [128, 127, 5, 0], [0; 4]];
        for lens in shapes {
            let src: [&[f32]; LANES] = std::array::from_fn(|l| &groups[l][..lens[l]]);
            let mut want: Batch = [[7.0; LANES]; HADAMARD_N];
            scalar_gather_batch(src, &mut want);
            for isa in EncodeIsa::available() {
                let mut got: Batch = [[-7.0; LANES]; HADAMARD_N];
                gather_batch(isa, src, &mut got);
                assert!(
                    same_bits(got.iter().flatten(), want.iter().flatten()),
                    "{isa:?} lengths {lens:?}"
                );
            }
        }
    }

    /// Every tier's column sums of squares equal the one-row-at-a-time
    /// reference bit for bit: widths around the vector lengths, row counts
    /// around the row groups (with a partial row at the end), values of
    /// mixed scales (so the order of the additions shows), zeros, -0.0,
    /// subnormals and the f32 extremes, and running sums carried in.
    #[test]
    fn every_tier_column_squares_equal_the_scalar_sums() {
        let mut rng = SplitMix64::new(77);
        for k in [1usize, 3, 7, 8, 9, 16, 17, 33, 640] {
            for nrows in [0usize, 1, 7, 8, 9, 15, 16, 17, 25] {
                let mut g = vec![0f64; nrows * k + 2];
                fill_gaussian(&mut rng, &mut g);
                let mut rows: Vec<f32> = g
                    .iter()
                    .enumerate()
                    .map(|(i, &x)| (x * 10f64.powi((i % 13) as i32 - 6)) as f32)
                    .collect();
                let specials = [
                    0.0,
                    -0.0,
                    f32::from_bits(1),
                    f32::MIN_POSITIVE,
                    f32::MAX,
                    -f32::MAX,
                    1e-30,
                ];
                for (i, v) in specials.iter().enumerate() {
                    if let Some(x) = rows.get_mut(i * 5) {
                        *x = *v;
                    }
                }
                // A partial row at the end is ignored.
                rows.truncate(nrows * k + (k > 1) as usize);
                let start: Vec<f64> = (0..k).map(|c| c as f64 * 0.37 + 1e-3).collect();
                let mut want = start.clone();
                scalar_column_squares(&mut want, &rows);
                for isa in EncodeIsa::available() {
                    let mut got = start.clone();
                    column_squares(isa, &mut got, &rows);
                    assert!(
                        same_bits(&got, &want),
                        "{isa:?} k {k} rows {nrows}: {got:?} != {want:?}"
                    );
                    // A band of columns alone gives those columns' sums.
                    for (c0, w) in [(0, k / 2), (k / 3, k - k / 3), (k - 1, 1), (k / 2, k / 4)] {
                        let mut band = start[c0..c0 + w].to_vec();
                        column_squares_of(isa, &mut band, &rows, k, c0);
                        assert!(
                            same_bits(&band, &want[c0..c0 + w]),
                            "{isa:?} k {k} rows {nrows} band {c0}+{w}"
                        );
                    }
                }
            }
        }
    }

    /// The column sums split among threads equal the one-thread reference
    /// bit for bit, on every tier, for widths that split evenly, unevenly
    /// and into fewer bands than threads.
    #[test]
    fn column_squares_on_several_threads_equal_the_scalar_sums() {
        let mut rng = SplitMix64::new(78);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for k in [16usize, 40, 640, 650] {
            // Enough values for the split (a partial row at the end).
            let nrows = 3 * PAR_COLUMN_VALUES / k + 5;
            let mut g = vec![0f64; nrows * k + 1];
            fill_gaussian(&mut rng, &mut g);
            let rows: Vec<f32> = g
                .iter()
                .enumerate()
                .map(|(i, &x)| (x * 10f64.powi((i % 11) as i32 - 5)) as f32)
                .collect();
            let start: Vec<f64> = (0..k).map(|c| c as f64 * 0.11).collect();
            let mut want = start.clone();
            scalar_column_squares(&mut want, &rows);
            for isa in EncodeIsa::available() {
                let mut got = start.clone();
                pool.install(|| par_column_squares(isa, &mut got, &rows));
                assert!(same_bits(&got, &want), "{isa:?} k {k}");
            }
        }
    }

    /// Every tier's row norms and packed filter input equal the scalar
    /// ones bit for bit: Gaussian rows of several scales and lengths (tails
    /// of 1-3 values), rows with zeros, -0.0, f32 subnormals and values at
    /// the f32 extremes, and rows whose quotients are exactly on or one ulp
    /// beside the 2^-28 grid's rounding boundaries (where the reciprocal's
    /// product alone would round the other way: the division must decide).
    #[test]
    fn every_tier_packs_the_scalar_filter_input() {
        let mut rows: Vec<Vec<f32>> = vec![];
        let mut g = vec![0.0f64; 643];
        for (s, scale) in [(1u64, 0.02), (2, 1.0), (3, 1e-30), (4, 3e30)] {
            fill_gaussian(&mut SplitMix64::new(s), &mut g);
            rows.push(g.iter().map(|&x| (x * scale) as f32).collect());
        }
        let mut odd = vec![0.0f32; 643];
        for (i, x) in odd.iter_mut().enumerate() {
            *x = match i % 7 {
                0 => -0.0,
                1 => f32::from_bits(1 + i as u32),
                2 => f32::MIN_POSITIVE,
                3 => f32::MAX / 64.0,
                4 => -(i as f32),
                _ => 0.0,
            };
        }
        rows.push(odd);
        // Norm 1 (the tiny values vanish in the f64 sum of squares), and
        // quotients m * 2^-29 for odd m (ties of the grid, half to even) and
        // one f32 ulp either side of them.
        let mut ties = vec![0.0f32; 643];
        ties[0] = 1.0;
        for (i, x) in ties.iter_mut().enumerate().skip(1) {
            let m = [1.0f32, 3.0, -1.0, -3.0, 5.0][i % 5];
            let t = m * 2f32.powi(-29);
            *x = match i % 3 {
                0 => t,
                1 => t.next_up(),
                _ => t.next_down(),
            };
        }
        rows.push(ties.clone());
        let nr_one = [1.0f64; MR];
        let rr: [&[f32]; MR] = [&ties[..], &ties[..], &ties[..], &ties[..]];
        let mut want = vec![[0.0f32; MR]; ties.len()];
        scalar_pack_fixed(&rr, &nr_one, &mut want);
        // Ties do round to even (1.5 * 2^-28 -> 2 * 2^-28), so a product
        // that misses the tie by an ulp would be caught.
        assert_eq!(want[15][0], 0.0, "2^-29 rounds to 0");
        assert_eq!(want[6][0], 2f32.powi(-27), "3 * 2^-29 rounds to 4 * 2^-29");
        assert_eq!(
            want[3][0],
            -(2f32.powi(-27)),
            "-3 * 2^-29 rounds to -4 * 2^-29"
        );

        for isa in EncodeIsa::available() {
            for len in [643usize, 640, 5, 3, 0] {
                for quad in rows.chunks(MR).chain(rows.windows(MR)) {
                    let rr: [&[f32]; MR] = std::array::from_fn(|r| &quad[r % quad.len()][..len]);
                    let ss = sum_squares(isa, &rr);
                    let want_ss = scalar_sum_squares(&rr);
                    assert_eq!(
                        ss.map(f64::to_bits),
                        want_ss.map(f64::to_bits),
                        "{isa:?} {len}"
                    );
                    for nr in [want_ss.map(|s| s.sqrt().max(1e-8)), nr_one] {
                        for r in 0..MR {
                            let mut got = vec![0.0f64; len];
                            let mut want = vec![0.0f64; len];
                            fixed_row(isa, rr[r], nr[r], &mut got);
                            scalar_fixed_row(rr[r], nr[r], &mut want);
                            let bits =
                                |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                            assert_eq!(bits(&got), bits(&want), "{isa:?} len {len} row {r}");
                        }
                        let mut got = vec![[0.0f32; MR]; len];
                        let mut want = vec![[0.0f32; MR]; len];
                        pack_fixed(isa, &rr, &nr, &mut got);
                        scalar_pack_fixed(&rr, &nr, &mut want);
                        for kk in 0..len {
                            assert_eq!(
                                got[kk].map(f32::to_bits),
                                want[kk].map(f32::to_bits),
                                "{isa:?} len {len} value {kk}: norms {nr:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// The x86 tiers' Hadamard positions (bucket by vector, then eight
    /// thresholds compared at once) equal the portable scan's for values
    /// on, beside and between every threshold, far outside the buckets,
    /// infinite and NaN, in every lane.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn x86_hadamard_positions_equal_the_portable_scan() {
        use crate::hadamard::HADAMARD_N;
        use crate::hadamard_quant::{positions, Positions, Rotated, SearchTable};
        if !EncodeIsa::Avx2.supported() {
            eprintln!("skipping: no AVX2");
            return;
        }
        let cb = crate::codebook::lloyd_max(128).unwrap();
        let st = SearchTable::new(&cb.values, &cb.midpoints);
        let mut probes: Vec<f64> = vec![
            0.0,
            -0.0,
            1e300,
            -1e300,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MIN_POSITIVE,
        ];
        for &x in st.thr.iter().filter(|x| x.is_finite()) {
            probes.extend([x, x.next_up(), x.next_down(), 2.0 * x, x / 2.0, -x]);
        }
        probes.extend((-40000..=40000).map(|i| i as f64 * 1e-4));
        // Each probe in every lane, shifted so the lanes differ.
        let n = probes.len();
        let mut checked = 0;
        for chunk in (0..n + 3).collect::<Vec<_>>().chunks(HADAMARD_N) {
            let mut rot: Rotated = [[0.0; LANES]; HADAMARD_N];
            for (j, &i) in chunk.iter().enumerate() {
                rot[j] = std::array::from_fn(|l| probes[(i + l) % n]);
            }
            let mut want: Positions = [[0; LANES]; HADAMARD_N];
            let mut got = want;
            positions(&st, &rot, &mut want);
            avx2::positions(&st, &rot, &mut got);
            assert_eq!(got, want, "probes from {}", chunk[0]);
            checked += chunk.len();
        }
        assert!(checked > n);
    }
}
