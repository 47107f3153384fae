//! GPTQ (FORMAT.md §CQ4.18) through the encoder: it lowers the
//! Hessian-weighted output error against plain §7 quantization, its bytes
//! do not depend on the thread count or the chunking, and it refuses the
//! orthogonal family and gains made for another width.

use std::sync::Arc;

use cq4::gptq::Gptq;
use cq4::rng::{fill_gaussian, SplitMix64};
use cq4::{Bundle, Family};

fn gaussian(seed: u64, n: usize) -> Vec<f64> {
    let mut r = SplitMix64::new(seed);
    let mut v = vec![0.0; n];
    fill_gaussian(&mut r, &mut v);
    v
}

/// Inputs with correlated, unevenly scaled columns, and their Hessian
/// `X^T X / m` as f32 little-endian bytes.
fn hessian(k: usize, m: usize) -> (Vec<f64>, Vec<u8>) {
    let z = gaussian(11, m * k);
    let mix = gaussian(12, k);
    let mut x = vec![0.0; m * k];
    for r in 0..m {
        for c in 0..k {
            // A shared factor per row (correlation) plus the column's own.
            let shared = z[r * k] * mix[c];
            x[r * k + c] = (z[r * k + c] + shared) * (1.0 + (c % 13) as f64 / 3.0);
        }
    }
    let mut h = vec![0.0f64; k * k];
    for r in 0..m {
        let xr = &x[r * k..(r + 1) * k];
        for i in 0..k {
            for j in 0..k {
                h[i * k + j] += xr[i] * xr[j];
            }
        }
    }
    let bytes = h
        .iter()
        .flat_map(|v| ((v / m as f64) as f32).to_le_bytes())
        .collect();
    (h.iter().map(|v| v / m as f64).collect(), bytes)
}

fn weighted_error(w: &[f32], q: &[f32], h: &[f64], n: usize, k: usize, kp: usize) -> f64 {
    let mut total = 0.0;
    for r in 0..n {
        let d: Vec<f64> = (0..k)
            .map(|c| w[r * k + c] as f64 - q[r * kp + c] as f64)
            .collect();
        for i in 0..k {
            let mut s = 0.0;
            for j in 0..k {
                s += h[i * k + j] * d[j];
            }
            total += d[i] * s;
        }
    }
    total
}

#[test]
fn gptq_lowers_the_hessian_weighted_error() {
    let (n, k) = (96, 384);
    let w: Vec<f32> = gaussian(3, n * k)
        .iter()
        .map(|&v| (v * 0.02) as f32)
        .collect();
    let (h, hb) = hessian(k, 1024);
    let bundle = Bundle::new(cq4::DEFAULT_SEED);
    let plain = bundle.encoder(Family::Hadamard, n, k).unwrap();
    let gq = Arc::new(Gptq::new(&hb, k, None).unwrap());
    let with = bundle
        .encoder(Family::Hadamard, n, k)
        .unwrap()
        .with_gptq(gq)
        .unwrap();
    let kp = plain.kp();
    let mut errs = Vec::new();
    for enc in [&plain, &with] {
        let (p, nr) = enc.encode_tensor(&w).unwrap();
        let mut q = vec![0f32; n * kp];
        enc.dequantize_superblocks(0, &p, &nr, &mut q).unwrap();
        errs.push(weighted_error(&w, &q, &h, n, k, kp));
    }
    // The compensation of each group's error in the later groups: measured
    // 0.54x here; a broken gain (sign, indices) makes it worse than plain.
    assert!(
        errs[1] < 0.85 * errs[0],
        "gptq {} vs plain {}",
        errs[1],
        errs[0]
    );
}

#[test]
fn gptq_bytes_do_not_depend_on_threads_or_chunks() {
    let (n, k) = (150, 300);
    let w: Vec<f32> = gaussian(5, n * k).iter().map(|&v| v as f32).collect();
    let (_, hb) = hessian(k, 600);
    let exps: Vec<i8> = (0..k).map(|c| (c % 5) as i8 - 2).collect();
    let make = || {
        let e = Bundle::new(9)
            .encoder(Family::Hadamard, n, k)
            .unwrap()
            .with_input_exponents(&exps)
            .unwrap();
        let gq = Gptq::new(&hb, k, Some(&exps)).unwrap();
        e.with_gptq(Arc::new(gq)).unwrap()
    };
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap()
        .install(|| make().encode_tensor(&w).unwrap());
    let many = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap()
        .install(|| make().encode_tensor(&w).unwrap());
    assert!(one == many);
    // Chunk by chunk (64 rows, then the tail).
    let enc = make();
    let g = enc.geometry();
    let (mut p, mut nr) = (vec![0u8; g.data_bytes()], vec![0u16; n * g.num_groups()]);
    for first in (0..n).step_by(64) {
        let rows = (n - first).min(64);
        let sbb = g.superblock_bytes();
        enc.encode_superblocks(
            first,
            &w[first * k..(first + rows) * k],
            &mut p[first / 64 * sbb..(first / 64 + 1) * sbb],
            &mut nr[first * g.num_groups()..(first + rows) * g.num_groups()],
        )
        .unwrap();
    }
    assert!((p, nr) == one);
    // And it is not plain quantization.
    let plain = Bundle::new(9)
        .encoder(Family::Hadamard, n, k)
        .unwrap()
        .with_input_exponents(&exps)
        .unwrap()
        .encode_tensor(&w)
        .unwrap();
    assert!(plain != one);
}

#[test]
fn gptq_is_refused_where_it_does_not_apply() {
    let (_, hb) = hessian(256, 300);
    let gq = Arc::new(Gptq::new(&hb, 256, None).unwrap());
    let b = Bundle::new(1);
    assert!(b
        .encoder(Family::Orthogonal, 10, 256)
        .unwrap()
        .with_gptq(gq.clone())
        .is_err());
    assert!(b
        .encoder(Family::Hadamard, 10, 384)
        .unwrap()
        .with_gptq(gq)
        .is_err());
}
