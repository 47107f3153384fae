//! Every encoder ISA tier this CPU has against the scalar tier, bit for bit
//! on the encoder's outputs (panels, norms, scales blob) of both families,
//! and the orthogonal scalar tier against the exact f64 reference indices.
//! Tiers the CPU lacks are skipped with a message.

use cq4::rng::fill_gaussian;
use cq4::{Bundle, EncodeIsa, Family, PanelEncoder, SplitMix64, ALL_ENCODE_ISAS, DEFAULT_SEED};

fn gaussian(n: usize, k: usize, seed: u64, scale: f64) -> Vec<f32> {
    let mut v = vec![0f64; n * k];
    fill_gaussian(&mut SplitMix64::new(seed), &mut v);
    v.into_iter().map(|x| (x * scale) as f32).collect()
}

fn encode(enc: &PanelEncoder, w: &[f32]) -> (Vec<u8>, Vec<u16>, Vec<u8>) {
    let g = enc.geometry();
    let mut panels = vec![0u8; g.data_bytes()];
    let mut norms = vec![0u16; g.n() * g.num_groups()];
    enc.encode_superblocks(0, w, &mut panels, &mut norms)
        .unwrap();
    let blob = enc.scales_blob(&norms).unwrap();
    (panels, norms, blob)
}

/// The tiers to test; prints why the others are skipped.
fn tiers() -> Vec<EncodeIsa> {
    let mut out = vec![];
    for t in ALL_ENCODE_ISAS {
        if t.supported() {
            out.push(t);
        } else {
            eprintln!(
                "skipping encoder tier {}: not supported by this CPU / build",
                t.name()
            );
        }
    }
    out
}

/// Inputs that put many rotated coordinates near thresholds: a few rows
/// whose values are rotated codebook points (R^T applied to a vector of
/// thresholds), plus Gaussian, sparse and heavy-tailed rows.
fn cases(bundle: &Bundle, n: usize, k: usize) -> Vec<Vec<f32>> {
    let mut out = vec![gaussian(n, k, 7, 0.02)];
    let mut sparse = vec![0f32; n * k];
    for (i, x) in sparse.iter_mut().enumerate() {
        if i % 37 == 0 {
            *x = ((i % 11) as f32 - 5.0) * 0.01;
        }
    }
    out.push(sparse);
    let mut heavy = gaussian(n, k, 9, 0.02);
    for (i, x) in heavy.iter_mut().enumerate() {
        if i % 101 == 3 {
            *x *= 40.0;
        }
    }
    out.push(heavy);
    // Rows w = t @ R^T (R orthogonal, ||t|| = 1): their rotation is ~t, whose
    // coordinates (but the first) are thresholds: the hardest case for the
    // filter (most of them take the exact path).
    let kp = k.next_multiple_of(128);
    if kp == k {
        let rot = bundle.orthogonal(kp).unwrap();
        let mid = bundle.codebook(kp).unwrap().midpoints;
        let r = rot.r_bits();
        let mut rows = vec![0f32; n * k];
        for row in 0..n {
            let mut target: Vec<f64> = (0..kp).map(|j| mid[4 + (row * 7 + j * 3) % 7]).collect();
            let rest: f64 = target[1..].iter().map(|t| t * t).sum();
            target[0] = (1.0 - rest).max(0.0).sqrt();
            for kk in 0..k {
                let mut s = 0.0f64;
                for (j, t) in target.iter().enumerate() {
                    s += t * cq4::fp16::f16_bits_to_f64(r[kk * kp + j]);
                }
                rows[row * k + kk] = (0.05 * s) as f32;
            }
        }
        out.push(rows);
    }
    out
}

#[test]
fn every_tier_gives_the_scalar_orthogonal_bytes() {
    let bundle = Bundle::new(DEFAULT_SEED);
    let tiers = tiers();
    eprintln!(
        "encoder tiers tested: {:?}; default {:?}",
        tiers,
        EncodeIsa::best()
    );
    for (n, k) in [(100usize, 128usize), (70, 640), (64, 200), (130, 256)] {
        for (ci, w) in cases(&bundle, n, k).iter().enumerate() {
            let base = bundle.encoder(Family::Orthogonal, n, k).unwrap();
            let scalar = base.with_isa(EncodeIsa::Scalar).unwrap();
            let want = encode(&scalar, w);
            // The scalar bytes are the exact reference's.
            let g = scalar.geometry();
            for row in [0, n / 2, n - 1] {
                let idx = scalar
                    .orthogonal_reference_indices(&w[row * k..(row + 1) * k])
                    .unwrap();
                for (j, &i) in idx.iter().enumerate() {
                    let (byte, high) = g.nibble_position(row, j).unwrap();
                    let got = if high {
                        want.0[byte] >> 4
                    } else {
                        want.0[byte] & 15
                    };
                    assert_eq!(got, i, "scalar {n}x{k} case {ci} row {row} col {j}");
                }
            }
            for &t in &tiers {
                let enc = tier_encoder(&bundle, Family::Orthogonal, n, k, t);
                assert_same_bytes(&encode(&enc, w), &want, &format!("{t:?} {n}x{k} case {ci}"));
                eprintln!(
                    "{} {n}x{k} case {ci}: identical ({} exact fallbacks)",
                    t.name(),
                    enc.exact_fallbacks()
                );
            }
        }
    }
}

/// An encoder of `family` for `n x k` that runs tier `t`.
fn tier_encoder(bundle: &Bundle, family: Family, n: usize, k: usize, t: EncodeIsa) -> PanelEncoder {
    bundle.encoder(family, n, k).unwrap().with_isa(t).unwrap()
}

/// Panels, norms and scales blob of a tier equal the scalar tier's.
fn assert_same_bytes(
    got: &(Vec<u8>, Vec<u16>, Vec<u8>),
    want: &(Vec<u8>, Vec<u16>, Vec<u8>),
    at: &str,
) {
    assert!(got.0 == want.0, "{at}: panels differ");
    assert_eq!(got.1, want.1, "{at}: norms differ");
    assert!(got.2 == want.2, "{at}: blob differs");
}

#[test]
fn every_tier_gives_the_scalar_hadamard_bytes() {
    let bundle = Bundle::new(DEFAULT_SEED);
    let tiers = tiers();
    // Shapes with 1, 2, 5 and 3 (partial last) groups and partial
    // super-blocks, so batches of 4 items straddle rows and end short.
    for (n, k) in [(70usize, 128usize), (64, 256), (129, 640), (33, 300)] {
        for (ci, w) in cases(&bundle, n, k).iter().enumerate() {
            let scalar = tier_encoder(&bundle, Family::Hadamard, n, k, EncodeIsa::Scalar);
            let want = encode(&scalar, w);
            for &t in &tiers {
                let enc = tier_encoder(&bundle, Family::Hadamard, n, k, t);
                assert_same_bytes(&encode(&enc, w), &want, &format!("{t:?} {n}x{k} case {ci}"));
            }
        }
    }
}

#[test]
fn unsupported_tiers_are_refused() {
    let bundle = Bundle::new(DEFAULT_SEED);
    for t in ALL_ENCODE_ISAS {
        let enc = bundle.encoder(Family::Orthogonal, 64, 128).unwrap();
        assert_eq!(enc.with_isa(t).is_some(), t.supported(), "{t:?}");
    }
    assert!(EncodeIsa::best().supported());
}
