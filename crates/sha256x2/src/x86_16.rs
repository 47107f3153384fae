//! Sixteen messages' blocks compressed at once with AVX-512: one message
//! per 32-bit lane of a 512-bit register, FIPS 180-4's rounds written out
//! with vector rotates (`vprord`) and three-input logic (`vpternlogd`).
//! Each block of the sixteen messages is loaded as sixteen 64-byte rows
//! and transposed so that register `t` holds word `t` of every message.
//!
//! On the Ice Lake Xeon of docs/BENCHMARKS.md (session 25) the rounds
//! alone ran at ~3.4 GB/s of message bytes per core against 1.3 GB/s for
//! one or two messages with the SHA extensions, which that core runs at a
//! fixed rate whatever the number of messages.
#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::x86::K;
use super::BLOCK;

/// Messages per call.
pub(super) const LANES: usize = 16;

/// Blocks prefetched ahead of the one compressed, in each lane (512 bytes;
/// 8 KiB over the sixteen lanes). Sixteen streams from DRAM left the
/// hardware prefetchers behind: `cargo bench -p sha256x2` on the Zen 5
/// guest, sixteen 16 MiB messages 3.85 - 3.87 GB/s without, 4.10 - 4.30
/// with 4, 8 or 16 blocks ahead, against 4.27 in cache (docs/BENCHMARKS.md,
/// session 27).
const AHEAD: usize = 8;

/// Whether the CPU has what [`compress16`] runs on (AVX-512 F and BW) and
/// the `CONVERT_FORCE_ISA` cap (shared with the `kernels` and `cq4`
/// crates, read as they read it) allows the `avx512` tier: unset, empty or
/// `avx512`. Any other value (`avx2`, an AVX2 machine stood in for; lower
/// tiers; values they do not know) hashes as without AVX-512. Probed once.
pub(super) fn supported() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(|| {
        let allowed = std::env::var("CONVERT_FORCE_ISA")
            .map_or(true, |v| matches!(v.as_str(), "" | "avx512"));
        allowed
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
    })
}

/// `data[l]`'s blocks into `states[l]` for every lane (the same number of
/// blocks each). Safe entry: checks the CPU and the lengths, then runs the
/// kernel.
pub(super) fn compress16(states: &mut [[u32; 8]; LANES], data: [&[[u8; BLOCK]]; LANES]) {
    let blocks = data[0].len();
    assert!(supported() && data.iter().all(|d| d.len() == blocks));
    // SAFETY: AVX-512 F and BW were detected on this CPU just above, and
    // every lane has `blocks` blocks.
    unsafe { compress16_avx512(states, data, blocks) }
}

/// Words `t` of the sixteen rows `r` (row `l`: lane `l`'s 16 words) in
/// `w[t]`: a 16 x 16 transpose of 32-bit values.
#[target_feature(enable = "avx512f")]
#[inline]
fn transpose(r: [__m512i; 16]) -> [__m512i; 16] {
    // Pairs of rows interleaved by 32 bits, then by 64 bits: in 128-bit
    // lane q, u[4i + j] holds word 4q + j of rows 4i .. 4i + 4.
    let mut t = [_mm512_setzero_si512(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    let mut u = [_mm512_setzero_si512(); 16];
    for i in 0..4 {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    // Word 4q + j of every row: 128-bit lane q of u[j], u[4 + j],
    // u[8 + j], u[12 + j].
    let mut w = [_mm512_setzero_si512(); 16];
    for j in 0..4 {
        let v0 = _mm512_shuffle_i32x4::<0x88>(u[j], u[4 + j]);
        let v1 = _mm512_shuffle_i32x4::<0xDD>(u[j], u[4 + j]);
        let v2 = _mm512_shuffle_i32x4::<0x88>(u[8 + j], u[12 + j]);
        let v3 = _mm512_shuffle_i32x4::<0xDD>(u[8 + j], u[12 + j]);
        w[j] = _mm512_shuffle_i32x4::<0x88>(v0, v2);
        w[8 + j] = _mm512_shuffle_i32x4::<0xDD>(v0, v2);
        w[4 + j] = _mm512_shuffle_i32x4::<0x88>(v1, v3);
        w[12 + j] = _mm512_shuffle_i32x4::<0xDD>(v1, v3);
    }
    w
}

/// The kernel of [`compress16`]. The state is held transposed (register
/// `i` = word `i` of every lane) for the whole call.
#[target_feature(enable = "avx512f,avx512bw")]
fn compress16_avx512(states: &mut [[u32; 8]; LANES], data: [&[[u8; BLOCK]]; LANES], blocks: usize) {
    // Big-endian words: a byte swap within each 32-bit lane.
    let bswap = _mm512_set4_epi32(0x0c0d_0e0f, 0x0809_0a0b, 0x0405_0607, 0x0001_0203);
    let mut rows = [_mm512_setzero_si512(); 16];
    for (r, s) in rows.iter_mut().zip(states.iter()) {
        let mut x = [0u32; 16];
        x[..8].copy_from_slice(s);
        // SAFETY: one 64-byte unaligned load of the 16-value array.
        *r = unsafe { _mm512_loadu_si512(x.as_ptr().cast()) };
    }
    // Words 0 .. 8 of the transposed rows: the state, lane by lane.
    let st = transpose(rows);
    let mut s: [__m512i; 8] = std::array::from_fn(|i| st[i]);
    for b in 0..blocks {
        for ahead in data.iter().filter_map(|d| d.get(b + AHEAD)) {
            _mm_prefetch::<_MM_HINT_T0>(ahead.as_ptr().cast());
        }
        for (r, d) in rows.iter_mut().zip(data.iter()) {
            // SAFETY: block b of lane l is 64 bytes (b < blocks, every
            // lane has `blocks` blocks): one unaligned load.
            let v = unsafe { _mm512_loadu_si512(d[b].as_ptr().cast()) };
            *r = _mm512_shuffle_epi8(v, bswap);
        }
        let mut w = transpose(rows);
        let [mut a, mut bb, mut c, mut d, mut e, mut f, mut g, mut h] = s;
        macro_rules! round {
            ($t:expr, $wt:expr) => {{
                let s1 = _mm512_ternarylogic_epi32::<0x96>(
                    _mm512_ror_epi32::<6>(e),
                    _mm512_ror_epi32::<11>(e),
                    _mm512_ror_epi32::<25>(e),
                );
                // Ch(e, f, g) = (e & f) ^ (!e & g): e ? f : g.
                let ch = _mm512_ternarylogic_epi32::<0xCA>(e, f, g);
                let t1 = _mm512_add_epi32(
                    _mm512_add_epi32(h, s1),
                    _mm512_add_epi32(ch, _mm512_add_epi32($wt, _mm512_set1_epi32(K[$t] as i32))),
                );
                let s0 = _mm512_ternarylogic_epi32::<0x96>(
                    _mm512_ror_epi32::<2>(a),
                    _mm512_ror_epi32::<13>(a),
                    _mm512_ror_epi32::<22>(a),
                );
                // Maj(a, b, c): the majority of the three bits.
                let maj = _mm512_ternarylogic_epi32::<0xE8>(a, bb, c);
                h = g;
                g = f;
                f = e;
                e = _mm512_add_epi32(d, t1);
                d = c;
                c = bb;
                bb = a;
                a = _mm512_add_epi32(t1, _mm512_add_epi32(s0, maj));
            }};
        }
        for t in 0..16 {
            round!(t, w[t]);
        }
        for t in 16..64 {
            // W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16], in a
            // ring of 16 (w[t % 16] holds W[t-16] until replaced).
            let w15 = w[(t + 1) % 16];
            let w2 = w[(t + 14) % 16];
            let s0 = _mm512_ternarylogic_epi32::<0x96>(
                _mm512_ror_epi32::<7>(w15),
                _mm512_ror_epi32::<18>(w15),
                _mm512_srli_epi32::<3>(w15),
            );
            let s1 = _mm512_ternarylogic_epi32::<0x96>(
                _mm512_ror_epi32::<17>(w2),
                _mm512_ror_epi32::<19>(w2),
                _mm512_srli_epi32::<10>(w2),
            );
            let n = _mm512_add_epi32(
                _mm512_add_epi32(w[t % 16], s0),
                _mm512_add_epi32(w[(t + 9) % 16], s1),
            );
            w[t % 16] = n;
            round!(t, n);
        }
        for (si, v) in s.iter_mut().zip([a, bb, c, d, e, f, g, h]) {
            *si = _mm512_add_epi32(*si, v);
        }
    }
    // Back to lane-major: transpose the 8 state words (rows 8 .. 16 unused).
    let mut t = [_mm512_setzero_si512(); 16];
    t[..8].copy_from_slice(&s);
    let back = transpose(t);
    for (st, v) in states.iter_mut().zip(back) {
        let mut x = [0u32; 16];
        // SAFETY: one 64-byte unaligned store into the 16-value array.
        unsafe { _mm512_storeu_si512(x.as_mut_ptr().cast(), v) };
        st.copy_from_slice(&x[..8]);
    }
}
