//! Byte layout of the ggml weight blocks the kernels read, and zero-copy
//! views over them.
//!
//! The offsets are taken with `offset_of!` from ggml-quants' `#[repr(C)]`
//! block structs (alignment 1, fp16 fields as `[u8; 2]`), and the sizes are
//! asserted at compile time, so the kernels and the codec cannot disagree on
//! where a field lives. Views wrap `&[u8; BYTES]`: any byte offset of an
//! mmap is fine, no cast and no `unsafe` is involved.

use core::mem::{offset_of, size_of};

use ggml_quants::float::fp16_to_f32;
use ggml_quants::iq4::{BlockIq4Nl, BlockIq4Xs, KVALUES_IQ4NL};
use ggml_quants::k_quants::{q3k_scale, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K};
use ggml_quants::legacy::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0};

/// Q8_0: `d` fp16, `qs` i8\[32\].
pub mod q8_0 {
    use super::*;
    /// Bytes per block.
    pub const BYTES: usize = 34;
    /// Weights per block.
    pub const QK: usize = 32;
    /// Offset of `d`.
    pub const D: usize = offset_of!(BlockQ8_0, d);
    /// Offset of `qs`.
    pub const QS: usize = offset_of!(BlockQ8_0, qs);
    const _: () = assert!(size_of::<BlockQ8_0>() == BYTES && D == 0 && QS == 2);
}

/// Q5_0: `d` fp16, `qh` u32 (fifth bits), `qs` u8\[16\] (nibbles).
pub mod q5_0 {
    use super::*;
    /// Bytes per block.
    pub const BYTES: usize = 22;
    /// Weights per block.
    pub const QK: usize = 32;
    /// Offset of `d`.
    pub const D: usize = offset_of!(BlockQ5_0, d);
    /// Offset of `qh`.
    pub const QH: usize = offset_of!(BlockQ5_0, qh);
    /// Offset of `qs`.
    pub const QS: usize = offset_of!(BlockQ5_0, qs);
    const _: () = assert!(size_of::<BlockQ5_0>() == BYTES && D == 0 && QH == 2 && QS == 6);
}

/// Q4_0: `d` fp16, `qs` u8\[16\] (nibbles: low = weight `j`, high = `j + 16`).
pub mod q4_0 {
    use super::*;
    /// Bytes per block.
    pub const BYTES: usize = 18;
    /// Weights per block.
    pub const QK: usize = 32;
    /// Offset of `d`.
    pub const D: usize = offset_of!(BlockQ4_0, d);
    /// Offset of `qs`.
    pub const QS: usize = offset_of!(BlockQ4_0, qs);
    const _: () = assert!(size_of::<BlockQ4_0>() == BYTES && D == 0 && QS == 2);
}

/// Q4_1: `d`, `m` fp16, `qs` u8\[16\] (nibbles as Q4_0).
pub mod q4_1 {
    use super::*;
    /// Bytes per block.
    pub const BYTES: usize = 20;
    /// Weights per block.
    pub const QK: usize = 32;
    /// Offset of `d`.
    pub const D: usize = offset_of!(BlockQ4_1, d);
    /// Offset of `m`.
    pub const M: usize = offset_of!(BlockQ4_1, m);
    /// Offset of `qs`.
    pub const QS: usize = offset_of!(BlockQ4_1, qs);
    const _: () = assert!(size_of::<BlockQ4_1>() == BYTES && D == 0 && M == 2 && QS == 4);
}

/// Q5_1: `d`, `m` fp16, `qh` u32 (fifth bits), `qs` u8\[16\] (nibbles).
pub mod q5_1 {
    use super::*;
    /// Bytes per block.
    pub const BYTES: usize = 24;
    /// Weights per block.
    pub const QK: usize = 32;
    /// Offset of `d`.
    pub const D: usize = offset_of!(BlockQ5_1, d);
    /// Offset of `m`.
    pub const M: usize = offset_of!(BlockQ5_1, m);
    /// Offset of `qh`.
    pub const QH: usize = offset_of!(BlockQ5_1, qh);
    /// Offset of `qs`.
    pub const QS: usize = offset_of!(BlockQ5_1, qs);
    const _: () =
        assert!(size_of::<BlockQ5_1>() == BYTES && D == 0 && M == 2 && QH == 4 && QS == 8);
}

/// Q4_K: `d`, `dmin` fp16, `scales` u8\[12\] (6-bit packed), `qs` u8\[128\].
pub mod q4_k {
    use super::*;
    /// Bytes per block.
    pub const BYTES: usize = 144;
    /// Weights per block.
    pub const QK: usize = 256;
    /// Offset of `d`.
    pub const D: usize = offset_of!(BlockQ4K, d);
    /// Offset of `dmin`.
    pub const DMIN: usize = offset_of!(BlockQ4K, dmin);
    /// Offset of `scales`.
    pub const SCALES: usize = offset_of!(BlockQ4K, scales);
    /// Offset of `qs`.
    pub const QS: usize = offset_of!(BlockQ4K, qs);
    const _: () =
        assert!(size_of::<BlockQ4K>() == BYTES && D == 0 && DMIN == 2 && SCALES == 4 && QS == 16);
}

/// Q5_K: as Q4_K plus `qh` u8\[32\] before `qs`.
pub mod q5_k {
    use super::*;
    /// Bytes per block.
    pub const BYTES: usize = 176;
    /// Weights per block.
    pub const QK: usize = 256;
    /// Offset of `d`.
    pub const D: usize = offset_of!(BlockQ5K, d);
    /// Offset of `dmin`.
    pub const DMIN: usize = offset_of!(BlockQ5K, dmin);
    /// Offset of `scales`.
    pub const SCALES: usize = offset_of!(BlockQ5K, scales);
    /// Offset of `qh`.
    pub const QH: usize = offset_of!(BlockQ5K, qh);
    /// Offset of `qs`.
    pub const QS: usize = offset_of!(BlockQ5K, qs);
    const _: () = assert!(
        size_of::<BlockQ5K>() == BYTES
            && D == 0
            && DMIN == 2
            && SCALES == 4
            && QH == 16
            && QS == 48
    );
}

/// Q6_K: `ql` u8\[128\], `qh` u8\[64\], `scales` i8\[16\], `d` fp16 (last).
pub mod q6_k {
    use super::*;
    /// Bytes per block.
    pub const BYTES: usize = 210;
    /// Weights per block.
    pub const QK: usize = 256;
    /// Offset of `ql`.
    pub const QL: usize = offset_of!(BlockQ6K, ql);
    /// Offset of `qh`.
    pub const QH: usize = offset_of!(BlockQ6K, qh);
    /// Offset of `scales`.
    pub const SCALES: usize = offset_of!(BlockQ6K, scales);
    /// Offset of `d`.
    pub const D: usize = offset_of!(BlockQ6K, d);
    const _: () = assert!(
        size_of::<BlockQ6K>() == BYTES && QL == 0 && QH == 128 && SCALES == 192 && D == 208
    );
}

/// IQ4_NL: `d` fp16, `qs` u8\[16\] (indices into [`KVALUES_IQ4NL`],
/// nibbles as Q4_0).
pub mod iq4_nl {
    use super::*;
    /// Bytes per block.
    pub const BYTES: usize = 18;
    /// Weights per block.
    pub const QK: usize = 32;
    /// Offset of `d`.
    pub const D: usize = offset_of!(BlockIq4Nl, d);
    /// Offset of `qs`.
    pub const QS: usize = offset_of!(BlockIq4Nl, qs);
    const _: () = assert!(size_of::<BlockIq4Nl>() == BYTES && D == 0 && QS == 2);
}

/// IQ4_XS: `d` fp16, `scales_h` u16, `scales_l` u8\[4\], `qs` u8\[128\]
/// (per sub-block of 32: 16 bytes, nibbles as Q4_0).
pub mod iq4_xs {
    use super::*;
    /// Bytes per block.
    pub const BYTES: usize = 136;
    /// Weights per block.
    pub const QK: usize = 256;
    /// Offset of `d`.
    pub const D: usize = offset_of!(BlockIq4Xs, d);
    /// Offset of `scales_h`.
    pub const SCALES_H: usize = offset_of!(BlockIq4Xs, scales_h);
    /// Offset of `scales_l`.
    pub const SCALES_L: usize = offset_of!(BlockIq4Xs, scales_l);
    /// Offset of `qs`.
    pub const QS: usize = offset_of!(BlockIq4Xs, qs);
    const _: () = assert!(
        size_of::<BlockIq4Xs>() == BYTES && D == 0 && SCALES_H == 2 && SCALES_L == 4 && QS == 8
    );
}

/// The 16 IQ4 levels (ggml's `kvalues_iq4nl`), as the kernels' lookup table.
pub const IQ4_LEVELS: [i8; 16] = KVALUES_IQ4NL;

/// The 8 signed sub-block scales (`ls - 32`, -32..=31) of an IQ4_XS block
/// from its header bytes `b[2..8]` (`scales_h`, `scales_l`): the 6-bit `ls`
/// of sub-block `j` is nibble `j % 2` of `scales_l[j / 2]` plus bits
/// `2j, 2j + 1` of `scales_h` as bits 4, 5 (ggml's `dequantize_row_iq4_xs`).
#[inline(always)]
pub fn iq4_xs_scales(b: &[u8]) -> [i8; 8] {
    let h = u16::from_le_bytes([b[iq4_xs::SCALES_H], b[iq4_xs::SCALES_H + 1]]);
    let mut sc = [0i8; 8];
    for (j, s) in sc.iter_mut().enumerate() {
        let lo = (b[iq4_xs::SCALES_L + j / 2] >> (4 * (j % 2))) & 0x0F;
        let hi = ((h >> (2 * j)) & 3) as u8;
        *s = (lo | (hi << 4)) as i8 - 32;
    }
    sc
}

/// Q2_K: `scales` u8\[16\] (scale low nibble, min high nibble), `qs`
/// u8\[64\] (2-bit), `d`, `dmin` fp16 (last).
pub mod q2_k {
    use super::*;
    /// Bytes per block.
    pub const BYTES: usize = 84;
    /// Weights per block.
    pub const QK: usize = 256;
    /// Offset of `scales`.
    pub const SCALES: usize = offset_of!(BlockQ2K, scales);
    /// Offset of `qs`.
    pub const QS: usize = offset_of!(BlockQ2K, qs);
    /// Offset of `d`.
    pub const D: usize = offset_of!(BlockQ2K, d);
    /// Offset of `dmin`.
    pub const DMIN: usize = offset_of!(BlockQ2K, dmin);
    const _: () =
        assert!(size_of::<BlockQ2K>() == BYTES && SCALES == 0 && QS == 16 && D == 80 && DMIN == 82);
}

/// Q3_K: `hmask` u8\[32\], `qs` u8\[64\] (low 2 bits), `scales` u8\[12\]
/// (6-bit packed), `d` fp16 (last).
pub mod q3_k {
    use super::*;
    /// Bytes per block.
    pub const BYTES: usize = 110;
    /// Weights per block.
    pub const QK: usize = 256;
    /// Offset of `hmask`.
    pub const HMASK: usize = offset_of!(BlockQ3K, hmask);
    /// Offset of `qs`.
    pub const QS: usize = offset_of!(BlockQ3K, qs);
    /// Offset of `scales`.
    pub const SCALES: usize = offset_of!(BlockQ3K, scales);
    /// Offset of `d`.
    pub const D: usize = offset_of!(BlockQ3K, d);
    const _: () = assert!(
        size_of::<BlockQ3K>() == BYTES && HMASK == 0 && QS == 32 && SCALES == 96 && D == 108
    );
}

/// The 16 signed scales (-32..=31) of a Q3_K block from its 12 packed
/// scale bytes (ggml-quants' `q3k_scale`).
#[inline(always)]
pub fn q3_k_scales(s: &[u8; 12]) -> [i8; 16] {
    core::array::from_fn(|j| q3k_scale(j, s))
}

/// The 2-bit field of weight `i` (0..256) of the 64 bytes at `qs` (Q2_K /
/// Q3_K): byte `32 (i / 128) + i % 32`, bits `2 ((i % 128) / 32)`.
#[inline(always)]
fn two_bit(b: &[u8], qs: usize, i: usize) -> i32 {
    ((b[qs + 32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3) as i32
}

/// The fp16 at `b[o..o + 2]` as f32 (exact).
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], o: usize) -> f32 {
    fp16_to_f32([b[o], b[o + 1]])
}

/// The 8 six-bit scales and 8 six-bit mins of a Q4_K / Q5_K block from its
/// 12 packed bytes (ggml's `get_scale_min_k4` for j = 0..8, done on three
/// little-endian u32 words):
///
/// ```text
/// sc[0..4] = b[0..4] & 63            m[0..4] = b[4..8] & 63
/// sc[4..8] = (b[8..12] & 15) | (b[0..4] >> 6) << 4
/// m[4..8]  = (b[8..12] >> 4) | (b[4..8] >> 6) << 4
/// ```
#[inline(always)]
pub fn unpack_k4_scales(s: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let w0 = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    let w1 = u32::from_le_bytes([s[4], s[5], s[6], s[7]]);
    let w2 = u32::from_le_bytes([s[8], s[9], s[10], s[11]]);
    let sc_lo = w0 & 0x3f3f_3f3f;
    let m_lo = w1 & 0x3f3f_3f3f;
    let sc_hi = (w2 & 0x0f0f_0f0f) | (((w0 >> 6) & 0x0303_0303) << 4);
    let m_hi = ((w2 >> 4) & 0x0f0f_0f0f) | (((w1 >> 6) & 0x0303_0303) << 4);
    let sc = ((sc_hi as u64) << 32 | sc_lo as u64).to_le_bytes();
    let m = ((m_hi as u64) << 32 | m_lo as u64).to_le_bytes();
    (sc, m)
}

macro_rules! view {
    ($(#[$doc:meta])* $name:ident, $bytes:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name<'a>(&'a [u8; $bytes]);

        impl<'a> $name<'a> {
            /// View the first block of `b` (`None` if `b` is too short).
            #[inline(always)]
            pub fn new(b: &'a [u8]) -> Option<Self> {
                b.first_chunk::<{ $bytes }>().map($name)
            }

            /// The block's bytes.
            #[inline(always)]
            pub fn bytes(&self) -> &'a [u8; $bytes] {
                self.0
            }
        }
    };
}

view!(
    /// A Q8_0 block.
    Q8_0View,
    q8_0::BYTES
);
view!(
    /// A Q4_0 block.
    Q4_0View,
    q4_0::BYTES
);
view!(
    /// A Q4_1 block.
    Q4_1View,
    q4_1::BYTES
);
view!(
    /// A Q5_0 block.
    Q5_0View,
    q5_0::BYTES
);
view!(
    /// A Q5_1 block.
    Q5_1View,
    q5_1::BYTES
);
view!(
    /// An IQ4_NL block.
    Iq4NlView,
    iq4_nl::BYTES
);
view!(
    /// An IQ4_XS block.
    Iq4XsView,
    iq4_xs::BYTES
);
view!(
    /// A Q2_K block.
    Q2KView,
    q2_k::BYTES
);
view!(
    /// A Q3_K block.
    Q3KView,
    q3_k::BYTES
);
view!(
    /// A Q4_K block.
    Q4KView,
    q4_k::BYTES
);
view!(
    /// A Q5_K block.
    Q5KView,
    q5_k::BYTES
);
view!(
    /// A Q6_K block.
    Q6KView,
    q6_k::BYTES
);

impl Q8_0View<'_> {
    /// Scale.
    pub fn d(&self) -> f32 {
        f16_at(self.0, q8_0::D)
    }
    /// Quant `i`.
    pub fn q(&self, i: usize) -> i32 {
        self.0[q8_0::QS + i] as i8 as i32
    }
}

/// The 4-bit value of weight `i` (0..32) of the 16 nibble bytes at `qs`.
#[inline(always)]
fn nibble(b: &[u8], qs: usize, i: usize) -> i32 {
    (if i < 16 {
        b[qs + i] & 15
    } else {
        b[qs + i - 16] >> 4
    }) as i32
}

impl Q4_0View<'_> {
    /// Scale.
    pub fn d(&self) -> f32 {
        f16_at(self.0, q4_0::D)
    }
    /// Unsigned 4-bit value of weight `i` (0..32): the weight is `d * (v - 8)`.
    pub fn v(&self, i: usize) -> i32 {
        nibble(self.0, q4_0::QS, i)
    }
}

impl Q4_1View<'_> {
    /// Scale.
    pub fn d(&self) -> f32 {
        f16_at(self.0, q4_1::D)
    }
    /// Min.
    pub fn m(&self) -> f32 {
        f16_at(self.0, q4_1::M)
    }
    /// Unsigned 4-bit value of weight `i` (0..32): the weight is `d * v + m`.
    pub fn v(&self, i: usize) -> i32 {
        nibble(self.0, q4_1::QS, i)
    }
}

impl Q5_0View<'_> {
    /// Scale.
    pub fn d(&self) -> f32 {
        f16_at(self.0, q5_0::D)
    }
    /// Unsigned 5-bit value of weight `i` (0..32): the weight is `d * (v - 16)`.
    pub fn v(&self, i: usize) -> i32 {
        five_bit(self.0, q5_0::QH, q5_0::QS, i)
    }
}

/// The 5-bit value of weight `i` (0..32): nibble from the 16 bytes at `qs`,
/// bit 4 = bit `i` of the little-endian u32 at `qh`.
#[inline(always)]
fn five_bit(b: &[u8], qh: usize, qs: usize, i: usize) -> i32 {
    let h = u32::from_le_bytes([b[qh], b[qh + 1], b[qh + 2], b[qh + 3]]);
    nibble(b, qs, i) | ((((h >> i) & 1) as i32) << 4)
}

impl Q5_1View<'_> {
    /// Scale.
    pub fn d(&self) -> f32 {
        f16_at(self.0, q5_1::D)
    }
    /// Min.
    pub fn m(&self) -> f32 {
        f16_at(self.0, q5_1::M)
    }
    /// Unsigned 5-bit value of weight `i` (0..32): the weight is `d * v + m`.
    pub fn v(&self, i: usize) -> i32 {
        five_bit(self.0, q5_1::QH, q5_1::QS, i)
    }
}

impl Iq4NlView<'_> {
    /// Scale.
    pub fn d(&self) -> f32 {
        f16_at(self.0, iq4_nl::D)
    }
    /// Level of weight `i` (0..32): `KVALUES_IQ4NL[index]`, the weight is `d * level`.
    pub fn level(&self, i: usize) -> i32 {
        IQ4_LEVELS[nibble(self.0, iq4_nl::QS, i) as usize] as i32
    }
}

impl Iq4XsView<'_> {
    /// Super-scale.
    pub fn d(&self) -> f32 {
        f16_at(self.0, iq4_xs::D)
    }
    /// The 8 signed sub-block scales (see [`iq4_xs_scales`]).
    pub fn scales(&self) -> [i8; 8] {
        iq4_xs_scales(self.0)
    }
    /// Level of weight `i` (0..256): sub-block `j = i / 32`, the weight is
    /// `d * scales()[j] * level`.
    pub fn level(&self, i: usize) -> i32 {
        IQ4_LEVELS[nibble(self.0, iq4_xs::QS + 16 * (i / 32), i % 32) as usize] as i32
    }
}

impl Q2KView<'_> {
    /// Super-scale.
    pub fn d(&self) -> f32 {
        f16_at(self.0, q2_k::D)
    }
    /// Super-min.
    pub fn dmin(&self) -> f32 {
        f16_at(self.0, q2_k::DMIN)
    }
    /// Scale (0..=15) of sub-block `j` (0..16, 16 weights each).
    pub fn scale(&self, j: usize) -> i32 {
        (self.0[q2_k::SCALES + j] & 15) as i32
    }
    /// Min (0..=15) of sub-block `j`.
    pub fn min(&self, j: usize) -> i32 {
        (self.0[q2_k::SCALES + j] >> 4) as i32
    }
    /// 2-bit value of weight `i` (0..256): the weight is `d * scale(i / 16)
    /// * v - dmin * min(i / 16)`.
    pub fn v(&self, i: usize) -> i32 {
        two_bit(self.0, q2_k::QS, i)
    }
}

impl Q3KView<'_> {
    /// Super-scale.
    pub fn d(&self) -> f32 {
        f16_at(self.0, q3_k::D)
    }
    /// The 16 signed sub-block scales.
    pub fn scales(&self) -> [i8; 16] {
        let mut s = [0u8; 12];
        s.copy_from_slice(&self.0[q3_k::SCALES..q3_k::SCALES + 12]);
        q3_k_scales(&s)
    }
    /// Signed 3-bit value (-4..=3) of weight `i` (0..256): the 2-bit field,
    /// minus 4 when bit `i / 32` of `hmask[i % 32]` is clear; the weight is
    /// `d * scales()[i / 16] * v`.
    pub fn v(&self, i: usize) -> i32 {
        let hi = (self.0[q3_k::HMASK + i % 32] >> (i / 32)) & 1;
        two_bit(self.0, q3_k::QS, i) - if hi == 0 { 4 } else { 0 }
    }
}

impl Q4KView<'_> {
    /// Super-scale.
    pub fn d(&self) -> f32 {
        f16_at(self.0, q4_k::D)
    }
    /// Super-min.
    pub fn dmin(&self) -> f32 {
        f16_at(self.0, q4_k::DMIN)
    }
    /// (scales, mins) of the 8 sub-blocks of 32.
    pub fn scales_mins(&self) -> ([u8; 8], [u8; 8]) {
        let mut s = [0u8; 12];
        s.copy_from_slice(&self.0[q4_k::SCALES..q4_k::SCALES + 12]);
        unpack_k4_scales(&s)
    }
    /// 4-bit value of weight `i` (0..256): sub-block `i / 32`.
    pub fn v(&self, i: usize) -> i32 {
        let (chunk, j) = (i / 64, i % 64);
        let b = self.0[q4_k::QS + 32 * chunk + j % 32];
        (if j < 32 { b & 15 } else { b >> 4 }) as i32
    }
    /// The 4-bit values of sub-block `j` (0..8): weights `32 j .. 32 j + 32`,
    /// i.e. `v(32 j + l)` for `l` in 0..32.
    pub fn sub_block(&self, j: usize) -> [u8; 32] {
        let qs = &self.0[q4_k::QS + 32 * (j / 2)..q4_k::QS + 32 * (j / 2) + 32];
        let shift = 4 * (j % 2);
        std::array::from_fn(|l| (qs[l] >> shift) & 15)
    }
}

impl Q5KView<'_> {
    /// Super-scale.
    pub fn d(&self) -> f32 {
        f16_at(self.0, q5_k::D)
    }
    /// Super-min.
    pub fn dmin(&self) -> f32 {
        f16_at(self.0, q5_k::DMIN)
    }
    /// (scales, mins) of the 8 sub-blocks of 32.
    pub fn scales_mins(&self) -> ([u8; 8], [u8; 8]) {
        let mut s = [0u8; 12];
        s.copy_from_slice(&self.0[q5_k::SCALES..q5_k::SCALES + 12]);
        unpack_k4_scales(&s)
    }
    /// 5-bit value of weight `i` (0..256): sub-block `j = i / 32`, fifth bit
    /// = bit `j` of `qh[i % 32]`.
    pub fn v(&self, i: usize) -> i32 {
        let (chunk, j) = (i / 64, i % 64);
        let b = self.0[q5_k::QS + 32 * chunk + j % 32];
        let lo = (if j < 32 { b & 15 } else { b >> 4 }) as i32;
        let hi = ((self.0[q5_k::QH + i % 32] >> (i / 32)) & 1) as i32;
        lo | (hi << 4)
    }
    /// The 5-bit values of sub-block `j` (0..8): `v(32 j + l)` for `l` in
    /// 0..32.
    pub fn sub_block(&self, j: usize) -> [u8; 32] {
        let qs = &self.0[q5_k::QS + 32 * (j / 2)..q5_k::QS + 32 * (j / 2) + 32];
        let qh = &self.0[q5_k::QH..q5_k::QH + 32];
        let shift = 4 * (j % 2);
        std::array::from_fn(|l| ((qs[l] >> shift) & 15) | (((qh[l] >> j) & 1) << 4))
    }
}

impl Q6KView<'_> {
    /// Super-scale.
    pub fn d(&self) -> f32 {
        f16_at(self.0, q6_k::D)
    }
    /// Scale of sub-block `j` (0..16, 16 weights each).
    pub fn scale(&self, j: usize) -> i32 {
        self.0[q6_k::SCALES + j] as i8 as i32
    }
    /// Unsigned 6-bit value of weight `i` (0..256): the weight is
    /// `d * scale(i / 16) * (v - 32)`.
    pub fn v(&self, i: usize) -> i32 {
        let (half, t, l) = (i / 128, (i % 128) / 32, i % 32);
        let ql = self.0[q6_k::QL + 64 * half + 32 * (t % 2) + l];
        let lo = if t < 2 { ql & 15 } else { ql >> 4 };
        let hi = (self.0[q6_k::QH + 32 * half + l] >> (2 * t)) & 3;
        (lo | (hi << 4)) as i32
    }
    /// The 6-bit values of sub-block `j` (0..16): `v(16 j + l)` for `l` in
    /// 0..16.
    pub fn sub_block(&self, j: usize) -> [u8; 16] {
        let i = 16 * j;
        let (half, t, l0) = (i / 128, (i % 128) / 32, i % 32);
        let ql = &self.0[q6_k::QL + 64 * half + 32 * (t % 2) + l0..][..16];
        let qh = &self.0[q6_k::QH + 32 * half + l0..][..16];
        let shift = 4 * (t / 2);
        std::array::from_fn(|l| ((ql[l] >> shift) & 15) | (((qh[l] >> (2 * t)) & 3) << 4))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ggml_quants::k_quants::get_scale_min_k4;

    #[test]
    fn iq4_xs_scales_match_ggml() {
        use ggml_quants::iq4::BlockIq4Xs;
        let mut x = 0x9e37_79b9u32;
        for _ in 0..1000 {
            let mut b = [0u8; iq4_xs::BYTES];
            for v in b.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *v = x as u8;
            }
            let blk = BlockIq4Xs {
                d: [b[0], b[1]],
                scales_h: [b[2], b[3]],
                scales_l: [b[4], b[5], b[6], b[7]],
                qs: b[8..].try_into().unwrap(),
            };
            let sc = iq4_xs_scales(&b);
            for (j, s) in sc.iter().enumerate() {
                assert_eq!(*s as i32, blk.scale(j) as i32 - 32);
            }
        }
    }

    #[test]
    fn k4_scale_unpack_matches_ggml() {
        let mut s = [0u8; 12];
        let mut x = 0x1234_5678u32;
        for _ in 0..1000 {
            for b in s.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *b = x as u8;
            }
            let (sc, m) = unpack_k4_scales(&s);
            for j in 0..8 {
                assert_eq!(get_scale_min_k4(j, &s), (sc[j], m[j]));
            }
        }
    }

    #[test]
    fn k_quant_sub_blocks_are_the_per_weight_values() {
        let mut x = 0x9e37_79b9u32;
        let mut bytes = |n: usize| -> Vec<u8> {
            (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect()
        };
        for _ in 0..50 {
            let b = bytes(q4_k::BYTES);
            let v = Q4KView::new(&b).unwrap();
            for j in 0..8 {
                let want: Vec<u8> = (0..32).map(|l| v.v(32 * j + l) as u8).collect();
                assert_eq!(v.sub_block(j).to_vec(), want);
            }
            let b = bytes(q5_k::BYTES);
            let v = Q5KView::new(&b).unwrap();
            for j in 0..8 {
                let want: Vec<u8> = (0..32).map(|l| v.v(32 * j + l) as u8).collect();
                assert_eq!(v.sub_block(j).to_vec(), want);
            }
            let b = bytes(q6_k::BYTES);
            let v = Q6KView::new(&b).unwrap();
            for j in 0..16 {
                let want: Vec<u8> = (0..16).map(|l| v.v(16 * j + l) as u8).collect();
                assert_eq!(v.sub_block(j).to_vec(), want);
            }
        }
    }
}
