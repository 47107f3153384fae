//! The one validated, zero-copy view of a CQ4 packed-panel tensor: its
//! scales blob and its panels (`docs/FORMAT.md` §CQ4 packed panels, "The
//! scales blob" and "The data region"). The decoder (`cq4`) and the kernels
//! (`kernels`) both take a [`PanelView`]; neither parses the blob itself.
//!
//! [`PanelView::parse`] checks, in order: the region lengths; a finite
//! codebook; finite, non-zero input scales with `recip = fp16(min(1 /
//! max(s, 1e-8), 65504))`; finite stored norms; zero padding after them;
//! folded norms equal to `f32(norm) * cb_scale` (0 for padded channels);
//! nibble 0 in padded channels; Hadamard signs +-1 and `perm` a permutation
//! of `0..128`; orthogonal R^T the exact transpose of R, all finite, and each
//! row's norm repeated in all its virtual groups.

use crate::format::Header;
use crate::fp16::{f16_bits_to_f32, f16_bits_to_f64, f64_to_f16_bits};
use crate::panel::{
    cb_scale_of, codebook_i8, PanelError, PanelGeometry, RotationFamily, RotationRegions,
    ScalesLayout, CODEBOOK_ENTRIES, KG_BLOCK_BYTES, KG_WIDTH, SUPER_BLOCK,
};
use crate::read::WeightsFile;

/// Weights per group of every CQ4 packed-panel tensor.
pub const GROUP: usize = crate::format::CQ4_GROUP_SIZE as usize;

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[2 * i], b[2 * i + 1]])
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
}

/// A validated CQ4 packed-panel tensor over borrowed bytes.
#[derive(Debug, Clone, Copy)]
pub struct PanelView<'a> {
    family: RotationFamily,
    geometry: PanelGeometry,
    layout: ScalesLayout,
    scales: &'a [u8],
    data: &'a [u8],
    cb_bits: [u16; CODEBOOK_ENTRIES],
    cb_scale: f32,
    cb_i8: [i8; CODEBOOK_ENTRIES],
}

/// The Hadamard parameters of a tensor (copied out of the blob; 1.5 KB).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HadamardParams {
    /// Left signs, +-1.
    pub left: [i8; GROUP],
    /// Right signs, +-1.
    pub right: [i8; GROUP],
    /// Column permutation of `0..128`.
    pub perm: [u32; GROUP],
}

impl<'a> PanelView<'a> {
    /// The view of a parsed `.cq4p.weights` container.
    pub fn from_file(f: &WeightsFile<'a>) -> Result<Self, PanelError> {
        let h: Header = f.header();
        let family = h
            .rotation_family()
            .ok_or(PanelError::Invalid("not a CQ4 packed-panel file"))?;
        let too_large = |what| PanelError::TooLarge {
            n: 0,
            k: 0,
            gs: GROUP,
            what,
        };
        let n = usize::try_from(h.dims[0]).map_err(|_| too_large("N"))?;
        let kp = usize::try_from(h.dims[1]).map_err(|_| too_large("K"))?;
        Self::parse(family, n, kp, f.scales(), f.data())
    }

    /// Validate an `n x kp` tensor of `family` (group size 128) from its
    /// scales blob and data region (see the module docs for the checks).
    pub fn parse(
        family: RotationFamily,
        n: usize,
        kp: usize,
        scales: &'a [u8],
        data: &'a [u8],
    ) -> Result<Self, PanelError> {
        let geometry = PanelGeometry::new(n, kp, GROUP)?;
        let layout = geometry.scales_layout(family);
        if scales.len() != layout.scales_bytes {
            return Err(PanelError::RegionLength {
                what: "scales blob",
                expected: layout.scales_bytes,
                got: scales.len(),
            });
        }
        if data.len() != geometry.data_bytes() {
            return Err(PanelError::RegionLength {
                what: "data region",
                expected: geometry.data_bytes(),
                got: data.len(),
            });
        }
        let (cb_bits, cb_scale, cb_i8) = codebook(&scales[layout.codebook.range()])?;
        let v = PanelView {
            family,
            geometry,
            layout,
            scales,
            data,
            cb_bits,
            cb_scale,
            cb_i8,
        };
        v.check_input_scales()?;
        v.check_norms()?;
        v.check_folded()?;
        v.check_padded_channels()?;
        match family {
            RotationFamily::Hadamard => {
                v.hadamard_checked()?;
            }
            RotationFamily::Orthogonal => v.check_orthogonal()?,
        }
        Ok(v)
    }

    fn check_input_scales(&self) -> Result<(), PanelError> {
        let is = &self.scales[self.layout.input_scale.range()];
        let rc = &self.scales[self.layout.recip.range()];
        for k in 0..self.geometry.k() {
            let s = f16_bits_to_f64(u16_at(is, k));
            if !s.is_finite() || s == 0.0 {
                return Err(PanelError::Invalid(
                    "input_scale must be finite and non-zero",
                ));
            }
            if u16_at(rc, k) != f64_to_f16_bits((1.0 / s.max(1e-8)).min(65504.0)) {
                return Err(PanelError::Invalid(
                    "recip != fp16(min(1 / max(input_scale, 1e-8), 65504))",
                ));
            }
        }
        Ok(())
    }

    fn check_norms(&self) -> Result<(), PanelError> {
        let nb = &self.scales[self.layout.norms.range()];
        if nb.chunks_exact(2).any(|b| b[1] & 0x7C == 0x7C) {
            return Err(PanelError::Invalid("a stored norm is not finite"));
        }
        if self.scales[self.layout.pad.range()].iter().any(|&b| b != 0) {
            return Err(PanelError::Invalid("non-zero padding after the norms"));
        }
        Ok(())
    }

    fn check_folded(&self) -> Result<(), PanelError> {
        let g = &self.geometry;
        let ng = g.num_groups();
        for sb in 0..g.sb64() {
            for grp in 0..ng {
                for c in 0..SUPER_BLOCK {
                    let row = sb * SUPER_BLOCK + c;
                    let want = if row < g.n() {
                        f16_bits_to_f32(self.norm(row, grp)) * self.cb_scale
                    } else {
                        0.0
                    };
                    if self.folded(row, grp).to_bits() != want.to_bits() {
                        return Err(PanelError::FoldedMismatch { row, group: grp });
                    }
                }
            }
        }
        Ok(())
    }

    fn check_padded_channels(&self) -> Result<(), PanelError> {
        let g = &self.geometry;
        let n = g.n();
        if n.is_multiple_of(SUPER_BLOCK) {
            return Ok(());
        }
        let sbb = g.superblock_bytes();
        let last = &self.data[(g.sb64() - 1) * sbb..];
        for blk in last.chunks_exact(KG_BLOCK_BYTES) {
            if blk[2 * (n % SUPER_BLOCK)..].iter().any(|&b| b != 0) {
                return Err(PanelError::Invalid("padded channels must have nibble 0"));
            }
        }
        Ok(())
    }

    fn hadamard_checked(&self) -> Result<HadamardParams, PanelError> {
        let RotationRegions::Hadamard { left, right, perm } = self.layout.rotation else {
            return Err(PanelError::Invalid("not a Hadamard tensor"));
        };
        let mut p = HadamardParams {
            left: [0; GROUP],
            right: [0; GROUP],
            perm: [0; GROUP],
        };
        let mut seen = [false; GROUP];
        for i in 0..GROUP {
            p.left[i] = self.scales[left.offset + i] as i8;
            p.right[i] = self.scales[right.offset + i] as i8;
            p.perm[i] = u32_at(&self.scales[perm.range()], i);
            if !matches!(p.left[i], 1 | -1) || !matches!(p.right[i], 1 | -1) {
                return Err(PanelError::Invalid("Hadamard signs must be +-1"));
            }
            let j = p.perm[i] as usize;
            if j >= GROUP || seen[j] {
                return Err(PanelError::Invalid("perm is not a permutation of 0..128"));
            }
            seen[j] = true;
        }
        Ok(p)
    }

    fn check_orthogonal(&self) -> Result<(), PanelError> {
        let kp = self.geometry.k();
        let (r, rt) = (self.r_bytes(), self.rt_bytes());
        for j in 0..kp {
            for k in 0..kp {
                let t = u16_at(rt, j * kp + k);
                if t != u16_at(r, k * kp + j) {
                    return Err(PanelError::Invalid("R^T is not the exact transpose of R"));
                }
                if t & 0x7C00 == 0x7C00 {
                    return Err(PanelError::Invalid("R has a non-finite entry"));
                }
            }
        }
        let ng = self.geometry.num_groups();
        for row in 0..self.geometry.n() {
            let first = self.norm(row, 0);
            if (1..ng).any(|g| self.norm(row, g) != first) {
                return Err(PanelError::Invalid(
                    "orthogonal norms must repeat the row norm in every virtual group",
                ));
            }
        }
        Ok(())
    }

    /// The rotation family.
    pub fn family(&self) -> RotationFamily {
        self.family
    }

    /// Geometry (`n = N`, `k = Kp`, `gs = 128`).
    pub fn geometry(&self) -> PanelGeometry {
        self.geometry
    }

    /// Offsets of the blob's regions.
    pub fn layout(&self) -> ScalesLayout {
        self.layout
    }

    /// The scales blob.
    pub fn scales(&self) -> &'a [u8] {
        self.scales
    }

    /// The data region (panels).
    pub fn panels(&self) -> &'a [u8] {
        self.data
    }

    /// Stored codebook, fp16 bits.
    pub fn codebook_bits(&self) -> [u16; CODEBOOK_ENTRIES] {
        self.cb_bits
    }

    /// Stored codebook values (exact f32).
    pub fn codebook(&self) -> [f32; CODEBOOK_ENTRIES] {
        self.cb_bits.map(f16_bits_to_f32)
    }

    /// `cb_scale` of the int8 codebook ([`cb_scale_of`]).
    pub fn cb_scale(&self) -> f32 {
        self.cb_scale
    }

    /// The int8 codebook the kernels use ([`codebook_i8`]).
    pub fn cb_i8(&self) -> [i8; CODEBOOK_ENTRIES] {
        self.cb_i8
    }

    /// `input_scale[k]`, fp16 bits.
    pub fn input_scale(&self, k: usize) -> u16 {
        u16_at(&self.scales[self.layout.input_scale.range()], k)
    }

    /// `recip[k]`, fp16 bits.
    pub fn recip(&self, k: usize) -> u16 {
        u16_at(&self.scales[self.layout.recip.range()], k)
    }

    /// Stored norm of row `n < N`, group `g`, fp16 bits.
    pub fn norm(&self, n: usize, g: usize) -> u16 {
        u16_at(
            &self.scales[self.layout.norms.range()],
            n * self.geometry.num_groups() + g,
        )
    }

    /// The norms region (`N x ng` fp16, little-endian).
    pub fn norms_bytes(&self) -> &'a [u8] {
        &self.scales[self.layout.norms.range()]
    }

    /// The folded norms region (`[SB64][ng][64]` fp32, little-endian).
    pub fn folded_bytes(&self) -> &'a [u8] {
        &self.scales[self.layout.folded.range()]
    }

    /// Folded norm of row `n < SB64 * 64`, group `g`.
    pub fn folded(&self, n: usize, g: usize) -> f32 {
        let ng = self.geometry.num_groups();
        let i = ((n / SUPER_BLOCK) * ng + g) * SUPER_BLOCK + n % SUPER_BLOCK;
        f32::from_bits(u32_at(self.folded_bytes(), i))
    }

    /// The 4-bit index of weight `(n, k)` (`n < SB64 * 64`, `k < Kp`).
    pub fn index(&self, n: usize, k: usize) -> Result<u8, PanelError> {
        let (byte, high) = self.geometry.nibble_position(n, k)?;
        let b = self.data[byte];
        Ok(if high { b >> 4 } else { b & 15 })
    }

    /// The stored byte pairs of row `n` (`n < SB64 * 64`) in group `g`:
    /// pair `kg` holds the indices of columns `g * GROUP + 4 kg ..`, the
    /// first byte columns 0 and 1 (low nibble first), the second columns 2
    /// and 3 (FORMAT.md §CQ4.9). One bounds check.
    pub fn group_pairs(
        &self,
        n: usize,
        g: usize,
    ) -> Result<[[u8; 2]; GROUP / KG_WIDTH], PanelError> {
        // The group's first nibble is the low one of its first kg-block's
        // byte pair for row `n`; each next kg-block is KG_BLOCK_BYTES on.
        // (The last column's check covers the group.)
        self.geometry.nibble_position(n, (g + 1) * GROUP - 1)?;
        let (first, _) = self.geometry.nibble_position(n, g * GROUP)?;
        // One slice from the first pair to the last (bounds checked once;
        // the parsed view's data region holds every position the geometry
        // gives), then fixed offsets into it.
        const SPAN: usize = (GROUP / KG_WIDTH - 1) * KG_BLOCK_BYTES + 2;
        let span: &[u8; SPAN] = self
            .data
            .get(first..first + SPAN)
            .and_then(|s| s.try_into().ok())
            .ok_or(PanelError::IndexOutOfRange {
                n,
                k: g * GROUP,
                padded_n: self.geometry.padded_n(),
                k_total: self.geometry.k(),
            })?;
        Ok(std::array::from_fn(|kg| {
            [span[kg * KG_BLOCK_BYTES], span[kg * KG_BLOCK_BYTES + 1]]
        }))
    }

    /// The 4-bit indices of row `n` (`n < SB64 * 64`) in group `g`, columns
    /// `g * GROUP .. (g + 1) * GROUP` in order: the values of
    /// [`PanelView::index`] for those columns, from [`PanelView::group_pairs`].
    pub fn group_indices(
        &self,
        n: usize,
        g: usize,
        out: &mut [u8; GROUP],
    ) -> Result<(), PanelError> {
        let pairs = self.group_pairs(n, g)?;
        for (q, [b0, b1]) in out.as_chunks_mut::<KG_WIDTH>().0.iter_mut().zip(pairs) {
            *q = [b0 & 15, b0 >> 4, b1 & 15, b1 >> 4];
        }
        Ok(())
    }

    /// The Hadamard parameters (Hadamard family only).
    pub fn hadamard(&self) -> Option<HadamardParams> {
        self.hadamard_checked().ok()
    }

    /// R (`Kp x Kp` fp16, row-major), orthogonal family only (else empty).
    pub fn r_bytes(&self) -> &'a [u8] {
        match self.layout.rotation {
            RotationRegions::Orthogonal { r, .. } => &self.scales[r.range()],
            RotationRegions::Hadamard { .. } => &[],
        }
    }

    /// R^T (`Kp x Kp` fp16, row-major), orthogonal family only (else empty).
    pub fn rt_bytes(&self) -> &'a [u8] {
        match self.layout.rotation {
            RotationRegions::Orthogonal { r_t, .. } => &self.scales[r_t.range()],
            RotationRegions::Hadamard { .. } => &[],
        }
    }

    /// `R[k][j]`, fp16 bits (orthogonal family, `k, j < Kp`).
    pub fn r(&self, k: usize, j: usize) -> u16 {
        u16_at(self.r_bytes(), k * self.geometry.k() + j)
    }
}

/// Codebook bits, `cb_scale` and the int8 codebook of the codebook region.
#[allow(clippy::type_complexity)]
fn codebook(
    cb: &[u8],
) -> Result<([u16; CODEBOOK_ENTRIES], f32, [i8; CODEBOOK_ENTRIES]), PanelError> {
    let mut bits = [0u16; CODEBOOK_ENTRIES];
    for (i, b) in bits.iter_mut().enumerate() {
        *b = u16_at(cb, i);
        if *b & 0x7C00 == 0x7C00 {
            return Err(PanelError::Invalid("codebook has a non-finite entry"));
        }
    }
    let values = bits.map(f16_bits_to_f32);
    let cb_scale = cb_scale_of(&values);
    Ok((bits, cb_scale, codebook_i8(&values, cb_scale)))
}
