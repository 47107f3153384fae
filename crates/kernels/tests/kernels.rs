//! Every tier equals the scalar reference bit for bit; R4/R8 equal plain
//! bit for bit (tails included); parallel equals sequential. (The kernels
//! against the f64 references: `crates/kernel-check/tests/references.rs`.)

mod common;

use common::*;
use kernels::aligned::AlignedBytes;
use kernels::ggml::ALL_FORMATS;
use kernels::{
    available, GgmlMatrix, Isa, PanelMatrix, QuantFormat, RotationFamily as Family, RowLayout,
};

#[test]
fn tiers_in_use() {
    let a = available();
    eprintln!("available ISAs: {a:?}");
    for isa in [Isa::Avx512, Isa::Neon, Isa::Sme2] {
        if !a.contains(&isa) {
            eprintln!("{isa}: not on this CPU (or not built for it): its kernels are not run here");
        }
    }
    assert!(a.contains(&Isa::Scalar));
}

#[test]
fn ggml_every_tier_and_layout_equals_scalar_plain() {
    for format in ALL_FORMATS {
        let qk = format.block_weights();
        for (si, &(n, nb)) in GGML_SHAPES.iter().enumerate() {
            let k = nb * qk;
            let x = gaussian(1000 + si as u64, k);
            for (di, plain) in [
                ggml_plain(format, n, k, 7 + si as u64),
                ggml_random_bytes(format, n, k, 99 + si as u64),
            ]
            .iter()
            .enumerate()
            {
                let base = GgmlMatrix::new(format, RowLayout::RowMajor, n, k, plain).unwrap();
                let want = run(&base, &x, Isa::Scalar, false);
                assert!(want.iter().all(|v| v.is_finite()), "{format:?}");
                for layout in LAYOUTS {
                    let data = in_layout(format, n, k, plain, layout);
                    let m = GgmlMatrix::new(format, layout, n, k, data.as_slice()).unwrap();
                    let what = format!("{format:?} {n}x{k} data#{di} {layout:?}");
                    every_tier_gives(&m, &x, &want, &what);
                }
            }
        }
    }
}

/// The largest integer sums a kernel must hold: every quant byte at an
/// extreme (0xFF, 0x80, 0x00, 0x77, 0x88: nibbles of 15 and 0, 6-bit
/// scales of 63, Q8_0 quants of -128 and 127) against activations that are
/// all +127 or all -127 (or alternate per block), on every tier and
/// layout: a kernel that lets an i16 partial sum overflow or saturate
/// differs from the scalar reference here.
#[test]
fn extreme_sums_every_tier_and_layout() {
    let (n, nb) = (19, 3);
    for format in ALL_FORMATS {
        let k = nb * format.block_weights();
        let xs = [
            vec![1.0f32; k],
            vec![-1.0f32; k],
            (0..k)
                .map(|i| if (i / 32) % 2 == 0 { 3.0 } else { -3.0 })
                .collect::<Vec<f32>>(),
        ];
        for (fi, fill) in [0xFFu8, 0x80, 0x00, 0x77, 0x88].into_iter().enumerate() {
            let plain = ggml_filled_bytes(format, n, k, fill, 40 + fi as u64);
            for (xi, x) in xs.iter().enumerate() {
                let base = GgmlMatrix::new(format, RowLayout::RowMajor, n, k, &plain).unwrap();
                let want = bits(&run(&base, x, Isa::Scalar, false));
                for layout in LAYOUTS {
                    let data = in_layout(format, n, k, &plain, layout);
                    let m = GgmlMatrix::new(format, layout, n, k, data.as_slice()).unwrap();
                    for isa in available() {
                        assert_eq!(
                            bits(&run(&m, x, isa, true)),
                            want,
                            "{format:?} fill {fill:#x} x#{xi} {layout:?} {isa}"
                        );
                    }
                }
            }
        }
    }
}

/// The x86 tiers have two tables each: `avx2` its 256-bit kernels and the
/// 128-bit-half variants `kernels(Avx2)` picks on CPUs that split 256-bit
/// operations; `avx512` its kernels and the GFNI Q6_K variant
/// `kernels(Avx512)` picks on CPUs with GFNI. Every group of every format,
/// layout and data kind, through every table this CPU can run, equals the
/// scalar group kernel bit for bit, whichever one this CPU uses.
#[cfg(target_arch = "x86_64")]
#[test]
fn x86_table_variants_equal_scalar() {
    use kernels::act::{quantize_q8_0, quantize_q8_k, ActQ8_0, BlockQ8K};
    use kernels::dispatch::{avx2_variants, avx512_variants, kernels, Kernels};
    use kernels::ggml::RowGroup;
    use kernels::QuantFormat as F;

    fn group(k: &Kernels, f: F, g: &RowGroup<'_>, a0: &[ActQ8_0], ak: &[BlockQ8K]) -> [u32; 8] {
        let mut o = [0f32; 8];
        match f {
            F::Q8_0 => k.q8_0_group(g, a0, &mut o),
            F::Q4_0 => k.q4_0_group(g, a0, &mut o),
            F::Q4_1 => k.q4_1_group(g, a0, &mut o),
            F::Q5_0 => k.q5_0_group(g, a0, &mut o),
            F::Q5_1 => k.q5_1_group(g, a0, &mut o),
            F::Iq4Nl => k.iq4_nl_group(g, a0, &mut o),
            F::Q4K => k.q4_k_group(g, ak, &mut o),
            F::Q5K => k.q5_k_group(g, ak, &mut o),
            F::Q6K => k.q6_k_group(g, ak, &mut o),
            F::Q2K => k.q2_k_group(g, ak, &mut o),
            F::Q3K => k.q3_k_group(g, ak, &mut o),
            F::Iq4Xs => k.iq4_xs_group(g, ak, &mut o),
        }
        o.map(f32::to_bits)
    }

    let variants: Vec<(&str, &Kernels)> = avx2_variants()
        .into_iter()
        .map(|t| ("avx2", t))
        .chain(avx512_variants().into_iter().map(|t| ("avx512", t)))
        .collect();
    eprintln!(
        "x86 tables compared with scalar: {:?}",
        variants.iter().map(|v| v.0).collect::<Vec<_>>()
    );
    if variants.is_empty() {
        eprintln!("no AVX2 on this CPU: nothing to compare");
        return;
    }
    let scalar = kernels(Isa::Scalar).unwrap();
    for format in ALL_FORMATS {
        let qk = format.block_weights();
        for (si, &(n, nb)) in GGML_SHAPES.iter().enumerate() {
            let k = nb * qk;
            let x = gaussian(300 + si as u64, k);
            let mut a0 = vec![ActQ8_0::default(); k / 32];
            quantize_q8_0(&x, &mut a0).unwrap();
            let mut ak = vec![BlockQ8K::default(); k / 256];
            if k % 256 == 0 {
                quantize_q8_k(&x, &mut ak).unwrap();
            }
            for plain in [
                ggml_plain(format, n, k, 70 + si as u64),
                ggml_random_bytes(format, n, k, 90 + si as u64),
                ggml_filled_bytes(format, n, k, 0xFF, 5),
            ] {
                for layout in LAYOUTS {
                    let data = in_layout(format, n, k, &plain, layout);
                    let m = GgmlMatrix::new(format, layout, n, k, data.as_slice()).unwrap();
                    for first in (0..n).step_by(8) {
                        let g = m.group_at(first);
                        let want = group(scalar, format, &g, &a0, &ak);
                        for (vi, (tier, v)) in variants.iter().enumerate() {
                            assert_eq!(
                                group(v, format, &g, &a0, &ak),
                                want,
                                "{format:?} {n}x{k} {layout:?} rows {first}.. {tier} table {vi}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn unaligned_buffers_give_the_same_bits() {
    for format in ALL_FORMATS {
        let (n, k) = (13, 3 * format.block_weights());
        let plain = ggml_plain(format, n, k, 5);
        let x = gaussian(6, k);
        let aligned = in_layout(format, n, k, &plain, RowLayout::Interleaved(8));
        assert_eq!(aligned.as_slice().as_ptr() as usize % 64, 0);
        let mut shifted = vec![0u8; plain.len() + 1];
        shifted[1..].copy_from_slice(aligned.as_slice());
        let a =
            GgmlMatrix::new(format, RowLayout::Interleaved(8), n, k, aligned.as_slice()).unwrap();
        let b = GgmlMatrix::new(format, RowLayout::Interleaved(8), n, k, &shifted[1..]).unwrap();
        for isa in available() {
            assert_eq!(
                bits(&run(&a, &x, isa, false)),
                bits(&run(&b, &x, isa, false)),
                "{format:?} {isa}"
            );
        }
    }
}

fn cq4_cases() -> Vec<(Family, usize, usize)> {
    let mut v = Vec::new();
    for &(n, k) in &[
        (1, 128),
        (63, 128),
        (64, 128),
        (65, 256),
        (100, 128),
        (130, 384),
        (37, 200),
    ] {
        v.push((Family::Hadamard, n, k));
    }
    for &(n, k) in &[(1, 128), (64, 128), (100, 128), (70, 256), (129, 200)] {
        v.push((Family::Orthogonal, n, k));
    }
    v
}

#[test]
fn cq4_every_tier_equals_scalar() {
    for (ci, (family, n, k)) in cq4_cases().into_iter().enumerate() {
        let (blob, panels, kp) = cq4_tensor(family, n, k, 40 + ci as u64);
        let m = PanelMatrix::new(
            kernels::PanelView::parse(family, n, kp, &blob, panels.as_slice()).unwrap(),
        );
        let mut x = gaussian(77 + ci as u64, kp);
        x[k..].fill(0.0);
        let want = run(&m, &x, Isa::Scalar, false);
        assert!(want.iter().all(|v| v.is_finite()));
        every_tier_gives(&m, &x, &want, &format!("{family:?} {n}x{k}"));
    }
}

#[test]
fn cq4_hostile_codebook_and_extreme_activations() {
    // A codebook whose int8 image contains -128 and 127, and activations
    // that hit +-127 in every group: the unsigned-operand tricks stay exact.
    let (n, k) = (70, 256);
    let (mut blob, panels, kp) = cq4_tensor(Family::Hadamard, n, k, 3);
    let g = weights_file::panel::PanelGeometry::new(n, kp, 128).unwrap();
    let cb = g.scales_layout(Family::Hadamard).codebook;
    // entries +-127 at the ends: cb_scale = 1, cb_i8 spans -127..=127
    let vals: [f32; 16] = [
        -127.0, -100.0, -80.0, -60.0, -40.0, -20.0, -5.0, -1.0, 1.0, 5.0, 20.0, 40.0, 60.0, 80.0,
        100.0, 127.0,
    ];
    for (i, v) in vals.iter().enumerate() {
        let h = half_bits(*v);
        blob[cb.offset + 2 * i..cb.offset + 2 * i + 2].copy_from_slice(&h.to_le_bytes());
    }
    let m = PanelMatrix::new(
        kernels::PanelView::parse(Family::Hadamard, n, kp, &blob, panels.as_slice()).unwrap(),
    );
    assert!(m.lut().cb_i8().contains(&127) && m.lut().cb_i8().contains(&-127));
    let mut x = vec![0f32; kp];
    for (i, v) in x.iter_mut().enumerate() {
        *v = if i % 3 == 0 { 1000.0 } else { -(i as f32) };
    }
    let want = run(&m, &x, Isa::Scalar, false);
    for isa in available() {
        assert_eq!(bits(&run(&m, &x, isa, true)), bits(&want), "{isa}");
    }
}

fn half_bits(v: f32) -> u16 {
    cq4::fp16::f64_to_f16_bits(v as f64)
}

#[test]
fn aligned_bytes_are_64_aligned() {
    let a = AlignedBytes::zeroed(1000);
    assert_eq!(a.as_slice().as_ptr() as usize % 64, 0);
}

/// Kernel level: an int8 codebook holding -128 (not produced by
/// `codebook_i8`, but the kernels must not care), random panel bytes,
/// activations at +-127.
#[test]
fn cq4_kernels_exact_for_any_codebook_bytes() {
    use kernels::act::Cq4Act;
    use kernels::panel::{CbLut, PanelBlock};
    let ng = 3;
    let mut rng = cq4::rng::SplitMix64::new(5);
    let panels: Vec<u8> = (0..ng * 4096).map(|_| rng.next_u64() as u8).collect();
    let folded: Vec<u8> = (0..ng * 64)
        .flat_map(|i| (0.5f32 + (i % 13) as f32 * 0.25).to_le_bytes())
        .collect();
    let q: Vec<i8> = (0..ng * 128)
        .map(|i| {
            if (rng.next_u64() >> 63) == 1 {
                127
            } else {
                -127 + (i % 3) as i8
            }
        })
        .collect();
    let scale = vec![0.01f32, 0.5, 3.0];
    let qsum = group_sums(&q);
    let act = Cq4Act::new(&q, &scale, &qsum);
    let lut = CbLut::new([
        -128, -127, -100, -64, -1, 0, 1, 2, 3, 50, 64, 100, 120, 126, 127, -7,
    ]);
    let blk = PanelBlock::new(&panels, &folded, ng).unwrap();
    cq4_tiers_equal_scalar(&blk, &act, &lut, "any codebook bytes");
}

#[test]
fn orthogonal_transform_is_identical_on_every_tier() {
    for kp in [128usize, 640] {
        let mut rng = cq4::rng::SplitMix64::new(kp as u64);
        let r: Vec<u8> = (0..kp * kp)
            .flat_map(|_| {
                let h = 0x2000u16 | (rng.next_u64() as u16 & 0x83FF);
                h.to_le_bytes()
            })
            .collect();
        let x = gaussian(3, kp);
        let recip: Vec<f32> = (0..kp).map(|i| 1.0 + (i % 3) as f32 * 0.5).collect();
        let mut want = vec![0f32; kp];
        kernels::scalar::orthogonal_rotate(&x, &recip, &r, &mut want);
        for isa in available() {
            let mut z = vec![1f32; kp];
            kernels::dispatch::kernels(isa)
                .unwrap()
                .orthogonal_rotate(&x, &recip, &r, &mut z);
            assert_eq!(bits(&z), bits(&want), "{isa} kp={kp}");
        }
    }
}

#[test]
fn random_shapes_every_tier_and_layout() {
    let mut rng = cq4::rng::SplitMix64::new(0xC0FFEE);
    for case in 0..40 {
        let format = ALL_FORMATS[(rng.next_u64() % ALL_FORMATS.len() as u64) as usize];
        let n = 1 + (rng.next_u64() % 90) as usize;
        let nb = 1 + (rng.next_u64() % 12) as usize;
        let k = nb * format.block_weights();
        let plain = if case % 2 == 0 {
            ggml_plain(format, n, k, case)
        } else {
            ggml_random_bytes(format, n, k, case)
        };
        let x = gaussian(case + 1, k);
        let base = GgmlMatrix::new(format, RowLayout::RowMajor, n, k, &plain).unwrap();
        let want = bits(&run(&base, &x, Isa::Scalar, false));
        for layout in LAYOUTS {
            let data = in_layout(format, n, k, &plain, layout);
            let m = GgmlMatrix::new(format, layout, n, k, data.as_slice()).unwrap();
            for isa in available() {
                assert_eq!(
                    bits(&run(&m, &x, isa, true)),
                    want,
                    "case {case}: {format:?} {n}x{k} {layout:?} {isa}"
                );
            }
        }
    }
    for case in 0..8u64 {
        let family = if case % 2 == 0 {
            Family::Hadamard
        } else {
            Family::Orthogonal
        };
        let n = 1 + (rng.next_u64() % 200) as usize;
        let k = 128 * (1 + (rng.next_u64() % 3) as usize) - (rng.next_u64() % 64) as usize;
        let (blob, panels, kp) = cq4_tensor(family, n, k, case);
        let m = PanelMatrix::new(
            kernels::PanelView::parse(family, n, kp, &blob, panels.as_slice()).unwrap(),
        );
        let mut x = gaussian(case + 100, kp);
        x[k..].fill(0.0);
        let want = bits(&run(&m, &x, Isa::Scalar, false));
        for isa in available() {
            assert_eq!(
                bits(&run(&m, &x, isa, true)),
                want,
                "cq4 case {case}: {family:?} {n}x{k} {isa}"
            );
        }
    }
}

/// A MoE tensor `[E, N, K]` in every layout: expert `e` of the stacked
/// bytes gives, on every tier, the scalar GEMV of that expert's own plain
/// bytes (quantized separately, never interleaved) bit for bit, and out of
/// range experts or short data are errors.
#[test]
fn expert_selection_equals_the_2d_gemv_of_that_expert() {
    use kernels::GgmlExperts;
    const E: usize = 3;
    for format in ALL_FORMATS {
        // 11 rows: one R8 group + 3 tail rows, two R4 groups + 3 tail rows.
        let (n, k) = (11, 2 * format.block_weights());
        let x = gaussian(77, k);
        let plains: Vec<Vec<u8>> = (0..E)
            .map(|e| ggml_plain(format, n, k, 300 + e as u64))
            .collect();
        let wants: Vec<Vec<f32>> = plains
            .iter()
            .map(|p| {
                let m = GgmlMatrix::new(format, RowLayout::RowMajor, n, k, p).unwrap();
                run(&m, &x, Isa::Scalar, false)
            })
            .collect();
        assert_ne!(
            bits(&wants[0]),
            bits(&wants[1]),
            "{format:?}: experts differ"
        );
        for layout in LAYOUTS {
            let mut stacked = Vec::new();
            for p in &plains {
                stacked.extend_from_slice(in_layout(format, n, k, p, layout).as_slice());
            }
            let data = AlignedBytes::copy_of(&stacked);
            let ex = GgmlExperts::new(format, layout, E, n, k, data.as_slice()).unwrap();
            assert_eq!(
                (ex.experts(), ex.rows(), ex.cols(), ex.expert_bytes()),
                (E, n, k, plains[0].len())
            );
            for (e, want) in wants.iter().enumerate() {
                let m = ex.expert(e).unwrap();
                let what = format!("{format:?} {layout:?} expert {e}");
                every_tier_gives(&m, &x, want, &what);
                let mut y = vec![0f32; n];
                let mut ws = kernels::Workspace::new();
                ex.gemv_expert(
                    e,
                    &x,
                    &mut y,
                    &mut ws,
                    kernels::Exec::new(Isa::Scalar, false),
                )
                .unwrap();
                assert_eq!(bits(&y), bits(want), "{what} gemv_expert");
            }
            assert!(ex.expert(E).is_err(), "{format:?}: expert {E} of {E}");
            let short = &data.as_slice()[..data.as_slice().len() - 1];
            assert!(GgmlExperts::new(format, layout, E, n, k, short).is_err());
            assert!(GgmlExperts::new(format, layout, 0, n, k, &[]).is_err());
        }
    }
}

/// GEMM `Y = X W^T`: row `i` of `Y` is, bit for bit, the scalar GEMV of row
/// `i` of `X`, on every tier, sequential and parallel, for every ggml
/// layout, both CQ4 families and FP16, with M tails (1, 2, 3, 17: the
/// multi-row kernels' runs of 4 / 8 rows and 16-row tiles plus a tail; 70,
/// for one matrix of each kind: past the driver's 64 rows per kernel call)
/// and N tails (rows not a multiple of 8 / 64). One workspace serves every
/// call, so buffers left by a larger M must not leak into a smaller one.
#[test]
fn gemm_rows_equal_the_scalar_gemv_of_each_row() {
    use kernels::{Exec, Gemv, Workspace};
    fn check(mat: &dyn Gemv, seed: u64, zero_from: usize, what: &str, long: bool) {
        let (n, k) = (mat.rows(), mat.cols());
        let mut ws = Workspace::new();
        let ms: &[usize] = if long {
            &[3, 70, 17, 1, 2]
        } else {
            &[3, 17, 1, 2]
        };
        for &m in ms {
            let rows: Vec<Vec<f32>> = (0..m)
                .map(|i| {
                    let mut x = gaussian(seed + 31 * i as u64, k);
                    x[zero_from..].fill(0.0);
                    x
                })
                .collect();
            let want: Vec<f32> = rows
                .iter()
                .flat_map(|x| run(mat, x, Isa::Scalar, false))
                .collect();
            let x: Vec<f32> = rows.concat();
            for isa in available() {
                for parallel in [false, true] {
                    let mut y = vec![f32::NAN; m * n];
                    mat.gemm(m, &x, &mut y, &mut ws, Exec::new(isa, parallel))
                        .unwrap();
                    assert_eq!(
                        bits(&y),
                        bits(&want),
                        "{what} M={m} {isa} parallel={parallel}"
                    );
                }
            }
            // Wrong lengths are refused, not read past.
            let mut y = vec![0f32; m * n];
            let e = Exec::new(Isa::Scalar, false);
            assert!(mat.gemm(m + 1, &x, &mut y, &mut ws, e).is_err(), "{what}");
            assert!(mat.gemm(m, &x, &mut y[1..], &mut ws, e).is_err(), "{what}");
        }
    }
    for format in ALL_FORMATS {
        let qk = format.block_weights();
        for &(n, nb) in &[(9usize, 2usize), (17, 1), (33, 3)] {
            let k = nb * qk;
            let plain = ggml_plain(format, n, k, 500 + n as u64);
            for layout in LAYOUTS {
                let data = in_layout(format, n, k, &plain, layout);
                let mat = GgmlMatrix::new(format, layout, n, k, data.as_slice()).unwrap();
                let long = format == QuantFormat::Q4K && n == 33;
                check(
                    &mat,
                    600,
                    k,
                    &format!("{format:?} {n}x{k} {layout:?}"),
                    long,
                );
            }
        }
    }
    for (ci, (family, n, k)) in cq4_cases().into_iter().enumerate() {
        let (blob, panels, kp) = cq4_tensor(family, n, k, 700 + ci as u64);
        let mat = PanelMatrix::new(
            kernels::PanelView::parse(family, n, kp, &blob, panels.as_slice()).unwrap(),
        );
        check(&mat, 800, k, &format!("{family:?} {n}x{k}"), ci % 6 == 5);
    }
    let (n, k) = (19, 40);
    let halves: Vec<u8> = gaussian(900, n * k)
        .iter()
        .flat_map(|&v| half_bits(v).to_le_bytes())
        .collect();
    let mat = kernels::FloatMatrix::new(kernels::FloatType::F16, n, k, &halves).unwrap();
    check(&mat, 901, k, "fp16 19x40", true);
}

/// Kernel level: each tier's multi-row CQ4 kernel against its own GEMV
/// kernel row by row (and so against scalar, which the tier's GEMV equals):
/// random panel bytes (every nibble), an int8 codebook with -128 and 127,
/// quants at +-127, every M from 1 to 20 plus 31, 33 and 64 (runs of 4 / 8
/// rows, 16-row tiles and their tails), 1 to 9 groups (the SME2 kernel's
/// sections of 4 groups and their tails). A kernel that dotted the wrong
/// activation row, tile, group or channel fails it.
#[test]
fn cq4_gemm_kernels_equal_the_gemv_kernel_per_row() {
    use kernels::act::Cq4Rows;
    use kernels::panel::{CbLut, PanelBlock};
    let mut rng = cq4::rng::SplitMix64::new(0x6E33);
    let lut = CbLut::new([
        -128, -127, -100, -64, -1, 0, 1, 2, 3, 50, 64, 100, 120, 126, 127, -7,
    ]);
    let ms: Vec<usize> = (1..=20).chain([31, 33, 64]).collect();
    for ng in [1usize, 3, 4, 5, 9] {
        let kp = ng * 128;
        let panels: Vec<u8> = (0..ng * 4096).map(|_| rng.next_u64() as u8).collect();
        let folded: Vec<u8> = (0..ng * 64)
            .flat_map(|i| (0.5f32 + (i % 13) as f32 * 0.25).to_le_bytes())
            .collect();
        let blk = PanelBlock::new(&panels, &folded, ng).unwrap();
        for &m in &ms {
            let q: Vec<i8> = (0..m * kp)
                .map(|_| match rng.next_u64() % 4 {
                    0 => 127,
                    1 => -127,
                    _ => (rng.next_u64() % 255) as i8,
                })
                .map(|v| v.max(-127))
                .collect();
            let scale: Vec<f32> = (0..m * ng).map(|i| 0.001 * (1 + i % 17) as f32).collect();
            let qsum: Vec<i32> = q
                .chunks(128)
                .map(|c| c.iter().map(|&v| v as i32).sum())
                .collect();
            let mut packed = vec![0i8; Cq4Rows::packed_len(m, kp)];
            Cq4Rows::pack(m, kp, &q, &mut packed).unwrap();
            let rows = Cq4Rows::new(m, kp, &q, &scale, &qsum, &packed).unwrap();
            let mut want = vec![0f32; 64 * m];
            for (i, o) in want.chunks_exact_mut(64).enumerate() {
                kernels::scalar::cq4_superblock(&blk, &rows.row(i), &lut, o.try_into().unwrap());
            }
            for isa in available() {
                let k = kernels::dispatch::kernels(isa).unwrap();
                let mut got = vec![f32::NAN; 64 * m];
                k.cq4_superblock_gemm(&blk, &rows, &lut, &mut got);
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "{isa} (multi-row kernel: {}) ng={ng} M={m}",
                    k.has_cq4_gemm()
                );
            }
        }
    }
}

/// The packed activation layout of the multi-row CQ4 kernels
/// ([`kernels::act::Cq4Rows`]), against its definition, and the shape
/// checks of its constructor.
#[test]
fn cq4_rows_packing() {
    use kernels::act::{Cq4Rows, CQ4_TILE_ROWS};
    let (m, kp) = (19, 256);
    let q: Vec<i8> = (0..m * kp).map(|i| (i % 251) as i8).collect();
    let mut packed = vec![1i8; Cq4Rows::packed_len(m, kp)];
    assert_eq!(packed.len(), 2 * CQ4_TILE_ROWS * kp);
    Cq4Rows::pack(m, kp, &q, &mut packed).unwrap();
    for t in 0..2 {
        for s in 0..kp / 4 {
            for r in 0..CQ4_TILE_ROWS {
                for c in 0..4 {
                    let i = 16 * t + r;
                    let want = if i < m { q[i * kp + 4 * s + c] } else { 0 };
                    assert_eq!(packed[((t * kp / 4) + s) * 64 + 4 * r + c], want);
                }
            }
        }
    }
    let (scale, qsum) = (vec![1f32; m * 2], vec![0i32; m * 2]);
    let rows = Cq4Rows::new(m, kp, &q, &scale, &qsum, &packed).unwrap();
    let sub = rows.sub(16, 3);
    assert_eq!((sub.rows(), sub.groups()), (3, 2));
    assert_eq!(sub.row(0).q, &q[16 * kp..17 * kp]);
    assert_eq!(sub.packed(), &packed[CQ4_TILE_ROWS * kp..]);
    assert!(Cq4Rows::new(m, kp, &q, &scale, &qsum, &packed[1..]).is_err());
    assert!(Cq4Rows::new(m, kp, &q[1..], &scale, &qsum, &packed).is_err());
    assert!(Cq4Rows::new(0, kp, &[], &[], &[], &[]).is_err());
    assert!(Cq4Rows::new(1, 100, &q[..100], &scale[..1], &qsum[..1], &packed[..1600]).is_err());
    assert!(Cq4Rows::pack(m, kp, &q, &mut packed[1..]).is_err());
}
