//! The activation quantizers of each ISA tier: [`quantize_q8_0_isa`] and
//! [`quantize_q8_k_isa`] pick the tier's block quantizer (AVX2 on x86 SIMD
//! tiers) and fall back to the portable ones of [`crate::act`], which they
//! equal byte for byte (tested here on inputs that reach every branch).

#[cfg(target_arch = "x86_64")]
use crate::act::first_non_finite;
use crate::act::{quantize_q8_0, quantize_q8_k, ActQ8_0, BlockQ8K};
#[cfg(target_arch = "x86_64")]
use crate::blocks::f16_at;
use crate::error::KernelError;

/// [`quantize_q8_0`] with the quantizer of tier `isa` (the AVX2 one on
/// x86 SIMD tiers, byte-identical to the scalar one; tests:
/// `simd_quantizers_equal_the_scalar_ones`). `isa` must be available.
pub(crate) fn quantize_q8_0_isa(
    isa: crate::isa::Isa,
    x: &[f32],
    out: &mut [ActQ8_0],
) -> Result<(), KernelError> {
    #[cfg(target_arch = "x86_64")]
    if isa != crate::isa::Isa::Scalar && isa.is_available() {
        crate::error::check_len("x (32 per Q8_0 block)", out.len() * 32, x.len())?;
        first_non_finite(x)?;
        for (xs, o) in x.chunks_exact(32).zip(out.iter_mut()) {
            let xs: &[f32; 32] = xs.try_into().expect("chunks of 32");
            let mut blk = ActQ8_0::default();
            // SAFETY: every x86 SIMD tier has AVX2, and `isa` is available.
            let d = unsafe { crate::x86::quant::q8_0_block(xs, &mut blk) };
            match ggml_quants::float::scale_to_fp16(d, "d") {
                Ok(h) => {
                    blk.d = f16_at(&h, 0);
                    *o = blk;
                }
                // fp16 overflow: the scalar path reports it (same message,
                // same blocks written before it).
                Err(_) => return quantize_q8_0(x, out),
            }
        }
        return Ok(());
    }
    let _ = isa;
    quantize_q8_0(x, out)
}

/// [`quantize_q8_k`] with the quantizer of tier `isa` (as
/// [`quantize_q8_0_isa`]). `isa` must be available.
pub(crate) fn quantize_q8_k_isa(
    isa: crate::isa::Isa,
    x: &[f32],
    out: &mut [BlockQ8K],
) -> Result<(), KernelError> {
    #[cfg(target_arch = "x86_64")]
    if isa != crate::isa::Isa::Scalar && isa.is_available() {
        crate::error::check_len("x (256 per Q8_K block)", out.len() * 256, x.len())?;
        first_non_finite(x)?;
        for (xs, o) in x.chunks_exact(256).zip(out.iter_mut()) {
            let xs: &[f32; 256] = xs.try_into().expect("chunks of 256");
            // SAFETY: every x86 SIMD tier has AVX2, and `isa` is available.
            unsafe { crate::x86::quant::q8_k_block(xs, o) };
        }
        return Ok(());
    }
    let _ = isa;
    quantize_q8_k(x, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inputs that reach every branch of the quantizers: Gaussian data at
    /// several scales, exact ties at .5 after scaling, all-zero blocks,
    /// subnormal blocks (an infinite or NaN reciprocal scale), a largest
    /// magnitude held by both signs (the first wins in Q8_K), and values
    /// whose fp16 scale overflows.
    fn hard_activations() -> Vec<Vec<f32>> {
        let mut rng = cq4::rng::SplitMix64::new(0x5155_414e);
        let mut sets = Vec::new();
        for scale in [1e-3f32, 1.0, 37.0, 6.0e4] {
            let mut g = vec![0f64; 1024];
            cq4::rng::fill_gaussian(&mut rng, &mut g);
            sets.push(g.iter().map(|&v| v as f32 * scale).collect());
        }
        // Ties: with amax = 127 the Q8_0 scale is 1, so k + 0.5 stays a tie.
        let mut ties: Vec<f32> = (0..1024).map(|i| (i % 255) as f32 - 127.0 + 0.5).collect();
        for b in ties.chunks_mut(32) {
            b[0] = 127.0;
        }
        sets.push(ties);
        let mut mixed = vec![0f32; 1024];
        for (i, v) in mixed.iter_mut().enumerate() {
            *v = match (i / 256, i % 7) {
                (0, _) => 0.0,
                (1, 0) => f32::from_bits(1 + (i as u32 % 5)),
                (1, _) => -f32::from_bits(3),
                (2, _) => (i as f32).sin() * 1e-37,
                _ => (i as f32).cos(),
            };
        }
        mixed[512] = 0.25;
        mixed[600] = -0.25;
        mixed[768] = -2.0;
        mixed[769] = 2.0;
        sets.push(mixed);
        let mut big = vec![1.0f32; 1024];
        big[100] = 1.0e7;
        sets.push(big);
        sets
    }

    #[test]
    fn simd_quantizers_equal_the_scalar_ones() {
        use crate::isa::available;
        for isa in available() {
            for x in hard_activations() {
                let mut want = vec![ActQ8_0::default(); x.len() / 32];
                let mut got = want.clone();
                let w = quantize_q8_0(&x, &mut want).map_err(|e| e.to_string());
                let g = quantize_q8_0_isa(isa, &x, &mut got).map_err(|e| e.to_string());
                assert_eq!(w, g, "{isa} Q8_0 result");
                for (a, b) in want.iter().zip(&got) {
                    assert_eq!(
                        (a.qs, a.d.to_bits(), a.sum),
                        (b.qs, b.d.to_bits(), b.sum),
                        "{isa}"
                    );
                }
                let mut want = vec![BlockQ8K::default(); x.len() / 256];
                let mut got = want.clone();
                let w = quantize_q8_k(&x, &mut want).map_err(|e| e.to_string());
                let g = quantize_q8_k_isa(isa, &x, &mut got).map_err(|e| e.to_string());
                assert_eq!(w, g, "{isa} Q8_K result");
                for (a, b) in want.iter().zip(&got) {
                    assert_eq!(
                        (a.qs, a.d.to_bits(), a.bsums),
                        (b.qs, b.d.to_bits(), b.bsums),
                        "{isa}"
                    );
                }
            }
        }
    }
}
