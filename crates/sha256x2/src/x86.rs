//! Two messages' blocks compressed together with the x86 SHA extensions:
//! the standard SHA-NI round structure (state as ABEF / CDGH, four rounds
//! per pair of `sha256rnds2`, the schedule by `sha256msg1` / `sha256msg2`)
//! with every step done for both messages in turn, so that one message's
//! dependent rounds overlap the other's.
#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::BLOCK;

/// The round constants (FIPS 180-4 §4.2.2).
pub(super) const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// Blocks prefetched ahead of the one compressed (1 KiB). A message's
/// rounds are one dependent chain, so the core's out-of-order window reaches
/// only a few blocks ahead and the hardware prefetcher alone left a message
/// from DRAM at 1.17 GB/s against 1.96 in cache; 8 - 64 blocks ahead all
/// gave 1.88 - 1.95 (`cargo bench -p sha256x2`: 256 MiB and 64 KiB messages;
/// docs/BENCHMARKS.md, session 15).
const AHEAD: usize = 16;

/// Whether the CPU has what [`compress_pair`] runs on (probed once by the
/// standard library's detection cache).
pub(super) fn supported() -> bool {
    std::arch::is_x86_feature_detected!("sha")
        && std::arch::is_x86_feature_detected!("ssse3")
        && std::arch::is_x86_feature_detected!("sse4.1")
}

/// `a`'s blocks into `sa` and `b`'s into `sb` (the same number). Safe
/// entry: checks the CPU and the lengths, then runs the kernel.
pub(super) fn compress_pair(
    sa: &mut [u32; 8],
    a: &[[u8; BLOCK]],
    sb: &mut [u32; 8],
    b: &[[u8; BLOCK]],
) {
    assert!(supported() && a.len() == b.len());
    // SAFETY: SHA, SSSE3 and SSE4.1 were detected on this CPU just above.
    unsafe { compress_sha([sa, sb], [a, b]) }
}

/// One message's blocks into `s`. Safe entry: checks the CPU, then runs
/// the kernel.
pub(super) fn compress_one(s: &mut [u32; 8], blocks: &[[u8; BLOCK]]) {
    assert!(supported());
    // SAFETY: SHA, SSSE3 and SSE4.1 were detected on this CPU just above.
    unsafe { compress_sha([s], [blocks]) }
}

/// The blocks of `N` messages (the same number each), every step done for
/// each message in turn so that one message's dependent rounds overlap the
/// others'. The sixteen 4-round steps of a block are written out (not a
/// loop) so that the schedule's four words stay in registers: as a loop
/// indexed `i % 4` they went through the stack, and the store-to-load
/// latency in the schedule's chain made it, not the rounds, the critical
/// path (docs/BENCHMARKS.md, session 15).
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn compress_sha<const N: usize>(st: [&mut [u32; 8]; N], data: [&[[u8; BLOCK]]; N]) {
    // Big-endian words: a byte swap within each 32-bit lane.
    let bswap = _mm_set_epi64x(0x0c0d_0e0f_0809_0a0b, 0x0405_0607_0001_0203);
    let mut s0 = [_mm_setzero_si128(); N];
    let mut s1 = [_mm_setzero_si128(); N];
    for l in 0..N {
        // SAFETY: two 16-byte loads inside the 32-byte state.
        let (dcba, hgfe) = unsafe {
            (
                _mm_loadu_si128(st[l].as_ptr().cast()),
                _mm_loadu_si128(st[l].as_ptr().add(4).cast()),
            )
        };
        let cdab = _mm_shuffle_epi32::<0xB1>(dcba);
        let efgh = _mm_shuffle_epi32::<0x1B>(hgfe);
        s0[l] = _mm_alignr_epi8::<8>(cdab, efgh); // ABEF
        s1[l] = _mm_blend_epi16::<0xF0>(efgh, cdab); // CDGH
    }
    let blocks = data[0].len();
    for b in 0..blocks {
        let (save0, save1) = (s0, s1);
        let mut m = [[_mm_setzero_si128(); 4]; N];
        for ahead in data.iter().filter_map(|d| d.get(b + AHEAD)) {
            _mm_prefetch::<_MM_HINT_T0>(ahead.as_ptr().cast());
        }
        for l in 0..N {
            for (q, mq) in m[l].iter_mut().enumerate() {
                // SAFETY: bytes 16q .. 16q + 16 of the 64-byte block b
                // (q < 4; every message has `blocks` blocks, checked by
                // the callers).
                let w = unsafe { _mm_loadu_si128(data[l][b].as_ptr().add(16 * q).cast()) };
                *mq = _mm_shuffle_epi8(w, bswap);
            }
        }
        // Rounds 4i .. 4i + 4 of every message (i a literal: `m[i % 4]` a
        // fixed register).
        macro_rules! step {
            ($($i:literal)*) => {$(
                // SAFETY: K[4i .. 4i + 4] (i < 16) inside the 64 constants.
                let k = unsafe { _mm_loadu_si128(K.as_ptr().add(4 * $i).cast()) };
                for l in 0..N {
                    let m = &mut m[l];
                    if $i >= 4 {
                        // W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16]
                        // for the words 4i .. 4i + 4 (m[j % 4] holds 4j ..).
                        let x = _mm_sha256msg1_epu32(m[$i % 4], m[($i + 1) % 4]);
                        let x = _mm_add_epi32(
                            x,
                            _mm_alignr_epi8::<4>(m[($i + 3) % 4], m[($i + 2) % 4]),
                        );
                        m[$i % 4] = _mm_sha256msg2_epu32(x, m[($i + 3) % 4]);
                    }
                    let wk = _mm_add_epi32(m[$i % 4], k);
                    s1[l] = _mm_sha256rnds2_epu32(s1[l], s0[l], wk);
                    s0[l] = _mm_sha256rnds2_epu32(s0[l], s1[l], _mm_shuffle_epi32::<0x0E>(wk));
                }
            )*};
        }
        step!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
        for l in 0..N {
            s0[l] = _mm_add_epi32(s0[l], save0[l]);
            s1[l] = _mm_add_epi32(s1[l], save1[l]);
        }
    }
    for (l, s) in st.into_iter().enumerate() {
        let feba = _mm_shuffle_epi32::<0x1B>(s0[l]);
        let dchg = _mm_shuffle_epi32::<0xB1>(s1[l]);
        let dcba = _mm_blend_epi16::<0xF0>(feba, dchg);
        let hgfe = _mm_alignr_epi8::<8>(dchg, feba);
        // SAFETY: two 16-byte stores inside the 32-byte state.
        unsafe {
            _mm_storeu_si128(s.as_mut_ptr().cast(), dcba);
            _mm_storeu_si128(s.as_mut_ptr().add(4).cast(), hgfe);
        }
    }
}
