//! SME2 multi-row (GEMM) CQ4 panel kernel: `smopa` outer products into ZA
//! (streaming vector length 512 bits, as on Apple M4), the form of the
//! packed-panel GEMM the format was designed for.
//!
//! A kg-block (128 bytes: 64 channels x 4 columns) expands with four
//! `luti4` into four 512-bit vectors of 16 channels x 4 columns (the
//! "[4 vec][16 ch][4 K]" layout, as in the GEMV kernel [`super::sme2`]);
//! the packed activations ([`crate::act::Cq4Rows`]) hold, per 4-column
//! step, 16 rows x 4 quants: one 512-bit vector. `smopa za{t}.s, z_act,
//! z_w{t}` adds the 16 x 16 block of 4-wide dot products (activation row
//! `j` x channel `16t + c`) into tile `t`; the four tiles of a 512-bit ZA
//! hold one group's 16 rows x 64 channels. Per group, in one streaming
//! section of up to [`SECTION_GROUPS`] groups (all inside one `asm!`
//! block, no Rust code in streaming mode):
//!
//! ```text
//! smstart; ldr zt0, [lut]; ptrue p0.b
//! for each group:
//!   zero {za}
//!   for kg in 0..32 (two per iteration):
//!     ld1b z4.b <- act[kg]          ; 16 rows x 4 quants
//!     ld1b z16, z17 <- panels[kg]   ; 128 bytes
//!     luti4 z0..z3 <- z16[0], z16[1], z17[0], z17[1]
//!     smopa za0.s .. za3.s, p0/m, p0/m, z4.b, z0.b .. z3.b
//!   for v in 0..64: str za[v] -> isum[group][v / 4][16 (v % 4) ..]
//! smstop
//! ```
//!
//! ZA array vector `v` of a 32-bit-element ZA is horizontal slice `v / 4`
//! of tile `v % 4`, so storing the 64 vectors in order writes
//! `isum[row][channel]` row-major. Only these exact int32 partials leave
//! streaming mode; the f32 rescale is the NEON `neon::rescale_group`, so
//! this kernel equals the NEON GEMM, the NEON GEMV and the scalar
//! reference bit for bit. Rows past `M` in the last 16-row tile are zero
//! quants and are never rescaled. The read-out is SME1 `str za` for the
//! reason given in [`super::sme2`] (a QEMU slowdown after multi-vector
//! `mova`).

use core::arch::aarch64::*;
use core::arch::asm;

use super::sme2::zt0_image;
use crate::act::{Cq4Rows, CQ4_TILE_ROWS};
use crate::operands::{CbLut, PanelBlock, GROUP_BYTES, KG_PER_GROUP};

/// Groups per streaming section: their partials (16 rows x 64 channels
/// x 4 bytes = 4 KiB each) wait on the stack for the NEON rescale.
pub const SECTION_GROUPS: usize = 4;

/// Bytes of packed activations per group of one 16-row tile.
const ACT_GROUP_BYTES: usize = KG_PER_GROUP * 4 * CQ4_TILE_ROWS;

/// The int32 partials of `n` (1..=[`SECTION_GROUPS`]) consecutive groups
/// against one 16-row tile: `isum[gi][row][c] = sum_{k in group}
/// q[row][k] * cb_i8[idx(c, k)]`, in one streaming section.
///
/// # Safety
/// SME2 with a 64-byte streaming vector length; `panels` must hold `n *
/// 4096` readable bytes and `act` `n * 2048` (the tile's packed quants of
/// those groups).
unsafe fn tile_sums(
    zt: &[u8; 64],
    panels: *const u8,
    act: *const i8,
    n: usize,
    isum: &mut [[[i32; 64]; CQ4_TILE_ROWS]; SECTION_GROUPS],
) {
    debug_assert!((1..=SECTION_GROUPS).contains(&n));
    // SAFETY: the caller guarantees SME2 with SVL = 64 bytes (every `ld1b`
    // and `str za` moves 64 bytes) and the buffer sizes: per group the
    // loop reads 32 kg-blocks (4096 bytes) and 32 x 64 activation bytes,
    // and the read-out writes 64 x 64 bytes inside `isum` (n <= 4).
    // Entering and leaving streaming mode zeroes Z0-Z31, P0-P15 and FFR,
    // so all are declared clobbered, and sets FPSR to 0x0800009f, so FPSR
    // is saved before `smstart` and restored after `smstop`. `smstop`
    // also turns ZA off before the block ends (PSTATE.ZA was off on entry:
    // no Rust code enables it). No Rust code runs in streaming mode.
    unsafe {
        asm!(
            ".arch_extension sme2",
            "mrs {fpsr}, fpsr",
            "smstart",
            "ldr zt0, [{zt}]",
            "ptrue p0.b",
            "2:",
            "zero {{za}}",
            "mov {kk}, #16",
            "3:",
            "ld1b {{z4.b}}, p0/z, [{q}]",
            "ld1b {{z5.b}}, p0/z, [{q}, #1, mul vl]",
            "ld1b {{z16.b}}, p0/z, [{p}]",
            "ld1b {{z17.b}}, p0/z, [{p}, #1, mul vl]",
            "ld1b {{z18.b}}, p0/z, [{p}, #2, mul vl]",
            "ld1b {{z19.b}}, p0/z, [{p}, #3, mul vl]",
            "luti4 z0.b, zt0, z16[0]",
            "luti4 z1.b, zt0, z16[1]",
            "luti4 z2.b, zt0, z17[0]",
            "luti4 z3.b, zt0, z17[1]",
            "luti4 z8.b, zt0, z18[0]",
            "luti4 z9.b, zt0, z18[1]",
            "luti4 z10.b, zt0, z19[0]",
            "luti4 z11.b, zt0, z19[1]",
            "smopa za0.s, p0/m, p0/m, z4.b, z0.b",
            "smopa za1.s, p0/m, p0/m, z4.b, z1.b",
            "smopa za2.s, p0/m, p0/m, z4.b, z2.b",
            "smopa za3.s, p0/m, p0/m, z4.b, z3.b",
            "smopa za0.s, p0/m, p0/m, z5.b, z8.b",
            "smopa za1.s, p0/m, p0/m, z5.b, z9.b",
            "smopa za2.s, p0/m, p0/m, z5.b, z10.b",
            "smopa za3.s, p0/m, p0/m, z5.b, z11.b",
            "add {p}, {p}, #256",
            "add {q}, {q}, #128",
            "subs {kk}, {kk}, #1",
            "b.ne 3b",
            // Read-out: ZA array vector v = slice v / 4 of tile v % 4 =
            // row v / 4, channels 16 (v % 4) ..: in order, isum[row][c].
            "mov w12, #0",
            "mov {kk}, #64",
            "4:",
            "str za[w12, 0], [{o}]",
            "add w12, w12, #1",
            "add {o}, {o}, #64",
            "subs {kk}, {kk}, #1",
            "b.ne 4b",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            "smstop",
            "msr fpsr, {fpsr}",
            zt = in(reg) zt.as_ptr(),
            p = inout(reg) panels => _,
            q = inout(reg) act => _,
            o = inout(reg) isum.as_mut_ptr() => _,
            n = inout(reg) n => _,
            kk = out(reg) _,
            fpsr = out(reg) _,
            // ZA vector select register of `str za`.
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

/// CQ4 super-block against every row of `rows` (`out[64 i + c]`): see the
/// module docs. Bit for bit the NEON GEMV of each row.
///
/// # Safety
/// The CPU must implement NEON, the dot-product extension and SME2 with a
/// 64-byte streaming vector length (the `sme2` tier's probe).
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn cq4_superblock_gemm(
    b: &PanelBlock<'_>,
    rows: &Cq4Rows<'_>,
    lut: &CbLut,
    out: &mut [f32],
) {
    let (m, ng, kp) = (rows.rows(), b.groups(), rows.cols());
    assert!(
        rows.groups() == ng && out.len() == 64 * m,
        "GEMM tile shape"
    );
    let zt = zt0_image(lut);
    let panels = b.panels().as_ptr();
    let folded = b.folded_bytes().as_ptr();
    let mut isum = [[[0i32; 64]; CQ4_TILE_ROWS]; SECTION_GROUPS];
    out.fill(0.0);
    for t in 0..m.div_ceil(CQ4_TILE_ROWS) {
        let tile = rows.packed()[t * CQ4_TILE_ROWS * kp..].as_ptr();
        let tile_rows = CQ4_TILE_ROWS.min(m - t * CQ4_TILE_ROWS);
        let mut g0 = 0;
        while g0 < ng {
            let n = SECTION_GROUPS.min(ng - g0);
            // SAFETY: the caller guarantees SME2 with SVL = 64;
            // PanelBlock::new checked panels = ng * 4096 bytes and
            // Cq4Rows::new the packed tiles (16 Kp bytes each = ng * 2048):
            // groups g0..g0 + n of both are in bounds; n <= SECTION_GROUPS.
            unsafe {
                tile_sums(
                    &zt,
                    panels.add(g0 * GROUP_BYTES),
                    tile.add(g0 * ACT_GROUP_BYTES),
                    n,
                    &mut isum,
                )
            };
            for (gi, sums) in isum.iter().take(n).enumerate() {
                let g = g0 + gi;
                for (r, s) in sums.iter().take(tile_rows).enumerate() {
                    let i = t * CQ4_TILE_ROWS + r;
                    let mut v = [vdupq_n_s32(0); 16];
                    for (j, vj) in v.iter_mut().enumerate() {
                        // SAFETY: `s` is 64 i32; 4j + 4 <= 64.
                        *vj = unsafe { vld1q_s32(s.as_ptr().add(4 * j)) };
                    }
                    let o: &mut [f32; 64] = (&mut out[64 * i..64 * i + 64])
                        .try_into()
                        .expect("64 channels");
                    // SAFETY: folded holds ng * 64 f32; group g's 256 bytes.
                    unsafe {
                        super::neon::rescale_group(&v, rows.scale(i, g), folded.add(g * 256), o)
                    };
                }
            }
            g0 += n;
        }
    }
}
