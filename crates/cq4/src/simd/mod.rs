//! The quantizer's hot loops, one implementation per ISA tier, selected at
//! run time: the orthogonal family's f32 filter tile and the Hadamard
//! family's batch quantizer ([`crate::hadamard_quant`], exact arithmetic,
//! the same values on every tier).
//!
//! The tile computes, for `MR` rows of `uf` (rounded to f32) and the `NR`
//! columns of one packed panel of R, estimates of `rot_j = sum_k uf_k R[k][j]`:
//! products and sums in f32 within blocks of [`KB`] consecutive `k`, block
//! sums added in f64. The estimate only *filters* (docs/FORMAT.md §CQ4.11):
//! an index is read from it only when no threshold lies within the proven
//! bound `E` of it, otherwise the exact f64 sum decides, so the bytes do not
//! depend on the tier. What the tiers share, and what `E` is derived for:
//! every f32 block sum has exactly [`KB`] terms, each accumulated with one
//! f32 rounding per product and per addition (scalar) or one per fused
//! multiply-add (AVX2+FMA, AVX-512F, NEON), in any order; each block sum is
//! converted to f64 exactly and the `Kp / KB` block sums are added in f64.
//!
//! Tiers: [`EncodeIsa::Scalar`] (portable, the reference),
//! [`EncodeIsa::Avx2`] (x86-64 AVX2 + FMA), [`EncodeIsa::Avx512`] (x86-64
//! AVX-512F), [`EncodeIsa::Neon`] (aarch64 Advanced SIMD). The best tier the
//! CPU has is used unless the environment variable [`FORCE_ENV`] (shared
//! with the `kernels` crate: `CONVERT_FORCE_ISA=scalar|avx2|avx512|neon`)
//! caps it.

use std::sync::OnceLock;

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
    /// x86-64 AVX-512F (16-wide f32, fused multiply-add).
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
        EncodeIsa::Avx2 if isa.supported() => avx2::tile(a, b),
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx512 if isa.supported() => {
            let [t] = avx512::tiles([a], b);
            t
        }
        #[cfg(target_arch = "aarch64")]
        EncodeIsa::Neon if isa.supported() => neon::tile(a, b),
        _ => scalar_tile(a, b),
    }
}

/// `N` tiles over one R panel: `[tile(isa, a[0], b), .., tile(isa, a[N-1], b)]`,
/// bit for bit. The AVX-512 tier runs them in one pass (one load of R per
/// `4 N` FMAs; see `avx512::tile_n`); the others run them in turn.
#[inline]
pub(crate) fn tiles<const N: usize>(isa: EncodeIsa, a: [&[APack]; N], b: &[BRow]) -> [Tile; N] {
    assert!(a.iter().all(|x| x.len() == b.len()) && b.len().is_multiple_of(KB));
    match isa {
        #[cfg(target_arch = "x86_64")]
        EncodeIsa::Avx512 if isa.supported() => avx512::tiles(a, b),
        _ => a.map(|x| tile(isa, x, b)),
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

/// [`Buckets::lookup`] of a tile row's `NR` estimates on `isa`, and the
/// mask of the entries that are [`UNCERTAIN`] (bit `q` for column `q`): the
/// same on every tier (the AVX2 and AVX-512 tiers compute the buckets with
/// the same f64 operations and gather the entries).
#[inline]
pub(crate) fn lookup_row(isa: EncodeIsa, t: Buckets<'_>, est: &[f64; NR]) -> ([u8; NR], u32) {
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
            (idx, unsure)
        }
    }
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
