//! The constants of f32 forward error analysis every bound here is built
//! from.

/// Unit roundoff of f32.
pub const U: f64 = 1.0 / (1u64 << 24) as f64;
/// Smallest positive f32 (subnormal): the absolute error of one operation
/// whose result underflows is at most half of it.
pub const TINY: f64 = 1.401_298_464_324_817e-45;

/// `g(m) = m u / (1 - m u)`.
pub fn gamma(m: usize) -> f64 {
    let mu = m as f64 * U;
    mu / (1.0 - mu)
}
