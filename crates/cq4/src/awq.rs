//! AWQ-style input scales from an importance matrix (FORMAT.md §CQ4.16).
//!
//! Column `j` of a Hadamard-family tensor is quantized as `W[., j] * 2^e_j`
//! and the file stores `input_scale_j = 2^e_j`, `recip_j = 2^-e_j`; the
//! kernels multiply the activations by `recip`, so `y = W' (x * recip) ~ W x`.
//! Channels that carry large activations (large importance `a_j`) get
//! `e_j > 0`: their share of the (rotation-spread, isotropic) quantization
//! error shrinks by `2^e_j`. The optimum of that model is
//! `s_j ~ (a_j / c_j)^(1/4)` with `c_j = sum_n W[n][j]^2`
//! (calibration facts, suggestion A); this module takes its power-of-two
//! rounding, computed with integers so every implementation gets the same
//! exponents:
//!
//! - `t_j = a_j / c_j` (f64); a column with `a_j <= 0`, `c_j <= 0` or `t_j`
//!   not a normal f64 gets `e_j = 0` and is left out of the mean;
//! - `E_j` = the binary exponent of `t_j` (`t_j = m * 2^E_j`, `0.5 <= m < 1`);
//! - `M = floor((2 * sum E_j + count) / (2 * count))` (the mean, rounded);
//! - `e_j = clamp(floor((E_j - M + 2) / 4), -3, 3)`.
//!
//! Powers of two keep every stored scale exact (fp16 `2^e` and its
//! reciprocal) and `W * 2^e` exact in f32, so the rest of the quantizer's
//! contract is unchanged.

/// Largest `|e_j|` this module produces (scales from 1/8 to 8).
pub const MAX_EXPONENT: i8 = 3;

/// Rows mapped at a time by [`ColumnSums::add_rows_mapped`].
const MAPPED_ROWS: usize = 64;

/// Per-column sums of squares `c_j = sum_n f64(W[n][j])^2`, accumulated row
/// by row in row order (the order is part of the contract).
#[derive(Debug, Clone)]
pub struct ColumnSums {
    sums: Vec<f64>,
}

impl ColumnSums {
    /// Zero sums for rows of `k` values.
    pub fn new(k: usize) -> Self {
        ColumnSums { sums: vec![0.0; k] }
    }

    /// Add whole rows (`rows.len()` a multiple of `k`; a partial row at the
    /// end is ignored). Columns in bands on rayon's threads: the same
    /// additions in the same order.
    pub fn add_rows(&mut self, rows: &[f32]) {
        // The same additions in the same order on every tier.
        crate::simd::par_column_squares(crate::simd::EncodeIsa::best(), &mut self.sums, rows);
    }

    /// [`ColumnSums::add_rows`] of the rows that `map` makes of `rows`:
    /// `map(src, out)` appends to `out` one value per value of `src` (an
    /// engine's affine transform: value by value); it is called on a part of
    /// a row at a time, a few rows' worth before they are summed, so the
    /// mapped values stay in cache. The same sums as mapping every row
    /// first. Panics if `map` appends a different number of values.
    pub fn add_rows_mapped(&mut self, rows: &[f32], map: impl Fn(&[f32], &mut Vec<f32>) + Sync) {
        let k = self.sums.len();
        if k == 0 {
            return;
        }
        let whole = &rows[..rows.len() / k * k];
        let n = whole.len() / k;
        let isa = crate::simd::EncodeIsa::best();
        crate::simd::par_column_bands(&mut self.sums, whole.len(), |c0, band| {
            let w = band.len();
            let mut buf = Vec::with_capacity(MAPPED_ROWS * w);
            for r0 in (0..n).step_by(MAPPED_ROWS) {
                buf.clear();
                for r in r0..(r0 + MAPPED_ROWS).min(n) {
                    map(&whole[r * k + c0..r * k + c0 + w], &mut buf);
                }
                assert_eq!(
                    buf.len(),
                    ((r0 + MAPPED_ROWS).min(n) - r0) * w,
                    "the map changed the number of values"
                );
                crate::simd::column_squares_of(isa, band, &buf, w, 0);
            }
        });
    }

    /// Multiply every sum by `f` (exact when `f` is a power of two and
    /// the products stay normal, as for sums of squares of f32 values
    /// scaled by `4^e`, `|e| <= 64`).
    pub fn scale(&mut self, f: f64) {
        self.sums.iter_mut().for_each(|s| *s *= f);
    }

    /// The sums.
    pub fn sums(&self) -> &[f64] {
        &self.sums
    }

    /// The sums, owned.
    pub fn into_sums(self) -> Vec<f64> {
        self.sums
    }
}

/// The binary exponent of a positive normal f64 (`frexp` convention).
fn exponent(t: f64) -> i64 {
    ((t.to_bits() >> 52) & 0x7FF) as i64 - 1022
}

/// The exponents `e_j` of the module docs for column sums `c` and
/// importance `a` (same length; extra entries of the longer one are ignored).
pub fn input_exponents(c: &[f64], a: &[f32]) -> Vec<i8> {
    let e: Vec<Option<i64>> = c
        .iter()
        .zip(a)
        .map(|(&c, &a)| {
            let a = a as f64;
            let t = a / c;
            (a > 0.0 && c > 0.0 && t.is_normal()).then(|| exponent(t))
        })
        .collect();
    let (sum, count) = e
        .iter()
        .flatten()
        .fold((0i64, 0i64), |(s, n), &x| (s + x, n + 1));
    if count == 0 {
        return vec![0; e.len()];
    }
    let mean = (2 * sum + count).div_euclid(2 * count);
    let lim = MAX_EXPONENT as i64;
    e.iter()
        .map(|x| match x {
            Some(x) => (x - mean + 2).div_euclid(4).clamp(-lim, lim) as i8,
            None => 0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponent_is_frexp() {
        assert_eq!(exponent(1.0), 1);
        assert_eq!(exponent(0.5), 0);
        assert_eq!(exponent(0.75), 0);
        assert_eq!(exponent(8.0), 4);
        assert_eq!(exponent(f64::MIN_POSITIVE), -1021);
    }

    /// Mapped sums, columns in bands on three threads, equal mapping every
    /// row first and summing one row at a time in plain f64, bit for bit
    /// (widths that split evenly, unevenly, and too few rows to split).
    #[test]
    fn mapped_sums_on_several_threads_are_the_plain_sums() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let mut rng = crate::rng::SplitMix64::new(5);
        for (k, n) in [(640usize, 400usize), (650, 333), (48, 5000), (640, 3)] {
            let mut g = vec![0f64; k * n + 7];
            crate::rng::fill_gaussian(&mut rng, &mut g);
            let rows: Vec<f32> = g
                .iter()
                .enumerate()
                .map(|(i, &x)| (x * 10f64.powi((i % 9) as i32 - 4)) as f32)
                .collect();
            let map = |x: f32| (x + 0.25) * 0.0625 - 1.0;
            let mut want = vec![0f64; k];
            for row in rows.chunks_exact(k) {
                for (s, &x) in want.iter_mut().zip(row) {
                    let v = map(x) as f64;
                    *s += v * v;
                }
            }
            let mut got = ColumnSums::new(k);
            pool.install(|| {
                got.add_rows_mapped(&rows, |src, out| out.extend(src.iter().map(|&x| map(x))))
            });
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(got.sums()), bits(&want), "k {k} rows {n}");
        }
    }

    #[test]
    fn uniform_importance_and_columns_give_unit_scales() {
        let mut c = ColumnSums::new(4);
        c.add_rows(&[1.0, -1.0, 1.0, 1.0, 2.0, 2.0, -2.0, 2.0]);
        assert_eq!(input_exponents(c.sums(), &[3.0; 4]), [0, 0, 0, 0]);
    }

    #[test]
    fn important_columns_scale_up_and_dead_ones_stay() {
        // t = a / c = 2^16, 1, 1, 1, 2^-16 and one column without importance.
        let c = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
        let a = [65536.0, 1.0, 1.0, 1.0, 1.0 / 65536.0, 0.0];
        // E = 17, 1, 1, 1, -15; mean = floor((2*5 + 5) / 10) = 1.
        assert_eq!(input_exponents(&c, &a), [3, 0, 0, 0, -3, 0]);
    }
}
