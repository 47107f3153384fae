//! The per-ISA kernel table type: the function-pointer signatures every
//! tier implements and the safe calls through them. The tables themselves
//! are built in [`crate::dispatch`].

use crate::act::{ActQ8_0, BlockQ8K, Cq4Act, Cq4Rows};
use crate::isa::Isa;
use crate::operands::{CbLut, PanelBlock, RowGroup};

/// One 8-row group kernel of a ggml format: the 8 row slots of `group`
/// against the activation blocks `act`, one f32 result per slot in `out`.
///
/// The SIMD versions are `#[target_feature]` functions, hence `unsafe fn`;
/// the scalar ones coerce to the same type.
pub type GroupFn<A> = unsafe fn(&RowGroup<'_>, &[A], &mut [f32; 8]);

/// One CQ4 super-block kernel: 64 output channels of `block` against the
/// quantized activations.
pub type PanelFn = unsafe fn(&PanelBlock<'_>, &Cq4Act<'_>, &CbLut, &mut [f32; 64]);

/// One 8-row group kernel against `m` activation rows at once (a GEMM
/// tile): `m = out.len() / 8`, `act` holds the rows' blocks one row after
/// the other (`group.nblocks()` each), `out[8 i + slot]` is slot `slot`
/// against row `i`. Row `i`'s eight values are, bit for bit, what the
/// tier's [`GroupFn`] gives for row `i` alone: each weight block is
/// decoded once and dotted with every row.
pub type GroupGemmFn<A> = unsafe fn(&RowGroup<'_>, &[A], &mut [f32]);

/// One CQ4 super-block against every row of `rows` (a GEMM tile):
/// `out[64 i + c]` (`out.len() == 64 * rows.rows()`), bit for bit the
/// tier's [`PanelFn`] on row `i` alone.
pub type PanelGemmFn = unsafe fn(&PanelBlock<'_>, &Cq4Rows<'_>, &CbLut, &mut [f32]);

/// The multi-row (GEMM) kernels of one tier; `None` where the tier has
/// none (the GEMM then runs the tier's GEMV kernel once per activation
/// row, which gives the same bits).
#[derive(Debug, Clone, Copy)]
pub struct GemmKernels {
    pub(crate) q8_0: Option<GroupGemmFn<ActQ8_0>>,
    pub(crate) q4_0: Option<GroupGemmFn<ActQ8_0>>,
    pub(crate) q4_1: Option<GroupGemmFn<ActQ8_0>>,
    pub(crate) q5_0: Option<GroupGemmFn<ActQ8_0>>,
    pub(crate) q5_1: Option<GroupGemmFn<ActQ8_0>>,
    pub(crate) q4_k: Option<GroupGemmFn<BlockQ8K>>,
    pub(crate) q5_k: Option<GroupGemmFn<BlockQ8K>>,
    pub(crate) q6_k: Option<GroupGemmFn<BlockQ8K>>,
    pub(crate) q2_k: Option<GroupGemmFn<BlockQ8K>>,
    pub(crate) q3_k: Option<GroupGemmFn<BlockQ8K>>,
    pub(crate) iq4_nl: Option<GroupGemmFn<ActQ8_0>>,
    pub(crate) iq4_xs: Option<GroupGemmFn<BlockQ8K>>,
    pub(crate) cq4: Option<PanelGemmFn>,
}

impl GemmKernels {
    /// No multi-row kernel at all (the scalar tier: its GEMM is the GEMV
    /// kernel per row, the definition).
    pub(crate) const NONE: GemmKernels = GemmKernels {
        q8_0: None,
        q4_0: None,
        q4_1: None,
        q5_0: None,
        q5_1: None,
        q4_k: None,
        q5_k: None,
        q6_k: None,
        q2_k: None,
        q3_k: None,
        iq4_nl: None,
        iq4_xs: None,
        cq4: None,
    };
}

/// The orthogonal activation transform of one tier:
/// `z_j = sum_k (x_k * recip_k) * R[k][j]` (see [`crate::panel`]).
pub type RotateFn = unsafe fn(&[f32], &[f32], &[u8], &mut [f32]);

/// The kernels of one tier. A `&Kernels` can only be obtained from
/// [`kernels`](crate::dispatch::kernels), which checks that the CPU supports the tier; that is the
/// safety argument of every call through these pointers.
#[derive(Debug)]
pub struct Kernels {
    pub(crate) isa: Isa,
    pub(crate) q8_0: GroupFn<ActQ8_0>,
    pub(crate) q4_0: GroupFn<ActQ8_0>,
    pub(crate) q4_1: GroupFn<ActQ8_0>,
    pub(crate) q5_0: GroupFn<ActQ8_0>,
    pub(crate) q5_1: GroupFn<ActQ8_0>,
    pub(crate) q4_k: GroupFn<BlockQ8K>,
    pub(crate) q5_k: GroupFn<BlockQ8K>,
    pub(crate) q6_k: GroupFn<BlockQ8K>,
    pub(crate) q2_k: GroupFn<BlockQ8K>,
    pub(crate) q3_k: GroupFn<BlockQ8K>,
    pub(crate) iq4_nl: GroupFn<ActQ8_0>,
    pub(crate) iq4_xs: GroupFn<BlockQ8K>,
    pub(crate) cq4: PanelFn,
    pub(crate) rotate: RotateFn,
    pub(crate) gemm: GemmKernels,
}

macro_rules! safe_group {
    ($(#[$doc:meta])* $name:ident, $field:ident, $act:ty) => {
        $(#[$doc])*
        pub fn $name(&self, g: &RowGroup<'_>, act: &[$act], out: &mut [f32; 8]) {
            // SAFETY: a `Kernels` value is only handed out by `kernels()` for
            // a tier the CPU supports (Isa::is_available).
            unsafe { (self.$field)(g, act, out) }
        }
    };
}

impl Kernels {
    /// The tier of this table.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    safe_group!(
        /// Q8_0 group kernel of this tier.
        q8_0_group, q8_0, ActQ8_0
    );
    safe_group!(
        /// Q4_0 group kernel of this tier.
        q4_0_group, q4_0, ActQ8_0
    );
    safe_group!(
        /// Q4_1 group kernel of this tier.
        q4_1_group, q4_1, ActQ8_0
    );
    safe_group!(
        /// Q5_0 group kernel of this tier.
        q5_0_group, q5_0, ActQ8_0
    );
    safe_group!(
        /// Q5_1 group kernel of this tier.
        q5_1_group, q5_1, ActQ8_0
    );
    safe_group!(
        /// Q4_K group kernel of this tier.
        q4_k_group, q4_k, BlockQ8K
    );
    safe_group!(
        /// Q5_K group kernel of this tier.
        q5_k_group, q5_k, BlockQ8K
    );
    safe_group!(
        /// Q6_K group kernel of this tier.
        q6_k_group, q6_k, BlockQ8K
    );
    safe_group!(
        /// Q2_K group kernel of this tier.
        q2_k_group, q2_k, BlockQ8K
    );
    safe_group!(
        /// Q3_K group kernel of this tier.
        q3_k_group, q3_k, BlockQ8K
    );
    safe_group!(
        /// IQ4_NL group kernel of this tier.
        iq4_nl_group, iq4_nl, ActQ8_0
    );
    safe_group!(
        /// IQ4_XS group kernel of this tier.
        iq4_xs_group, iq4_xs, BlockQ8K
    );

    /// The orthogonal activation transform of this tier: `x`, `recip` and
    /// `z` hold `Kp` values, `r` the `Kp x Kp` fp16 R (LE bytes).
    pub fn orthogonal_rotate(&self, x: &[f32], recip: &[f32], r: &[u8], z: &mut [f32]) {
        // SAFETY: a `Kernels` value is only handed out by `kernels()` for a
        // tier the CPU supports (Isa::is_available).
        unsafe { (self.rotate)(x, recip, r, z) }
    }

    /// Whether this tier has any multi-row (GEMM) kernel (otherwise its
    /// GEMM runs the GEMV kernels once per activation row).
    pub fn has_gemm(&self) -> bool {
        let g = &self.gemm;
        [
            g.q8_0.is_some(),
            g.q4_0.is_some(),
            g.q4_1.is_some(),
            g.q5_0.is_some(),
            g.q5_1.is_some(),
            g.q4_k.is_some(),
            g.q5_k.is_some(),
            g.q6_k.is_some(),
            g.q2_k.is_some(),
            g.q3_k.is_some(),
            g.iq4_nl.is_some(),
            g.iq4_xs.is_some(),
            g.cq4.is_some(),
        ]
        .contains(&true)
    }

    /// Whether this tier has a multi-row (GEMM) kernel for CQ4 panels
    /// (without one, [`Kernels::cq4_superblock_gemm`] runs the GEMV kernel
    /// per row).
    pub fn has_cq4_gemm(&self) -> bool {
        self.gemm.cq4.is_some()
    }

    /// CQ4 super-block against every row of `rows`: `out[64 i + c]`, bit
    /// for bit [`Kernels::cq4_superblock`] of row `i` (`out.len()` must be
    /// `64 * rows.rows()`, and `rows` must have the block's groups).
    pub fn cq4_superblock_gemm(
        &self,
        b: &PanelBlock<'_>,
        rows: &Cq4Rows<'_>,
        lut: &CbLut,
        out: &mut [f32],
    ) {
        assert!(
            out.len() == 64 * rows.rows() && rows.groups() == b.groups(),
            "GEMM tile shape"
        );
        match self.gemm.cq4 {
            // SAFETY: a `Kernels` value is only handed out by `kernels()`
            // for a tier the CPU supports; shapes checked above.
            Some(f) => unsafe { f(b, rows, lut, out) },
            None => {
                for (i, o) in out.chunks_exact_mut(64).enumerate() {
                    let o: &mut [f32; 64] = o.try_into().expect("64 channels");
                    self.cq4_superblock(b, &rows.row(i), lut, o);
                }
            }
        }
    }

    /// CQ4 super-block kernel of this tier.
    pub fn cq4_superblock(
        &self,
        b: &PanelBlock<'_>,
        act: &Cq4Act<'_>,
        lut: &CbLut,
        out: &mut [f32; 64],
    ) {
        // SAFETY: a `Kernels` value is only handed out by `kernels()` for a
        // tier the CPU supports (Isa::is_available).
        unsafe { (self.cq4)(b, act, lut, out) }
    }
}
