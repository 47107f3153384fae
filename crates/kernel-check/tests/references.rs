//! The kernels of every tier against the f64 references: the exact
//! reference (proven rounding bound) on real and random bytes, a wrong
//! block or nibble caught, the end-to-end oracles on Gaussian data, the
//! embedding row decode against qdq.

#[path = "../../kernels/tests/common/mod.rs"]
mod common;

use common::*;
use kernel_check::oracle::{compare, ggml_oracle, panel_oracle, panel_oracle_factored};
use kernels::ggml::ALL_FORMATS;
use kernels::{
    available, GgmlMatrix, Isa, PanelMatrix, QuantFormat, RotationFamily as Family, RowLayout,
};

/// End-to-end relative-L2 error of the kernels against unquantized
/// activations on these Gaussian test matrices (the 8-bit activation
/// quantization, plus the int8 codebook for CQ4; docs/KERNELS.md): a
/// statistical property of this data, twice the worst value measured.
fn bound_of(format: Option<QuantFormat>) -> f64 {
    match format {
        Some(QuantFormat::Q8_0 | QuantFormat::Q5_0) => 0.012,
        Some(_) => 0.015,
        None => 0.02,
    }
}

/// The exact reference (kernel's own activations, proven rounding bound)
/// holds for every tier, on real and on random bytes; corrupting one
/// block between the kernel's bytes and the reference's is caught.
#[test]
fn every_tier_within_the_exact_bound_and_a_wrong_block_is_caught() {
    use kernel_check::reference::{compare_exact, reference};
    for format in ALL_FORMATS {
        let qk = format.block_weights();
        for (si, &(n, nb)) in GGML_SHAPES.iter().enumerate() {
            let k = nb * qk;
            let x = gaussian(3000 + si as u64, k);
            for plain in [
                ggml_plain(format, n, k, 70 + si as u64),
                ggml_random_bytes(format, n, k, 90 + si as u64),
            ] {
                let m = GgmlMatrix::new(format, RowLayout::RowMajor, n, k, &plain).unwrap();
                let r = reference(&kernels::Matrix::Ggml(m), &x).unwrap();
                assert!(
                    r.act_ratio <= 1.0,
                    "{format:?}: activations {}",
                    r.act_ratio
                );
                for isa in available() {
                    let y = run(&m, &x, isa, true);
                    let st = compare_exact(&y, &r);
                    assert!(st.pass(), "{format:?} {n}x{k} {isa}: {st:?}");
                }
                // A kernel that read another block: change one block's bytes
                // (a different random block) under the kernel only.
                let bb = format.block_bytes();
                let mut other = plain.clone();
                let alt = ggml_random_bytes(format, 1, qk, 5 + si as u64);
                other[..bb].copy_from_slice(&alt[..bb]);
                let m2 = GgmlMatrix::new(format, RowLayout::RowMajor, n, k, &other).unwrap();
                let y = run(&m2, &x, Isa::Scalar, false);
                if y[0] != run(&m, &x, Isa::Scalar, false)[0] {
                    assert!(
                        !compare_exact(&y, &r).pass(),
                        "{format:?} {n}x{k}: wrong block passed"
                    );
                }
            }
        }
    }
    for (family, n, k) in [(Family::Hadamard, 130, 512), (Family::Orthogonal, 70, 256)] {
        let (blob, panels, kp) = cq4_tensor(family, n, k, 31);
        let m = PanelMatrix::new(
            kernels::PanelView::parse(family, n, kp, &blob, panels.as_slice()).unwrap(),
        );
        let x = gaussian(77, kp);
        let r = reference(&kernels::Matrix::Panel(Box::new(m.clone())), &x).unwrap();
        assert!(
            r.act_ratio <= 1.0,
            "{family:?}: activations {}",
            r.act_ratio
        );
        // The self-check's reference (no e2e sums: the stored byte pairs
        // read directly) is the same, bit for bit.
        let own = kernel_check::reference::reference_with(
            &kernels::Matrix::Panel(Box::new(m.clone())),
            &x,
            false,
        )
        .unwrap();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&own.exact),
            bits(&r.exact),
            "{family:?}: self-check sums"
        );
        assert_eq!(
            bits(&own.bound),
            bits(&r.bound),
            "{family:?}: self-check bounds"
        );
        for isa in available() {
            let st = compare_exact(&run(&m, &x, isa, true), &r);
            assert!(st.pass(), "{family:?} {isa}: {st:?}");
        }
        // One nibble of channel 0 changed under the kernel only.
        let mut p2 = panels.as_slice().to_vec();
        p2[0] ^= 0x07;
        let m2 = PanelMatrix::new(kernels::PanelView::parse(family, n, kp, &blob, &p2).unwrap());
        for r in [&r, &own] {
            let st = compare_exact(&run(&m2, &x, Isa::Scalar, false), r);
            assert!(
                !st.pass() && st.worst_row == 0,
                "{family:?}: wrong nibble passed {st:?}"
            );
        }
    }
}

#[test]
fn ggml_kernels_within_oracle_bounds() {
    for format in ALL_FORMATS {
        let k = if format.block_weights() == 32 {
            2880
        } else {
            4096
        };
        let n = 203;
        let plain = ggml_plain(format, n, k, 11);
        let m = GgmlMatrix::new(format, RowLayout::RowMajor, n, k, &plain).unwrap();
        let mut worst = 0f64;
        for seed in 0..4 {
            let x = gaussian(500 + seed, k);
            let oracle = ggml_oracle(&m, &x).unwrap();
            assert_eq!(oracle.nonfinite_weights, 0);
            for isa in available() {
                let y = run(&m, &x, isa, true);
                let st = compare(&y, &oracle.y);
                worst = worst.max(st.rel_l2);
                assert!(
                    st.rel_l2 <= bound_of(Some(format)),
                    "{format:?} {isa}: {st:?}"
                );
            }
        }
        eprintln!(
            "{format:?}: worst rel L2 {worst:.5} (bound {})",
            bound_of(Some(format))
        );
    }
}

#[test]
fn cq4_kernels_within_oracle_bounds() {
    for (family, n, k) in [
        (Family::Hadamard, 200, 2048),
        (Family::Orthogonal, 200, 512),
    ] {
        let (blob, panels, kp) = cq4_tensor(family, n, k, 21);
        let view = cq4::PanelTensorView::parse(family, n, kp, &blob, panels.as_slice()).unwrap();
        let m = PanelMatrix::new(
            kernels::PanelView::parse(family, n, kp, &blob, panels.as_slice()).unwrap(),
        );
        let mut worst = 0f64;
        for seed in 0..4 {
            let x = gaussian(600 + seed, kp);
            let oracle = panel_oracle(&view, &x).unwrap();
            let factored = panel_oracle_factored(&m, &x).unwrap();
            let agree = compare(
                &factored.y.iter().map(|&v| v as f32).collect::<Vec<_>>(),
                &oracle.y,
            );
            assert!(agree.rel_l2 < 1e-6, "factored oracle {agree:?}");
            for isa in available() {
                let y = run(&m, &x, isa, true);
                let st = compare(&y, &oracle.y);
                worst = worst.max(st.rel_l2);
                assert!(st.rel_l2 <= bound_of(None), "{family:?} {isa}: {st:?}");
            }
        }
        eprintln!(
            "CQ4 {family:?}: worst rel L2 {worst:.5} (bound {})",
            bound_of(None)
        );
    }
}

#[test]
fn embedding_rows_match_qdq() {
    for family in [Family::Orthogonal, Family::Hadamard] {
        let (n, k) = (90, 256);
        let (blob, panels, kp) = cq4_tensor(family, n, k, 8);
        let view = cq4::PanelTensorView::parse(family, n, kp, &blob, panels.as_slice()).unwrap();
        let m = PanelMatrix::new(
            kernels::PanelView::parse(family, n, kp, &blob, panels.as_slice()).unwrap(),
        );
        for row in [0, 45, 89] {
            let mut want = vec![0f32; kp];
            view.embedding_row(row, &mut want).unwrap();
            let mut got = vec![0f32; kp];
            m.embedding_row(row, &mut got).unwrap();
            let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
            let err = want
                .iter()
                .zip(&got)
                .fold(0f32, |a, (w, g)| a.max((w - g).abs()));
            assert!(
                err <= kernel_check::check::EMBEDDING_BOUND * scale,
                "{family:?} row {row}: {err} vs {scale}"
            );
        }
    }
}

/// GEMM rows against the f64 references: each row of an M = 19 GEMM of
/// distinct Gaussian rows (a 16-row tile plus a tail, runs of 4 / 8 rows
/// plus tails), on every tier, is within the exact bound of its own row's
/// reference and within the end-to-end oracle bound; the same row held to
/// another row's reference fails, so the check would catch mixed-up rows.
#[test]
fn gemm_rows_within_the_exact_bound_of_their_own_rows() {
    use kernel_check::reference::{compare_exact, reference};
    use kernels::{Exec, Matrix, Workspace};
    const M: usize = 19;
    let check = |what: &str, m: &Matrix<'_>| {
        let g = m.as_gemv();
        let k = g.cols();
        let rows: Vec<Vec<f32>> = (0..M).map(|i| gaussian(900 + i as u64, k)).collect();
        let refs: Vec<_> = rows.iter().map(|x| reference(m, x).unwrap()).collect();
        let xs: Vec<f32> = rows.concat();
        let mut ws = Workspace::new();
        for isa in available() {
            let mut ys = vec![0f32; M * g.rows()];
            g.gemm(M, &xs, &mut ys, &mut ws, Exec::new(isa, true))
                .unwrap();
            for (i, (y, r)) in ys.chunks_exact(g.rows()).zip(&refs).enumerate() {
                let st = compare_exact(y, r);
                assert!(st.pass(), "{what} {isa} row {i}: {st:?}");
                let e2e = compare(y, &r.e2e);
                assert!(e2e.rel_l2 <= 0.05, "{what} {isa} row {i}: {e2e:?}");
            }
            let other = compare_exact(&ys[g.rows()..2 * g.rows()], &refs[0]);
            assert!(
                !other.pass(),
                "{what} {isa}: row 1 passed row 0's reference"
            );
        }
    };
    for (format, layout, n) in [
        (QuantFormat::Q4K, RowLayout::Interleaved(8), 37),
        (QuantFormat::Q6K, RowLayout::RowMajor, 20),
        (QuantFormat::Q8_0, RowLayout::Interleaved(4), 21),
        (QuantFormat::Q4_0, RowLayout::Interleaved(8), 16),
        (QuantFormat::Iq4Xs, RowLayout::Interleaved(8), 9),
    ] {
        let k = 512;
        let plain = ggml_plain(format, n, k, 41);
        let data = in_layout(format, n, k, &plain, layout);
        let m = GgmlMatrix::new(format, layout, n, k, data.as_slice()).unwrap();
        check(&format!("{format:?} {layout:?}"), &Matrix::Ggml(m));
    }
    for (family, n, k) in [(Family::Hadamard, 130, 512), (Family::Orthogonal, 70, 256)] {
        let (blob, panels, kp) = cq4_tensor(family, n, k, 43);
        let m = PanelMatrix::new(
            kernels::PanelView::parse(family, n, kp, &blob, panels.as_slice()).unwrap(),
        );
        check(&format!("CQ4 {family:?}"), &Matrix::Panel(Box::new(m)));
    }
}
