//! CQ4 packed-panel matrices and their GEMV driver.
//!
//! # Activation transform (once per call, shared by every tier)
//!
//! With `r_k = f32(recip_fp16[k])`:
//!
//! - Hadamard, per group `g` of 128 columns (`i = 0..128`, `k = 128g + i`):
//!   `u_i = (x_k * r_k) * left_i`; `u = FWHT128(u)` in f32 (butterflies
//!   `h = 1, 2, .., 64`, `(a, b) -> (a + b, a - b)`, the order of
//!   the f64 `cq4::hadamard::fwht128` of the encoder); `z_{128g+j} = (u_p * right_p) / sqrt(128)` with
//!   `p = perm[j]` and `sqrt(128)` the f32 square root.
//! - Orthogonal: `a_k = x_k * r_k`; `z_j = sum_k a_k * R[k][j]`, f32, summed
//!   sequentially over `k = 0..Kp` starting from 0 (R = the fp16 `R` region
//!   widened to f32); then virtual groups of 128.
//! - Per group: [`crate::act::quantize_groups`].
//!
//! # Kernel
//!
//! [`crate::scalar::cq4_superblock`] defines the arithmetic; the driver runs
//! one super-block (64 channels) per kernel call, super-blocks split over
//! rayon tasks.

use weights_file::fp16::f16_bits_to_f32;
use weights_file::panel::{RotationFamily, SUPER_BLOCK};
use weights_file::{PanelView, WeightsFile};

use crate::act::{quantize_groups, Cq4Act, Cq4Rows};
use crate::dispatch::{kernels, Exec};
use crate::error::{check_len, KernelError};
use crate::gemv::{weight_stationary, Dims, Gemv, GemvResult};
pub use crate::operands::{
    CbLut, PanelBlock, FOLDED_GROUP_BYTES, GROUP, GROUP_BYTES, KG_BYTES, KG_PER_GROUP,
};
use crate::workspace::Workspace;

/// The rotation of a panel tensor, widened for the f32 transform.
#[derive(Debug, Clone)]
enum Rotation<'a> {
    Hadamard {
        left: Box<[f32; GROUP]>,
        right: Box<[f32; GROUP]>,
        perm: Box<[usize; GROUP]>,
    },
    Orthogonal {
        /// R, `Kp x Kp` row-major, fp16 LE (borrowed from the scales blob).
        r: &'a [u8],
    },
}

/// A CQ4 packed-panel matrix over a validated [`PanelView`]: borrowed
/// panels, folded norms and norms; owned widened codebook, reciprocal
/// scales and rotation.
#[derive(Debug, Clone)]
pub struct PanelMatrix<'a> {
    view: PanelView<'a>,
    lut: CbLut,
    codebook: [f32; 16],
    recip: Vec<f32>,
    input_scale: Vec<f32>,
    rotation: Rotation<'a>,
}

/// In-place f32 FWHT of 128 values (the butterfly order of the module docs).
pub fn fwht128_f32(x: &mut [f32; GROUP]) {
    let mut h = 1;
    while h < GROUP {
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

impl<'a> PanelMatrix<'a> {
    /// The matrix of a validated tensor (every check is the view's).
    pub fn new(view: PanelView<'a>) -> Self {
        let kp = view.geometry().k();
        let widen = |f: &dyn Fn(usize) -> u16| -> Vec<f32> {
            (0..kp).map(|k| f16_bits_to_f32(f(k))).collect()
        };
        let recip = widen(&|k| view.recip(k));
        let input_scale = widen(&|k| view.input_scale(k));
        let rotation = match view.hadamard() {
            Some(p) => Rotation::Hadamard {
                left: Box::new(p.left.map(f32::from)),
                right: Box::new(p.right.map(f32::from)),
                perm: Box::new(p.perm.map(|v| v as usize)),
            },
            None => Rotation::Orthogonal { r: view.r_bytes() },
        };
        PanelMatrix {
            lut: CbLut::new(view.cb_i8()),
            codebook: view.codebook(),
            recip,
            input_scale,
            rotation,
            view,
        }
    }

    /// The matrix of a `.cq4p.weights` container.
    pub fn from_file(f: &WeightsFile<'a>) -> Result<Self, KernelError> {
        PanelView::from_file(f)
            .map(Self::new)
            .map_err(|e| KernelError::Panel(e.to_string()))
    }

    /// The validated view the matrix reads.
    pub fn view(&self) -> &PanelView<'a> {
        &self.view
    }

    /// The rotation family.
    pub fn family(&self) -> RotationFamily {
        self.view.family()
    }

    /// Groups per row (`Kp / 128`).
    pub fn groups(&self) -> usize {
        self.view.geometry().num_groups()
    }

    /// The int8 codebook.
    pub fn lut(&self) -> &CbLut {
        &self.lut
    }

    /// Super-block `sb` of the tensor.
    pub fn block(&self, sb: usize) -> PanelBlock<'a> {
        let ng = self.groups();
        let (pb, fb) = (ng * GROUP_BYTES, ng * FOLDED_GROUP_BYTES);
        PanelBlock::new(
            &self.view.panels()[sb * pb..(sb + 1) * pb],
            &self.view.folded_bytes()[sb * fb..(sb + 1) * fb],
            ng,
        )
        .expect("super-block slices have the view's validated lengths")
    }

    /// The rotated activations `z` (`Kp`) of `x` (`Kp`, zero-padded by the
    /// caller), per the module docs. The orthogonal product runs on `isa`'s
    /// transform (same arithmetic on every tier: per `j`, a sequential sum
    /// over `k` of f32 products, no FMA).
    pub fn rotate(
        &self,
        x: &[f32],
        z: &mut [f32],
        isa: crate::isa::Isa,
    ) -> Result<(), KernelError> {
        let kp = self.cols();
        check_len("x (Kp)", kp, x.len())?;
        check_len("z (Kp)", kp, z.len())?;
        match &self.rotation {
            Rotation::Hadamard { left, right, perm } => {
                let s128 = (GROUP as f32).sqrt();
                for ((xg, rg), zg) in x
                    .chunks_exact(GROUP)
                    .zip(self.recip.chunks_exact(GROUP))
                    .zip(z.chunks_exact_mut(GROUP))
                {
                    let mut u = [0f32; GROUP];
                    for i in 0..GROUP {
                        u[i] = (xg[i] * rg[i]) * left[i];
                    }
                    fwht128_f32(&mut u);
                    for (zj, &p) in zg.iter_mut().zip(perm.iter()) {
                        *zj = (u[p] * right[p]) / s128;
                    }
                }
            }
            Rotation::Orthogonal { r } => {
                kernels(isa)?.orthogonal_rotate(x, &self.recip, r, z);
            }
        }
        Ok(())
    }

    /// Decode row `row` (an embedding lookup) into `out` (`Kp`), in f32:
    /// `y_j = cb[idx(row, j)]` (stored fp16 codebook value); orthogonal:
    /// `a_k = sum_j y_j * R[k][j]` (sequential in `j`),
    /// `out_k = (a_k * norm) / input_scale_k`; Hadamard, per group:
    /// `t[perm[j]] = right[perm[j]] * y_j`, `t = FWHT128(t)`,
    /// `out_k = ((left_k * t_k) / sqrt(128)) * norm_g / input_scale_k`.
    pub fn embedding_row(&self, row: usize, out: &mut [f32]) -> Result<(), KernelError> {
        let (n, kp) = (self.rows(), self.cols());
        check_len("out (Kp)", kp, out.len())?;
        if row >= n {
            return Err(KernelError::Shape(format!("row {row} of {n}")));
        }
        let v = &self.view;
        let norm = |g: usize| f16_bits_to_f32(v.norm(row, g));
        let value = |j: usize| -> f32 {
            v.index(row, j)
                .map_or(f32::NAN, |i| self.codebook[i as usize])
        };
        match &self.rotation {
            Rotation::Orthogonal { .. } => {
                let nrm = norm(0);
                let y: Vec<f32> = (0..kp).map(value).collect();
                for (k, o) in out.iter_mut().enumerate() {
                    let mut a = 0f32;
                    for (j, &yj) in y.iter().enumerate() {
                        a += yj * f16_bits_to_f32(v.r(k, j));
                    }
                    *o = (a * nrm) / self.input_scale[k];
                }
            }
            Rotation::Hadamard { left, right, perm } => {
                let s128 = (GROUP as f32).sqrt();
                for (g, og) in out.chunks_exact_mut(GROUP).enumerate() {
                    let mut t = [0f32; GROUP];
                    for (j, &p) in perm.iter().enumerate() {
                        t[p] = right[p] * value(g * GROUP + j);
                    }
                    fwht128_f32(&mut t);
                    let nrm = norm(g);
                    for (i, o) in og.iter_mut().enumerate() {
                        *o = ((left[i] * t[i]) / s128) * nrm / self.input_scale[g * GROUP + i];
                    }
                }
            }
        }
        Ok(())
    }
}

impl Gemv for PanelMatrix<'_> {
    fn dims(&self) -> Dims {
        let g = self.view.geometry();
        let bytes = self.view.panels().len() + self.view.folded_bytes().len();
        Dims::new(g.n(), g.k(), bytes)
    }

    /// The activation transform per row of `X` (exactly the GEMV's), then
    /// each super-block against every row before the next super-block.
    fn gemm_sized(
        &self,
        m: usize,
        x: &[f32],
        y: &mut [f32],
        ws: &mut Workspace,
        exec: Exec,
    ) -> GemvResult {
        let (kp, ng) = (self.cols(), self.groups());
        let table = kernels(exec.isa)?;
        let kern = table.cq4;
        let c = &mut ws.cq4;
        c.z.resize(kp, 0.0);
        c.q.resize(m * kp, 0);
        c.scale.resize(m * ng, 0.0);
        c.qsum.resize(m * ng, 0);
        for i in 0..m {
            self.rotate(&x[i * kp..(i + 1) * kp], &mut c.z, exec.isa)?;
            quantize_groups(
                &c.z,
                &mut c.q[i * kp..(i + 1) * kp],
                &mut c.scale[i * ng..(i + 1) * ng],
                &mut c.qsum[i * ng..(i + 1) * ng],
            )?;
        }
        let lut = self.lut;
        if m == 1 {
            let act = Cq4Act::new(&c.q, &c.scale, &c.qsum);
            weight_stationary::<SUPER_BLOCK>(1, y, &mut ws.yt, exec, |row0, _, _, out| {
                let out: &mut [f32; SUPER_BLOCK] = out.try_into().expect("64 channels");
                let blk = self.block(row0 / SUPER_BLOCK);
                // SAFETY: `kern` comes from `kernels(exec.isa)`, which only
                // returns tables of ISAs the CPU supports; `blk` was built by
                // PanelBlock::new (checked lengths) and `act` holds ng groups.
                unsafe { kern(&blk, &act, &lut, out) };
            });
            return Ok(());
        }
        c.packed.resize(Cq4Rows::packed_len(m, kp), 0);
        Cq4Rows::pack(m, kp, &c.q, &mut c.packed)?;
        let rows = Cq4Rows::new(m, kp, &c.q, &c.scale, &c.qsum, &c.packed)?;
        weight_stationary::<SUPER_BLOCK>(m, y, &mut ws.yt, exec, |row0, i0, count, out| {
            let blk = self.block(row0 / SUPER_BLOCK);
            table.cq4_superblock_gemm(&blk, &rows.sub(i0, count), &lut, out);
        });
        Ok(())
    }
}
