//! Dequantization ("qdq") of packed-panel CQ4 tensors, and a validating view
//! over a tensor's scales blob and data region.
//!
//! Arithmetic (f64, then one rounding to f32), for row `n`:
//!
//! - `y_j = cb[idx(n, j)]` (the stored fp16 codebook value, exact).
//! - Hadamard, per group `g` (columns `128g..128g+128`): `z[perm[j]] =
//!   right[perm[j]] * y_j`; `h = FWHT(z)` (exact); for each `k`:
//!   `w = ((left[k] * h[k]) / sqrt(128)) * norm[n][g] / input_scale[k]`.
//! - Orthogonal: `a_k = sum_{j=0..Kp} y_j * RT[j][k]` summed sequentially in
//!   `j` (exact for CQ4 files); `w = (a_k * norm[n][0]) / input_scale[k]`.
//! - output `f32(w)` (round to nearest even).

use std::sync::Arc;

use weights_file::panel::{PanelGeometry, RotationRegions, SUPER_BLOCK};

use crate::codebook::{cb_scale_of, codebook_i8, LEVELS};
use crate::encode::sqrt128;
use crate::fp16::{f16_bits_to_f32, f16_bits_to_f64};
use crate::hadamard::{fwht128, HadamardRotation, HADAMARD_N};
use crate::orthogonal::OrthogonalRotation;
use crate::{Cq4Error, Family, GROUP_SIZE};

/// Where the decoder finds R^T (as exact f32 values, row-major `[j][k]`).
pub(crate) enum RtSource {
    None,
    Shared(Arc<OrthogonalRotation>),
    Owned(Vec<f32>),
}

impl std::fmt::Debug for RtSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RtSource::None => f.write_str("None"),
            RtSource::Shared(r) => write!(f, "Shared(Kp = {})", r.kp()),
            RtSource::Owned(v) => write!(f, "Owned({} values)", v.len()),
        }
    }
}

impl RtSource {
    fn get(&self) -> &[f32] {
        match self {
            RtSource::None => &[],
            RtSource::Shared(r) => &r.rt32,
            RtSource::Owned(v) => v,
        }
    }
}

/// Everything dequantization needs, whether it came from an encoder or a file.
#[derive(Debug)]
pub(crate) struct Decoder {
    pub(crate) family: Family,
    pub(crate) geometry: PanelGeometry,
    /// Stored codebook values (exact).
    pub(crate) codebook: [f64; LEVELS],
    /// Stored input scales as f64 (length Kp).
    pub(crate) input_scale: Vec<f64>,
    pub(crate) hadamard: HadamardRotation,
    pub(crate) rt: RtSource,
}

/// Decode `nrows` rows starting at a super-block boundary. `panels` holds the
/// super-blocks covering those rows, `norms` their `nrows x ng` stored norms,
/// `out` is `nrows x Kp`. Lengths are validated by the callers.
pub(crate) fn decode_rows(
    dec: &Decoder,
    panels: &[u8],
    norms: &[u16],
    nrows: usize,
    out: &mut [f32],
) {
    let kp = dec.geometry.k();
    let ng = dec.geometry.num_groups();
    let sbb = dec.geometry.superblock_bytes();
    for r in 0..nrows {
        let sb = &panels[(r / SUPER_BLOCK) * sbb..(r / SUPER_BLOCK + 1) * sbb];
        decode_row(
            dec,
            sb,
            r % SUPER_BLOCK,
            &norms[r * ng..(r + 1) * ng],
            &mut out[r * kp..(r + 1) * kp],
        );
    }
}

/// The stored codebook value of every column of row `c` of a super-block.
fn row_values(dec: &Decoder, sb: &[u8], c: usize, y: &mut [f64]) {
    for (blk, quad) in y.chunks_exact_mut(4).enumerate() {
        // blk = g * 32 + kg  (4 columns per kg-block)
        let byte = blk * 128 + 2 * c;
        let (b0, b1) = (sb[byte], sb[byte + 1]);
        quad[0] = dec.codebook[(b0 & 15) as usize];
        quad[1] = dec.codebook[(b0 >> 4) as usize];
        quad[2] = dec.codebook[(b1 & 15) as usize];
        quad[3] = dec.codebook[(b1 >> 4) as usize];
    }
}

fn decode_row(dec: &Decoder, sb: &[u8], c: usize, norms: &[u16], out: &mut [f32]) {
    let kp = dec.geometry.k();
    let mut y = vec![0.0f64; kp];
    row_values(dec, sb, c, &mut y);
    match dec.family {
        Family::Hadamard => {
            let had = &dec.hadamard;
            let s128 = sqrt128();
            for (g, (yg, og)) in y
                .chunks_exact(HADAMARD_N)
                .zip(out.chunks_exact_mut(HADAMARD_N))
                .enumerate()
            {
                let nrm = f16_bits_to_f64(norms[g]);
                let mut z = [0.0f64; HADAMARD_N];
                for (j, &yj) in yg.iter().enumerate() {
                    let p = had.perm[j] as usize;
                    z[p] = had.right[p] as f64 * yj;
                }
                fwht128(&mut z);
                for (kk, o) in og.iter_mut().enumerate() {
                    let w = ((had.left[kk] as f64 * z[kk]) / s128) * nrm
                        / dec.input_scale[g * HADAMARD_N + kk];
                    *o = w as f32;
                }
            }
        }
        Family::Orthogonal => {
            let rt = dec.rt.get();
            let nrm = f16_bits_to_f64(norms[0]);
            let mut acc = vec![0.0f64; kp];
            for (&yj, rtj) in y.iter().zip(rt.chunks_exact(kp)) {
                for (a, &r) in acc.iter_mut().zip(rtj) {
                    *a += yj * r as f64;
                }
            }
            for ((o, &a), &s) in out.iter_mut().zip(&acc).zip(&dec.input_scale) {
                *o = ((a * nrm) / s) as f32;
            }
        }
    }
}

/// A validated, borrowed view of one packed-panel CQ4 tensor: its scales blob
/// and data region (as found at the header's offsets).
pub struct PanelTensorView<'a> {
    scales: &'a [u8],
    data: &'a [u8],
    norms: Vec<u16>,
    dec: Decoder,
    cb_bits: [u16; LEVELS],
    cb_scale: f32,
}

impl std::fmt::Debug for PanelTensorView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PanelTensorView")
            .field("family", &self.dec.family)
            .field("geometry", &self.dec.geometry)
            .field("cb_scale", &self.cb_scale)
            .field("scales_bytes", &self.scales.len())
            .field("data_bytes", &self.data.len())
            .finish_non_exhaustive()
    }
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[2 * i], b[2 * i + 1]])
}

impl<'a> PanelTensorView<'a> {
    /// Parse and validate. `n` is the header's `dims[0]` (= original_N), `kp`
    /// its `dims[1]`; group size is 128 for both families. Checks: region
    /// lengths; finite codebook; finite non-zero input scales and
    /// `recip = fp16(min(1 / max(s, 1e-8), 65504))`; finite stored norms;
    /// folded norms equal `f32(norm) * cb_scale` (0 for padded channels);
    /// padded channels' nibbles are 0; Hadamard signs are +-1 and `perm` a
    /// permutation; orthogonal R^T is the exact transpose of R, all finite,
    /// and each row's norm is repeated across its virtual groups.
    pub fn parse(
        family: Family,
        n: usize,
        kp: usize,
        scales: &'a [u8],
        data: &'a [u8],
    ) -> Result<Self, Cq4Error> {
        let geometry = PanelGeometry::new(n, kp, GROUP_SIZE)?;
        let layout = geometry.scales_layout(family);
        if scales.len() != layout.scales_bytes {
            return Err(Cq4Error::BufferLength {
                what: "scales blob",
                expected: layout.scales_bytes,
                got: scales.len(),
            });
        }
        if data.len() != geometry.data_bytes() {
            return Err(Cq4Error::BufferLength {
                what: "data region",
                expected: geometry.data_bytes(),
                got: data.len(),
            });
        }
        let cb = &scales[layout.codebook.range()];
        let mut cb_bits = [0u16; LEVELS];
        let mut codebook = [0f64; LEVELS];
        let mut cb32 = [0f32; LEVELS];
        for i in 0..LEVELS {
            cb_bits[i] = u16_at(cb, i);
            codebook[i] = f16_bits_to_f64(cb_bits[i]);
            cb32[i] = f16_bits_to_f32(cb_bits[i]);
            if !codebook[i].is_finite() {
                return Err(Cq4Error::BadBlob("codebook has a non-finite entry"));
            }
        }
        let cb_scale = cb_scale_of(&cb32);
        let is = &scales[layout.input_scale.range()];
        let rc = &scales[layout.recip.range()];
        let mut input_scale = vec![0f64; kp];
        for (kk, s) in input_scale.iter_mut().enumerate() {
            *s = f16_bits_to_f64(u16_at(is, kk));
            if !s.is_finite() || *s == 0.0 {
                return Err(Cq4Error::BadBlob("input_scale must be finite and non-zero"));
            }
            let want = crate::fp16::f64_to_f16_bits((1.0 / s.max(1e-8)).min(65504.0));
            if u16_at(rc, kk) != want {
                return Err(Cq4Error::BadBlob(
                    "recip != fp16(min(1 / max(input_scale, 1e-8), 65504))",
                ));
            }
        }
        let ng = geometry.num_groups();
        let nb = &scales[layout.norms.range()];
        let norms: Vec<u16> = (0..n * ng).map(|i| u16_at(nb, i)).collect();
        if norms.iter().any(|&b| b & 0x7C00 == 0x7C00) {
            return Err(Cq4Error::BadBlob("a stored norm is not finite"));
        }
        if scales[layout.pad.range()].iter().any(|&b| b != 0) {
            return Err(Cq4Error::BadBlob("non-zero padding after the norms"));
        }
        let fb = &scales[layout.folded.range()];
        for sb in 0..geometry.sb64() {
            for g in 0..ng {
                for c in 0..SUPER_BLOCK {
                    let row = sb * SUPER_BLOCK + c;
                    let i = (sb * ng + g) * SUPER_BLOCK + c;
                    let got = u32::from_le_bytes([
                        fb[4 * i],
                        fb[4 * i + 1],
                        fb[4 * i + 2],
                        fb[4 * i + 3],
                    ]);
                    let want = if row < n {
                        f16_bits_to_f32(norms[row * ng + g]) * cb_scale
                    } else {
                        0.0
                    };
                    if got != want.to_bits() {
                        return Err(Cq4Error::FoldedMismatch { row, group: g });
                    }
                }
            }
        }
        // Padded channels carry index 0.
        let sbb = geometry.superblock_bytes();
        if !n.is_multiple_of(SUPER_BLOCK) {
            let last = &data[(geometry.sb64() - 1) * sbb..];
            for blk in last.chunks_exact(128) {
                if blk[2 * (n % SUPER_BLOCK)..].iter().any(|&b| b != 0) {
                    return Err(Cq4Error::BadBlob("padded channels must have nibble 0"));
                }
            }
        }
        let (hadamard, rt) = match layout.rotation {
            RotationRegions::Hadamard { left, right, perm } => {
                let mut l = [0i8; HADAMARD_N];
                let mut r = [0i8; HADAMARD_N];
                let mut p = [0u32; HADAMARD_N];
                for i in 0..HADAMARD_N {
                    l[i] = scales[left.offset + i] as i8;
                    r[i] = scales[right.offset + i] as i8;
                    let o = perm.offset + 4 * i;
                    p[i] = u32::from_le_bytes([
                        scales[o],
                        scales[o + 1],
                        scales[o + 2],
                        scales[o + 3],
                    ]);
                }
                let h = HadamardRotation::from_parts(l, r, p).ok_or(Cq4Error::BadBlob(
                    "Hadamard signs must be +-1 and perm a permutation of 0..128",
                ))?;
                (h, RtSource::None)
            }
            RotationRegions::Orthogonal { r, r_t } => {
                let rb = &scales[r.range()];
                let tb = &scales[r_t.range()];
                let mut rt32 = vec![0f32; kp * kp];
                for j in 0..kp {
                    for kk in 0..kp {
                        let t = u16_at(tb, j * kp + kk);
                        if t != u16_at(rb, kk * kp + j) {
                            return Err(Cq4Error::BadBlob("R^T is not the exact transpose of R"));
                        }
                        let v = f16_bits_to_f32(t);
                        if !v.is_finite() {
                            return Err(Cq4Error::BadBlob("R has a non-finite entry"));
                        }
                        rt32[j * kp + kk] = v;
                    }
                }
                for row in norms.chunks_exact(ng) {
                    if row.iter().any(|&b| b != row[0]) {
                        return Err(Cq4Error::BadBlob(
                            "orthogonal norms must repeat the row norm in every virtual group",
                        ));
                    }
                }
                (HadamardRotation::from_seed(0), RtSource::Owned(rt32))
            }
        };
        Ok(PanelTensorView {
            scales,
            data,
            norms,
            dec: Decoder {
                family,
                geometry,
                codebook,
                input_scale,
                hadamard,
                rt,
            },
            cb_bits,
            cb_scale,
        })
    }

    /// The rotation family.
    pub fn family(&self) -> Family {
        self.dec.family
    }

    /// Geometry (`n = N`, `k = Kp`, `gs = 128`).
    pub fn geometry(&self) -> PanelGeometry {
        self.dec.geometry
    }

    /// The scales blob this view borrows.
    pub fn scales(&self) -> &'a [u8] {
        self.scales
    }

    /// The data region (panels) this view borrows.
    pub fn panels(&self) -> &'a [u8] {
        self.data
    }

    /// Stored codebook, fp16 bits.
    pub fn codebook_bits(&self) -> [u16; LEVELS] {
        self.cb_bits
    }

    /// `cb_scale` (f32) as the kernels compute it.
    pub fn cb_scale(&self) -> f32 {
        self.cb_scale
    }

    /// The int8 codebook the kernels use.
    pub fn cb_i8(&self) -> [i8; LEVELS] {
        let mut s = [0f32; LEVELS];
        for (d, &b) in s.iter_mut().zip(&self.cb_bits) {
            *d = f16_bits_to_f32(b);
        }
        codebook_i8(&s, self.cb_scale)
    }

    /// Stored norms, `N x num_groups` fp16 bits.
    pub fn norms(&self) -> &[u16] {
        &self.norms
    }

    /// The Hadamard parameters (Hadamard family only).
    pub fn hadamard(&self) -> Option<&HadamardRotation> {
        (self.dec.family == Family::Hadamard).then_some(&self.dec.hadamard)
    }

    /// The 4-bit index of weight `(n, k)` (`n < N`, `k < Kp`).
    pub fn index(&self, n: usize, k: usize) -> Result<u8, Cq4Error> {
        let g = &self.dec.geometry;
        if n >= g.n() {
            return Err(Cq4Error::RowOutOfRange { row: n, n: g.n() });
        }
        let (byte, high) = g.nibble_position(n, k)?;
        let b = self.data[byte];
        Ok(if high { b >> 4 } else { b & 15 })
    }

    /// Dequantize rows `first_row..first_row + out.len() / Kp` into `out`
    /// (`rows x Kp`, f32). `first_row` must be a multiple of 64 unless a
    /// single row is requested.
    pub fn dequantize_rows(&self, first_row: usize, out: &mut [f32]) -> Result<(), Cq4Error> {
        let g = &self.dec.geometry;
        let kp = g.k();
        let ng = g.num_groups();
        if !out.len().is_multiple_of(kp) || out.is_empty() {
            return Err(Cq4Error::BufferLength {
                what: "out (rows x Kp)",
                expected: kp,
                got: out.len(),
            });
        }
        let nrows = out.len() / kp;
        let end = first_row.saturating_add(nrows);
        if end > g.n() {
            return Err(Cq4Error::RowOutOfRange {
                row: end - 1,
                n: g.n(),
            });
        }
        let sbb = g.superblock_bytes();
        if nrows == 1 {
            let sb =
                &self.data[(first_row / SUPER_BLOCK) * sbb..(first_row / SUPER_BLOCK + 1) * sbb];
            decode_row(
                &self.dec,
                sb,
                first_row % SUPER_BLOCK,
                &self.norms[first_row * ng..(first_row + 1) * ng],
                out,
            );
            return Ok(());
        }
        if !first_row.is_multiple_of(SUPER_BLOCK) {
            return Err(Cq4Error::BadChunk {
                first_row,
                rows: nrows,
                n: g.n(),
            });
        }
        let sb0 = first_row / SUPER_BLOCK;
        let sb1 = end.div_ceil(SUPER_BLOCK);
        decode_rows(
            &self.dec,
            &self.data[sb0 * sbb..sb1 * sbb],
            &self.norms[first_row * ng..end * ng],
            nrows,
            out,
        );
        Ok(())
    }

    /// Embedding row decode: row `n` of the tensor as `Kp` f32 values (what
    /// the engine does for token embeddings; works for both families).
    pub fn embedding_row(&self, n: usize, out: &mut [f32]) -> Result<(), Cq4Error> {
        let kp = self.dec.geometry.k();
        if out.len() != kp {
            return Err(Cq4Error::BufferLength {
                what: "out (Kp values)",
                expected: kp,
                got: out.len(),
            });
        }
        self.dequantize_rows(n, out)
    }

    /// Dequantize the whole tensor: `N x Kp` f32, row-major.
    pub fn qdq(&self) -> Result<Vec<f32>, Cq4Error> {
        let g = &self.dec.geometry;
        let mut out = vec![0f32; g.n() * g.k()];
        self.dequantize_rows(0, &mut out)?;
        Ok(out)
    }
}

/// Parse a tensor's scales blob and data region and dequantize all of it
/// (`N x Kp` f32). See [`PanelTensorView::parse`].
pub fn qdq(
    family: Family,
    n: usize,
    kp: usize,
    scales: &[u8],
    data: &[u8],
) -> Result<Vec<f32>, Cq4Error> {
    PanelTensorView::parse(family, n, kp, scales, data)?.qdq()
}

/// Parse and decode one row (e.g. a token embedding) into `out` (`Kp` values).
pub fn embedding_row(
    family: Family,
    n: usize,
    kp: usize,
    scales: &[u8],
    data: &[u8],
    row: usize,
    out: &mut [f32],
) -> Result<(), Cq4Error> {
    PanelTensorView::parse(family, n, kp, scales, data)?.embedding_row(row, out)
}
