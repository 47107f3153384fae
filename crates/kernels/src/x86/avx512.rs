//! AVX-512 (F, BW, VL) + VNNI kernels: same signatures and bit-identical
//! results as [`crate::scalar`].
//!
//! `vpdpbusd` multiplies an *unsigned* byte by a signed byte. Signed weights
//! are made unsigned exactly by XOR 0x80 (`w + 128`), and the excess
//! `128 * sum(a)` is subtracted with the activation sums computed at
//! quantization time (`ActQ8_0::sum`, `Cq4Act::qsum`); unsigned weights
//! (Q5_0, k-quant nibbles) go in directly. `vpdpbusd` / `vpdpwssd` do not
//! saturate, and every partial sum is far below 2^31 (see
//! [`crate::format`]), so the integer parts equal the scalar ones.

use core::arch::x86_64::*;

use super::{
    bcast16_mask, d_dmin8, fp16_at8, k4_scales, load128, load256, pair16_mask, q4_k_values,
    q5_0_values, q5_k_values, q6_k_values, read_u32, reduce8, Slots,
};
use crate::act::{ActQ8_0, BlockQ8K, Cq4Act};
use crate::blocks::{q6_k, q8_0};
use crate::ggml::RowGroup;
use crate::panel::{CbLut, PanelBlock, KG_PER_GROUP};

/// Q8_0 x Q8_0 group kernel.
///
/// # Safety
/// The CPU must support AVX2, F16C, AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q8_0_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let mut s = Slots::new(g);
    let mut acc = _mm256_setzero_ps();
    let bias = _mm256_set1_epi8(-128);
    for a in &act[..g.nblocks()] {
        // SAFETY: `a.qs` is 32 bytes; by the RowGroup invariant the current
        // 34-byte block of every slot is in bounds.
        let (raw, d) = unsafe {
            let av = load256(a.qs.as_ptr().cast());
            let mut v = [_mm256_setzero_si256(); 8];
            for (r, vr) in v.iter_mut().enumerate() {
                let w = _mm256_xor_si256(load256(s.at(r).add(q8_0::QS)), bias);
                *vr = _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, av);
            }
            (reduce8(&v), fp16_at8(&s, q8_0::D))
        };
        // sum (w + 128) a - 128 sum a.
        let isum = _mm256_sub_epi32(raw, _mm256_set1_epi32(128 * a.sum));
        let c = _mm256_mul_ps(
            _mm256_cvtepi32_ps(isum),
            _mm256_mul_ps(d, _mm256_set1_ps(a.d)),
        );
        acc = _mm256_add_ps(acc, c);
        s.advance();
    }
    // SAFETY: `out` is 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// Q5_0 x Q8_0 group kernel.
///
/// # Safety
/// The CPU must support AVX2, F16C, AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q5_0_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let mut s = Slots::new(g);
    let mut acc = _mm256_setzero_ps();
    for a in &act[..g.nblocks()] {
        // SAFETY: as in q8_0_group (22-byte blocks).
        let (raw, d) = unsafe {
            let av = load256(a.qs.as_ptr().cast());
            let mut v = [_mm256_setzero_si256(); 8];
            for (r, vr) in v.iter_mut().enumerate() {
                *vr = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q5_0_values(s.at(r)), av);
            }
            (reduce8(&v), fp16_at8(&s, 0))
        };
        let isum = _mm256_sub_epi32(raw, _mm256_set1_epi32(16 * a.sum));
        let c = _mm256_mul_ps(
            _mm256_cvtepi32_ps(isum),
            _mm256_mul_ps(d, _mm256_set1_ps(a.d)),
        );
        acc = _mm256_add_ps(acc, c);
        s.advance();
    }
    // SAFETY: `out` is 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// Shared Q4_K / Q5_K body (`Q5`: the blocks are Q5_K).
///
/// # Safety
/// AVX2, F16C, AVX-512 F/BW/VL, VNNI.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k4_group<const Q5: bool>(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let mut s = Slots::new(g);
    let mut acc = _mm256_setzero_ps();
    for a in &act[..g.nblocks()] {
        // SAFETY: `a.qs` is 256 bytes and `a.bsums` 32 bytes; the current
        // block of every slot is in bounds (RowGroup invariant).
        let (sv, mv, d, dmin) = unsafe {
            let bsums = load256(a.bsums.as_ptr().cast());
            let mut sv = [_mm256_setzero_si256(); 8];
            let mut mv = [_mm256_setzero_si256(); 8];
            for r in 0..8 {
                let p = s.at(r);
                let (sc, mins) = k4_scales(p);
                let v = if Q5 { q5_k_values(p) } else { q4_k_values(p) };
                let mut t = _mm256_setzero_si256();
                for (j, vj) in v.iter().enumerate() {
                    let aj = load256(a.qs.as_ptr().add(32 * j).cast());
                    let pj = _mm256_maddubs_epi16(*vj, aj);
                    t = _mm256_dpwssd_epi32(t, pj, _mm256_shuffle_epi8(sc, bcast16_mask(j)));
                }
                sv[r] = t;
                mv[r] = _mm256_madd_epi16(mins, bsums);
            }
            let (d, dmin) = d_dmin8(&s);
            (reduce8(&sv), reduce8(&mv), d, dmin)
        };
        let da = _mm256_set1_ps(a.d);
        let c = _mm256_sub_ps(
            _mm256_mul_ps(_mm256_cvtepi32_ps(sv), _mm256_mul_ps(d, da)),
            _mm256_mul_ps(_mm256_cvtepi32_ps(mv), _mm256_mul_ps(dmin, da)),
        );
        acc = _mm256_add_ps(acc, c);
        s.advance();
    }
    // SAFETY: `out` is 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// Q4_K x Q8_K group kernel.
///
/// # Safety
/// The CPU must support AVX2, F16C, AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q4_k_group(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    // SAFETY: same contract.
    unsafe { k4_group::<false>(g, act, out) }
}

/// Q5_K x Q8_K group kernel.
///
/// # Safety
/// The CPU must support AVX2, F16C, AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q5_k_group(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    // SAFETY: same contract.
    unsafe { k4_group::<true>(g, act, out) }
}

/// Q6_K x Q8_K group kernel.
///
/// # Safety
/// The CPU must support AVX2, F16C, AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn q6_k_group(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    let mut s = Slots::new(g);
    let mut acc = _mm256_setzero_ps();
    for a in &act[..g.nblocks()] {
        // SAFETY: activation arrays are 256 / 32 bytes; the current 210-byte
        // block of every slot is in bounds (RowGroup invariant).
        let (sv, d) = unsafe {
            let bsums = load256(a.bsums.as_ptr().cast());
            let mut sv = [_mm256_setzero_si256(); 8];
            for (r, svr) in sv.iter_mut().enumerate() {
                let p = s.at(r);
                let sc8 = load128(p.add(q6_k::SCALES));
                let sc_all = _mm256_cvtepi8_epi16(sc8);
                let sc_h = [
                    _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8)),
                    _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128::<8>(sc8))),
                ];
                let v = q6_k_values(p);
                let mut t = _mm256_setzero_si256();
                for (i, vi) in v.iter().enumerate() {
                    let ai = load256(a.qs.as_ptr().add(32 * i).cast());
                    let pi = _mm256_maddubs_epi16(*vi, ai);
                    t = _mm256_dpwssd_epi32(
                        t,
                        pi,
                        _mm256_shuffle_epi8(sc_h[i / 4], pair16_mask(i % 4)),
                    );
                }
                let bias = _mm256_madd_epi16(sc_all, bsums);
                *svr = _mm256_sub_epi32(t, _mm256_slli_epi32::<5>(bias));
            }
            (reduce8(&sv), fp16_at8(&s, q6_k::D))
        };
        let c = _mm256_mul_ps(
            _mm256_cvtepi32_ps(sv),
            _mm256_mul_ps(d, _mm256_set1_ps(a.d)),
        );
        acc = _mm256_add_ps(acc, c);
        s.advance();
    }
    // SAFETY: `out` is 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// CQ4 super-block kernel (64 channels), `vpdpbusd` on 512-bit vectors.
///
/// Per kg-block: two 64-byte vectors (32 channels each); nibbles are looked
/// up in the biased codebook `cb_i8 + 128` (u8), re-interleaved into one
/// channel per i32 lane, and `vpdpbusd` accumulates
/// `sum (cb + 128) q = isum + 128 * qsum[g]`. Lane order after the unpack
/// is `{0-3, 8-11, 16-19, 24-27}`, `{4-7, 12-15, ..}` per 32 channels;
/// `vpermt2d` restores it once per group.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn cq4_superblock(
    b: &PanelBlock<'_>,
    act: &Cq4Act<'_>,
    lut: &CbLut,
    out: &mut [f32; 64],
) {
    let ng = b.groups();
    assert!(
        act.q.len() >= ng * 128 && act.scale.len() >= ng && act.qsum.len() >= ng,
        "activations"
    );
    let mut biased = [0u8; 16];
    for (d, &c) in biased.iter_mut().zip(lut.cb_i8()) {
        *d = (c as u8) ^ 0x80;
    }
    // SAFETY: `biased` is 16 bytes.
    let table = _mm512_broadcast_i32x4(unsafe { load128(biased.as_ptr()) });
    let m4 = _mm512_set1_epi8(0x0F);
    let idx_a = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    let idx_b = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    let panels = b.panels().as_ptr();
    let folded = b.folded_bytes().as_ptr();
    let q = act.q.as_ptr().cast::<u8>();
    let mut accf = [_mm512_setzero_ps(); 4];
    for g in 0..ng {
        let mut acc = [_mm512_setzero_si512(); 4];
        for kg in 0..KG_PER_GROUP {
            // SAFETY: PanelBlock::new checked panels = ng * 32 * 128 bytes and
            // the assert above q >= ng * 128: kg-block (g, kg) and its 4
            // activations are in bounds.
            unsafe {
                let qd = _mm512_set1_epi32(read_u32(q.add(g * 128 + kg * 4)) as i32);
                let blk = panels.add((g * KG_PER_GROUP + kg) * 128);
                for h in 0..2 {
                    let bytes = _mm512_loadu_si512(blk.add(64 * h).cast());
                    let lo = _mm512_shuffle_epi8(table, _mm512_and_si512(bytes, m4));
                    let hi = _mm512_shuffle_epi8(
                        table,
                        _mm512_and_si512(_mm512_srli_epi16::<4>(bytes), m4),
                    );
                    acc[2 * h] = _mm512_dpbusd_epi32(acc[2 * h], _mm512_unpacklo_epi8(lo, hi), qd);
                    acc[2 * h + 1] =
                        _mm512_dpbusd_epi32(acc[2 * h + 1], _mm512_unpackhi_epi8(lo, hi), qd);
                }
            }
        }
        let bias = _mm512_set1_epi32(128 * act.qsum[g]);
        let sc = _mm512_set1_ps(act.scale[g]);
        for h in 0..2 {
            let (u, v) = (
                _mm512_sub_epi32(acc[2 * h], bias),
                _mm512_sub_epi32(acc[2 * h + 1], bias),
            );
            let first = _mm512_permutex2var_epi32(u, idx_a, v);
            let second = _mm512_permutex2var_epi32(u, idx_b, v);
            for (i, iv) in [(2 * h, first), (2 * h + 1, second)] {
                // SAFETY: folded holds ng * 64 f32; channels 16i..16i+16 of group g.
                let f = unsafe { _mm512_loadu_ps(folded.add((g * 64 + 16 * i) * 4).cast()) };
                accf[i] = _mm512_add_ps(
                    accf[i],
                    _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(iv), sc), f),
                );
            }
        }
    }
    for (i, a) in accf.iter().enumerate() {
        // SAFETY: `out` is 64 f32; 16i + 16 <= 64.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(16 * i), *a) };
    }
}
