//! One message vs two at once, side by side in one run: GB/s of message
//! bytes per thread for the `sha2` crate's `Sha256`, this crate's
//! `Sha256::update`, `update_pair` and `update_many` (best of 5 passes over
//! 256 MiB each).
//! `cargo bench -p sha256x2`.

use std::time::Instant;

use sha2::Digest;

fn best(mut f: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let n = 256usize << 20;
    let a: Vec<u8> = (0..n).map(|i| (i * 31 % 251) as u8).collect();
    let b: Vec<u8> = (0..n).map(|i| (i * 37 % 253) as u8).collect();
    let gb = |bytes: usize, s: f64| bytes as f64 / s / 1e9;
    let t_sha2 = best(|| {
        std::hint::black_box(sha2::Sha256::digest(&a));
    });
    let t_one = best(|| {
        std::hint::black_box(sha256x2::Sha256::digest(&a));
    });
    let t_pair = best(|| {
        let (mut x, mut y) = (sha256x2::Sha256::new(), sha256x2::Sha256::new());
        for (ca, cb) in a.chunks(8 << 20).zip(b.chunks(8 << 20)) {
            sha256x2::update_pair(&mut x, ca, &mut y, cb);
        }
        std::hint::black_box((x.finalize(), y.finalize()));
    });
    // The same in cache: 64 KiB messages hashed 4096 times (what
    // `openssl speed -evp sha256` measures, for comparison).
    let (ha, hb) = (&a[..64 << 10], &b[..64 << 10]);
    let reps = 4096;
    let t_one_hot = best(|| {
        let mut x = sha256x2::Sha256::new();
        for _ in 0..reps {
            x.update(ha);
        }
        std::hint::black_box(x.finalize());
    });
    let t_pair_hot = best(|| {
        let (mut x, mut y) = (sha256x2::Sha256::new(), sha256x2::Sha256::new());
        for _ in 0..reps {
            sha256x2::update_pair(&mut x, ha, &mut y, hb);
        }
        std::hint::black_box((x.finalize(), y.finalize()));
    });
    println!(
        "in cache (64 KiB): one message {:.2} GB/s, two at once {:.2} GB/s",
        gb(reps * ha.len(), t_one_hot),
        gb(2 * reps * ha.len(), t_pair_hot)
    );
    println!(
        "two messages at once on this CPU: {}",
        sha256x2::pair_supported()
    );
    // Sixteen messages of 16 MiB (the 256 MiB of `a`), 1 MiB per lane
    // and call: what the converter's source hashing feeds `update_many`.
    let lane = n / sha256x2::MANY;
    let t_many = best(|| {
        let mut hs: Vec<sha256x2::Sha256> = vec![sha256x2::Sha256::new(); sha256x2::MANY];
        for at in (0..lane).step_by(1 << 20) {
            let pieces: Vec<&[u8]> = (0..sha256x2::MANY)
                .map(|l| &a[l * lane + at..l * lane + (at + (1 << 20)).min(lane)])
                .collect();
            let mut refs: Vec<&mut sha256x2::Sha256> = hs.iter_mut().collect();
            sha256x2::update_many(&mut refs, &pieces);
        }
        std::hint::black_box(hs.into_iter().map(|h| h.finalize()).collect::<Vec<_>>());
    });
    // The same sixteen lanes in cache: 64 KiB per lane (1 MiB in all,
    // L2-resident), hashed over and over.
    let hot_lane = 64usize << 10;
    let hot_reps = 256;
    let t_many_hot = best(|| {
        let mut hs: Vec<sha256x2::Sha256> = vec![sha256x2::Sha256::new(); sha256x2::MANY];
        let pieces: Vec<&[u8]> = (0..sha256x2::MANY)
            .map(|l| &a[l * hot_lane..(l + 1) * hot_lane])
            .collect();
        for _ in 0..hot_reps {
            let mut refs: Vec<&mut sha256x2::Sha256> = hs.iter_mut().collect();
            sha256x2::update_many(&mut refs, &pieces);
        }
        std::hint::black_box(hs.into_iter().map(|h| h.finalize()).collect::<Vec<_>>());
    });
    println!(
        "sixteen messages at once on this CPU: {}; in cache (16 x 64 KiB): {:.2} GB/s",
        sha256x2::many_supported(),
        gb(hot_reps * sha256x2::MANY * hot_lane, t_many_hot)
    );
    println!("sha2::Sha256          {:.2} GB/s", gb(n, t_sha2));
    println!("sha256x2 one message  {:.2} GB/s", gb(n, t_one));
    println!(
        "sha256x2 two at once  {:.2} GB/s ({:.2}x sha2)",
        gb(2 * n, t_pair),
        t_sha2 * 2.0 / t_pair
    );
    println!(
        "sha256x2 16 at once   {:.2} GB/s ({:.2}x sha2)",
        gb(n, t_many),
        t_sha2 / t_many
    );
}
