//! Shared test helpers: seeded data, ggml and CQ4 matrices.
#![allow(dead_code)]

use cq4::rng::{fill_gaussian, SplitMix64};
use ggml_quants::quantize_rows;
use kernels::aligned::AlignedBytes;
use kernels::{Exec, Gemv, Isa, QuantFormat, RotationFamily as Family, RowLayout, Workspace};
use weights_file::interleave;

/// `n` standard normal f32 values from `seed`.
pub fn gaussian(seed: u64, n: usize) -> Vec<f32> {
    let mut v = vec![0f64; n];
    fill_gaussian(&mut SplitMix64::new(seed), &mut v);
    v.into_iter().map(|x| x as f32).collect()
}

/// Plain ggml bytes of an `n x k` Gaussian matrix (row `r` scaled by
/// `1 + r % 5` so rows differ in scale).
pub fn ggml_plain(format: QuantFormat, n: usize, k: usize, seed: u64) -> Vec<u8> {
    let mut w = gaussian(seed, n * k);
    for (r, row) in w.chunks_exact_mut(k).enumerate() {
        let s = 1.0 + (r % 5) as f32;
        row.iter_mut().for_each(|v| *v *= s * 0.05);
    }
    let ty = format.ggml_type();
    let mut out = vec![0u8; n * k / ty.block_size() * ty.type_size()];
    quantize_rows(ty, &w, k, &mut out).unwrap();
    out
}

/// Random block bytes with finite, moderate fp16 scales (every other byte
/// arbitrary: extreme quants, 6-bit scales of 63, Q6_K scales of -128).
pub fn ggml_random_bytes(format: QuantFormat, n: usize, k: usize, seed: u64) -> Vec<u8> {
    let ty = format.ggml_type();
    let len = n * k / ty.block_size() * ty.type_size();
    let mut rng = SplitMix64::new(seed);
    let mut out: Vec<u8> = (0..len).map(|_| (rng.next_u64() >> 56) as u8).collect();
    set_scales(format, &mut out, &mut rng);
    out
}

/// Blocks whose every byte is `fill`, scales set as in
/// [`ggml_random_bytes`]: with `fill` = 0xFF / 0x80 / 0x00 the quants (and
/// 6-bit scales) sit at their extremes, so with constant activations of
/// +-127 the integer sums reach the largest magnitudes a kernel must hold.
pub fn ggml_filled_bytes(format: QuantFormat, n: usize, k: usize, fill: u8, seed: u64) -> Vec<u8> {
    let ty = format.ggml_type();
    let len = n * k / ty.block_size() * ty.type_size();
    let mut out = vec![fill; len];
    set_scales(format, &mut out, &mut SplitMix64::new(seed));
    out
}

/// Finite, moderate fp16 scale fields in every block of `out`.
fn set_scales(format: QuantFormat, out: &mut [u8], rng: &mut SplitMix64) {
    let bb = format.block_bytes();
    let fp16_fields: &[usize] = match format {
        QuantFormat::Q8_0
        | QuantFormat::Q4_0
        | QuantFormat::Q5_0
        | QuantFormat::Iq4Nl
        | QuantFormat::Iq4Xs => &[0],
        QuantFormat::Q4_1 | QuantFormat::Q5_1 | QuantFormat::Q4K | QuantFormat::Q5K => &[0, 2],
        QuantFormat::Q6K => &[208],
        QuantFormat::Q2K => &[80, 82],
        QuantFormat::Q3K => &[108],
    };
    for blk in out.chunks_exact_mut(bb) {
        for &o in fp16_fields {
            // exponent 0x0C..0x13 (about 2^-3 .. 2^4), random sign and mantissa
            let e = 12 + (rng.next_u64() % 8) as u16;
            let m = (rng.next_u64() & 0x3FF) as u16;
            let s = ((rng.next_u64() & 1) as u16) << 15;
            let h = s | (e << 10) | m;
            blk[o..o + 2].copy_from_slice(&h.to_le_bytes());
        }
    }
}

/// The bytes of `plain` in `layout`, in a 64-byte aligned buffer.
pub fn in_layout(
    format: QuantFormat,
    n: usize,
    k: usize,
    plain: &[u8],
    layout: RowLayout,
) -> AlignedBytes {
    match layout {
        RowLayout::RowMajor => AlignedBytes::copy_of(plain),
        RowLayout::Interleaved(f) => {
            let bb = format.block_bytes();
            let rb = k / format.block_weights() * bb;
            let mut out = vec![0u8; plain.len()];
            interleave::repack(plain, n, rb, bb, f, &mut out).unwrap();
            AlignedBytes::copy_of(&out)
        }
    }
}

/// A CQ4 tensor written through cq4's encoder: (scales blob, panels).
pub fn cq4_tensor(family: Family, n: usize, k: usize, seed: u64) -> (Vec<u8>, AlignedBytes, usize) {
    let bundle = cq4::Bundle::new(cq4::DEFAULT_SEED);
    let enc = bundle.encoder(family, n, k).unwrap();
    let mut w = gaussian(seed, n * k);
    for (r, row) in w.chunks_exact_mut(k).enumerate() {
        let s = 0.02 * (1.0 + (r % 7) as f32);
        row.iter_mut().for_each(|v| *v *= s);
    }
    let (panels, norms) = enc.encode_tensor(&w).unwrap();
    let blob = enc.scales_blob(&norms).unwrap();
    (blob, AlignedBytes::copy_of(&panels), enc.kp())
}

/// `y = W x` on `isa`, fresh workspace.
pub fn run(m: &dyn Gemv, x: &[f32], isa: Isa, parallel: bool) -> Vec<f32> {
    let mut y = vec![f32::NAN; m.rows()];
    let mut ws = Workspace::new();
    m.gemv(x, &mut y, &mut ws, Exec::new(isa, parallel))
        .unwrap();
    y
}

/// The bits of f32 values (for bit-for-bit comparisons).
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// Every row layout of a ggml matrix.
pub const LAYOUTS: [RowLayout; 3] = [
    RowLayout::RowMajor,
    RowLayout::Interleaved(4),
    RowLayout::Interleaved(8),
];

/// (rows, blocks per row): N not a multiple of 4/8/64, 90 blocks per row
/// (a row of 2880 weights for Q8_0/Q5_0), a single block.
pub const GGML_SHAPES: [(usize, usize); 9] = [
    (1, 1),
    (3, 2),
    (5, 3),
    (7, 90),
    (8, 1),
    (9, 90),
    (17, 5),
    (33, 4),
    (71, 2),
];

/// `sum(q)` per group of 128 (the `qsum` of CQ4 activations).
pub fn group_sums(q: &[i8]) -> Vec<i32> {
    q.chunks(128)
        .map(|c| c.iter().map(|&v| v as i32).sum())
        .collect()
}

/// Every available tier's CQ4 super-block kernel equals the scalar one bit
/// for bit on `blk`.
pub fn cq4_tiers_equal_scalar(
    blk: &kernels::panel::PanelBlock<'_>,
    act: &kernels::act::Cq4Act<'_>,
    lut: &kernels::panel::CbLut,
    what: &str,
) {
    let mut want = [0f32; 64];
    kernels::scalar::cq4_superblock(blk, act, lut, &mut want);
    for isa in kernels::available() {
        let mut got = [0f32; 64];
        kernels::dispatch::kernels(isa)
            .unwrap()
            .cq4_superblock(blk, act, lut, &mut got);
        assert_eq!(bits(&got), bits(&want), "{what} {isa}");
    }
}

/// `m` gives `want` bit for bit on every available tier, sequential and
/// parallel.
pub fn every_tier_gives(m: &dyn Gemv, x: &[f32], want: &[f32], what: &str) {
    for isa in kernels::available() {
        for parallel in [false, true] {
            let got = run(m, x, isa, parallel);
            assert_eq!(bits(&got), bits(want), "{what} {isa} parallel={parallel}");
        }
    }
}
