//! SHA-256 (FIPS 180-4) whose extra is hashing **several messages at
//! once**: [`update_pair`] compresses the blocks the two messages have in
//! common side by side. On x86-64 with the SHA extensions (SHA-NI) one
//! message's compression is a chain of dependent `sha256rnds2`, so a core
//! hashes two independent messages in about the time of 1.2 of them; one
//! message alone runs this crate's own SHA-NI kernel too, with the message
//! prefetched ahead (`cargo bench -p sha256x2` on a Xeon with AVX-512,
//! 256 MiB messages: the sha2 crate 1.17 GB/s, one message 1.96, two
//! messages together 2.36 GB/s of message bytes; docs/BENCHMARKS.md,
//! session 15). Without SHA-NI the compression is the `sha2` crate's (its
//! ARMv8 or portable code).
//!
//! With AVX-512, [`update_many`] hashes **sixteen messages at once**, one
//! per 32-bit lane (`x86_16.rs`): on an Ice Lake Xeon whose SHA-NI runs
//! one or two messages at the same 1.3 GB/s, sixteen messages of 16 MiB
//! went at 2.88 GB/s of message bytes (`cargo bench -p sha256x2`;
//! docs/BENCHMARKS.md, session 25).
//!
//! The digests are SHA-256's whatever the split into updates, pairs and
//! sixteens (tests: against the `sha2` crate on every length up to 300
//! bytes, long messages, random splits, pairs of unequal lengths, 1 - 16
//! messages fed in equal and unequal pieces, and the 16-lane kernel
//! against the `sha2` crate's compression from random states).

#![deny(unsafe_code)]

#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_16;

use sha2::digest::generic_array::GenericArray;

/// Bytes per block.
const BLOCK: usize = 64;

/// The initial hash value (FIPS 180-4 §5.3.3).
const H0: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// A SHA-256 computation in progress.
#[derive(Clone)]
pub struct Sha256 {
    state: [u32; 8],
    /// A partial block (`len` bytes).
    buf: [u8; BLOCK],
    len: usize,
    /// Message bytes so far.
    total: u64,
}

impl Default for Sha256 {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Sha256 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sha256")
            .field("bytes", &self.total)
            .finish_non_exhaustive()
    }
}

impl Sha256 {
    /// An empty message.
    pub fn new() -> Self {
        Sha256 {
            state: H0,
            buf: [0; BLOCK],
            len: 0,
            total: 0,
        }
    }

    /// The SHA-256 of `data`.
    pub fn digest(data: &[u8]) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(data);
        h.finalize()
    }

    /// Append `data` to the message.
    pub fn update(&mut self, data: &[u8]) {
        let rest = self.fill(data);
        let (blocks, tail) = rest.as_chunks::<BLOCK>();
        compress(&mut self.state, blocks);
        self.total += (blocks.len() * BLOCK) as u64;
        self.fill(tail);
    }

    /// Complete the buffered block from `data` (compressing it when full)
    /// and return what of `data` is left; with an empty buffer, nothing is
    /// taken unless `data` is shorter than a block.
    fn fill<'a>(&mut self, data: &'a [u8]) -> &'a [u8] {
        if self.len == 0 && data.len() >= BLOCK {
            return data;
        }
        let n = (BLOCK - self.len).min(data.len());
        self.buf[self.len..self.len + n].copy_from_slice(&data[..n]);
        self.len += n;
        self.total += n as u64;
        if self.len == BLOCK {
            compress(&mut self.state, &[self.buf]);
            self.len = 0;
        }
        &data[n..]
    }

    /// The digest: the message padded with `0x80`, zeros and its length in
    /// bits (big-endian u64), the final state's words big-endian.
    pub fn finalize(mut self) -> [u8; 32] {
        let bits = self.total.wrapping_mul(8);
        let mut pad = [0u8; 2 * BLOCK];
        pad[0] = 0x80;
        // 1 byte of 0x80, then zeros up to 56 mod 64, then 8 length bytes.
        let zeros = (BLOCK + 55 - self.len) % BLOCK;
        let end = 1 + zeros + 8;
        pad[end - 8..end].copy_from_slice(&bits.to_be_bytes());
        self.update(&pad[..end]);
        debug_assert_eq!(self.len, 0);
        let mut out = [0u8; 32];
        for (o, w) in out.chunks_exact_mut(4).zip(self.state) {
            o.copy_from_slice(&w.to_be_bytes());
        }
        out
    }
}

/// `io::copy` into a hasher appends what is read (never fails).
impl std::io::Write for Sha256 {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Append `da` to `a`'s message and `db` to `b`'s: the same as `a.update(da);
/// b.update(db)`, with the whole blocks both have compressed together where
/// the CPU can ([`pair_supported`]). Fastest when the two are about as long.
pub fn update_pair(a: &mut Sha256, da: &[u8], b: &mut Sha256, db: &[u8]) {
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let (mut da, mut db) = (a.fill(da), b.fill(db));
    #[cfg(target_arch = "x86_64")]
    if a.len == 0 && b.len == 0 && pair_supported() {
        let n = (da.len() / BLOCK).min(db.len() / BLOCK);
        if n > 0 {
            let (ba, _) = da[..n * BLOCK].as_chunks::<BLOCK>();
            let (bb, _) = db[..n * BLOCK].as_chunks::<BLOCK>();
            x86::compress_pair(&mut a.state, ba, &mut b.state, bb);
            a.total += (n * BLOCK) as u64;
            b.total += (n * BLOCK) as u64;
            da = &da[n * BLOCK..];
            db = &db[n * BLOCK..];
        }
    }
    a.update(da);
    b.update(db);
}

/// Messages [`update_many`] takes at once.
pub const MANY: usize = 16;

/// Fewest messages with whole blocks to share for [`update_many`] to
/// compress them in one 16-lane pass: each lane runs at about a sixteenth
/// of the pass's rate (~0.2 GB/s on the core measured), one message alone
/// at 1.3 GB/s with SHA-NI, so below this the lanes would be mostly idle
/// and the messages go through [`update_pair`] instead.
#[cfg(target_arch = "x86_64")]
const MANY_MIN: usize = 8;

/// Append `data[i]` to `hs[i]`'s message for every `i` (at most [`MANY`];
/// `hs` and `data` as long): the same as updating each in turn. Where the
/// CPU can ([`many_supported`]) and there are at least 8 messages, the
/// whole blocks all of them have are compressed in one 16-lane pass; the
/// rest goes two messages at a time ([`update_pair`]). Fastest when every
/// message gets whole blocks and the same number of them.
pub fn update_many(hs: &mut [&mut Sha256], data: &[&[u8]]) {
    assert!(hs.len() == data.len() && hs.len() <= MANY);
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut rest: Vec<&[u8]> = hs.iter_mut().zip(data).map(|(h, d)| h.fill(d)).collect();
    #[cfg(target_arch = "x86_64")]
    if hs.len() >= MANY_MIN && hs.iter().all(|h| h.len == 0) && many_supported() {
        let n = rest.iter().map(|d| d.len() / BLOCK).min().unwrap_or(0);
        if n > 0 {
            let mut states = [[0u32; 8]; MANY];
            for (s, h) in states.iter_mut().zip(hs.iter()) {
                *s = h.state;
            }
            // Lanes past `hs.len()` repeat the first message; their states
            // are dropped.
            let lanes: [&[[u8; BLOCK]]; MANY] =
                std::array::from_fn(|l| rest[l.min(hs.len() - 1)][..n * BLOCK].as_chunks().0);
            x86_16::compress16(&mut states, lanes);
            for ((h, s), d) in hs.iter_mut().zip(states).zip(rest.iter_mut()) {
                h.state = s;
                h.total += (n * BLOCK) as u64;
                *d = &d[n * BLOCK..];
            }
        }
    }
    // The rest two at a time.
    let mut i = 0;
    while i < hs.len() {
        if i + 1 < hs.len() {
            let (a, b) = hs[i..].split_at_mut(1);
            update_pair(a[0], rest[i], b[0], rest[i + 1]);
        } else {
            hs[i].update(rest[i]);
        }
        i += 2;
    }
}

/// Whether [`update_many`] compresses sixteen messages at once on this CPU
/// (x86-64 with AVX-512 F and BW, unless `CONVERT_FORCE_ISA` caps the tiers
/// at `avx2` or lower); otherwise it updates them two at a time.
pub fn many_supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        x86_16::supported()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether [`update_pair`] compresses two messages together on this CPU
/// (x86-64 with SHA-NI, SSSE3 and SSE4.1); otherwise it updates them in turn.
pub fn pair_supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        x86::supported()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// One message's blocks: this crate's SHA-NI kernel where the CPU has it
/// ([`pair_supported`]), else the `sha2` crate's compression (its ARMv8 or
/// portable code, chosen at run time).
fn compress(state: &mut [u32; 8], blocks: &[[u8; BLOCK]]) {
    #[cfg(target_arch = "x86_64")]
    if pair_supported() {
        x86::compress_one(state, blocks);
        return;
    }
    for b in blocks {
        sha2::compress256(state, std::slice::from_ref(GenericArray::from_slice(b)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::Digest;

    fn want(data: &[u8]) -> [u8; 32] {
        sha2::Sha256::digest(data).into()
    }

    fn bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn known_answers() {
        let hex = |d: [u8; 32]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(
            hex(Sha256::digest(b"")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            hex(Sha256::digest(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex(Sha256::digest(
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
            )),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
    }

    #[test]
    fn every_length_and_split_is_sha256() {
        let data = bytes(300, 1);
        for n in 0..=300 {
            let d = &data[..n];
            assert_eq!(Sha256::digest(d), want(d), "length {n}");
            for cut in [1usize, 55, 56, 63, 64, 65, 127, 128] {
                let cut = cut.min(n);
                let mut h = Sha256::new();
                h.update(&d[..cut]);
                h.update(&d[cut..]);
                assert_eq!(h.finalize(), want(d), "length {n} cut {cut}");
            }
        }
    }

    /// Messages of many blocks (past the kernel's prefetch distance), in
    /// one update and in pieces, are SHA-256 of their bytes.
    #[test]
    fn long_messages_are_sha256() {
        let data = bytes(200_000, 4);
        for n in [64 * 16, 64 * 17 + 1, 64 * 33, 99_999, 200_000] {
            let d = &data[..n];
            assert_eq!(Sha256::digest(d), want(d), "length {n}");
            let mut h = Sha256::new();
            for piece in d.chunks(4097) {
                h.update(piece);
            }
            assert_eq!(h.finalize(), want(d), "length {n} in pieces");
        }
    }

    /// Pairs of messages of unequal lengths, fed in pieces of unequal and
    /// changing sizes (partial blocks on either side, empty pieces), are
    /// each SHA-256 of their bytes; so are long ones (many shared blocks).
    #[test]
    fn pairs_are_each_sha256() {
        let a = bytes(70_000, 2);
        let b = bytes(70_000, 3);
        let steps: [(usize, usize); 8] = [
            (0, 0),
            (1, 64),
            (64, 1),
            (100, 300),
            (4096, 4096),
            (640, 65),
            (63, 129),
            (8192, 100),
        ];
        for (la, lb) in [
            (0usize, 0usize),
            (5, 70_000),
            (70_000, 64),
            (69_999, 70_000),
            (12_345, 54_321),
        ] {
            for rot in 0..steps.len() {
                let (mut ha, mut hb) = (Sha256::new(), Sha256::new());
                let (mut ia, mut ib) = (0, 0);
                let mut k = rot;
                while ia < la || ib < lb {
                    let (sa, sb) = steps[k % steps.len()];
                    k += 1;
                    let (ea, eb) = ((ia + sa).min(la), (ib + sb).min(lb));
                    update_pair(&mut ha, &a[ia..ea], &mut hb, &b[ib..eb]);
                    (ia, ib) = (ea, eb);
                }
                assert_eq!(ha.finalize(), want(&a[..la]), "a {la} / {lb}, rot {rot}");
                assert_eq!(hb.finalize(), want(&b[..lb]), "b {la} / {lb}, rot {rot}");
            }
        }
        // One call with many shared blocks.
        let (mut ha, mut hb) = (Sha256::new(), Sha256::new());
        update_pair(&mut ha, &a, &mut hb, &b[..69_000]);
        assert_eq!(ha.finalize(), want(&a));
        assert_eq!(hb.finalize(), want(&b[..69_000]));
        eprintln!("two messages at once on this CPU: {}", pair_supported());
    }

    /// Up to sixteen messages at once, of equal and unequal lengths, fed
    /// in equal and unequal pieces (partial blocks first, empty pieces,
    /// lanes past the count), are each SHA-256 of their bytes.
    #[test]
    fn many_are_each_sha256() {
        let msgs: Vec<Vec<u8>> = (0..MANY)
            .map(|l| bytes(9_000 + 131 * l, 10 + l as u64))
            .collect();
        for count in [1usize, 2, 7, 8, 9, 15, 16] {
            for (step, skew) in [(64usize, 0usize), (4096, 0), (640, 1), (100, 0), (8192, 65)] {
                let mut hs: Vec<Sha256> = vec![Sha256::new(); count];
                let mut at = vec![0usize; count];
                loop {
                    let pieces: Vec<&[u8]> = (0..count)
                        .map(|l| {
                            let len = msgs[l].len();
                            // Lane l's piece: `step`, plus `skew` * l bytes.
                            let e = (at[l] + step + skew * l).min(len);
                            &msgs[l][at[l]..e]
                        })
                        .collect();
                    if pieces.iter().all(|p| p.is_empty()) {
                        break;
                    }
                    for (a, p) in at.iter_mut().zip(&pieces) {
                        *a += p.len();
                    }
                    let mut refs: Vec<&mut Sha256> = hs.iter_mut().collect();
                    update_many(&mut refs, &pieces);
                }
                for (l, h) in hs.into_iter().enumerate() {
                    assert_eq!(
                        h.finalize(),
                        want(&msgs[l]),
                        "{count} lanes, step {step}/{skew}, lane {l}"
                    );
                }
            }
        }
        eprintln!("sixteen messages at once on this CPU: {}", many_supported());
    }

    /// The 16-lane kernel against the `sha2` crate's compression from
    /// random states (not only the initial one), block by block.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn sixteen_lane_kernel_is_the_compression() {
        if !many_supported() {
            eprintln!("skipped: no AVX-512 F/BW here (or CONVERT_FORCE_ISA caps it)");
            return;
        }
        let data = bytes(MANY * 5 * BLOCK, 7);
        let seeds = bytes(MANY * 32, 8);
        let mut states = [[0u32; 8]; MANY];
        for (l, s) in states.iter_mut().enumerate() {
            for (i, w) in s.iter_mut().enumerate() {
                let b = &seeds[l * 32 + 4 * i..l * 32 + 4 * i + 4];
                *w = u32::from_le_bytes(b.try_into().unwrap());
            }
        }
        let mut want_states = states;
        let lanes: [&[[u8; BLOCK]]; MANY] =
            std::array::from_fn(|l| data[l * 5 * BLOCK..(l + 1) * 5 * BLOCK].as_chunks().0);
        x86_16::compress16(&mut states, lanes);
        for (l, s) in want_states.iter_mut().enumerate() {
            for b in lanes[l] {
                sha2::compress256(s, std::slice::from_ref(GenericArray::from_slice(b)));
            }
            assert_eq!(states[l], *s, "lane {l}");
        }
    }
}
