//! ggml's scale searches (the static helpers of `ggml-quants.c`):
//! `nearest_int`, `make_qx_quants`, `make_q3_quants`, `make_qkx2_quants`,
//! `make_qkx3_quants`, `make_qp_quants` and `best_index_int8`.
//!
//! Each is written operation for operation in f32 as ggml's C evaluates it
//! (left to right, no contraction into fused multiply-adds, the same integer
//! to float conversions and the same wrap of `int` into `uint8_t` / `int8_t`
//! arrays), because the bytes of the quantized blocks depend on every
//! rounding. Inputs are fixed-size arrays so no index can be out of bounds.
#![allow(clippy::needless_range_loop)]

/// ggml's `GROUP_MAX_EPS`: below this absolute max a group counts as all zero.
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int`: round to nearest (ties to even) through the
/// 1.5 * 2^23 magic constant. Exact for |v| <= 4194303; larger inputs give
/// the same (meaningless) bits ggml computes, never a panic.
#[inline]
pub(crate) fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12_582_912.0f32;
    let i = val.to_bits() as i32;
    (i & 0x007f_ffff) - 0x0040_0000
}

/// The first value of `x` with the largest magnitude, and that magnitude
/// (`(0, 0)` when every value is 0): ggml's `max` / `amax` scan.
pub(crate) fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    (max, amax)
}

/// ggml's `make_qx_quants` with `rmse_type == 1` (the only form ggml's
/// quantizers call): symmetric quants in `-nmax..nmax`, written to `out_l`
/// biased by `nmax`; returns the least-squares scale. The weight of value
/// `i` is `qw[i]`, or `x[i]^2` without `qw`.
pub(crate) fn make_qx_quants<const N: usize>(
    nmax: i32,
    x: &[f32; N],
    out_l: &mut [i8; N],
    qw: Option<&[f32; N]>,
) -> f32 {
    let weight = |i: usize| match qw {
        Some(q) => q[i],
        None => x[i] * x[i],
    };
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        *out_l = [0; N];
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    let mut iscale = -nmaxf / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for i in 0..N {
        let l = clamp(nearest_int(iscale * x[i]));
        out_l[i] = (l + nmax) as i8;
        let w = weight(i);
        let lf = l as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    // C: `suml2 ? sumlx/suml2 : 0` (NaN counts as true, as `!=` does here).
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmaxf + 0.1f32 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for i in 0..N {
            let l = clamp(nearest_int(iscale * x[i]));
            let w = weight(i);
            let lf = l as f32;
            sumlx += w * x[i] * lf;
            suml2 += w * lf * lf;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..N {
                out_l[i] = (nmax + clamp(nearest_int(iscale * x[i]))) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// ggml's `make_q3_quants` with `do_rmse == true` (Q3_K's reference
/// quantizer): weights `x^2`, up to 5 passes of per-value re-rounding.
/// Writes quants biased by `nmax` (0..2*nmax) and returns the scale.
pub(crate) fn make_q3_quants<const N: usize>(nmax: i32, x: &[f32; N], out_l: &mut [i8; N]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        *out_l = [0; N];
        return 0.0;
    }
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    let iscale = -(nmax as f32) / max;
    let mut l_int = [0i32; N];
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for i in 0..N {
        let l = clamp(nearest_int(iscale * x[i]));
        l_int[i] = l;
        let w = x[i] * x[i];
        let lf = l as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for i in 0..N {
            let w = x[i] * x[i];
            let li = l_int[i] as f32;
            let mut slx = sumlx - w * x[i] * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = clamp(nearest_int(x[i] * sl2 / slx));
                if new_l != l_int[i] {
                    let nl = new_l as f32;
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l_int[i] = new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for i in 0..N {
        out_l[i] = (l_int[i] + nmax) as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Which of ggml's two asymmetric searches: they differ only in the test
/// for a degenerate group (`max == min` vs `max <= min`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Qkx {
    /// `make_qkx2_quants` (the reference quantizers).
    Two,
    /// `make_qkx3_quants` (the importance-weighted quantizers).
    Three,
}

/// The scale grid of [`make_qkx_quants`]: `nstep + 1` candidate inverse
/// scales `(nmax + rmin + rdelta * i) / (max - min)`; `use_mad`: judge by
/// weighted absolute (not squared) error.
#[derive(Clone, Copy)]
pub(crate) struct Grid {
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
    pub use_mad: bool,
}

impl Grid {
    /// The grid of ggml's `make_qkx3_quants` callers (rmin -0.9, rdelta
    /// 0.05, 36 steps, squared error).
    pub(crate) const QKX3: Grid = Grid {
        rmin: -0.9,
        rdelta: 0.05,
        nstep: 36,
        use_mad: false,
    };
}

/// ggml's `make_qkx2_quants` / `make_qkx3_quants` with explicit weights:
/// asymmetric quants `0..=nmax` with a min clamped to `<= 0`. Writes `L`
/// and returns `(scale, the_min)` where `the_min = -min >= 0`.
pub(crate) fn make_qkx_quants<const N: usize>(
    variant: Qkx,
    nmax: i32,
    x: &[f32; N],
    weights: &[f32; N],
    out_l: &mut [u8; N],
    grid: Grid,
) -> (f32, f32) {
    let Grid {
        rmin,
        rdelta,
        nstep,
        use_mad,
    } = grid;
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..N {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    let degenerate = match variant {
        Qkx::Two => max == min,
        Qkx::Three => max <= min,
    };
    if degenerate {
        *out_l = [0; N];
        return (0.0, -min);
    }
    let err = |d: f32| if use_mad { d.abs() } else { d * d };
    let nmaxf = nmax as f32;
    let mut iscale = nmaxf / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..N {
        let l = nearest_int(iscale * (x[i] - min));
        out_l[i] = l.clamp(0, nmax) as u8;
        let diff = scale * out_l[i] as f32 + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    let mut laux = [0u8; N];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmaxf) / (max - min);
        let mut sum_l = 0.0f32;
        let mut sum_l2 = 0.0f32;
        let mut sum_xl = 0.0f32;
        for i in 0..N {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let big_d = sum_w * sum_l2 - sum_l * sum_l;
        if big_d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / big_d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / big_d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..N {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                *out_l = laux;
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// ggml's `make_qp_quants`: quantizes the non-negative values `x` (the
/// sub-block scales or mins of a super-block) to `0..=nmax` under the
/// weights `qw`, and returns the scale. `L` is a `uint8_t` array in ggml, so
/// an out-of-range integer is stored modulo 256, here too.
pub(crate) fn make_qp_quants<const N: usize>(
    nmax: i32,
    x: &[f32; N],
    out_l: &mut [u8; N],
    qw: &[f32; N],
) -> f32 {
    let mut max = 0.0f32;
    for &v in x {
        // C: MAX(max, x) = max > x ? max : x
        max = if max > v { max } else { v };
    }
    if max < GROUP_MAX_EPS {
        *out_l = [0; N];
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let mut iscale = nmaxf / max;
    for i in 0..N {
        out_l[i] = nearest_int(iscale * x[i]) as u8;
    }
    let scale = 1.0 / iscale;
    let mut best_mse = 0.0f32;
    for i in 0..N {
        let diff = x[i] - scale * out_l[i] as f32;
        best_mse += qw[i] * diff * diff;
    }
    for is in -4..=4 {
        if is == 0 {
            continue;
        }
        let iscale_is = (0.1f32 * is as f32 + nmaxf) / max;
        let scale_is = 1.0 / iscale_is;
        let mut mse = 0.0f32;
        for i in 0..N {
            let l = nearest_int(iscale_is * x[i]).min(nmax);
            let diff = x[i] - scale_is * l as f32;
            mse += qw[i] * diff * diff;
        }
        if mse < best_mse {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for i in 0..N {
        let l = nearest_int(iscale * x[i]).min(nmax);
        out_l[i] = l as u8;
        let w = qw[i];
        let lf = l as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for i in 0..N {
            let w = qw[i];
            let li = out_l[i] as f32;
            let mut slx = sumlx - w * x[i] * li;
            let mut sl2 = suml2 - w * li * li;
            if slx > 0.0 && sl2 > 0.0 {
                let new_l = nearest_int(x[i] * sl2 / slx).min(nmax);
                if new_l != out_l[i] as i32 {
                    let nl = new_l as f32;
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if slx * slx * suml2 > sumlx * sumlx * sl2 {
                        out_l[i] = new_l as u8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// ggml's `best_index_int8`: the index of the entry of the sorted table
/// `values` nearest to `x` (binary search; a tie goes to the upper entry).
pub(crate) fn best_index_int8<const N: usize>(values: &[i8; N], x: f32) -> usize {
    if N == 0 || x <= values[0] as f32 {
        return 0;
    }
    if x >= values[N - 1] as f32 {
        return N - 1;
    }
    let mut ml = 0usize;
    let mut mu = N - 1;
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < values[mav] as f32 {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - (values[mu - 1] as f32) < values[mu] as f32 - x {
        mu - 1
    } else {
        mu
    }
}
