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

use weights_file::panel::{PanelGeometry, SUPER_BLOCK};
use weights_file::PanelView;

use crate::codebook::LEVELS;
use crate::error::Cq4Error;
use crate::hadamard::{unrotate_group, HadamardRotation, HADAMARD_N};
use crate::orthogonal::OrthogonalRotation;
use weights_file::fp16::{f16_bits_to_f32, f16_bits_to_f64};
use weights_file::panel::RotationFamily as Family;

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
    use rayon::prelude::*;
    let kp = dec.geometry.k();
    let ng = dec.geometry.num_groups();
    let sbb = dec.geometry.superblock_bytes();
    // Rows are independent and each is computed the same way on any
    // thread: super-blocks in parallel (the orthogonal family's rows cost
    // Kp^2 multiply-adds each).
    out[..nrows * kp]
        .par_chunks_mut(SUPER_BLOCK * kp)
        .enumerate()
        .for_each(|(b, chunk)| {
            let sb = &panels[b * sbb..(b + 1) * sbb];
            for (c, row) in chunk.chunks_exact_mut(kp).enumerate() {
                let r = b * SUPER_BLOCK + c;
                decode_row(dec, sb, c, &norms[r * ng..(r + 1) * ng], row);
            }
        });
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
            for (g, (yg, og)) in y
                .chunks_exact(HADAMARD_N)
                .zip(out.chunks_exact_mut(HADAMARD_N))
                .enumerate()
            {
                let w = unrotate_group(&dec.hadamard, yg, f16_bits_to_f64(norms[g]));
                for (kk, o) in og.iter_mut().enumerate() {
                    *o = (w[kk] / dec.input_scale[g * HADAMARD_N + kk]) as f32;
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

/// A validated, borrowed view of one packed-panel CQ4 tensor (the
/// container's [`PanelView`]) with what dequantization needs decoded.
pub struct PanelTensorView<'a> {
    view: PanelView<'a>,
    norms: Vec<u16>,
    dec: Decoder,
}

impl std::fmt::Debug for PanelTensorView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PanelTensorView")
            .field("family", &self.dec.family)
            .field("geometry", &self.dec.geometry)
            .field("cb_scale", &self.view.cb_scale())
            .finish_non_exhaustive()
    }
}

impl<'a> PanelTensorView<'a> {
    /// Parse and validate (all checks are [`PanelView::parse`]'s). `n` is
    /// the header's `dims[0]` (= original_N), `kp` its `dims[1]`; group
    /// size is 128 for both families.
    pub fn parse(
        family: Family,
        n: usize,
        kp: usize,
        scales: &'a [u8],
        data: &'a [u8],
    ) -> Result<Self, Cq4Error> {
        Self::new(PanelView::parse(family, n, kp, scales, data)?)
    }

    /// Decode what qdq needs from a validated view.
    pub fn new(view: PanelView<'a>) -> Result<Self, Cq4Error> {
        let geometry = view.geometry();
        let (n, kp, ng) = (geometry.n(), geometry.k(), geometry.num_groups());
        let codebook = view.codebook_bits().map(f16_bits_to_f64);
        let input_scale: Vec<f64> = (0..kp)
            .map(|k| f16_bits_to_f64(view.input_scale(k)))
            .collect();
        let norms: Vec<u16> = (0..n * ng).map(|i| view.norm(i / ng, i % ng)).collect();
        let (hadamard, rt) = match view.hadamard() {
            Some(p) => (
                HadamardRotation::from_parts(p.left, p.right, p.perm)
                    .ok_or(Cq4Error::BadRotation("Hadamard parameters"))?,
                RtSource::None,
            ),
            None => {
                let rt32: Vec<f32> = view
                    .rt_bytes()
                    .chunks_exact(2)
                    .map(|h| f16_bits_to_f32(u16::from_le_bytes([h[0], h[1]])))
                    .collect();
                (HadamardRotation::from_seed(0), RtSource::Owned(rt32))
            }
        };
        Ok(PanelTensorView {
            view,
            norms,
            dec: Decoder {
                family: view.family(),
                geometry,
                codebook,
                input_scale,
                hadamard,
                rt,
            },
        })
    }

    /// The container's view this decoder was built from.
    pub fn view(&self) -> &PanelView<'a> {
        &self.view
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
        self.view.scales()
    }

    /// The data region (panels) this view borrows.
    pub fn panels(&self) -> &'a [u8] {
        self.view.panels()
    }

    /// Stored codebook, fp16 bits.
    pub fn codebook_bits(&self) -> [u16; LEVELS] {
        self.view.codebook_bits()
    }

    /// `cb_scale` (f32) as the kernels compute it.
    pub fn cb_scale(&self) -> f32 {
        self.view.cb_scale()
    }

    /// The int8 codebook the kernels use.
    pub fn cb_i8(&self) -> [i8; LEVELS] {
        self.view.cb_i8()
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
        Ok(self.view.index(n, k)?)
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
            let sb = &self.panels()
                [(first_row / SUPER_BLOCK) * sbb..(first_row / SUPER_BLOCK + 1) * sbb];
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
            &self.panels()[sb0 * sbb..sb1 * sbb],
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
