//! aarch64 tiers (`neon`, `sme2`): detection, the `CONVERT_FORCE_ISA` cap,
//! and the SME2 CQ4 kernel's chunking (16 groups per streaming section)
//! against NEON and scalar, bit for bit. The shape matrix of
//! `tests/kernels.rs` already runs on every available tier, aarch64 ones
//! included; a tier this CPU lacks is skipped with a printed note.
//!
//! Under QEMU (`scripts/test-aarch64`) the CPU model comes from `QEMU_CPU`,
//! which QEMU passes on to the guest: with `sme-default-vector-length=64`
//! the `sme2` tier must be detected, with `sme=off` or another vector length
//! it must not.

mod common;

use common::*;
use kernels::act::Cq4Act;
use kernels::panel::{CbLut, PanelBlock};
use kernels::{available, dispatch, Isa, PanelMatrix, RotationFamily as Family};

/// The aarch64 tiers usable here; prints a note for each one that is not.
fn arm_tiers(test: &str) -> Vec<Isa> {
    let mut v = Vec::new();
    for isa in [Isa::Neon, Isa::Sme2] {
        if isa.is_available() {
            v.push(isa);
        } else {
            eprintln!(
                "note: {test}: {isa} not available here ({}); skipped",
                if isa.hardware_supports() {
                    "capped by CONVERT_FORCE_ISA"
                } else {
                    "CPU lacks it"
                }
            );
        }
    }
    v
}

#[test]
fn aarch64_tiers_match_the_cpu() {
    let hw: Vec<Isa> = dispatch::ALL_ISAS
        .into_iter()
        .filter(|i| i.hardware_supports())
        .collect();
    eprintln!(
        "hardware tiers: {hw:?}; available: {:?}; QEMU_CPU={:?}",
        available(),
        std::env::var("QEMU_CPU").ok()
    );
    #[cfg(not(target_arch = "aarch64"))]
    {
        assert!(!Isa::Neon.hardware_supports() && !Isa::Sme2.hardware_supports());
    }
    #[cfg(target_arch = "aarch64")]
    {
        assert_eq!(
            Isa::Neon.hardware_supports(),
            std::arch::is_aarch64_feature_detected!("dotprod")
        );
        assert!(!Isa::Avx2.hardware_supports() && !Isa::Avx512.hardware_supports());
        if Isa::Sme2.hardware_supports() {
            assert!(Isa::Neon.hardware_supports(), "sme2 implies neon");
        }
        if let Ok(cpu) = std::env::var("QEMU_CPU") {
            let want_sme2 =
                cpu.contains("sme-default-vector-length=64") && !cpu.contains("sme=off");
            assert_eq!(
                Isa::Sme2.hardware_supports(),
                want_sme2,
                "QEMU_CPU={cpu}: SME2 with a 64-byte streaming vector length expected: {want_sme2}"
            );
            if !want_sme2 {
                eprintln!("note: QEMU_CPU={cpu}: no SME2 tier (as expected); SME2 tests skip");
            }
        }
    }
}

#[test]
fn forced_cap_is_respected() {
    // Meaningful when the suite runs with CONVERT_FORCE_ISA set (e.g.
    // CONVERT_FORCE_ISA=neon on an SME2 machine).
    if let Some(cap) = dispatch::forced() {
        eprintln!("CONVERT_FORCE_ISA cap: {cap}; available: {:?}", available());
        for isa in available() {
            assert!(isa.allowed_under(cap), "{isa} above the cap {cap}");
        }
        assert!(available().contains(&Isa::Scalar));
        if cap == Isa::Neon {
            assert!(!Isa::Sme2.is_available());
            assert_eq!(
                Isa::Neon.is_available(),
                Isa::Neon.hardware_supports(),
                "neon is within the cap"
            );
        }
    }
    // The cap relation itself.
    assert!(Isa::Scalar.allowed_under(Isa::Sme2));
    assert!(Isa::Neon.allowed_under(Isa::Sme2));
    assert!(Isa::Neon.allowed_under(Isa::Neon));
    assert!(!Isa::Sme2.allowed_under(Isa::Neon));
    assert!(!Isa::Neon.allowed_under(Isa::Scalar));
    assert!(!Isa::Neon.allowed_under(Isa::Avx512));
    assert!(!Isa::Avx2.allowed_under(Isa::Sme2));
    assert!(Isa::Avx2.allowed_under(Isa::Avx512));
    for name in ["neon", "sme2", "NEON", " sme2 "] {
        assert!(Isa::from_name(name).is_some(), "{name}");
    }
}

/// Whole GEMVs whose group count crosses the SME2 kernel's 16-group
/// streaming sections (ng = 16, 17, 33), N not a multiple of 64 or 8.
#[test]
fn sme2_chunked_groups_equal_neon_and_scalar() {
    let tiers = arm_tiers("sme2_chunked_groups");
    if tiers.is_empty() {
        return;
    }
    for (ci, &(family, n, k)) in [
        (Family::Hadamard, 70, 16 * 128),
        (Family::Hadamard, 129, 17 * 128 - 50),
        (Family::Hadamard, 5, 33 * 128),
        // The kernel never sees the family; an orthogonal tensor with 17
        // groups (Kp = 2176) would only add a slow QR to the encoder.
        (Family::Orthogonal, 65, 3 * 128),
    ]
    .iter()
    .enumerate()
    {
        let (blob, panels, kp) = cq4_tensor(family, n, k, 300 + ci as u64);
        let m = PanelMatrix::new(
            kernels::PanelView::parse(family, n, kp, &blob, panels.as_slice()).unwrap(),
        );
        let mut x = gaussian(400 + ci as u64, kp);
        x[k..].fill(0.0);
        let want = bits(&run(&m, &x, Isa::Scalar, false));
        for &isa in &tiers {
            for parallel in [false, true] {
                assert_eq!(
                    bits(&run(&m, &x, isa, parallel)),
                    want,
                    "{family:?} {n}x{k} {isa} parallel={parallel}"
                );
            }
        }
    }
}

/// Kernel level: random panel bytes (every nibble value), a codebook
/// holding -128 and 127, activations at +-127, 1..=35 groups.
#[test]
fn arm_cq4_kernels_exact_for_any_bytes() {
    let tiers = arm_tiers("arm_cq4_kernels_exact");
    if tiers.is_empty() {
        return;
    }
    let mut rng = cq4::rng::SplitMix64::new(0xA64);
    for ng in [1usize, 2, 15, 16, 17, 32, 35] {
        let panels: Vec<u8> = (0..ng * 4096).map(|_| rng.next_u64() as u8).collect();
        let folded: Vec<u8> = (0..ng * 64)
            .flat_map(|i| (0.25f32 + (i % 11) as f32 * 0.375).to_le_bytes())
            .collect();
        let q: Vec<i8> = (0..ng * 128)
            .map(|_| match rng.next_u64() % 4 {
                0 => 127,
                1 => -127,
                _ => (rng.next_u64() % 255) as i8,
            })
            .collect();
        let scale: Vec<f32> = (0..ng).map(|g| 0.003 + g as f32 * 0.7).collect();
        let qsum = group_sums(&q);
        let act = Cq4Act::new(&q, &scale, &qsum);
        let lut = CbLut::new([
            -128, 127, -100, -64, -1, 0, 1, 2, 3, 50, 64, 100, 120, 126, -127, -7,
        ]);
        // Unaligned views (offset 1) as well as the vectors' own alignment.
        let mut shifted = vec![0u8; panels.len() + 1];
        shifted[1..].copy_from_slice(&panels);
        for p in [&panels[..], &shifted[1..]] {
            let blk = PanelBlock::new(p, &folded, ng).unwrap();
            let mut want = [0f32; 64];
            kernels::scalar::cq4_superblock(&blk, &act, &lut, &mut want);
            for &isa in &tiers {
                let mut got = [f32::NAN; 64];
                dispatch::kernels(isa)
                    .unwrap()
                    .cq4_superblock(&blk, &act, &lut, &mut got);
                assert_eq!(bits(&got), bits(&want), "{isa} ng={ng}");
            }
        }
    }
}

/// The SME2 kernel leaves no trace: FPSR (which `smstart` / `smstop` reset
/// to 0x0800009f) is restored, and f32 work after it is unchanged.
#[cfg(target_arch = "aarch64")]
#[test]
fn sme2_kernel_restores_fpsr() {
    if !Isa::Sme2.is_available() {
        eprintln!("note: sme2_kernel_restores_fpsr: sme2 not available here; skipped");
        return;
    }
    fn fpsr() -> u64 {
        let v: u64;
        // SAFETY: reading FPSR has no side effects.
        unsafe { std::arch::asm!("mrs {0}, fpsr", out(reg) v, options(nomem, nostack)) };
        v
    }
    let ng = 2;
    let panels = vec![0x5Au8; ng * 4096];
    let folded: Vec<u8> = (0..ng * 64).flat_map(|_| 1.5f32.to_le_bytes()).collect();
    let q = vec![3i8; ng * 128];
    let scale = vec![0.5f32; ng];
    let qsum = vec![384i32; ng];
    let act = Cq4Act::new(&q, &scale, &qsum);
    let lut = CbLut::new([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
    let blk = PanelBlock::new(&panels, &folded, ng).unwrap();
    let before = fpsr();
    let mut out = [0f32; 64];
    dispatch::kernels(Isa::Sme2)
        .unwrap()
        .cq4_superblock(&blk, &act, &lut, &mut out);
    let after = fpsr();
    // The rescale's f32 products may set IXC (inexact, bit 4); nothing in
    // the kernel can raise QC, IDC, UFC, OFC, DZC or IOC.
    assert_eq!(
        after & !before & 0x0800_008f,
        0,
        "FPSR {before:#x} -> {after:#x}"
    );
    let mut want = [0f32; 64];
    kernels::scalar::cq4_superblock(&blk, &act, &lut, &mut want);
    assert_eq!(bits(&out), bits(&want));
}
