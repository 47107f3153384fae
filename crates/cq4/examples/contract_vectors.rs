//! Print the test vectors quoted in `docs/FORMAT.md` §CQ4 packed panels.
//!
//! `cargo run -p cq4 --release --example contract_vectors`

use cq4::rng::fill_gaussian;
use cq4::{Bundle, Family, SplitMix64, DEFAULT_SEED};

fn fnv(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

fn hex16(v: &[u16]) -> String {
    v.iter()
        .map(|b| format!("{b:04x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() -> Result<(), cq4::Cq4Error> {
    println!("sqrt(128.0) bits = {:016x}", 128f64.sqrt().to_bits());
    let mut g = SplitMix64::new(DEFAULT_SEED);
    println!(
        "SplitMix64({DEFAULT_SEED:#x}) first 3: {:016x} {:016x} {:016x}",
        g.next_u64(),
        g.next_u64(),
        g.next_u64()
    );
    let mut v = [0f64; 4];
    fill_gaussian(&mut SplitMix64::new(DEFAULT_SEED), &mut v);
    println!("gaussian(DEFAULT_SEED)[0..4] = {v:?}");
    let bundle = Bundle::new(DEFAULT_SEED);
    for d in [128usize, 256, 640, 1024, 2048] {
        let cb = bundle.codebook(d)?;
        println!(
            "codebook d={d}: iterations {}, fp16 {}",
            cb.iterations,
            hex16(&cb.bits)
        );
        println!("  raw positive half {:?}", &cb.raw[8..]);
    }
    let h = bundle.hadamard();
    println!("hadamard left[0..16]  {:?}", &h.left[..16]);
    println!("hadamard right[0..16] {:?}", &h.right[..16]);
    println!("hadamard perm[0..16]  {:?}", &h.perm[..16]);
    let enc = bundle.encoder(Family::Hadamard, 64, 128)?;
    println!("hadamard stored codebook {}", hex16(&enc.stored_codebook()));
    println!(
        "hadamard cb_factor {:e} ({:016x})",
        enc.cb_factor(),
        enc.cb_factor().to_bits()
    );
    let rot = bundle.orthogonal(128)?;
    println!("orthogonal Kp=128 R[0][0..8] {}", hex16(&rot.r_bits()[..8]));
    println!(
        "orthogonal Kp=128 R[127][120..128] {}",
        hex16(&rot.r_bits()[127 * 128 + 120..])
    );
    println!(
        "orthogonal Kp=128 fnv(R bytes) {:016x}",
        fnv(&rot
            .r_bits()
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect::<Vec<_>>())
    );
    // The golden tensors of tests/quantize.rs: W = f32(0.02 * gaussian(seed 42)), 100 x 256.
    for family in [Family::Hadamard, Family::Orthogonal] {
        let (n, k) = (100usize, 256usize);
        let enc = bundle.encoder(family, n, k)?;
        let mut w = vec![0f64; n * k];
        fill_gaussian(&mut SplitMix64::new(42), &mut w);
        let w: Vec<f32> = w.iter().map(|&x| (x * 0.02) as f32).collect();
        let (panels, norms) = enc.encode_tensor(&w)?;
        let blob = enc.scales_blob(&norms)?;
        println!(
            "{family:?} 100x256 seed-42 tensor: fnv(panels) {:016x} fnv(scales) {:016x}, scales_bytes {}, first panel bytes {:02x?}, norms[0..4] {}",
            fnv(&panels),
            fnv(&blob),
            blob.len(),
            &panels[..8],
            hex16(&norms[..4])
        );
    }
    Ok(())
}
