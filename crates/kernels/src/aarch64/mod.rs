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
pub mod neon_gemm;
pub mod probe;
pub mod sme2;
pub mod sme2_gemm;

use core::arch::aarch64::*;
use core::arch::asm;

pub(crate) use crate::operands::{read_u16, read_u32, Slots};

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

impl Slots {
    /// Prefetch the block `ahead` bytes down each slot's stream (first and
    /// last byte; in an R8 group the slots' blocks are adjacent).
    #[inline(always)]
    pub(crate) fn prefetch(&self) {
        for r in 0..8 {
            let q = self.p[r].wrapping_add(self.ahead_of(r));
            prefetch(q);
            prefetch(q.wrapping_add(self.block_bytes - 1));
        }
    }
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
