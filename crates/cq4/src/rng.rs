//! The seeded generator: SplitMix64, and the Box–Muller Gaussian stream built on it.

/// The default bundle seed: the ASCII bytes "CQ4P" in the high half, 1 in the low half.
pub const DEFAULT_SEED: u64 = 0x4351_3450_0000_0001;

/// XORed (with `Kp`) into the bundle seed to seed the orthogonal-family generator:
/// the ASCII bytes "ORTHOGON".
pub const ORTHOGONAL_SEED_TAG: u64 = 0x4F52_5448_4F47_4F4E;

/// SplitMix64 (Steele, Lea, Flood 2014), exactly:
///
/// ```text
/// state = state + 0x9E3779B97F4A7C15            (wrapping)
/// z = state
/// z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9      (wrapping)
/// z = (z ^ (z >> 27)) * 0x94D049BB133111EB      (wrapping)
/// return z ^ (z >> 31)
/// ```
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose initial state is `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64-bit output.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// 2^-53 (exact).
const TWO_POW_M53: f64 = 1.0 / 9_007_199_254_740_992.0;

/// Fill `out` with standard normal samples, in order, by Box–Muller:
///
/// for each pair t (out[2t], out[2t+1]):
/// ```text
/// a = next_u64(); b = next_u64()                 (a drawn first)
/// u1 = ((a >> 11) + 1) * 2^-53                   in (0, 1]
/// u2 = (b >> 11) * 2^-53                         in [0, 1)
/// r  = sqrt(-2 * ln(u1))
/// th = TAU * u2                                  (TAU = 6.283185307179586, the f64 nearest 2*pi)
/// out[2t] = r * cos(th); out[2t+1] = r * sin(th)
/// ```
/// All in f64. `ln`, `cos`, `sin` are the platform libm's (these three are the
/// only non-basic operations anywhere in CQ4; see the contract for why that is
/// acceptable). An odd-length `out` drops the last sine.
pub fn fill_gaussian(rng: &mut SplitMix64, out: &mut [f64]) {
    for pair in out.chunks_mut(2) {
        let a = rng.next_u64();
        let b = rng.next_u64();
        let u1 = ((a >> 11) + 1) as f64 * TWO_POW_M53;
        let u2 = (b >> 11) as f64 * TWO_POW_M53;
        let r = (-2.0 * u1.ln()).sqrt();
        let th = core::f64::consts::TAU * u2;
        pair[0] = r * th.cos();
        if let Some(s) = pair.get_mut(1) {
            *s = r * th.sin();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_known_answers() {
        // Seed 0: published first outputs of the reference splitmix64.c.
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(g.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(g.next_u64(), 0x06C4_5D18_8009_454F);
        // Seed 1234567: first five outputs (values widely used as test vectors).
        let mut g = SplitMix64::new(1234567);
        let want = [
            6457827717110365317u64,
            3203168211198807973,
            9817491932198370423,
            4593380528125082431,
            16408922859458223821,
        ];
        for w in want {
            assert_eq!(g.next_u64(), w);
        }
    }

    #[test]
    fn gaussian_moments() {
        let mut g = SplitMix64::new(DEFAULT_SEED);
        let mut v = vec![0.0; 200_000];
        fill_gaussian(&mut g, &mut v);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.01, "{mean}");
        assert!((var - 1.0).abs() < 0.02, "{var}");
    }
}
