//! CQ4 packed-panel matrices and their GEMV driver.
//!
//! # Activation transform (once per call, shared by every tier)
//!
//! With `r_k = f32(recip_fp16[k])`:
//!
//! - Hadamard, per group `g` of 128 columns (`i = 0..128`, `k = 128g + i`):
//!   `u_i = (x_k * r_k) * left_i`; `u = FWHT128(u)` in f32 (butterflies
//!   `h = 1, 2, .., 64`, `(a, b) -> (a + b, a - b)`, the order of
//!   `cq4::hadamard::fwht128`); `z_{128g+j} = (u_p * right_p) / sqrt(128)` with
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

use rayon::prelude::*;
use weights_file::panel::{PanelGeometry, RotationRegions, SUPER_BLOCK};
use weights_file::{flags, Precision, WeightsFile};

use cq4::codebook::{cb_scale_of, codebook_i8};
use cq4::fp16::f16_bits_to_f32;
pub use cq4::Family;

use crate::act::{quantize_groups, Cq4Act};
use crate::dispatch::{kernels, Exec};
use crate::error::{check_len, KernelError};
use crate::ggml::rows_per_task;
use crate::workspace::Workspace;
use crate::Gemv;

/// Columns per group.
pub const GROUP: usize = 128;
/// kg-blocks (4 columns x 64 channels, 128 bytes) per group.
pub const KG_PER_GROUP: usize = GROUP / 4;
/// Bytes of one kg-block.
pub const KG_BYTES: usize = 128;
/// Panel bytes per (super-block, group).
pub const GROUP_BYTES: usize = KG_PER_GROUP * KG_BYTES;
/// Folded-norm bytes per (super-block, group).
pub const FOLDED_GROUP_BYTES: usize = SUPER_BLOCK * 4;

/// The int8 codebook of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CbLut {
    cb_i8: [i8; 16],
}

impl CbLut {
    /// From the 16 int8 entries (`round_half_away(cb / cb_scale)`).
    pub fn new(cb_i8: [i8; 16]) -> Self {
        CbLut { cb_i8 }
    }
    /// The entries.
    pub fn cb_i8(&self) -> &[i8; 16] {
        &self.cb_i8
    }
}

/// One super-block of a panel tensor: its panels (`ng` groups of 32
/// kg-blocks) and its folded norms (`[ng][64]` fp32 LE).
#[derive(Debug, Clone, Copy)]
pub struct PanelBlock<'a> {
    panels: &'a [u8],
    folded: &'a [u8],
    ng: usize,
}

impl<'a> PanelBlock<'a> {
    /// Checks `panels.len() == ng * 4096` and `folded.len() == ng * 256`.
    pub fn new(panels: &'a [u8], folded: &'a [u8], ng: usize) -> Result<Self, KernelError> {
        check_len("super-block panels", ng * GROUP_BYTES, panels.len())?;
        check_len(
            "super-block folded norms",
            ng * FOLDED_GROUP_BYTES,
            folded.len(),
        )?;
        Ok(PanelBlock { panels, folded, ng })
    }
    /// Groups.
    pub fn groups(&self) -> usize {
        self.ng
    }
    /// The panel bytes.
    pub fn panels(&self) -> &'a [u8] {
        self.panels
    }
    /// The folded-norm bytes.
    pub fn folded_bytes(&self) -> &'a [u8] {
        self.folded
    }
    /// kg-block `kg` of group `g` (128 bytes).
    pub fn kg_block(&self, g: usize, kg: usize) -> &'a [u8] {
        let o = (g * KG_PER_GROUP + kg) * KG_BYTES;
        &self.panels[o..o + KG_BYTES]
    }
    /// Folded norm of channel `c` in group `g`.
    pub fn folded(&self, g: usize, c: usize) -> f32 {
        let o = (g * SUPER_BLOCK + c) * 4;
        let b = &self.folded[o..o + 4];
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
}

/// The rotation of a panel tensor.
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

/// A CQ4 packed-panel matrix: borrowed panels, folded norms and norms;
/// owned widened codebook, reciprocal scales and rotation.
#[derive(Debug, Clone)]
pub struct PanelMatrix<'a> {
    family: Family,
    n: usize,
    kp: usize,
    ng: usize,
    sb64: usize,
    panels: &'a [u8],
    folded: &'a [u8],
    norms: &'a [u8],
    lut: CbLut,
    codebook: [f32; 16],
    recip: Vec<f32>,
    input_scale: Vec<f32>,
    rotation: Rotation<'a>,
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[2 * i], b[2 * i + 1]])
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
    /// A view of an `n x kp` tensor of `family` from its scales blob and
    /// data region. Checks the region lengths, a finite codebook, `perm`
    /// a permutation and signs +-1 (Hadamard). It does not re-derive the
    /// folded norms (`cq4::PanelTensorView::parse` does; `convert verify`
    /// runs both).
    pub fn new(
        family: Family,
        n: usize,
        kp: usize,
        scales: &'a [u8],
        data: &'a [u8],
    ) -> Result<Self, KernelError> {
        let geom =
            PanelGeometry::new(n, kp, GROUP).map_err(|e| KernelError::Shape(e.to_string()))?;
        let layout = geom.scales_layout(family);
        check_len("scales blob", layout.scales_bytes, scales.len())?;
        check_len("panel data", geom.data_bytes(), data.len())?;
        let cbb = &scales[layout.codebook.range()];
        let mut codebook = [0f32; 16];
        for (i, c) in codebook.iter_mut().enumerate() {
            *c = f16_bits_to_f32(u16_at(cbb, i));
            if !c.is_finite() {
                return Err(KernelError::Panel("non-finite codebook entry".into()));
            }
        }
        let cb_scale = cb_scale_of(&codebook);
        let lut = CbLut::new(codebook_i8(&codebook, cb_scale));
        let widen = |r: weights_file::panel::Region| -> Vec<f32> {
            (0..kp)
                .map(|i| f16_bits_to_f32(u16_at(&scales[r.range()], i)))
                .collect()
        };
        let recip = widen(layout.recip);
        let input_scale = widen(layout.input_scale);
        let rotation = match layout.rotation {
            RotationRegions::Hadamard { left, right, perm } => {
                let mut l = [0f32; GROUP];
                let mut r = [0f32; GROUP];
                let mut p = [0usize; GROUP];
                let mut seen = [false; GROUP];
                for i in 0..GROUP {
                    let (ls, rs) = (
                        scales[left.offset + i] as i8,
                        scales[right.offset + i] as i8,
                    );
                    if !matches!(ls, 1 | -1) || !matches!(rs, 1 | -1) {
                        return Err(KernelError::Panel("Hadamard signs must be +-1".into()));
                    }
                    l[i] = ls as f32;
                    r[i] = rs as f32;
                    let o = perm.offset + 4 * i;
                    let v = u32::from_le_bytes([
                        scales[o],
                        scales[o + 1],
                        scales[o + 2],
                        scales[o + 3],
                    ]) as usize;
                    if v >= GROUP || seen[v] {
                        return Err(KernelError::Panel(
                            "perm is not a permutation of 0..128".into(),
                        ));
                    }
                    seen[v] = true;
                    p[i] = v;
                }
                Rotation::Hadamard {
                    left: Box::new(l),
                    right: Box::new(r),
                    perm: Box::new(p),
                }
            }
            RotationRegions::Orthogonal { r, .. } => Rotation::Orthogonal {
                r: &scales[r.range()],
            },
        };
        Ok(PanelMatrix {
            family,
            n,
            kp,
            ng: geom.num_groups(),
            sb64: geom.sb64(),
            panels: data,
            folded: &scales[layout.folded.range()],
            norms: &scales[layout.norms.range()],
            lut,
            codebook,
            recip,
            input_scale,
            rotation,
        })
    }

    /// The matrix of a `.cq4p.weights` container (PACKED_PANELS, CQ4; family
    /// from ORTHOGONAL_ROTATION).
    pub fn from_file(f: &WeightsFile<'a>) -> Result<Self, KernelError> {
        let h = f.header();
        if h.precision() != Some(Precision::Cq(4)) || h.flags & flags::PACKED_PANELS == 0 {
            return Err(KernelError::Unsupported(
                "not a CQ4 packed-panel file (precision CQ4 + PACKED_PANELS)".into(),
            ));
        }
        if h.ndim != 2 || h.group_size as usize != GROUP {
            return Err(KernelError::Shape(format!(
                "panel file with ndim {} and group size {} (want 2 and 128)",
                h.ndim, h.group_size
            )));
        }
        let family = Self::family_of(h.flags);
        let n = usize::try_from(h.dims[0]).map_err(|_| KernelError::Shape("N".into()))?;
        let kp = usize::try_from(h.dims[1]).map_err(|_| KernelError::Shape("K".into()))?;
        Self::new(family, n, kp, f.scales(), f.data())
    }

    /// The family a header's flags announce.
    pub fn family_of(header_flags: u32) -> Family {
        if header_flags & flags::ORTHOGONAL_ROTATION != 0 {
            Family::Orthogonal
        } else {
            Family::Hadamard
        }
    }

    /// The rotation family.
    pub fn family(&self) -> Family {
        self.family
    }
    /// Groups per row (`Kp / 128`).
    pub fn groups(&self) -> usize {
        self.ng
    }
    /// The int8 codebook.
    pub fn lut(&self) -> &CbLut {
        &self.lut
    }

    /// Super-block `sb` of the tensor.
    pub fn block(&self, sb: usize) -> PanelBlock<'a> {
        let pb = self.ng * GROUP_BYTES;
        let fb = self.ng * FOLDED_GROUP_BYTES;
        PanelBlock::new(
            &self.panels[sb * pb..(sb + 1) * pb],
            &self.folded[sb * fb..(sb + 1) * fb],
            self.ng,
        )
        .expect("super-block slices have the checked lengths")
    }

    /// The rotated activations `z` (`Kp`) of `x` (`Kp`, zero-padded by the
    /// caller), per the module docs. The orthogonal product runs on `isa`'s
    /// transform (same arithmetic on every tier: per `j`, a sequential sum
    /// over `k` of f32 products, no FMA).
    pub fn rotate(&self, x: &[f32], z: &mut [f32], isa: crate::Isa) -> Result<(), KernelError> {
        check_len("x (Kp)", self.kp, x.len())?;
        check_len("z (Kp)", self.kp, z.len())?;
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

    /// The 4-bit index of weight `(row, col)`.
    pub fn index(&self, row: usize, col: usize) -> u8 {
        let (sb, c) = (row / SUPER_BLOCK, row % SUPER_BLOCK);
        let (g, kg, kc) = (col / GROUP, (col % GROUP) / 4, col % 4);
        let byte = ((sb * self.ng + g) * KG_PER_GROUP + kg) * KG_BYTES + 2 * c + kc / 2;
        let b = self.panels[byte];
        if kc % 2 == 0 {
            b & 15
        } else {
            b >> 4
        }
    }

    /// `R[k][j]` (fp16 widened), orthogonal family only (else 0).
    fn r_at(&self, k: usize, j: usize) -> f32 {
        match &self.rotation {
            Rotation::Orthogonal { r } => f16_bits_to_f32(u16_at(r, k * self.kp + j)),
            Rotation::Hadamard { .. } => 0.0,
        }
    }

    /// Stored norm of row `n`, group `g` (fp16 widened).
    pub fn norm(&self, n: usize, g: usize) -> f32 {
        f16_bits_to_f32(u16_at(self.norms, n * self.ng + g))
    }

    /// Stored codebook value of index `i` (fp16 widened).
    pub fn codebook_value(&self, i: u8) -> f32 {
        self.codebook[i as usize & 15]
    }

    /// The rotated activations of [`PanelMatrix::rotate`] computed in f64
    /// (`x * recip`, then the rotation, no rounding but f64's), with a
    /// proven bound of `|z_f32 - z_f64|` per element for the f32 arithmetic
    /// the kernels use ([`crate::reference`]): Hadamard `g(12) sum_i |x_i
    /// r_i| / sqrt(128)` over the group (one product, the 7 butterfly levels,
    /// the sign, the rounded square root and the division); orthogonal
    /// `g(Kp + 2) sum_k |x_k r_k R_kj|` (sequential f32 sum).
    pub fn rotated_exact(&self, x: &[f32]) -> (Vec<f64>, Vec<f64>) {
        use crate::reference::gamma;
        const TINY: f64 = 1.401_298_464_324_817e-45;
        let kp = self.kp;
        let xr: Vec<f64> = x
            .iter()
            .zip(&self.recip)
            .map(|(&v, &r)| f64::from(v) * f64::from(r))
            .collect();
        let mut z = vec![0f64; kp];
        let mut bound = vec![0f64; kp];
        match &self.rotation {
            Rotation::Orthogonal { r } => {
                let mut mag = vec![0f64; kp];
                for (row, &a) in r.chunks_exact(2 * kp).zip(&xr) {
                    for ((zj, mj), h) in z.iter_mut().zip(mag.iter_mut()).zip(row.chunks_exact(2)) {
                        let p = f64::from(f16_bits_to_f32(u16::from_le_bytes([h[0], h[1]]))) * a;
                        *zj += p;
                        *mj += p.abs();
                    }
                }
                let g = gamma(kp + 2);
                for (b, m) in bound.iter_mut().zip(&mag) {
                    *b = g * m + (2 * kp + 2) as f64 * TINY;
                }
            }
            Rotation::Hadamard { left, right, perm } => {
                let s128 = (GROUP as f64).sqrt();
                let g = gamma(12);
                for ((xg, zg), bg) in xr
                    .chunks_exact(GROUP)
                    .zip(z.chunks_exact_mut(GROUP))
                    .zip(bound.chunks_exact_mut(GROUP))
                {
                    let mut u = [0f64; GROUP];
                    for i in 0..GROUP {
                        u[i] = f64::from(left[i]) * xg[i];
                    }
                    cq4::hadamard::fwht128(&mut u);
                    let mag: f64 = xg.iter().map(|v| v.abs()).sum();
                    for ((zj, bj), &p) in zg.iter_mut().zip(bg.iter_mut()).zip(perm.iter()) {
                        *zj = f64::from(right[p]) * u[p] / s128;
                        *bj = g * mag / s128 + 20.0 * TINY;
                    }
                }
            }
        }
        (z, bound)
    }

    /// f64 rotated activations of the factored oracle
    /// ([`crate::oracle::panel_oracle_factored`]).
    pub fn factored_activations(&self, x: &[f32]) -> Vec<f64> {
        let kp = self.kp;
        let xs: Vec<f64> = x
            .iter()
            .zip(&self.input_scale)
            .map(|(&v, &s)| v as f64 / s as f64)
            .collect();
        let mut t = vec![0f64; kp];
        match &self.rotation {
            Rotation::Orthogonal { r } => {
                // t_j = sum_k R[k][j] * xs_k
                for (row, &xk) in r.chunks_exact(2 * kp).zip(&xs) {
                    for (tj, h) in t.iter_mut().zip(row.chunks_exact(2)) {
                        *tj += f16_bits_to_f32(u16::from_le_bytes([h[0], h[1]])) as f64 * xk;
                    }
                }
            }
            Rotation::Hadamard { left, right, perm } => {
                let s128 = (GROUP as f64).sqrt();
                for (xg, tg) in xs.chunks_exact(GROUP).zip(t.chunks_exact_mut(GROUP)) {
                    let mut u = [0f64; GROUP];
                    for i in 0..GROUP {
                        u[i] = left[i] as f64 * xg[i];
                    }
                    cq4::hadamard::fwht128(&mut u);
                    for (tj, &p) in tg.iter_mut().zip(perm.iter()) {
                        *tj = right[p] as f64 * u[p] / s128;
                    }
                }
            }
        }
        t
    }

    /// Decode row `row` (an embedding lookup) into `out` (`Kp`), in f32:
    /// `y_j = cb[idx(row, j)]` (stored fp16 codebook value); orthogonal:
    /// `a_k = sum_j y_j * R[k][j]` (sequential in `j`),
    /// `out_k = (a_k * norm) / input_scale_k`; Hadamard, per group:
    /// `t[perm[j]] = right[perm[j]] * y_j`, `t = FWHT128(t)`,
    /// `out_k = ((left_k * t_k) / sqrt(128)) * norm_g / input_scale_k`.
    pub fn embedding_row(&self, row: usize, out: &mut [f32]) -> Result<(), KernelError> {
        check_len("out (Kp)", self.kp, out.len())?;
        if row >= self.n {
            return Err(KernelError::Shape(format!("row {row} of {}", self.n)));
        }
        let norm = |g: usize| f16_bits_to_f32(u16_at(self.norms, row * self.ng + g));
        match &self.rotation {
            Rotation::Orthogonal { .. } => {
                let nrm = norm(0);
                let y: Vec<f32> = (0..self.kp)
                    .map(|j| self.codebook[self.index(row, j) as usize])
                    .collect();
                for (k, o) in out.iter_mut().enumerate() {
                    let mut a = 0f32;
                    for (j, &yj) in y.iter().enumerate() {
                        a += yj * self.r_at(k, j);
                    }
                    *o = (a * nrm) / self.input_scale[k];
                }
            }
            Rotation::Hadamard { left, right, perm } => {
                let s128 = (GROUP as f32).sqrt();
                for (g, og) in out.chunks_exact_mut(GROUP).enumerate() {
                    let mut t = [0f32; GROUP];
                    for (j, &p) in perm.iter().enumerate() {
                        t[p] = right[p] * self.codebook[self.index(row, g * GROUP + j) as usize];
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
    fn rows(&self) -> usize {
        self.n
    }

    fn cols(&self) -> usize {
        self.kp
    }

    fn weight_bytes(&self) -> usize {
        self.panels.len() + self.folded.len()
    }

    fn gemv(
        &self,
        x: &[f32],
        y: &mut [f32],
        ws: &mut Workspace,
        exec: Exec,
    ) -> Result<(), KernelError> {
        check_len("x (Kp)", self.kp, x.len())?;
        check_len("y", self.n, y.len())?;
        let kern = kernels(exec.isa)?.cq4;
        let c = &mut ws.cq4;
        c.z.resize(self.kp, 0.0);
        c.q.resize(self.kp, 0);
        c.scale.resize(self.ng, 0.0);
        c.qsum.resize(self.ng, 0);
        self.rotate(x, &mut c.z, exec.isa)?;
        quantize_groups(&c.z, &mut c.q, &mut c.scale, &mut c.qsum)?;
        let act = Cq4Act {
            q: &c.q,
            scale: &c.scale,
            qsum: &c.qsum,
        };
        let lut = self.lut;
        let task = |first: usize, ys: &mut [f32]| {
            for (i, yc) in ys.chunks_mut(SUPER_BLOCK).enumerate() {
                let blk = self.block(first / SUPER_BLOCK + i);
                let mut out = [0.0f32; SUPER_BLOCK];
                // SAFETY: `kern` comes from `kernels(exec.isa)`, which only
                // returns tables of ISAs the CPU supports; `blk` was built by
                // PanelBlock::new (checked lengths) and `act` holds ng groups.
                unsafe { kern(&blk, &act, &lut, &mut out) };
                yc.copy_from_slice(&out[..yc.len()]);
            }
        };
        let per_task = rows_per_task(self.n, SUPER_BLOCK, exec.parallel);
        debug_assert!(self.sb64 * SUPER_BLOCK >= self.n);
        if per_task >= self.n {
            task(0, y);
        } else {
            y.par_chunks_mut(per_task)
                .enumerate()
                .for_each(|(t, ys)| task(t * per_task, ys));
        }
        Ok(())
    }
}
