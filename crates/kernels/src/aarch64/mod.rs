//! aarch64 SIMD kernels: [`neon`] (NEON + the dot-product extension) and
//! [`sme2`] (SME2 for the CQ4 panels, NEON for everything else), plus the
//! building blocks they share and the CPU probes.
//!
//! Every kernel reproduces the scalar reference ([`crate::scalar`]) bit for
//! bit: integer parts are exact (`sdot` accumulates 4-wide i8 dot products
//! into i32 without saturation; every partial sum is far below 2^31, see
//! [`crate::format`]); the float part runs one f32 lane per row slot or
//! channel with separate `fmul` / `fadd` (the intrinsics are never fused into
//! `fmla`, and `scvtf` / `fcvtl` round like `as f32` / are exact).
//!
//! Stable Rust (1.96) has no intrinsics for `sdot` (`vdotq_s32` is still
//! unstable) and none at all for SME, so those instructions are written with
//! `asm!`; everything else uses `core::arch::aarch64` intrinsics.

pub mod neon;
pub mod probe;
pub mod sme2;

pub(crate) use probe::{has_dotprod, os_reports_sme2, sme2_usable, streaming_vector_bytes};

use core::arch::aarch64::*;
use core::arch::asm;

/// `acc + sdot(a, b)`: lane `i` gains `sum_{t<4} a[4i+t] * b[4i+t]` (exact).
#[inline]
#[target_feature(enable = "neon,dotprod")]
pub(crate) fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: `sdot` reads and writes only the named registers (no memory);
    // this function's target feature guarantees FEAT_DotProd.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    acc
}

/// `acc + sdot(a, b[L])` (by element): lane `i` gains
/// `sum_{t<4} a[4i+t] * b[4L+t]` (exact).
#[inline]
#[target_feature(enable = "neon,dotprod")]
pub(crate) fn sdot_lane<const L: i32>(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: as in `sdot`; `L` is a constant lane index (0..4 at every
    // call site; the assembler rejects anything else).
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.4b[{l}]",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            l = const L,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    acc
}

/// Four fp16 values (bits) widened to f32 (`fcvtl`, exact).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn f16x4_to_f32(h: uint16x4_t) -> float32x4_t {
    let out: float32x4_t;
    // SAFETY: register-only instruction of the base ISA (FP/SIMD).
    unsafe {
        asm!(
            "fcvtl {o:v}.4s, {i:v}.4h",
            o = lateout(vreg) out,
            i = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    out
}

/// The upper four fp16 values of `h` widened to f32 (`fcvtl2`, exact).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn f16x4_high_to_f32(h: uint16x8_t) -> float32x4_t {
    let out: float32x4_t;
    // SAFETY: register-only instruction of the base ISA (FP/SIMD).
    unsafe {
        asm!(
            "fcvtl2 {o:v}.4s, {i:v}.8h",
            o = lateout(vreg) out,
            i = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    out
}

/// Lane `r` of the result (`r` in 0..8, two vectors) = the sum of the four
/// i32 lanes of `v[r]` (exact).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn reduce8(v: &[int32x4_t; 8]) -> [int32x4_t; 2] {
    let p01 = vpaddq_s32(v[0], v[1]);
    let p23 = vpaddq_s32(v[2], v[3]);
    let p45 = vpaddq_s32(v[4], v[5]);
    let p67 = vpaddq_s32(v[6], v[7]);
    [vpaddq_s32(p01, p23), vpaddq_s32(p45, p67)]
}

/// How far ahead (bytes along a row's block stream) the ggml kernels
/// prefetch.
const PREFETCH_BYTES: usize = 1536;

/// How far ahead the CQ4 NEON kernel prefetches panel bytes.
pub(crate) const CQ4_PREFETCH_BYTES: usize = 2048;

/// Prefetch hint for reading `p` into L1 (`prfm pldl1keep`). A hint never
/// faults, whatever the address.
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    // SAFETY: `prfm` is a hint: it does not access memory architecturally
    // and never faults, even for an invalid address.
    unsafe {
        asm!(
            "prfm pldl1keep, [{p}]",
            p = in(reg) p,
            options(nostack, preserves_flags, readonly)
        )
    };
}

/// Per-slot block pointers of a row group, advanced one block at a time.
pub(crate) struct Slots {
    p: [*const u8; 8],
    stride: [usize; 8],
    /// Prefetch distance of each slot: whole blocks, >= PREFETCH_BYTES.
    ahead: [usize; 8],
    block_bytes: usize,
}

impl Slots {
    /// The slots of `g`, at block 0.
    #[inline(always)]
    pub(crate) fn new(g: &crate::operands::RowGroup<'_>) -> Self {
        let base = g.data().as_ptr();
        let mut p = [base; 8];
        for (q, &o) in p.iter_mut().zip(g.offsets()) {
            // wrapping_add: no dereference here; the RowGroup invariant
            // makes every pointer produced for b < nblocks in bounds.
            *q = base.wrapping_add(o);
        }
        let stride = *g.strides();
        let mut ahead = [0usize; 8];
        for (a, &st) in ahead.iter_mut().zip(&stride) {
            *a = PREFETCH_BYTES.div_ceil(st.max(1)) * st;
        }
        Slots {
            p,
            stride,
            ahead,
            block_bytes: g.block_bytes(),
        }
    }

    /// Prefetch the block `ahead` bytes down each slot's stream (first and
    /// last byte; in an R8 group the slots' blocks are adjacent).
    #[inline(always)]
    pub(crate) fn prefetch(&self) {
        for r in 0..8 {
            let q = self.p[r].wrapping_add(self.ahead[r]);
            prefetch(q);
            prefetch(q.wrapping_add(self.block_bytes - 1));
        }
    }

    /// Pointer to the current block of slot `r`.
    #[inline(always)]
    pub(crate) fn at(&self, r: usize) -> *const u8 {
        self.p[r]
    }

    /// Move every slot to its next block.
    #[inline(always)]
    pub(crate) fn advance(&mut self) {
        for (q, &s) in self.p.iter_mut().zip(&self.stride) {
            *q = q.wrapping_add(s);
        }
    }
}

/// Read an unaligned little-endian u16.
///
/// # Safety
/// `p..p + 2` must be readable.
#[inline(always)]
pub(crate) unsafe fn read_u16(p: *const u8) -> u16 {
    // SAFETY: the caller guarantees 2 readable bytes; read_unaligned has no
    // alignment requirement (aarch64 is little-endian).
    unsafe { p.cast::<u16>().read_unaligned() }
}

/// Read an unaligned little-endian u32.
///
/// # Safety
/// `p..p + 4` must be readable.
#[inline(always)]
pub(crate) unsafe fn read_u32(p: *const u8) -> u32 {
    // SAFETY: the caller guarantees 4 readable bytes.
    unsafe { p.cast::<u32>().read_unaligned() }
}

/// fp16 at offset `off` of the 8 current blocks, widened (slots 0-3, 4-7).
///
/// # Safety
/// Each `s.at(r) + off..+2` must be readable.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) unsafe fn fp16_at8(s: &Slots, off: usize) -> [float32x4_t; 2] {
    let mut d = [0u16; 8];
    for (r, x) in d.iter_mut().enumerate() {
        // SAFETY: guaranteed by the caller.
        *x = unsafe { read_u16(s.at(r).add(off)) };
    }
    // SAFETY: `d` is 8 u16.
    let v = unsafe { vld1q_u16(d.as_ptr()) };
    [f16x4_to_f32(vget_low_u16(v)), f16x4_high_to_f32(v)]
}
