//! The scalar reference kernels: written for clarity, they *are* the
//! definition every SIMD path must equal bit for bit.
//!
//! - ggml formats: each row of a [`RowGroup`] is
//!   `y = sum over blocks b in order of F::block_contrib(w_b, a_b)`,
//!   accumulated in f32 starting from 0 (see [`crate::format`]).
//! - CQ4 panels: see [`cq4_superblock`].
//!
//! They have the same signatures as the `#[target_feature]` kernels in
//! `x86::avx2` / `x86::avx512` so one dispatch table type holds them all.

use crate::act::{ActQ8_0, BlockQ8K, Cq4Act};
use crate::format::{
    GgmlFormat, Iq4Nl, Iq4Xs, Q2K, Q3K, Q4K, Q4_0, Q4_1, Q5K, Q5_0, Q5_1, Q6K, Q8_0,
};
use crate::operands::RowGroup;
use crate::operands::{CbLut, PanelBlock, KG_PER_GROUP};

/// Every slot of `g`: sequential f32 sum of the block contributions.
pub fn group<F: GgmlFormat>(g: &RowGroup<'_>, act: &[F::Act], out: &mut [f32; 8]) {
    assert!(act.len() >= g.nblocks(), "activation blocks");
    for (slot, o) in out.iter_mut().enumerate() {
        let mut acc = 0.0f32;
        for (b, a) in act.iter().enumerate().take(g.nblocks()) {
            acc += F::block_contrib(g.block(slot, b), a);
        }
        *o = acc;
    }
}

/// Q8_0 group kernel (reference).
pub fn q8_0_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    group::<Q8_0>(g, act, out)
}

/// Q4_0 group kernel (reference).
pub fn q4_0_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    group::<Q4_0>(g, act, out)
}

/// Q4_1 group kernel (reference).
pub fn q4_1_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    group::<Q4_1>(g, act, out)
}

/// Q5_0 group kernel (reference).
pub fn q5_0_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    group::<Q5_0>(g, act, out)
}

/// Q5_1 group kernel (reference).
pub fn q5_1_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    group::<Q5_1>(g, act, out)
}

/// Q4_K group kernel (reference).
pub fn q4_k_group(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    group::<Q4K>(g, act, out)
}

/// Q5_K group kernel (reference).
pub fn q5_k_group(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    group::<Q5K>(g, act, out)
}

/// Q6_K group kernel (reference).
pub fn q6_k_group(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    group::<Q6K>(g, act, out)
}

/// Q2_K group kernel (reference).
pub fn q2_k_group(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    group::<Q2K>(g, act, out)
}

/// Q3_K group kernel (reference).
pub fn q3_k_group(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    group::<Q3K>(g, act, out)
}

/// IQ4_NL group kernel (reference).
pub fn iq4_nl_group(g: &RowGroup<'_>, act: &[ActQ8_0], out: &mut [f32; 8]) {
    group::<Iq4Nl>(g, act, out)
}

/// IQ4_XS group kernel (reference).
pub fn iq4_xs_group(g: &RowGroup<'_>, act: &[BlockQ8K], out: &mut [f32; 8]) {
    group::<Iq4Xs>(g, act, out)
}

/// One CQ4 super-block (64 output channels), the reference:
///
/// ```text
/// for each channel c:
///   acc = 0.0f32
///   for g in 0..ng (in order):
///     isum = sum_{k in group g} cb_i8[idx(c, k)] * q[k]        (exact i32)
///     acc  = acc + (f32(isum) * scale[g]) * folded[g][c]        (two f32 products, then add; no FMA)
///   out[c] = acc
/// ```
///
/// `idx(c, k)`: in kg-block `(g, kg)` (128 bytes), byte `2c + kc/2`, low
/// nibble for even `kc`. `folded[g][c]` is the fp32 folded norm of the
/// super-block (`fp32(norm) * cb_scale`).
pub fn cq4_superblock(b: &PanelBlock<'_>, act: &Cq4Act<'_>, lut: &CbLut, out: &mut [f32; 64]) {
    let ng = b.groups();
    assert!(
        act.q.len() >= ng * 128 && act.scale.len() >= ng,
        "activations"
    );
    let cb = lut.cb_i8();
    for (c, o) in out.iter_mut().enumerate() {
        let mut acc = 0.0f32;
        for g in 0..ng {
            let mut isum = 0i32;
            for kg in 0..KG_PER_GROUP {
                let blk = b.kg_block(g, kg);
                let (b0, b1) = (blk[2 * c], blk[2 * c + 1]);
                let idx = [b0 & 15, b0 >> 4, b1 & 15, b1 >> 4];
                for (kc, &i) in idx.iter().enumerate() {
                    isum += cb[i as usize] as i32 * act.q[g * 128 + kg * 4 + kc] as i32;
                }
            }
            acc += (isum as f32 * act.scale[g]) * b.folded(g, c);
        }
        *o = acc;
    }
}

/// The orthogonal activation transform (reference): `z` (`Kp`) from `x`,
/// `recip` (`Kp`) and R (`Kp x Kp` fp16 LE, row-major):
///
/// ```text
/// z = 0; for k in 0..Kp: a = x[k] * recip[k]; for j: z[j] = z[j] + a * R[k][j]
/// ```
///
/// i.e. for each `j` a sequential f32 sum over `k` (products rounded, then
/// added; no FMA).
pub fn orthogonal_rotate(x: &[f32], recip: &[f32], r: &[u8], z: &mut [f32]) {
    let kp = x.len();
    assert!(
        recip.len() == kp && z.len() == kp && r.len() == 2 * kp * kp,
        "shapes"
    );
    z.fill(0.0);
    for ((&xk, &rk), row) in x.iter().zip(recip).zip(r.chunks_exact(2 * kp)) {
        let a = xk * rk;
        for (zj, h) in z.iter_mut().zip(row.chunks_exact(2)) {
            *zj += a * ggml_quants::float::fp16_to_f32([h[0], h[1]]);
        }
    }
}
