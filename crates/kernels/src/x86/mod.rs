//! x86-64 SIMD kernels: [`avx2`] and (with a Rust >= 1.89 compiler)
//! [`avx512`], plus the AVX2 building blocks both share.
//!
//! Every kernel reproduces the scalar reference ([`crate::scalar`]) bit for
//! bit. The integer parts are exact by construction (bounds in the comments
//! at each unsigned-operand trick); the float part of a ggml group kernel
//! runs with one f32 lane per row slot, so each lane executes exactly the
//! scalar sequence of operations for its row.

pub mod avx2;
pub mod avx2_gemm;
pub(crate) mod quant;
// Compiled only by rustc >= 1.89 (cfg set by build.rs), where the AVX-512
// intrinsics are stable.
#[cfg(kernels_avx512)]
#[clippy::msrv = "1.89"]
pub mod avx512;
#[cfg(kernels_avx512)]
#[clippy::msrv = "1.89"]
pub mod avx512_gemm;

use core::arch::x86_64::*;

pub(crate) use crate::operands::{read_u16, read_u32, Slots};

/// Lane `r` of the result = the sum of the 8 i32 lanes of `v[r]` (exact).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn reduce8(v: &[__m256i; 8]) -> __m256i {
    let h01 = _mm256_hadd_epi32(v[0], v[1]);
    let h23 = _mm256_hadd_epi32(v[2], v[3]);
    let h45 = _mm256_hadd_epi32(v[4], v[5]);
    let h67 = _mm256_hadd_epi32(v[6], v[7]);
    // [v0a v1a v2a v3a | v0b v1b v2b v3b]: a/b = low/high 128-bit lane sums.
    let h0123 = _mm256_hadd_epi32(h01, h23);
    let h4567 = _mm256_hadd_epi32(h45, h67);
    let lo = _mm256_permute2x128_si256::<0x20>(h0123, h4567);
    let hi = _mm256_permute2x128_si256::<0x31>(h0123, h4567);
    _mm256_add_epi32(lo, hi)
}

/// Eight fp16 values (bits) widened to f32, lane `r` = `h[r]` (exact).
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn fp16x8(h: &[u16; 8]) -> __m256 {
    let v = _mm_set_epi16(
        h[7] as i16,
        h[6] as i16,
        h[5] as i16,
        h[4] as i16,
        h[3] as i16,
        h[2] as i16,
        h[1] as i16,
        h[0] as i16,
    );
    _mm256_cvtph_ps(v)
}

/// `acc + f32(s) * (d * da)` lane-wise: the block formula of the formats
/// without mins for 8 rows (the scalar order: the product of the scales
/// first, no FMA).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn add_scaled(acc: __m256, s: __m256i, d: __m256, da: f32) -> __m256 {
    let c = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, _mm256_set1_ps(da)));
    _mm256_add_ps(acc, c)
}

/// `f32(s) * (d * da) - f32(m) * (dmin * da)` lane-wise: the block terms
/// of the k-quants with mins (Q4_K, Q5_K, Q2_K) for 8 rows, or for 8
/// blocks of a walk each with its own `da`, in the scalar order (the
/// product of the scales first, no FMA).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn mins_terms(s: __m256i, m: __m256i, d: __m256, dmin: __m256, da: __m256) -> __m256 {
    _mm256_sub_ps(
        _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, da)),
        _mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dmin, da)),
    )
}

/// `acc + mins_terms(s, m, d, dmin, da)` lane-wise ([`mins_terms`]), one
/// activation block's `da` for all 8 rows.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn add_scaled_mins(
    acc: __m256,
    s: __m256i,
    m: __m256i,
    d: __m256,
    dmin: __m256,
    da: f32,
) -> __m256 {
    _mm256_add_ps(acc, mins_terms(s, m, d, dmin, _mm256_set1_ps(da)))
}

/// How far ahead the CQ4 kernels prefetch panel bytes.
pub(crate) const CQ4_PREFETCH_BYTES: usize = 2048;

impl Slots {
    /// Prefetch (T0) the block `ahead` bytes down each slot's stream.
    /// Prefetches are hints: an address past the data never faults.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn prefetch(&self) {
        for r in 0..8 {
            let q = self.p[r].wrapping_add(self.ahead_of(r));
            // First and last line of the block; in an R8 group the slots'
            // blocks are adjacent, so together they cover the group.
            _mm_prefetch::<_MM_HINT_T0>(q.cast());
            _mm_prefetch::<_MM_HINT_T0>(q.wrapping_add(self.block_bytes - 1).cast());
        }
    }
}

/// Whether this CPU has GFNI (Galois-field byte instructions; Ice Lake and
/// later, Zen 4 and later, not Skylake-X / Cascade Lake): the `avx512`
/// tier then runs the Q6_K kernel that uses them
/// ([`avx512::q6_k_group_gfni`]); both give the same bits
/// (tests/kernels.rs `x86_table_variants_equal_scalar`).
pub fn has_gfni() -> bool {
    std::arch::is_x86_feature_detected!("gfni")
}

/// Whether this CPU runs 256-bit vector operations as two 128-bit halves
/// (AMD Zen 1 / Zen+ and the Hygon parts built on them: family 0x17 below
/// model 0x30, family 0x18), probed once with `cpuid`. There the `avx2`
/// tier uses kernels written in 128-bit halves where that measured faster
/// (`*_group_h`: no lane extractions, and better scheduling around the one
/// 128-bit multiplier pipe; kernel-only Q8_0 and Q4_K 6-7% faster, Q6_K 4%,
/// on an EPYC of that family); every other AVX2 CPU keeps the 256-bit ones. Both
/// give the same bits (tests/kernels.rs `x86_table_variants_equal_scalar`).
pub fn halves() -> bool {
    static HALVES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HALVES.get_or_init(|| {
        let (vendor, family, model) = cpu_model();
        match &vendor {
            b"AuthenticAMD" => family == 0x17 && model < 0x30,
            b"HygonGenuine" => family == 0x18,
            _ => false,
        }
    })
}

/// The CPU's vendor string, family and model (`cpuid` leaves 0 and 1, with
/// the extended family and model folded in as the vendors document).
fn cpu_model() -> ([u8; 12], u32, u32) {
    // Leaves 0 and 1 exist on every x86-64 CPU.
    let (v, l1) = (__cpuid(0), __cpuid(1));
    let mut vendor = [0u8; 12];
    for (d, w) in vendor.chunks_exact_mut(4).zip([v.ebx, v.edx, v.ecx]) {
        d.copy_from_slice(&w.to_le_bytes());
    }
    let base = (l1.eax >> 8) & 0xF;
    let family = if base == 0xF {
        base + ((l1.eax >> 20) & 0xFF)
    } else {
        base
    };
    let model = ((l1.eax >> 4) & 0xF) | (((l1.eax >> 16) & 0xF) << 4);
    (vendor, family, model)
}

/// Where the interleaved layouts' group kernels (R8, and R4 alike: both
/// address a half as 4 adjacent blocks) put their software prefetch (a
/// hint: the bits never depend on it). Measured on R8 per CPU model,
/// because the two CPU models measured so far want opposite things
/// (docs/BENCHMARKS.md, sessions 17 and 22); the distance is in the
/// layout's own strides, so R4's is half R8's in bytes:
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum R8Prefetch {
    /// Into L2 (`prefetcht1`) at twice the plain distance, L2 -> L1 left
    /// to the hardware. The default: on a Rocket Lake (family 6 model 167,
    /// 512 KB L2) it beat L1 at 2x and 4x the distance by 12 - 21 % on R8
    /// Q6_K from DRAM.
    L2,
    /// Into L1 (`prefetcht0`) at four times the plain distance. Ice Lake
    /// server (family 6 models 106 and 108, 1.25 MB L2): against
    /// [`L2`](Self::L2), +10 % from L3 and +8 % from DRAM (geometric means over
    /// R8 Q4_K / Q6_K / Q8_0, three shapes, 1 and 2 threads); 3x, 6x and 8x
    /// gave the same. AMD Zen 5 (EPYC, family 0x1A model 2, 1 MB L2):
    /// from DRAM at one thread, R8 +21 - 38 % (Q4_K 24.3 -> 33.5 GB/s,
    /// Q6_K 24.6 -> 30.7, Q8_0 33.5 -> 37.6) and R4 +4 - 34 % against
    /// [`L2`](Self::L2), 2048 x 8192, in turn; 2x and 3x lost, 6x and 8x
    /// were no better (docs/BENCHMARKS.md, session 26).
    L1Far,
}

impl R8Prefetch {
    /// The distance, in multiples of the plain one (`PREFETCH_BYTES` in
    /// whole strides).
    const fn times(self) -> usize {
        match self {
            R8Prefetch::L2 => 2,
            R8Prefetch::L1Far => 4,
        }
    }
}

/// [`R8Prefetch`] for this CPU: [`R8Prefetch::L1Far`] on the CPU models
/// where it measured faster, [`R8Prefetch::L2`] elsewhere;
/// `KERNELS_R8_PREFETCH=l1` or `=l2` overrides it (to measure a CPU model
/// not in the list; any other value is ignored). Probed once.
pub fn r8_prefetch() -> R8Prefetch {
    static P: std::sync::OnceLock<R8Prefetch> = std::sync::OnceLock::new();
    *P.get_or_init(|| match std::env::var("KERNELS_R8_PREFETCH").as_deref() {
        Ok("l1") => R8Prefetch::L1Far,
        Ok("l2") => R8Prefetch::L2,
        _ => match cpu_model() {
            (v, 6, 106 | 108) if &v == b"GenuineIntel" => R8Prefetch::L1Far,
            (v, 0x1A, 2) if &v == b"AuthenticAMD" => R8Prefetch::L1Far,
            _ => R8Prefetch::L2,
        },
    })
}

/// How a group kernel over plain (row-major) rows, or over R4's two
/// units, prefetches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowPrefetch {
    /// Each of the 8 rows' current block, `operands::PREFETCH_BYTES`
    /// ahead: eight streams per thread, a row apart.
    Rows,
    /// For the groups `linear_prefetch` names, the next group's bytes
    /// in memory order, one step's worth (8 blocks) per step: the rows of
    /// a plain group, and R4's two units, are contiguous, so the reads
    /// ahead form one stream per thread. AMD Zen 5 (EPYC, family 0x1A
    /// model 2), DRAM in its slow regime (~45 GB/s read at 2 threads), in turn against
    /// [`Rows`](Self::Rows): cold at 2 threads Q8_0 38.5 - 39.5 -> 44.4 -
    /// 49.5 GB/s (the read rate), Q4_0 and Q4_1 +12 - 15 %; hot +9 - 17 %.
    /// An experiment build giving it to every type: Q4_K -5 %, Q6_K level,
    /// so the larger blocks kept [`Rows`](Self::Rows) (docs/BENCHMARKS.md,
    /// session 28). Session 29 limited Q4_K to groups of at most
    /// [`LINEAR_GROUP_MAX`] and gave R4 the same rule (docs/BENCHMARKS.md,
    /// session 29). Q6_K's plain and R4 groups are instead walked in memory
    /// order, a row or an R4 unit at a time (`walk`; docs/BENCHMARKS.md,
    /// session 30).
    Linear,
}

/// The prefetch of plain rows and of R4 on this CPU:
/// [`RowPrefetch::Linear`] where it measured faster (Zen 5, for the groups
/// `linear_prefetch` names), [`RowPrefetch::Rows`] elsewhere;
/// `KERNELS_ROW_PREFETCH=linear` or `=rows` overrides it (any other value
/// is ignored). Probed once.
pub fn row_prefetch() -> RowPrefetch {
    static P: std::sync::OnceLock<RowPrefetch> = std::sync::OnceLock::new();
    *P.get_or_init(|| match std::env::var("KERNELS_ROW_PREFETCH").as_deref() {
        Ok("linear") => RowPrefetch::Linear,
        Ok("rows") => RowPrefetch::Rows,
        _ => match cpu_model() {
            (v, 0x1A, 2) if &v == b"AuthenticAMD" => RowPrefetch::Linear,
            _ => RowPrefetch::Rows,
        },
    })
}

/// The largest group (8 rows' bytes) of Q4_K blocks that takes
/// [`RowPrefetch::Linear`]: one group ahead in L1 beside the current one.
/// At 2048 columns (a group of 9 KB) Q4_K gained 7 - 8 % cold in slow
/// periods, plain rows and R4 alike, hot level; at 8192 (37 KB) it lost
/// (docs/BENCHMARKS.md, session 29).
pub const LINEAR_GROUP_MAX: usize = 32 * 1024;

/// Whether a contiguous group (plain rows, or R4's two units) of `b`-byte
/// blocks, `group` bytes in all, takes [`RowPrefetch::Linear`]: Q4_0 and
/// IQ4_NL (18), Q4_1 (20) and Q8_0 (34) at every size, Q4_K (144) up to
/// [`LINEAR_GROUP_MAX`]. Q4_0, Q4_1, Q8_0 and Q4_K were measured, IQ4_NL
/// shares Q4_0's block shape. Q6_K (210) keeps [`RowPrefetch::Rows`]:
/// plain rows lost 3 - 12 % cold at 2048 columns, R4 was level there and
/// lost 10 % cold and 15 % hot at 8192. Q5_0 / Q5_1 (22, 24) were not
/// measured and keep it too.
const fn linear_prefetch(b: usize, group: usize) -> bool {
    matches!(b, 18 | 20 | 34) || (b == 144 && group <= LINEAR_GROUP_MAX)
}

/// How far ahead of a walk ([`walk`]) its kernel prefetches, in
/// bytes of the one stream it reads. 2 and 4 KiB measured alike hot; 4 KiB
/// was ahead cold in fast DRAM periods (docs/BENCHMARKS.md, session 30).
pub(crate) const WALK_AHEAD: usize = 4096;

/// [`WALK_AHEAD`] for the Q4_K walks (plain rows and R4), measured on its
/// own: at 4, 8 and 12 KiB the plain row walk's cold rate at one thread
/// rose with the distance, at two threads it held up to 8 KiB and fell at
/// 12; 8 KiB also lifted R4's unit walk at one thread, two threads level
/// (docs/BENCHMARKS.md, session 31). Q6_K's walks lost at two threads
/// with 8 KiB and keep [`WALK_AHEAD`].
pub(crate) const K4_WALK_AHEAD: usize = 8192;

/// A group its kernel walks in memory order instead of reading its 8 slots
/// in lockstep ([`walk`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Walk {
    /// 8 contiguous plain rows from this byte, walked a row at a time.
    Rows(*const u8),
    /// R4's two contiguous units (4 rows each, blocks interleaved) from this
    /// byte, walked a unit at a time.
    Units(*const u8),
}

/// How group `g` (blocks of `b` bytes) is walked, when its kernel walks it
/// **in memory order** instead of its 8 slots in lockstep: a plain group
/// whose rows are contiguous (every group but a matrix's last) a row at a
/// time, an R4 group (its two units contiguous) a unit at a time; only for
/// a format `walks` names and with [`RowPrefetch::Linear`] on. The bytes
/// are then read in order, one stream per thread; each row's terms are
/// still added in block order, so the sums are the lockstep kernel's bit
/// for bit.
#[inline(always)]
pub(crate) fn walk(g: &crate::operands::RowGroup<'_>, b: usize) -> Option<Walk> {
    let (o, st) = (g.offsets(), g.strides());
    let span = g.nblocks() * b;
    if !walks(b) || g.block_bytes() != b || span == 0 || row_prefetch() != RowPrefetch::Linear {
        return None;
    }
    let base = g.data().as_ptr().wrapping_add(o[0]);
    if st.iter().all(|&x| x == b) && (0..8).all(|r| o[r] == o[0] + r * span) {
        return Some(Walk::Rows(base));
    }
    let r4 = st.iter().all(|&x| x == 4 * b)
        && (0..8).all(|r| o[r] == o[0] + (r / 4) * 4 * span + (r % 4) * b);
    r4.then_some(Walk::Units(base))
}

/// The formats whose plain and R4 groups [`walk`] walks, each with an
/// AVX-512 walk kernel; Zen 5, in turn against the lockstep kernels
/// (docs/BENCHMARKS.md, sessions 30 and 31):
/// - Q6_K (210-byte blocks): cold at 2 threads +20 - 30 % in slow DRAM
///   periods (35 - 37 -> 43 - 48 GB/s, 91 - 116 % of the read probe),
///   +7 - 10 % at one thread; hot level to 9 % lower.
/// - Q4_K (144), R4: cold at 2 threads 35 - 39 -> 48 - 49 GB/s in slow
///   periods (98 - 104 % of the probe), hot +14 - 20 %.
/// - Q4_K, plain rows, with each run of activation blocks prepared once
///   per group: cold at 2 threads 37 - 40 -> 42 - 47 GB/s in slow periods
///   (ggml 38 - 39 at 2048 x 8192: 0.95 - 0.98x -> 1.09 - 1.16x); hot
///   level. One thread cold at 8192 columns, where the lockstep's eight
///   streams read 36 GB/s, 33 (ggml 25 - 26); at 2048 columns +10 - 15 %.
///
/// A plain row's walk sums one row at a time; where a block holds 32
/// weights (Q8_0) its chain of additions binds it hot (session 28), and
/// R4 Q8_0's unit walk lost cold (session 30).
const fn walks(b: usize) -> bool {
    b == 210 || b == 144
}

/// How a group kernel finds the current block of each of its 8 row slots
/// (one implementation per addressing pattern, so the common patterns get
/// code without per-slot pointer arrays).
pub(crate) trait Rows {
    /// The current block of slot `r` (`r < 8`).
    fn at(&self, r: usize) -> *const u8;
    /// Move every slot to its next block.
    fn advance(&mut self);
    /// Prefetch hint for the blocks `PREFETCH_BYTES` ahead (never faults).
    fn prefetch(&self);
}

/// 8 slot pointers that do not move: a walk's blocks of one step, for the
/// helpers that read a field of 8 blocks ([`fp16x8_rows`],
/// [`fp16x8x2_rows`]).
pub(crate) struct Ptrs(pub(crate) [*const u8; 8]);

impl Ptrs {
    /// Slot `i < n` at the `i`-th of the `b`-byte blocks from `p`; the
    /// slots past `n` repeat the first block (a step short of 8 blocks
    /// reads nothing past its own).
    #[inline(always)]
    pub(crate) fn blocks(p: *const u8, b: usize, n: usize) -> Ptrs {
        let mut q = [p; 8];
        for (i, x) in q.iter_mut().enumerate().take(n) {
            *x = p.wrapping_add(i * b);
        }
        Ptrs(q)
    }
}

impl Rows for Ptrs {
    #[inline(always)]
    fn at(&self, r: usize) -> *const u8 {
        self.0[r]
    }
    #[inline(always)]
    fn advance(&mut self) {}
    #[inline(always)]
    fn prefetch(&self) {}
}

impl Rows for Slots {
    #[inline(always)]
    fn at(&self, r: usize) -> *const u8 {
        Slots::at(self, r)
    }
    #[inline(always)]
    fn advance(&mut self) {
        Slots::advance(self)
    }
    #[inline(always)]
    fn prefetch(&self) {
        // SAFETY: every x86 tier that runs a group kernel has AVX2 (the
        // table is only handed out for an available tier); prefetch is a
        // hint that never faults.
        unsafe { Slots::prefetch(self) }
    }
}

/// The slots of every group the drivers build except the last of a matrix:
/// slot `r` at `half[r / 4] + (r % 4) * d`, all with the same stride.
/// `PACKED` (the 4 slots of each half are adjacent blocks, `d` = one
/// block, a constant): R8, `half[1] = half[0] + 4d`, stride `8B`, and R4,
/// two units, stride `4B`. Otherwise plain rows: `d` = row bytes, stride
/// `B`. `B` is the format's block size.
pub(crate) struct Uniform<const B: usize, const PACKED: bool> {
    half: [*const u8; 2],
    d: usize,
    stride: usize,
    /// Prefetch distance: whole strides, at least `PREFETCH_BYTES`
    /// (`PACKED`, i.e. R4 and R8: two or four times that, see
    /// [`R8Prefetch`]).
    ahead: usize,
    /// `PACKED`: prefetch into L1 ([`R8Prefetch::L1Far`]) rather than L2.
    l1: bool,
    /// Past a stream's end, the next group.
    look: crate::operands::Lookahead,
    /// Plain rows and R4 with [`RowPrefetch::Linear`]: the next group's
    /// first byte (the group's 8 rows are contiguous).
    linear: Option<*const u8>,
}

impl<const B: usize, const PACKED: bool> Uniform<B, PACKED> {
    /// The group's addressing, when it has this pattern (`PACKED`: the 4
    /// slots of each half are adjacent blocks).
    #[inline(always)]
    pub(crate) fn of(g: &crate::operands::RowGroup<'_>) -> Option<Self> {
        let (o, st) = (g.offsets(), g.strides());
        if g.block_bytes() != B || st.iter().any(|&x| x != st[0]) || o[1] <= o[0] {
            return None;
        }
        let d = o[1] - o[0];
        if PACKED != (d == B) {
            return None;
        }
        for r in 0..8 {
            if o[r] != o[r & 4] + (r & 3) * d {
                return None;
            }
        }
        let base = g.data().as_ptr();
        let stride = st[0];
        // The group's 8 rows, in bytes, when they are contiguous: plain
        // rows one after another, or R4's two units (`o[4] - o[0]` apart).
        // R8 (`o[4] = o[0] + 4B`) is one stream already.
        let apart = o[4] - o[0];
        let contiguous = if PACKED {
            apart == g.nblocks() * 4 * B && apart != 4 * B
        } else {
            apart == 4 * d
        };
        // Plain rows prefetch into L1 at the plain distance; R4 and R8
        // (both `PACKED`) as `r8_prefetch` says.
        let r8 = PACKED.then(r8_prefetch);
        Some(Uniform {
            // wrapping_add: no dereference here; the RowGroup invariant
            // makes every pointer produced for b < nblocks in bounds.
            half: [base.wrapping_add(o[0]), base.wrapping_add(o[4])],
            d: if PACKED { B } else { d },
            stride,
            ahead: crate::operands::PREFETCH_BYTES.div_ceil(stride.max(1))
                * stride
                * r8.map_or(1, R8Prefetch::times),
            l1: r8 == Some(R8Prefetch::L1Far),
            look: crate::operands::Lookahead::new(o, st, g.nblocks()),
            // Contiguous groups only (the last group of plain rows repeats
            // its last row).
            linear: (contiguous
                && linear_prefetch(B, 2 * apart)
                && row_prefetch() == RowPrefetch::Linear)
                .then(|| base.wrapping_add(o[0] + 2 * apart)),
        })
    }
}

impl<const B: usize, const PACKED: bool> Rows for Uniform<B, PACKED> {
    #[inline(always)]
    fn at(&self, r: usize) -> *const u8 {
        let d = if PACKED { B } else { self.d };
        self.half[r / 4].wrapping_add((r % 4) * d)
    }
    #[inline(always)]
    fn advance(&mut self) {
        self.half[0] = self.half[0].wrapping_add(self.stride);
        self.half[1] = self.half[1].wrapping_add(self.stride);
        self.look.advance();
    }
    #[inline(always)]
    fn prefetch(&self) {
        if let Some(next) = self.linear {
            // One step's bytes of the next group, in memory order: as far
            // into it as the group's streams have walked into theirs (8
            // rows of plain rows, R4's 2 units).
            let streams = if PACKED { 2 } else { 8 };
            lines::<_MM_HINT_T0>(next.wrapping_add(streams * self.look.walked()), 8 * B);
            return;
        }
        let ahead = self.look.ahead(self.ahead);
        if PACKED {
            // Each half is 4 adjacent blocks: every line of them, further
            // ahead than for plain rows and into L2 or L1 by CPU model
            // (`R8Prefetch`; measured on R8, whose group is one stream, and
            // applied to R4's two units alike).
            for h in 0..2 {
                let q = self.half[h].wrapping_add(ahead);
                if self.l1 {
                    lines::<_MM_HINT_T0>(q, 4 * B);
                } else {
                    lines::<_MM_HINT_T1>(q, 4 * B);
                }
            }
        } else {
            // Plain rows: 8 streams, the lines of each slot's block.
            for r in 0..8 {
                lines::<_MM_HINT_T0>(self.at(r).wrapping_add(ahead), B);
            }
        }
    }
}

/// Prefetch (hint `HINT`) the cache lines of `q .. q + len`: one per 64
/// bytes, and the last byte's when `len > 64` (a shorter span is left to
/// its first line; R8's spans are 4 blocks, always longer).
#[inline(always)]
fn lines<const HINT: i32>(q: *const u8, len: usize) {
    let mut off = 0;
    while off < len {
        // SAFETY: a hint; never faults, whatever the address.
        unsafe { _mm_prefetch::<HINT>(q.wrapping_add(off).cast()) };
        off += 64;
    }
    if len > 64 {
        // SAFETY: as above.
        unsafe { _mm_prefetch::<HINT>(q.wrapping_add(len - 1).cast()) };
    }
}

/// Run `$body` with `$s` bound to the cheapest [`Rows`] for group `$g`
/// (blocks of `$b` bytes): one monomorphized copy per addressing pattern.
macro_rules! with_rows {
    ($g:expr, $b:expr, |$s:ident| $body:expr) => {{
        let g = $g;
        if let Some($s) = $crate::x86::Uniform::<{ $b }, true>::of(g) {
            $body
        } else if let Some($s) = $crate::x86::Uniform::<{ $b }, false>::of(g) {
            $body
        } else {
            let $s = $crate::x86::Slots::new(g);
            $body
        }
    }};
}
pub(crate) use with_rows;

/// Eight fp16 values at offset `off` of the 8 slots' current blocks, widened.
///
/// # Safety
/// Each `s.at(r) + off..+2` must be readable.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) unsafe fn fp16x8_rows<R: Rows>(s: &R, off: usize) -> __m256 {
    // SAFETY: guaranteed by the caller.
    let h = |r: usize| unsafe { read_u16(s.at(r).add(off)) } as i16;
    _mm256_cvtph_ps(_mm_set_epi16(
        h(7),
        h(6),
        h(5),
        h(4),
        h(3),
        h(2),
        h(1),
        h(0),
    ))
}

/// The two adjacent fp16 values at offsets `off` and `off + 2` of the 8
/// slots' current blocks (Q4_1's `d, m`, the k-quants' `d, dmin`), widened:
/// one u32 load per slot instead of two u16 loads and inserts.
///
/// # Safety
/// Each `s.at(r) + off..+4` must be readable.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) unsafe fn fp16x8x2_rows<R: Rows>(s: &R, off: usize) -> (__m256, __m256) {
    // SAFETY: guaranteed by the caller.
    let w = |r: usize| unsafe { read_u32(s.at(r).add(off)) } as i32;
    let v = _mm256_setr_epi32(w(0), w(1), w(2), w(3), w(4), w(5), w(6), w(7));
    let lo = _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF));
    let hi = _mm256_srli_epi32::<16>(v);
    // [lo0-3 hi0-3 | lo4-7 hi4-7] -> [lo0-7 | hi0-7].
    let p = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(lo, hi));
    (
        _mm256_cvtph_ps(_mm256_castsi256_si128(p)),
        _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(p)),
    )
}

/// Lane `r` = the sum of the 4 i32 lanes of `x[r]` (exact).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn hsum8x4(x: &[__m128i; 8]) -> __m256i {
    let four = |a: __m128i, b: __m128i, c: __m128i, d: __m128i| {
        let ab = _mm_add_epi32(_mm_unpacklo_epi32(a, b), _mm_unpackhi_epi32(a, b));
        let cd = _mm_add_epi32(_mm_unpacklo_epi32(c, d), _mm_unpackhi_epi32(c, d));
        opaque128(_mm_add_epi32(
            _mm_unpacklo_epi64(ab, cd),
            _mm_unpackhi_epi64(ab, cd),
        ))
    };
    _mm256_set_m128i(four(x[4], x[5], x[6], x[7]), four(x[0], x[1], x[2], x[3]))
}

/// The 4 i32 lanes of `v` summed pairwise with its upper half: `lo + hi`.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn fold256(v: __m256i) -> __m128i {
    opaque128(_mm_add_epi32(
        _mm256_castsi256_si128(v),
        _mm256_extracti128_si256::<1>(v),
    ))
}

/// `x`, through an empty `asm!` block: the compiler cannot look through
/// it, so it keeps 128-bit reduction trees as written instead of merging
/// them into 256-bit shuffles (`vperm2i128`), which cost three times as
/// much on CPUs that split 256-bit operations in two (AMD Zen 1).
#[inline(always)]
pub(crate) fn opaque128(mut x: __m128i) -> __m128i {
    // SAFETY: an empty asm block with one register operand; it reads and
    // writes nothing else.
    unsafe {
        core::arch::asm!("/* {0} */", inout(xmm_reg) x, options(pure, nomem, nostack, preserves_flags));
    }
    x
}

/// 32 bytes at `p`.
///
/// # Safety
/// `p..p + 32` must be readable.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn load256(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 32 readable bytes; loadu is unaligned.
    unsafe { _mm256_loadu_si256(p.cast()) }
}

/// 16 bytes at `p`.
///
/// # Safety
/// `p..p + 16` must be readable.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn load128(p: *const u8) -> __m128i {
    // SAFETY: the caller guarantees 16 readable bytes; loadu is unaligned.
    unsafe { _mm_loadu_si128(p.cast()) }
}

/// The 32 four-bit values (unsigned, 0..=15) of the 16 nibble bytes of a
/// Q4_0 / Q4_1 block at `qs`, in weight order: bytes 0..16 = low nibbles,
/// 16..32 = high nibbles.
///
/// # Safety
/// `qs..qs + 16` must be readable.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn q4_values(qs: *const u8) -> __m256i {
    // SAFETY: the caller guarantees the 16 bytes.
    let q = unsafe { load128(qs) };
    let m4 = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(q, m4);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(q), m4);
    _mm256_set_m128i(hi, lo)
}

/// The 16 IQ4 levels in both 128-bit lanes (the `pshufb` table of
/// [`iq4_levels`]).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn iq4_table() -> __m256i {
    // SAFETY: IQ4_LEVELS is 16 bytes.
    let t = unsafe { load128(crate::blocks::IQ4_LEVELS.as_ptr().cast()) };
    _mm256_broadcastsi128_si256(t)
}

/// The 32 signed levels (-127..=113) of the 16 index bytes at `qs` of an
/// IQ4_NL block (or one IQ4_XS sub-block), in weight order: the nibbles of
/// [`q4_values`] looked up in `table` ([`iq4_table`]).
///
/// # Safety
/// `qs..qs + 16` must be readable.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn iq4_levels(qs: *const u8, table: __m256i) -> __m256i {
    // SAFETY: the caller guarantees the 16 bytes.
    _mm256_shuffle_epi8(table, unsafe { q4_values(qs) })
}

/// The 8 signed sub-block scales of the IQ4_XS block at `p`
/// ([`crate::blocks::iq4_xs_scales`]).
///
/// # Safety
/// `p..p + 8` (d, scales_h, scales_l) must be readable.
#[inline]
pub(crate) unsafe fn iq4_xs_scales_at(p: *const u8) -> [i8; 8] {
    // SAFETY: the caller guarantees the 8 header bytes; read_unaligned has
    // no alignment requirement.
    let hdr = unsafe { p.cast::<[u8; 8]>().read_unaligned() };
    crate::blocks::iq4_xs_scales(&hdr)
}

/// Eight i8 as the low 8 bytes of a vector (the rest zero).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn i8x8(v: [i8; 8]) -> __m128i {
    _mm_set_epi64x(0, i64::from_le_bytes(v.map(|x| x as u8)))
}

/// The f32 contribution of a Q4_1 / Q5_1 block for 8 rows, as the scalar
/// reference computes it: `S * (d * da) - M * ((-m) * da)` with `M` the
/// activation block sum (`(-m)` is a sign flip, as the scalar `-m`).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn q4_1_contrib(s: __m256i, d: __m256, m: __m256, a: &crate::act::ActQ8_0) -> __m256 {
    let da = _mm256_set1_ps(a.d);
    let neg_m = _mm256_xor_ps(m, _mm256_set1_ps(-0.0));
    _mm256_sub_ps(
        _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, da)),
        _mm256_mul_ps(_mm256_set1_ps(a.sum as f32), _mm256_mul_ps(neg_m, da)),
    )
}

/// The 32 five-bit values of a Q5_0 block at `p` (unsigned, 0..=31), in
/// weight order: bytes 0..16 = low nibbles of `qs`, 16..32 = high nibbles,
/// bit 4 from `qh` bit `j` for weight `j`.
///
/// # Safety
/// `p..p + 22` must be readable.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn q5_0_values(p: *const u8) -> __m256i {
    use crate::blocks::q5_0;
    // SAFETY: qs is 16 bytes at offset 6 and qh 4 bytes at offset 2 of the
    // 22-byte block the caller guarantees.
    unsafe { q5_values(p.add(q5_0::QH), p.add(q5_0::QS)) }
}

/// The 32 five-bit values (0..=31) of a Q5_1 block at `p` (as
/// [`q5_0_values`]; `qh` at 4, `qs` at 8).
///
/// # Safety
/// `p..p + 24` must be readable.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn q5_1_values(p: *const u8) -> __m256i {
    use crate::blocks::q5_1;
    // SAFETY: qh 4 bytes at 4 and qs 16 bytes at 8 of the 24-byte block.
    unsafe { q5_values(p.add(q5_1::QH), p.add(q5_1::QS)) }
}

/// Five-bit values from the u32 fifth bits at `qh` and 16 nibble bytes at `qs`.
///
/// # Safety
/// `qh..qh + 4` and `qs..qs + 16` must be readable.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn q5_values(qh: *const u8, qs: *const u8) -> __m256i {
    // SAFETY: guaranteed by the caller.
    let (qs, qh) = unsafe { (load128(qs), read_u32(qh)) };
    let m4 = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(qs, m4);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(qs), m4);
    let nib = _mm256_set_m128i(hi, lo);
    // Byte j of `spread` = byte j / 8 of qh; select bit j % 8.
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(qh as i32),
        _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0x0000_0000_0000_0000,
        ),
    );
    let bits = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bits), bits);
    _mm256_or_si256(nib, _mm256_and_si256(set, _mm256_set1_epi8(0x10)))
}

/// The 8 sub-blocks (32 values each, unsigned) of a Q4_K block at `p`:
/// `v[j]` = weights `32j..32j+32`.
///
/// # Safety
/// `p..p + 144` must be readable.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn q4_k_values(p: *const u8) -> [__m256i; 8] {
    use crate::blocks::q4_k;
    let m4 = _mm256_set1_epi8(0x0F);
    let mut v = [_mm256_setzero_si256(); 8];
    for c in 0..4 {
        // SAFETY: qs is 128 bytes at offset 16 of the 144-byte block.
        let q = unsafe { load256(p.add(q4_k::QS + 32 * c)) };
        v[2 * c] = _mm256_and_si256(q, m4);
        v[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
    }
    v
}

/// Bit `j` of each byte of `qh`, moved to bit 4 (`j` in 0..8).
#[inline]
#[target_feature(enable = "avx2")]
fn qh_bit4(qh: __m256i, j: usize) -> __m256i {
    // An epi16 shift by s <= 4 moves bit j of *each* byte to bit 4 of the
    // same byte: bits crossing the byte boundary land outside the 0x10 mask.
    let s = match j {
        0 => _mm256_slli_epi16::<4>(qh),
        1 => _mm256_slli_epi16::<3>(qh),
        2 => _mm256_slli_epi16::<2>(qh),
        3 => _mm256_slli_epi16::<1>(qh),
        4 => qh,
        5 => _mm256_srli_epi16::<1>(qh),
        6 => _mm256_srli_epi16::<2>(qh),
        _ => _mm256_srli_epi16::<3>(qh),
    };
    _mm256_and_si256(s, _mm256_set1_epi8(0x10))
}

/// The 8 sub-blocks (32 five-bit values each) of a Q5_K block at `p`.
///
/// # Safety
/// `p..p + 176` must be readable.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn q5_k_values(p: *const u8) -> [__m256i; 8] {
    use crate::blocks::q5_k;
    let m4 = _mm256_set1_epi8(0x0F);
    // SAFETY: qh is 32 bytes at offset 16 of the 176-byte block.
    let qh = unsafe { load256(p.add(q5_k::QH)) };
    let mut v = [_mm256_setzero_si256(); 8];
    for c in 0..4 {
        // SAFETY: qs is 128 bytes at offset 48 of the 176-byte block.
        let q = unsafe { load256(p.add(q5_k::QS + 32 * c)) };
        v[2 * c] = _mm256_or_si256(_mm256_and_si256(q, m4), qh_bit4(qh, 2 * c));
        v[2 * c + 1] = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4),
            qh_bit4(qh, 2 * c + 1),
        );
    }
    v
}

/// The 2-bit fields of the 64 bytes at `qs` (Q2_K / Q3_K), as 8 runs of 32
/// (0..=3): `v[i]` = weights `32i..32i + 32`, whose low 16 are sub-block
/// `2i` and high 16 sub-block `2i + 1`.
///
/// # Safety
/// `qs..qs + 64` must be readable.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn two_bit_values(qs: *const u8) -> [__m256i; 8] {
    let m3 = _mm256_set1_epi8(0x03);
    let mut v = [_mm256_setzero_si256(); 8];
    for n in 0..2 {
        // SAFETY: the caller guarantees the 64 bytes.
        let q = unsafe { load256(qs.add(32 * n)) };
        // epi16 shifts: bits crossing a byte boundary land outside the mask.
        v[4 * n] = _mm256_and_si256(q, m3);
        v[4 * n + 1] = _mm256_and_si256(_mm256_srli_epi16::<2>(q), m3);
        v[4 * n + 2] = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m3);
        v[4 * n + 3] = _mm256_and_si256(_mm256_srli_epi16::<6>(q), m3);
    }
    v
}

/// The 8 runs of 32 values of a Q3_K block at `p` plus 4 (unsigned,
/// 0..=7): the 2-bit field, bit 2 = bit `i` of `hmask[l]` for run `i`.
///
/// # Safety
/// `p..p + 110` must be readable.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn q3_k_values(p: *const u8) -> [__m256i; 8] {
    use crate::blocks::q3_k;
    // SAFETY: hmask is 32 bytes at 0, qs 64 bytes at 32 of the block.
    let (mut v, hm) = unsafe { (two_bit_values(p.add(q3_k::QS)), load256(p.add(q3_k::HMASK))) };
    for (i, vi) in v.iter_mut().enumerate() {
        // Bit i at bit 4 (masked), then at bit 2 of the same byte.
        *vi = _mm256_or_si256(*vi, _mm256_srli_epi16::<2>(qh_bit4(hm, i)));
    }
    v
}

/// The 8 runs of 32 six-bit values (unsigned, 0..=63) of a Q6_K block at
/// `p`: `v[4h + t]` = weights `128h + 32t .. +32`, whose low 16 use scale
/// `8h + 2t` and high 16 scale `8h + 2t + 1`.
///
/// # Safety
/// `p..p + 210` must be readable.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn q6_k_values(p: *const u8) -> [__m256i; 8] {
    use crate::blocks::q6_k;
    let m4 = _mm256_set1_epi8(0x0F);
    let m3 = _mm256_set1_epi8(0x03);
    let m30 = _mm256_set1_epi8(0x30);
    let mut v = [_mm256_setzero_si256(); 8];
    for h in 0..2 {
        // SAFETY: ql is 128 bytes at offset 0, qh 64 bytes at offset 128 of
        // the 210-byte block.
        let (ql0, ql1, qh) = unsafe {
            (
                load256(p.add(q6_k::QL + 64 * h)),
                load256(p.add(q6_k::QL + 64 * h + 32)),
                load256(p.add(q6_k::QH + 32 * h)),
            )
        };
        // Masked before shifting, or masked after: no bit crosses into a
        // kept position of the neighbouring byte.
        v[4 * h] = _mm256_or_si256(
            _mm256_and_si256(ql0, m4),
            _mm256_slli_epi16::<4>(_mm256_and_si256(qh, m3)),
        );
        v[4 * h + 1] = _mm256_or_si256(
            _mm256_and_si256(ql1, m4),
            _mm256_and_si256(_mm256_slli_epi16::<2>(qh), m30),
        );
        v[4 * h + 2] = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4),
            _mm256_and_si256(qh, m30),
        );
        v[4 * h + 3] = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
            _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m30),
        );
    }
    v
}

/// The 128-bit half `half` of each of the runs `v[4h..4h + 4]` of
/// [`q6_k_values`] (the same values: sub-block `8h + 2t + half` of run
/// `4h + t`), decoded from 16-byte loads without lane crossings.
///
/// # Safety
/// AVX2; `p..p + 210` (one Q6_K block) readable; `h, half < 2`.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn q6_k_values_h(p: *const u8, h: usize, half: usize) -> [__m128i; 4] {
    use crate::blocks::q6_k;
    let (m4, m3, m30) = (
        _mm_set1_epi8(0x0F),
        _mm_set1_epi8(0x03),
        _mm_set1_epi8(0x30),
    );
    // SAFETY: ql is 128 bytes at offset 0, qh 64 bytes at offset 128 of the
    // 210-byte block; each load is inside them for h, half < 2.
    let (ql0, ql1, qh) = unsafe {
        (
            load128(p.add(q6_k::QL + 64 * h + 16 * half)),
            load128(p.add(q6_k::QL + 64 * h + 32 + 16 * half)),
            load128(p.add(q6_k::QH + 32 * h + 16 * half)),
        )
    };
    [
        _mm_or_si128(
            _mm_and_si128(ql0, m4),
            _mm_slli_epi16::<4>(_mm_and_si128(qh, m3)),
        ),
        _mm_or_si128(
            _mm_and_si128(ql1, m4),
            _mm_and_si128(_mm_slli_epi16::<2>(qh), m30),
        ),
        _mm_or_si128(
            _mm_and_si128(_mm_srli_epi16::<4>(ql0), m4),
            _mm_and_si128(qh, m30),
        ),
        _mm_or_si128(
            _mm_and_si128(_mm_srli_epi16::<4>(ql1), m4),
            _mm_and_si128(_mm_srli_epi16::<2>(qh), m30),
        ),
    ]
}

/// `pshufb` masks broadcasting i16 element `j` of each 128-bit lane.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn bcast16_mask(j: usize) -> __m256i {
    let b = (2 * j) as i8;
    _mm256_set1_epi16(((b as i16 + 1) << 8) | b as i16)
}

/// `pshufb` mask putting i16 element `2t` in the low lane and `2t + 1` in the
/// high lane (both broadcast across their lane).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn pair16_mask(t: usize) -> __m256i {
    let lo = (4 * t) as i16;
    let hi = (4 * t + 2) as i16;
    _mm256_set_m128i(
        _mm_set1_epi16(((hi + 1) << 8) | hi),
        _mm_set1_epi16(((lo + 1) << 8) | lo),
    )
}

/// Q4_K / Q5_K scales as 8 i16 broadcast to both lanes, and the mins
/// duplicated per pair (`[m0 m0 m1 m1 .. m7 m7]` as 16 i16).
///
/// With `b` = the 16 header bytes (d, dmin, then the 12 scale bytes at 4),
/// the 6-bit unpack of [`crate::blocks::unpack_k4_scales`] in one vector:
///
/// ```text
/// t = b[4..8] b[12..16] b[8..12] b[12..16]    u = 0 b[4..8] 0 b[8..12]
/// [sc0..8 | m0..8] = (t & [63, 15, 63, 0]) | ((t >> 4) & [0, 0, 0, 15])
///                    | ((u >> 2) & [0, 0x30, 0, 0x30])
/// ```
/// (per group of 4 bytes; `(x >> 6) << 4 == (x >> 2) & 0x30`; the 16-bit
/// shifts only move bits into positions the masks clear).
///
/// # Safety
/// `p..p + 16` must be readable (the block header: d, dmin, scales).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn k4_scales(p: *const u8) -> (__m256i, __m256i) {
    // SAFETY: the caller guarantees the 16 header bytes.
    let r = unsafe { k4_scale_bytes(p) };
    let sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(r));
    let mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(
        r,
        _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15),
    ));
    (sc, mins)
}

/// The 6-bit scales and mins of a Q4_K / Q5_K block as 16 bytes
/// `[sc0..8 | m0..8]` (the unpack documented at [`k4_scales`]).
///
/// # Safety
/// `p..p + 16` must be readable (the block header: d, dmin, scales).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn k4_scale_bytes(p: *const u8) -> __m128i {
    // SAFETY: the caller guarantees the 16 header bytes.
    let b = unsafe { load128(p) };
    let t = _mm_shuffle_epi8(
        b,
        _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15),
    );
    let z = -1i8;
    let u = _mm_shuffle_epi8(
        b,
        _mm_setr_epi8(z, z, z, z, 4, 5, 6, 7, z, z, z, z, 8, 9, 10, 11),
    );
    let lo = _mm_and_si128(t, _mm_setr_epi32(0x3f3f_3f3f, 0x0f0f_0f0f, 0x3f3f_3f3f, 0));
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(t), _mm_setr_epi32(0, 0, 0, 0x0f0f_0f0f));
    let top = _mm_and_si128(
        _mm_srli_epi16::<2>(u),
        _mm_setr_epi32(0, 0x3030_3030, 0, 0x3030_3030),
    );
    _mm_or_si128(_mm_or_si128(lo, hi), top)
}

/// d and dmin (fp16 at offsets 0 and 2) of 8 k-quant blocks, widened.
///
/// # Safety
/// Each `p[r]..p[r] + 4` must be readable.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) unsafe fn d_dmin8(s: &Slots) -> (__m256, __m256) {
    let mut d = [0u16; 8];
    let mut m = [0u16; 8];
    for r in 0..8 {
        // SAFETY: the caller guarantees 4 readable bytes at every slot.
        let w = unsafe { read_u32(s.at(r)) };
        d[r] = w as u16;
        m[r] = (w >> 16) as u16;
    }
    (fp16x8(&d), fp16x8(&m))
}

/// fp16 at offset `off` of the 8 current blocks, widened.
///
/// # Safety
/// Each `p[r] + off..+2` must be readable.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) unsafe fn fp16_at8(s: &Slots, off: usize) -> __m256 {
    let mut d = [0u16; 8];
    for (r, x) in d.iter_mut().enumerate() {
        // SAFETY: guaranteed by the caller.
        *x = unsafe { read_u16(s.at(r).add(off)) };
    }
    fp16x8(&d)
}
