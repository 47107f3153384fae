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

/// Natural logarithm of `u` in `(0, 1]` (any positive normal `u` works)
/// using only IEEE basic operations, in this order:
///
/// ```text
/// u = f * 2^e, f in [1, 2)                  (exact, from the bits)
/// if f > SQRT_2 { f = f / 2; e = e + 1 }     (exact)    SQRT_2 = 0x3FF6A09E667F3BCD
/// s = (f - 1) / (f + 1); z = s * s
/// p = c_10; for i = 9 down to 0: p = p * z + c_i     c_i = 1 / (2i + 1) (f64 division)
/// ln u = e * LN_2 + (2 * s) * p                       LN_2 = 0x3FE62E42FEFA39EF
/// ```
/// (`e * LN_2` and `(2*s) * p` are each rounded, then added.) Accurate to a
/// few ulp; what matters is that it is the same everywhere.
pub fn det_ln(u: f64) -> f64 {
    let bits = u.to_bits();
    let mut e = ((bits >> 52) & 0x7FF) as i64 - 1023;
    let mut f = f64::from_bits((bits & 0x000F_FFFF_FFFF_FFFF) | 0x3FF0_0000_0000_0000);
    if f > core::f64::consts::SQRT_2 {
        f /= 2.0;
        e += 1;
    }
    let s = (f - 1.0) / (f + 1.0);
    let z = s * s;
    let mut p = 1.0 / 21.0;
    for i in (0..10).rev() {
        p = p * z + 1.0 / (2 * i + 1) as f64;
    }
    (e as f64) * core::f64::consts::LN_2 + (2.0 * s) * p
}

/// `(sin(2 pi u), cos(2 pi u))` for `u` in `[0, 1)` using only IEEE basic
/// operations (plus the exact `floor`), in this order:
///
/// ```text
/// t = 8 * u; q = floor(t); f = t - q                 (all exact; q in 0..8)
/// a = (q even ? f : 1 - f) * FRAC_PI_4              FRAC_PI_4 = 0x3FE921FB54442D18
/// z = a * a
/// S = a * P_s(z), P_s = s_9; for i = 8 down to 0: P = P * z + s_i,  s_i = (-1)^i / (2i+1)!
/// C =     P_c(z), P_c = c_9; for i = 8 down to 0: P = P * z + c_i,  c_i = (-1)^i / (2i)!
/// ```
/// (`n!` is the sequential f64 product `1*2*..*n`, exact up to 19!; each
/// coefficient is one f64 division.) Then by octant `q`:
/// (sin, cos) = 0: (S, C), 1: (C, S), 2: (C, -S), 3: (S, -C), 4: (-S, -C),
/// 5: (-C, -S), 6: (-C, S), 7: (-S, C).
pub fn det_sincos_turn(u: f64) -> (f64, f64) {
    let t = u * 8.0;
    let q = t.floor();
    let f = t - q;
    let q = q as u32;
    let a = if q.is_multiple_of(2) { f } else { 1.0 - f } * core::f64::consts::FRAC_PI_4;
    let z = a * a;
    // factorials 0!..19!
    let mut fact = [1.0f64; 20];
    for n in 1..20 {
        fact[n] = fact[n - 1] * n as f64;
    }
    let coef = |sign_i: usize, n: usize| {
        let c = 1.0 / fact[n];
        if sign_i.is_multiple_of(2) {
            c
        } else {
            -c
        }
    };
    let mut ps = coef(9, 19);
    let mut pc = coef(9, 18);
    for i in (0..9).rev() {
        ps = ps * z + coef(i, 2 * i + 1);
        pc = pc * z + coef(i, 2 * i);
    }
    let (sa, ca) = (a * ps, pc);
    match q {
        0 => (sa, ca),
        1 => (ca, sa),
        2 => (ca, -sa),
        3 => (sa, -ca),
        4 => (-sa, -ca),
        5 => (-ca, -sa),
        6 => (-ca, sa),
        _ => (-sa, ca),
    }
}

/// Fill `out` with standard normal samples, in order, by Box–Muller:
///
/// for each pair t (`out[2t]`, `out[2t+1]`):
/// ```text
/// a = next_u64(); b = next_u64()                 (a drawn first)
/// u1 = ((a >> 11) + 1) * 2^-53                   in (0, 1]
/// u2 = (b >> 11) * 2^-53                         in [0, 1)
/// r  = sqrt(-2 * det_ln(u1))
/// (s, c) = det_sincos_turn(u2)
/// out[2t] = r * c; out[2t+1] = r * s
/// ```
/// All in f64 with basic operations only (no libm), so the samples are
/// bit-identical on every platform. An odd-length `out` drops the last sine.
pub fn fill_gaussian(rng: &mut SplitMix64, out: &mut [f64]) {
    for pair in out.chunks_mut(2) {
        let a = rng.next_u64();
        let b = rng.next_u64();
        let u1 = ((a >> 11) + 1) as f64 * TWO_POW_M53;
        let u2 = (b >> 11) as f64 * TWO_POW_M53;
        let r = (-2.0 * det_ln(u1)).sqrt();
        let (s, c) = det_sincos_turn(u2);
        pair[0] = r * c;
        if let Some(x) = pair.get_mut(1) {
            *x = r * s;
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
    fn det_ln_is_accurate() {
        let mut g = SplitMix64::new(3);
        let mut worst = 0.0f64;
        for i in 0..200_000 {
            let u = if i < 64 {
                2f64.powi(-i)
            } else {
                ((g.next_u64() >> 11) + 1) as f64 * TWO_POW_M53
            };
            let (a, b) = (det_ln(u), u.ln());
            worst = worst.max((a - b).abs() / b.abs().max(1e-300));
            if u == 1.0 {
                assert_eq!(a, 0.0);
            }
        }
        assert!(worst < 1e-15, "{worst}");
        assert_eq!(det_ln(1.0), 0.0);
        assert_eq!(det_ln(0.5), -core::f64::consts::LN_2);
    }

    #[test]
    fn det_sincos_is_accurate() {
        let mut g = SplitMix64::new(4);
        let mut worst = 0.0f64;
        for i in 0..200_000 {
            let u = if i < 1024 {
                i as f64 / 1024.0
            } else {
                (g.next_u64() >> 11) as f64 * TWO_POW_M53
            };
            let th = core::f64::consts::TAU * u;
            let (s, c) = det_sincos_turn(u);
            worst = worst.max((s - th.sin()).abs()).max((c - th.cos()).abs());
        }
        // TAU * u itself is rounded, so compare in absolute terms.
        assert!(worst < 2e-15, "{worst}");
        assert_eq!(det_sincos_turn(0.0), (0.0, 1.0));
        assert!(det_sincos_turn(0.25).1.abs() < 1e-16);
    }

    #[test]
    fn gaussian_known_answer() {
        // Pins the generator + Box-Muller arithmetic (platform independent).
        let mut g = SplitMix64::new(DEFAULT_SEED);
        let mut v = [0.0f64; 4];
        fill_gaussian(&mut g, &mut v);
        let bits: Vec<u64> = v.iter().map(|x| x.to_bits()).collect();
        eprintln!("gaussian KAT: {v:?} {bits:x?}");
        assert_eq!(bits, GAUSSIAN_KAT);
    }

    const GAUSSIAN_KAT: [u64; 4] = [
        0x3fe3_86ed_724e_a4be,
        0xbfec_7814_f005_8583,
        0xbfb1_7a78_e0cf_8994,
        0x3fdd_057a_ed36_d3fe,
    ];

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
