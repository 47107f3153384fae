//! The Hadamard rotation family: `R = (diag(left) H diag(right))[:, perm]`
//! with `H` the 128 x 128 Sylvester Hadamard matrix scaled by `1/sqrt(128)`.

use crate::rng::SplitMix64;

/// Width of a Hadamard group (and of the rotation).
pub const HADAMARD_N: usize = 128;

/// `1.5 * 2^24`: `(u + FIXED_MAGIC) - FIXED_MAGIC` rounds `|u| <= 1` to the
/// nearest multiple of 2^-28, ties to even (both operations are exact except
/// the one rounding of the addition).
pub(crate) const FIXED_MAGIC: f64 = 25_165_824.0;

/// The per-bundle Hadamard parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HadamardRotation {
    /// Left signs (+1 / -1).
    pub left: [i8; HADAMARD_N],
    /// Right signs (+1 / -1).
    pub right: [i8; HADAMARD_N],
    /// Column permutation (a permutation of 0..128).
    pub perm: [u32; HADAMARD_N],
}

impl HadamardRotation {
    /// Draw the parameters from `SplitMix64::new(bundle_seed)`:
    /// 128 draws for `left` (top bit 1 -> -1, 0 -> +1), then 128 for `right`,
    /// then Fisher–Yates on `perm = [0, 1, .., 127]`: for `i` from 127 down to
    /// 1, `j = next_u64() % (i + 1)`, swap `perm[i]` and `perm[j]`.
    pub fn from_seed(bundle_seed: u64) -> Self {
        let mut rng = SplitMix64::new(bundle_seed);
        let mut left = [0i8; HADAMARD_N];
        let mut right = [0i8; HADAMARD_N];
        for s in left.iter_mut() {
            *s = if rng.next_u64() >> 63 == 1 { -1 } else { 1 };
        }
        for s in right.iter_mut() {
            *s = if rng.next_u64() >> 63 == 1 { -1 } else { 1 };
        }
        let mut perm = [0u32; HADAMARD_N];
        for (i, p) in perm.iter_mut().enumerate() {
            *p = i as u32;
        }
        for i in (1..HADAMARD_N).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            perm.swap(i, j);
        }
        HadamardRotation { left, right, perm }
    }

    /// Validate parameters read from a file: signs are +-1 and `perm` is a
    /// permutation of 0..128.
    pub fn from_parts(
        left: [i8; HADAMARD_N],
        right: [i8; HADAMARD_N],
        perm: [u32; HADAMARD_N],
    ) -> Option<Self> {
        if left.iter().chain(&right).any(|&s| s != 1 && s != -1) {
            return None;
        }
        let mut seen = [false; HADAMARD_N];
        for &p in &perm {
            let p = p as usize;
            if p >= HADAMARD_N || seen[p] {
                return None;
            }
            seen[p] = true;
        }
        Some(HadamardRotation { left, right, perm })
    }

    /// The dense rotation `R[k][j] = left[k] * H[k][perm[j]] * right[perm[j]] / sqrt(128)`
    /// (row-major, f64), for tests and documentation.
    pub fn dense(&self) -> Vec<f64> {
        let s = (HADAMARD_N as f64).sqrt();
        let mut r = vec![0.0; HADAMARD_N * HADAMARD_N];
        for k in 0..HADAMARD_N {
            for j in 0..HADAMARD_N {
                let p = self.perm[j] as usize;
                let h = if (k & p).count_ones().is_multiple_of(2) {
                    1.0
                } else {
                    -1.0
                };
                r[k * HADAMARD_N + j] = self.left[k] as f64 * h * self.right[p] as f64 / s;
            }
        }
        r
    }
}

/// `sqrt(128)` as the nearest f64 (the scale of the normalized transform).
pub(crate) fn sqrt128() -> f64 {
    (HADAMARD_N as f64).sqrt()
}

/// One group back from rotated coordinates (FORMAT.md §CQ4.12): `y` the
/// codebook values of its 128 indices, `nrm` its stored norm;
/// `((left[i] * FWHT(z)[i]) / SQRT128) * nrm` with `z[perm[j]] =
/// right[perm[j]] * y[j]`, before any input scale. Shared by the decoder
/// and GPTQ's reconstruction (§CQ4.18), so both are the same operations.
pub(crate) fn unrotate_group(had: &HadamardRotation, y: &[f64], nrm: f64) -> [f64; HADAMARD_N] {
    let s128 = sqrt128();
    let mut z = [0.0f64; HADAMARD_N];
    for (j, &yj) in y.iter().enumerate() {
        let p = had.perm[j] as usize;
        z[p] = had.right[p] as f64 * yj;
    }
    fwht128(&mut z);
    for (zi, &l) in z.iter_mut().zip(&had.left) {
        *zi = ((l as f64 * *zi) / s128) * nrm;
    }
    z
}

/// In-place fast Walsh–Hadamard transform (unnormalized, Sylvester order):
/// `x <- H x` with `H[i][j] = (-1)^popcount(i & j)`. Butterfly order: for
/// `h = 1, 2, 4, .., 64`; for each block start `i = 0, 2h, 4h, ..`; for
/// `t in i..i+h`: `(a, b) = (x[t], x[t+h]); x[t] = a + b; x[t+h] = a - b`.
/// On CQ4 inputs every intermediate is exact, so the order is immaterial.
#[inline]
pub fn fwht128(x: &mut [f64; HADAMARD_N]) {
    let mut h = 1;
    while h < HADAMARD_N {
        for block in x.chunks_exact_mut(2 * h) {
            let (lo, hi) = block.split_at_mut(h);
            for (a, b) in lo.iter_mut().zip(hi.iter_mut()) {
                let (p, q) = (*a, *b);
                *a = p + q;
                *b = p - q;
            }
        }
        h *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::DEFAULT_SEED;

    #[test]
    fn parameters_are_valid_and_seeded() {
        let a = HadamardRotation::from_seed(DEFAULT_SEED);
        assert!(HadamardRotation::from_parts(a.left, a.right, a.perm).is_some());
        let b = HadamardRotation::from_seed(DEFAULT_SEED + 1);
        assert_ne!(a, b);
        assert_eq!(a, HadamardRotation::from_seed(DEFAULT_SEED));
        // Roughly balanced signs, non-trivial permutation.
        let neg = a.left.iter().filter(|&&s| s < 0).count();
        assert!((40..88).contains(&neg));
        assert!(
            a.perm
                .iter()
                .enumerate()
                .filter(|(i, &p)| *i as u32 == p)
                .count()
                < 10
        );
        let mut bad = a.perm;
        bad[0] = bad[1];
        assert!(HadamardRotation::from_parts(a.left, a.right, bad).is_none());
        let mut bad = a.left;
        bad[3] = 0;
        assert!(HadamardRotation::from_parts(bad, a.right, a.perm).is_none());
    }

    #[test]
    fn seed_zero_first_draws() {
        // SplitMix64(0) first output 0xE220.. has its top bit set -> left[0] = -1;
        // second 0x6E78.. -> +1; third 0x06C4.. -> +1.
        let r = HadamardRotation::from_seed(0);
        assert_eq!(&r.left[..3], &[-1, 1, 1]);
    }

    #[test]
    fn dense_is_orthogonal() {
        let r = HadamardRotation::from_seed(DEFAULT_SEED).dense();
        let n = HADAMARD_N;
        for a in 0..n {
            for b in 0..n {
                let mut dot = 0.0;
                for k in 0..n {
                    dot += r[a * n + k] * r[b * n + k];
                }
                let want = if a == b { 1.0 } else { 0.0 };
                assert!((dot - want).abs() < 1e-12, "({a},{b}) {dot}");
            }
        }
    }

    #[test]
    fn fwht_matches_explicit_matrix() {
        let mut rng = SplitMix64::new(7);
        let mut x = [0.0f64; HADAMARD_N];
        for v in x.iter_mut() {
            *v = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
        }
        let mut y = x;
        fwht128(&mut y);
        for (i, &yi) in y.iter().enumerate() {
            let mut s = 0.0;
            for (j, &xj) in x.iter().enumerate() {
                s += if (i & j).count_ones().is_multiple_of(2) {
                    xj
                } else {
                    -xj
                };
            }
            assert!((s - yi).abs() < 1e-12);
        }
        // And on fixed-point inputs (multiples of 2^-28, |x| <= 1) it is exact:
        // equal to the explicit sum in any order.
        let mut u = [0.0f64; HADAMARD_N];
        for (i, v) in u.iter_mut().enumerate() {
            let raw = x[i] * 2.0 / 11.3;
            *v = (raw + FIXED_MAGIC) - FIXED_MAGIC;
        }
        let mut y = u;
        fwht128(&mut y);
        for (i, &yi) in y.iter().enumerate() {
            let mut s = 0.0;
            for j in (0..HADAMARD_N).rev() {
                s += if (i & j).count_ones().is_multiple_of(2) {
                    u[j]
                } else {
                    -u[j]
                };
            }
            assert_eq!(s, yi);
        }
    }
}
