//! IEEE-754 binary16 conversions with a precisely defined rounding.
//!
//! `f64_to_f16_bits` rounds the f64 value *directly* to the nearest fp16,
//! ties to even (one rounding). We do not use `half::f16::from_f64`: it
//! converts through f32 when the CPU has F16C (double rounding) and its
//! software path ignores the low 32 mantissa bits, so it is neither correctly
//! rounded nor the same on every machine. fp16 -> f32/f64 is exact.

/// fp16 bits of +1.0.
pub const F16_ONE: u16 = 0x3C00;

/// Round `x` to the nearest IEEE binary16 value, ties to even, and return its
/// bits. |x| >= 65520 rounds to +-infinity; NaN becomes the quiet NaN 0x7E00
/// (with the sign of `x`). Signed zeros keep their sign.
pub fn f64_to_f16_bits(x: f64) -> u16 {
    let sign: u16 = if x.is_sign_negative() { 0x8000 } else { 0 };
    if x.is_nan() {
        return sign | 0x7E00;
    }
    let a = x.abs();
    if a >= 65520.0 {
        // 65520 is the midpoint between 65504 (max finite) and 65536; the tie
        // goes to the even significand, which is the overflow to infinity.
        return sign | 0x7C00;
    }
    if a < 6.103515625e-5 {
        // Subnormal range (< 2^-14): value = m * 2^-24, m in 0..=1024.
        // a * 2^24 is exact; round_ties_even is exact; m = 1024 encodes 2^-14.
        let m = (a * 16_777_216.0).round_ties_even();
        return sign | m as u16;
    }
    // Normal: a = 2^e * (1 + f), e in -14..=15.
    let e = ((a.to_bits() >> 52) & 0x7FF) as i64 - 1023;
    // scale = 2^(10 - e), exact power of two; a * scale in [1024, 2048) exact.
    let scale = f64::from_bits(((1023 + 10 - e) as u64) << 52);
    let m = (a * scale).round_ties_even() as u32;
    let (e, m) = if m == 2048 { (e + 1, 1024) } else { (e, m) };
    // e <= 15 here because a < 65520.
    sign | (((e + 15) as u16) << 10) | (m - 1024) as u16
}

/// The exact f64 value of fp16 bits.
pub fn f16_bits_to_f64(h: u16) -> f64 {
    half::f16::from_bits(h).to_f64()
}

/// The exact f32 value of fp16 bits.
pub fn f16_bits_to_f32(h: u16) -> f32 {
    half::f16::from_bits(h).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhaustive_roundtrip_and_midpoints() {
        // Every finite fp16 value converts back to itself.
        for h in 0u16..=0xFFFF {
            let v = f16_bits_to_f64(h);
            if v.is_nan() {
                assert_eq!(f64_to_f16_bits(v) & 0x7FFF, 0x7E00);
                continue;
            }
            assert_eq!(f64_to_f16_bits(v), h, "{h:#06x}");
        }
        // Midpoints between consecutive positive values: ties to even, and one
        // f64 ulp either side goes to the nearer neighbour.
        for h in 0u16..0x7BFF {
            let lo = f16_bits_to_f64(h);
            let hi = f16_bits_to_f64(h + 1);
            let mid = (lo + hi) / 2.0; // exact in f64
            let even = if h.is_multiple_of(2) { h } else { h + 1 };
            assert_eq!(f64_to_f16_bits(mid), even, "mid of {h:#06x}");
            assert_eq!(f64_to_f16_bits(-mid), even | 0x8000);
            assert_eq!(f64_to_f16_bits(mid.next_up()), h + 1);
            assert_eq!(f64_to_f16_bits(mid.next_down()), h);
        }
        // Overflow boundary.
        assert_eq!(f64_to_f16_bits(65504.0), 0x7BFF);
        assert_eq!(f64_to_f16_bits(65519.99), 0x7BFF);
        assert_eq!(f64_to_f16_bits(65520.0), 0x7C00);
        assert_eq!(f64_to_f16_bits(f64::INFINITY), 0x7C00);
        assert_eq!(f64_to_f16_bits(f64::NEG_INFINITY), 0xFC00);
        // Below half the smallest subnormal -> 0; exactly half -> 0 (even);
        // just above -> smallest subnormal.
        let tiny = 2f64.powi(-25);
        assert_eq!(f64_to_f16_bits(tiny), 0);
        assert_eq!(f64_to_f16_bits(tiny.next_up()), 1);
        assert_eq!(f64_to_f16_bits(1e-300), 0);
        assert_eq!(f64_to_f16_bits(-0.0), 0x8000);
        // Sticky bits far below the fp16 precision still count (this is what
        // half::f16::from_f64 gets wrong).
        assert_eq!(
            f64_to_f16_bits(1.0 + 2f64.powi(-11) + 2f64.powi(-40)),
            0x3C01
        );
    }

    #[test]
    fn agrees_with_correct_f32_conversion() {
        // f32 -> f64 is exact, so on f32 inputs our conversion must equal a
        // correct f32 -> f16 RNE conversion (half's f32 paths are correct).
        let mut s = 0x1234_5678_9ABC_DEF0u64;
        for _ in 0..1_000_000 {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let f = f32::from_bits((s >> 32) as u32);
            if !f.is_finite() {
                continue;
            }
            let want = half::f16::from_f32(f).to_bits();
            assert_eq!(f64_to_f16_bits(f as f64), want, "{f:e}");
        }
    }
}
