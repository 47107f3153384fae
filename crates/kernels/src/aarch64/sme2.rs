//! SME2 CQ4 panel kernel (streaming vector length 512 bits, as on Apple
//! M4); the ggml formats and the orthogonal transform of the `sme2` tier
//! are the NEON ones ([`super::neon`]).
//!
//! Stable Rust has no SME intrinsics and no `sme` target feature, so the
//! whole streaming section is one `asm!` block (`.arch_extension sme2`):
//! no Rust code ever runs in streaming mode. Per call of up to
//! [`CHUNK_GROUPS`] groups:
//!
//! ```text
//! smstart                      ; streaming mode + ZA on (Z/P registers zeroed)
//! ldr   zt0, [lut]             ; ZT0 = 16 x 32-bit entries, byte 4i = cb_i8[i]
//! zero  {za}
//! for each group gi (w8 = gi):
//!   for each 4 kg-blocks (512 bytes):
//!     ld1rqb z4.b <- q[16]     ; the 16 activations, replicated per 128 bits
//!     ld1b  z16..z23 <- panels ; 4 kg-blocks, 2 vectors each
//!     luti4 z0.b, zt0, z16[0]  ; nibbles 0..64 of the block -> 64 int8:
//!     luti4 z1.b, zt0, z16[1]  ;   channels 16v..16v+16 x 4 columns
//!     luti4 z2.b, zt0, z17[0]  ;   ("[4 vec][16 ch][4 K]")
//!     luti4 z3.b, zt0, z17[1]
//!     sdot  za.s[w8, 0, vgx4], {z0.b-z3.b}, z4.b[L]   ; L = kg % 4
//!     (same for the other 3 kg-blocks)
//! for each ZA row 16j + gi: str za[w12], [isum[gi][16j..]]  ; row -> memory
//! smstop                       ; ZA off, back to non-streaming mode
//! ```
//!
//! With a 64-byte SVL the ZA array has 64 rows; a VGx4 vector group `w`
//! is rows `w, w + 16, w + 32, w + 48`, so 16 groups accumulate side by
//! side and each group's 64 channel sums come out in channel order. Only
//! these int32 partials leave streaming mode; the f32 rescale is the NEON
//! `neon::rescale_group`, so SME2 and NEON agree bit for bit
//! (the integer sums are exact in both).
//!
//! The read-out uses SME1 `str za` (one ZA row to memory) rather than the
//! SME2 multi-vector `mova {z0.d-z3.d}, za.d[w8, 0, vgx4]` + `st1w`: both
//! are correct, but under QEMU 11.1.3 a single multi-vector `mova` (array
//! or tile form, vgx2 or vgx4) leaves the emulated process ~24x slower on
//! scalar f64 code for the rest of its life (a QEMU artefact, measured with
//! `cq4::codebook::lloyd_max`: 0.55 s -> 13 s), which made every test that
//! encodes after an SME2 call crawl.

use core::arch::aarch64::*;
use core::arch::asm;

use crate::act::Cq4Act;
use crate::operands::{CbLut, PanelBlock, GROUP_BYTES};

pub use super::probe::SVL_BYTES;

/// Groups accumulated in ZA per streaming section: the 16 VGx4 vector
/// groups of a 512-bit ZA array.
pub const CHUNK_GROUPS: usize = 16;

/// ZT0's image of a codebook: 16 little-endian 32-bit entries, entry `i`'s
/// low byte = `cb_i8[i]` (what `luti4 .b` returns), other bytes 0.
pub(crate) fn zt0_image(lut: &CbLut) -> [u8; 64] {
    let mut t = [0u8; 64];
    for (i, &c) in lut.cb_i8().iter().enumerate() {
        t[4 * i] = c as u8;
    }
    t
}

/// The exact int32 sums `isum[gi][c] = sum_{k in group} cb_i8[idx(c, k)] q[k]`
/// of `n` (1..=16) consecutive groups, in one streaming section.
///
/// # Safety
/// The CPU must implement SME2 with a 64-byte streaming vector length;
/// `panels` must hold `n * 4096` readable bytes, `q` `n * 128`;
/// `isum` has room for the `n` groups.
unsafe fn group_sums(
    zt: &[u8; 64],
    panels: *const u8,
    q: *const i8,
    n: usize,
    isum: &mut [[i32; 64]; CHUNK_GROUPS],
) {
    debug_assert!((1..=CHUNK_GROUPS).contains(&n));
    // SAFETY: the caller guarantees SME2 with SVL = 64 bytes (so every
    // `ld1b` and `str za` moves 64 bytes) and the buffer sizes: per group
    // the loop reads 32 kg-blocks (8 x 512 bytes) and 128 activation bytes,
    // and the read-out writes 256 bytes per group inside `isum` (n <= 16).
    // Entering and leaving streaming mode zeroes Z0-Z31, P0-P15 and FFR, so
    // all of them are declared clobbered (the compiler saves and restores
    // the callee-saved d8-d15), and sets FPSR to 0x0800009f, so FPSR is
    // saved before `smstart` and restored after `smstop`. `smstop` also
    // turns ZA off before the block ends: no ZA / ZT0 state is live outside
    // it (PSTATE.ZA was off on entry: no Rust code enables it). No Rust
    // code runs in streaming mode.
    unsafe {
        asm!(
            ".arch_extension sme2",
            "mrs {fpsr}, fpsr",
            "smstart",
            "ldr zt0, [{zt}]",
            "zero {{za}}",
            "ptrue p0.b",
            "mov w8, #0",
            "mov {g}, {n}",
            "2:",
            "mov {kk}, #8",
            "3:",
            "ld1rqb {{z4.b}}, p0/z, [{q}]",
            "ld1b {{z16.b}}, p0/z, [{p}]",
            "ld1b {{z17.b}}, p0/z, [{p}, #1, mul vl]",
            "ld1b {{z18.b}}, p0/z, [{p}, #2, mul vl]",
            "ld1b {{z19.b}}, p0/z, [{p}, #3, mul vl]",
            "ld1b {{z20.b}}, p0/z, [{p}, #4, mul vl]",
            "ld1b {{z21.b}}, p0/z, [{p}, #5, mul vl]",
            "ld1b {{z22.b}}, p0/z, [{p}, #6, mul vl]",
            "ld1b {{z23.b}}, p0/z, [{p}, #7, mul vl]",
            "luti4 z0.b, zt0, z16[0]",
            "luti4 z1.b, zt0, z16[1]",
            "luti4 z2.b, zt0, z17[0]",
            "luti4 z3.b, zt0, z17[1]",
            "luti4 z8.b, zt0, z18[0]",
            "luti4 z9.b, zt0, z18[1]",
            "luti4 z10.b, zt0, z19[0]",
            "luti4 z11.b, zt0, z19[1]",
            "sdot za.s[w8, 0, vgx4], {{z0.b-z3.b}}, z4.b[0]",
            "luti4 z12.b, zt0, z20[0]",
            "luti4 z13.b, zt0, z20[1]",
            "luti4 z14.b, zt0, z21[0]",
            "luti4 z15.b, zt0, z21[1]",
            "sdot za.s[w8, 0, vgx4], {{z8.b-z11.b}}, z4.b[1]",
            "luti4 z24.b, zt0, z22[0]",
            "luti4 z25.b, zt0, z22[1]",
            "luti4 z26.b, zt0, z23[0]",
            "luti4 z27.b, zt0, z23[1]",
            "sdot za.s[w8, 0, vgx4], {{z12.b-z15.b}}, z4.b[2]",
            "sdot za.s[w8, 0, vgx4], {{z24.b-z27.b}}, z4.b[3]",
            "add {p}, {p}, #512",
            "add {q}, {q}, #16",
            "subs {kk}, {kk}, #1",
            "b.ne 3b",
            "add w8, w8, #1",
            "subs {g}, {g}, #1",
            "b.ne 2b",
            // Read-out: ZA row gi + 16j holds channels 16j..16j+16 of
            // group gi (the VGx4 vector group gi); `str za` stores one row.
            "mov {r:w}, #0",
            "mov {kk}, #4",
            "4:",
            "mov w12, {r:w}",
            "mov {a}, {o}",
            "mov {g}, {n}",
            "5:",
            "str za[w12, 0], [{a}]",
            "add w12, w12, #1",
            "add {a}, {a}, #256",
            "subs {g}, {g}, #1",
            "b.ne 5b",
            "add {r:w}, {r:w}, #16",
            "add {o}, {o}, #64",
            "subs {kk}, {kk}, #1",
            "b.ne 4b",
            "smstop",
            "msr fpsr, {fpsr}",
            zt = in(reg) zt.as_ptr(),
            p = inout(reg) panels => _,
            q = inout(reg) q => _,
            o = inout(reg) isum.as_mut_ptr() => _,
            n = inout(reg) n => _,
            g = out(reg) _,
            kk = out(reg) _,
            r = out(reg) _,
            a = out(reg) _,
            fpsr = out(reg) _,
            // ZA vector select registers: w8-w11 for `sdot`, w12-w15 for
            // `str za`.
            out("x8") _,
            out("x12") _,
            // smstart / smstop zero every Z (so V), P and FFR register.
            out("v0") _, out("v1") _, out("v2") _, out("v3") _,
            out("v4") _, out("v5") _, out("v6") _, out("v7") _,
            out("v8") _, out("v9") _, out("v10") _, out("v11") _,
            out("v12") _, out("v13") _, out("v14") _, out("v15") _,
            out("v16") _, out("v17") _, out("v18") _, out("v19") _,
            out("v20") _, out("v21") _, out("v22") _, out("v23") _,
            out("v24") _, out("v25") _, out("v26") _, out("v27") _,
            out("v28") _, out("v29") _, out("v30") _, out("v31") _,
            out("p0") _, out("p1") _, out("p2") _, out("p3") _,
            out("p4") _, out("p5") _, out("p6") _, out("p7") _,
            out("p8") _, out("p9") _, out("p10") _, out("p11") _,
            out("p12") _, out("p13") _, out("p14") _, out("p15") _,
            out("ffr") _,
            options(nostack),
        )
    };
}

/// CQ4 super-block kernel (64 channels): see the module docs.
///
/// # Safety
/// The CPU must implement NEON, the dot-product extension and SME2 with a
/// 64-byte streaming vector length (the `sme2` tier's probe).
#[target_feature(enable = "neon,dotprod")]
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
    let zt = zt0_image(lut);
    let panels = b.panels().as_ptr();
    let folded = b.folded_bytes().as_ptr();
    let mut isum = [[0i32; 64]; CHUNK_GROUPS];
    out.fill(0.0);
    let mut g0 = 0;
    while g0 < ng {
        let n = CHUNK_GROUPS.min(ng - g0);
        // SAFETY: the caller guarantees SME2 with SVL = 64; PanelBlock::new
        // checked panels = ng * 4096 bytes and the assert above q >= ng * 128:
        // groups g0..g0 + n are in bounds; n <= CHUNK_GROUPS.
        unsafe {
            group_sums(
                &zt,
                panels.add(g0 * GROUP_BYTES),
                act.q.as_ptr().add(g0 * 128),
                n,
                &mut isum,
            )
        };
        for (gi, s) in isum.iter().take(n).enumerate() {
            let g = g0 + gi;
            // SAFETY: `s` is 64 i32; 4i + 4 <= 64.
            let v: [int32x4_t; 16] =
                core::array::from_fn(|i| unsafe { vld1q_s32(s.as_ptr().add(4 * i)) });
            // SAFETY: folded holds ng * 64 f32; group g's 256 bytes.
            unsafe { super::neon::rescale_group(&v, act.scale[g], folded.add(g * 256), out) };
        }
        g0 += n;
    }
}
