//! The CQ4 activation rotation in f64, from the container's view alone
//! (independent of the kernels' f32 transform): what the exact check holds
//! the kernels' rotated activations to, and the end-to-end oracle's
//! rotation.

use cq4::hadamard::fwht128;
use weights_file::fp16::{f16_bits_to_f32, f16_bits_to_f64};
use weights_file::panel_view::GROUP;
use weights_file::PanelView;

use crate::bounds::{gamma, TINY};

/// `z = R xs` in f64 for per-column scaled inputs `xs` (`Kp`), and per
/// element the magnitude that bounds an f32 evaluation: Hadamard (per group
/// of 128) `sum_i |xs_i| / sqrt(128)`; orthogonal `sum_k |xs_k R_kj|`.
/// Hadamard: `u_i = left_i xs_i`, `u = FWHT128(u)`, `z_j = right_p u_p /
/// sqrt(128)` with `p = perm[j]`; orthogonal: `z_j = sum_k xs_k R[k][j]`.
pub fn rotate_f64(view: &PanelView<'_>, xs: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let kp = view.geometry().k();
    let mut z = vec![0f64; kp];
    let mut mag = vec![0f64; kp];
    match view.hadamard() {
        None => {
            for (row, &a) in view.r_bytes().chunks_exact(2 * kp).zip(xs) {
                for ((zj, mj), h) in z.iter_mut().zip(mag.iter_mut()).zip(row.chunks_exact(2)) {
                    let p = f16_bits_to_f64(u16::from_le_bytes([h[0], h[1]])) * a;
                    *zj += p;
                    *mj += p.abs();
                }
            }
        }
        Some(h) => {
            let s128 = (GROUP as f64).sqrt();
            for ((xg, zg), mg) in xs
                .chunks_exact(GROUP)
                .zip(z.chunks_exact_mut(GROUP))
                .zip(mag.chunks_exact_mut(GROUP))
            {
                let mut u = [0f64; GROUP];
                for (i, ui) in u.iter_mut().enumerate() {
                    *ui = f64::from(h.left[i]) * xg[i];
                }
                fwht128(&mut u);
                let m = xg.iter().map(|v| v.abs()).sum::<f64>() / s128;
                for ((zj, mj), &p) in zg.iter_mut().zip(mg.iter_mut()).zip(h.perm.iter()) {
                    let p = p as usize;
                    *zj = f64::from(h.right[p]) * u[p] / s128;
                    *mj = m;
                }
            }
        }
    }
    (z, mag)
}

/// The kernels' rotated activations (`x * recip`, then the rotation) in
/// f64, with a proven bound of `|z_f32 - z_f64|` per element for the f32
/// arithmetic the kernels use (`kernels::panel`): Hadamard `g(12)` times
/// the group magnitude (one product, the 7 butterfly levels, the rounded
/// square root and the division); orthogonal `g(Kp + 2)` times `sum_k |x_k
/// r_k R_kj|` (a sequential f32 sum), each plus the subnormal allowance.
pub fn rotated_exact(view: &PanelView<'_>, x: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let kp = view.geometry().k();
    let xs: Vec<f64> = x
        .iter()
        .enumerate()
        .map(|(k, &v)| f64::from(v) * f64::from(f16_bits_to_f32(view.recip(k))))
        .collect();
    let (z, mag) = rotate_f64(view, &xs);
    let (g, abs) = match view.hadamard() {
        Some(_) => (gamma(12), 20.0 * TINY),
        None => (gamma(kp + 2), (2 * kp + 2) as f64 * TINY),
    };
    let bound = mag.iter().map(|m| g * m + abs).collect();
    (z, bound)
}

/// The end-to-end oracle's rotation `t = R (x / input_scale)` (the qdq
/// algebra of `docs/FORMAT.md` §12 moved onto `x`).
pub fn factored(view: &PanelView<'_>, x: &[f32]) -> Vec<f64> {
    let xs: Vec<f64> = x
        .iter()
        .enumerate()
        .map(|(k, &v)| f64::from(v) / f16_bits_to_f64(view.input_scale(k)))
        .collect();
    rotate_f64(view, &xs).0
}
