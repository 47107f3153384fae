//! Quantization throughput (weights/second) of both CQ4 families.
//!
//! `cargo bench -p cq4 --bench throughput [-- quick]`. Input rows are a
//! reused Gaussian chunk (generation is not timed); the encoder is fed whole
//! super-block chunks exactly as the converter does.

use std::time::Instant;

use cq4::rng::fill_gaussian;
use cq4::{Bundle, Family, SplitMix64, DEFAULT_SEED};

const CHUNK_ROWS: usize = 4096;

/// CPU seconds (user + system) of this process so far (Linux; 0 elsewhere).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let Some(rest) = stat.rsplit(')').next() else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn run(bundle: &Bundle, family: Family, n: usize, k: usize) {
    let t0 = Instant::now();
    let enc = bundle.encoder(family, n, k).expect("encoder");
    let setup = t0.elapsed().as_secs_f64();
    let g = enc.geometry();
    let ng = g.num_groups();
    let rows = CHUNK_ROWS.min(n);
    let mut chunk = vec![0f64; rows * k];
    fill_gaussian(&mut SplitMix64::new(1), &mut chunk);
    let chunk: Vec<f32> = chunk.iter().map(|&x| (x * 0.02) as f32).collect();
    let mut panels = vec![0u8; rows.div_ceil(64) * g.superblock_bytes()];
    let mut norms = vec![0u16; rows * ng];
    let t1 = Instant::now();
    let c1 = cpu_seconds();
    let mut r0 = 0;
    while r0 < n {
        let r1 = (r0 + rows).min(n);
        let cnt = r1 - r0;
        enc.encode_superblocks(
            r0,
            &chunk[..cnt * k],
            &mut panels[..cnt.div_ceil(64) * g.superblock_bytes()],
            &mut norms[..cnt * ng],
        )
        .expect("encode");
        r0 = r1;
    }
    let secs = t1.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - c1;
    let weights = (n * k) as f64;
    let fb = enc.exact_fallbacks();
    println!(
        "{family:?} {n} x {k} (Kp {}): setup {setup:.3} s, encode {secs:.3} s wall / {cpu:.2} s CPU, {:.1} M weights/s wall, {:.1} M weights/CPU-s{}",
        g.k(),
        weights / secs / 1e6,
        weights / cpu / 1e6,
        if family == Family::Orthogonal {
            format!(
                ", {:.2} GMAC/s, exact fallbacks {:.4}% (bound {:.2e})",
                weights * g.k() as f64 / secs / 1e9,
                100.0 * fb as f64 / (n as f64 * g.k() as f64),
                enc.filter_bound()
            )
        } else {
            String::new()
        }
    );
}

fn main() {
    // Arguments: `quick` skips the two big cases; any other argument selects
    // the cases whose name contains it (e.g. `orthogonal-640`).
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let quick = args.iter().any(|a| a == "quick");
    let filters: Vec<&String> = args.iter().filter(|a| *a != "quick").collect();
    println!("rayon threads: {}", rayon::current_num_threads());
    let bundle = Bundle::new(DEFAULT_SEED);
    let t = Instant::now();
    bundle.codebook(128).expect("codebook");
    println!("codebook d=128: {:.3} s", t.elapsed().as_secs_f64());
    // The orthogonal rotation's QR (part of an orthogonal encoder's
    // setup), best of 3: the case `rotation-qr`.
    let wanted =
        |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    let qr_widths: &[usize] = if wanted("rotation-qr") {
        &[640, 2048]
    } else {
        &[]
    };
    for &kp in qr_widths {
        let best = (0..3)
            .map(|_| {
                let t = Instant::now();
                cq4::orthogonal::orthogonal_q(DEFAULT_SEED, kp).expect("rotation");
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min);
        println!("rotation QR Kp={kp}: {best:.4} s (best of 3)");
    }
    let cases: &[(Family, usize, usize, bool)] = &[
        (Family::Hadamard, 2048, 2048, false),
        (Family::Hadamard, 8960, 1536, false),
        (Family::Orthogonal, 8192, 640, false),
        (Family::Orthogonal, 4096, 2048, false),
        (Family::Hadamard, 32768, 4096, true),
        (Family::Orthogonal, 262144, 640, true),
    ];
    for &(family, n, k, big) in cases {
        let name = format!(
            "{}-{k}-{n}",
            if family == Family::Hadamard {
                "hadamard"
            } else {
                "orthogonal"
            }
        );
        if (big && quick) || !wanted(&name) {
            continue;
        }
        run(&bundle, family, n, k);
    }
}
