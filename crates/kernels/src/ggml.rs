//! ggml weight matrices (plain row-major, R4, R8) and their GEMV driver.
//!
//! Every layout is served by the same 8-row *group kernels*: a
//! [`RowGroup`] names, for each of 8 row slots, the byte offset of the
//! row's block 0 and the distance between its consecutive blocks. In an R8
//! file the 8 rows of a group have stride `8 * B` and adjacent offsets (one
//! sequential stream); in a plain file stride `B` and offsets a row apart;
//! R4 groups contribute two 4-row groups per unit; the `N % F` tail rows
//! of an interleaved file are plain rows. Because a row's arithmetic never
//! depends on its slot or on where its blocks are, R4/R8 results equal the
//! plain results bit for bit by construction, and so does any row split
//! across threads.

use ggml_quants::GgmlType;
use weights_file::{interleave, Precision, WeightsFile};

use crate::dispatch::{kernels, Exec, GroupFn};
use crate::error::{check_len, KernelError};
use crate::format::{
    ActBlock, GgmlFormat, Iq4Nl, Iq4Xs, Q2K, Q3K, Q4K, Q4_0, Q4_1, Q5K, Q5_0, Q5_1, Q6K, Q8_0,
};
use crate::gemv::{weight_stationary, Dims, Gemv, GemvResult};
pub use crate::operands::{RowGroup, GROUP_ROWS};
use crate::workspace::Workspace;

/// The twelve ggml types the kernels serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuantFormat {
    /// Q8_0 (Q8_0 activations).
    Q8_0,
    /// Q4_0 (Q8_0 activations).
    Q4_0,
    /// Q4_1 (Q8_0 activations).
    Q4_1,
    /// Q5_0 (Q8_0 activations).
    Q5_0,
    /// Q5_1 (Q8_0 activations).
    Q5_1,
    /// Q4_K (Q8_K activations).
    Q4K,
    /// Q5_K (Q8_K activations).
    Q5K,
    /// Q6_K (Q8_K activations).
    Q6K,
    /// Q2_K (Q8_K activations).
    Q2K,
    /// Q3_K (Q8_K activations).
    Q3K,
    /// IQ4_NL (Q8_0 activations).
    Iq4Nl,
    /// IQ4_XS (Q8_K activations).
    Iq4Xs,
}

/// The twelve formats.
pub const ALL_FORMATS: [QuantFormat; 12] = [
    QuantFormat::Q8_0,
    QuantFormat::Q4_0,
    QuantFormat::Q4_1,
    QuantFormat::Q5_0,
    QuantFormat::Q5_1,
    QuantFormat::Q4K,
    QuantFormat::Q5K,
    QuantFormat::Q6K,
    QuantFormat::Q2K,
    QuantFormat::Q3K,
    QuantFormat::Iq4Nl,
    QuantFormat::Iq4Xs,
];

impl QuantFormat {
    /// The format of a ggml type, if served.
    pub fn from_ggml(t: GgmlType) -> Option<Self> {
        Some(match t {
            GgmlType::Q8_0 => QuantFormat::Q8_0,
            GgmlType::Q4_0 => QuantFormat::Q4_0,
            GgmlType::Q4_1 => QuantFormat::Q4_1,
            GgmlType::Q5_0 => QuantFormat::Q5_0,
            GgmlType::Q5_1 => QuantFormat::Q5_1,
            GgmlType::Q4_K => QuantFormat::Q4K,
            GgmlType::Q5_K => QuantFormat::Q5K,
            GgmlType::Q6_K => QuantFormat::Q6K,
            GgmlType::Q2_K => QuantFormat::Q2K,
            GgmlType::Q3_K => QuantFormat::Q3K,
            GgmlType::IQ4_NL => QuantFormat::Iq4Nl,
            GgmlType::IQ4_XS => QuantFormat::Iq4Xs,
            _ => return None,
        })
    }
    /// The ggml type.
    pub fn ggml_type(self) -> GgmlType {
        match self {
            QuantFormat::Q8_0 => Q8_0::TYPE,
            QuantFormat::Q4_0 => Q4_0::TYPE,
            QuantFormat::Q4_1 => Q4_1::TYPE,
            QuantFormat::Q5_0 => Q5_0::TYPE,
            QuantFormat::Q5_1 => Q5_1::TYPE,
            QuantFormat::Q4K => Q4K::TYPE,
            QuantFormat::Q5K => Q5K::TYPE,
            QuantFormat::Q6K => Q6K::TYPE,
            QuantFormat::Q2K => Q2K::TYPE,
            QuantFormat::Q3K => Q3K::TYPE,
            QuantFormat::Iq4Nl => Iq4Nl::TYPE,
            QuantFormat::Iq4Xs => Iq4Xs::TYPE,
        }
    }
    /// Weights per block.
    pub fn block_weights(self) -> usize {
        self.ggml_type().block_size()
    }
    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        self.ggml_type().type_size()
    }
}

// `GgmlMatrix::group_at` masks with `f - 1`: every factor is a power of two.
const _: () = {
    let mut i = 0;
    while i < interleave::FACTORS.len() {
        assert!(interleave::FACTORS[i].is_power_of_two());
        i += 1;
    }
};

/// How the rows of a ggml matrix are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RowLayout {
    /// Plain row-major (as in a GGUF file).
    RowMajor,
    /// Rows interleaved block by block in groups of 4 or 8 (R4 / R8), tail
    /// rows plain (`docs/FORMAT.md` §sidecar).
    Interleaved(usize),
}

impl RowLayout {
    /// `row_major`, `r4`, `r8`.
    pub fn name(self) -> String {
        match self {
            RowLayout::RowMajor => "row_major".into(),
            RowLayout::Interleaved(f) => format!("r{f}"),
        }
    }
}

/// A ggml weight matrix `[N, K]` over borrowed bytes.
#[derive(Debug, Clone, Copy)]
pub struct GgmlMatrix<'a> {
    format: QuantFormat,
    layout: RowLayout,
    n: usize,
    k: usize,
    data: &'a [u8],
    /// Blocks per row, bytes per block and per row, computed once:
    /// [`GgmlMatrix::group_at`] runs for every 8 rows of every call, and
    /// `K / block_weights` is an integer division.
    nb: usize,
    bb: usize,
    rb: usize,
}

impl<'a> GgmlMatrix<'a> {
    /// A matrix of `n` rows of `k` weights stored as `format` in `layout`.
    pub fn new(
        format: QuantFormat,
        layout: RowLayout,
        n: usize,
        k: usize,
        data: &'a [u8],
    ) -> Result<Self, KernelError> {
        let qk = format.block_weights();
        if n == 0 || k == 0 || !k.is_multiple_of(qk) {
            return Err(KernelError::Shape(format!(
                "{} matrix {n} x {k}: K must be a positive multiple of {qk}",
                format.ggml_type()
            )));
        }
        if let RowLayout::Interleaved(f) = layout {
            if !interleave::FACTORS.contains(&f) {
                return Err(KernelError::Shape(format!("interleave factor {f}")));
            }
        }
        let bytes = (k / qk)
            .checked_mul(format.block_bytes())
            .and_then(|rb| rb.checked_mul(n))
            .ok_or_else(|| KernelError::Shape(format!("{n} x {k} overflows")))?;
        check_len("ggml data", bytes, data.len())?;
        let (nb, bb) = (k / qk, format.block_bytes());
        Ok(GgmlMatrix {
            format,
            layout,
            n,
            k,
            data,
            nb,
            bb,
            rb: nb * bb,
        })
    }

    /// The matrix of a sidecar container (precision `0x100 | ggml id`, flags
    /// ROW_INTERLEAVE_4 / _8; neither flag = plain row-major).
    pub fn from_file(f: &WeightsFile<'a>) -> Result<Self, KernelError> {
        let h = f.header();
        sidecar_format(f)?;
        if h.ndim != 2 {
            return Err(KernelError::Shape(format!(
                "ndim {} (want 2; a 3-D expert sidecar is read with GgmlExperts)",
                h.ndim
            )));
        }
        let (format, layout) = sidecar_format(f)?;
        let n = usize::try_from(h.dims[0]).map_err(|_| KernelError::Shape("N".into()))?;
        let k = usize::try_from(h.dims[1]).map_err(|_| KernelError::Shape("K".into()))?;
        Self::new(format, layout, n, k, f.data())
    }

    /// The format.
    pub fn format(&self) -> QuantFormat {
        self.format
    }
    /// The row layout.
    pub fn layout(&self) -> RowLayout {
        self.layout
    }
    /// The stored bytes.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }
    /// Blocks per row.
    pub fn blocks_per_row(&self) -> usize {
        self.nb
    }
    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.rb
    }

    /// (offset of block 0, bytes between consecutive blocks) of row `row`.
    pub fn row_location(&self, row: usize) -> (usize, usize) {
        let bb = self.format.block_bytes();
        let rb = self.row_bytes();
        match self.layout {
            RowLayout::Interleaved(f) if row < interleave::full_group_rows(self.n, f) => {
                ((row / f) * f * rb + (row % f) * bb, f * bb)
            }
            _ => (row * rb, bb),
        }
    }

    /// The group of rows `first..first + 8` (rows past `N` repeat row
    /// `N - 1`; their results are discarded).
    pub fn group_at(&self, first: usize) -> RowGroup<'a> {
        let mut offsets = [0usize; GROUP_ROWS];
        let mut strides = [0usize; GROUP_ROWS];
        let (bb, rb) = (self.bb, self.rb);
        // Once per group, without divisions (interleave factors are 4 and
        // 8): this runs for every 8 rows of every call.
        let (f, full) = match self.layout {
            RowLayout::Interleaved(f) => (f, self.n & !(f - 1)),
            RowLayout::RowMajor => (1, 0),
        };
        for r in 0..GROUP_ROWS {
            let row = (first + r).min(self.n - 1);
            (offsets[r], strides[r]) = if row < full {
                ((row & !(f - 1)) * rb + (row & (f - 1)) * bb, f * bb)
            } else {
                (row * rb, bb)
            };
        }
        debug_assert!((0..GROUP_ROWS).all(|r| {
            (offsets[r], strides[r]) == self.row_location((first + r).min(self.n - 1))
        }));
        // In bounds by construction (the data length was checked in `new`).
        RowGroup::new(self.data, offsets, strides, self.nb, self.bb)
            .expect("row locations are inside the checked data")
    }

    /// Copy row `row`'s blocks, in column order, into `out` (`row_bytes()`).
    pub fn row_blocks(&self, row: usize, out: &mut [u8]) -> Result<(), KernelError> {
        check_len("row buffer", self.row_bytes(), out.len())?;
        if row >= self.n {
            return Err(KernelError::Shape(format!("row {row} of {}", self.n)));
        }
        let (o, s) = self.row_location(row);
        let bb = self.format.block_bytes();
        for (b, dst) in out.chunks_exact_mut(bb).enumerate() {
            dst.copy_from_slice(&self.data[o + b * s..o + b * s + bb]);
        }
        Ok(())
    }

    /// `Y = X W^T` for `m` activation rows (`m == 1`: the GEMV, `y`
    /// written in place). Each 8-row weight group runs against every
    /// activation row before the next group (module docs of `gemv`).
    fn run<F: GgmlFormat>(
        &self,
        m: usize,
        x: &[f32],
        y: &mut [f32],
        acts: &mut Vec<F::Act>,
        yt: &mut Vec<f32>,
        exec: Exec,
    ) -> Result<(), KernelError> {
        let table = kernels(exec.isa)?;
        let kern: GroupFn<F::Act> = F::kernel(table);
        let gemm = F::gemm_kernel(table);
        let nb = self.blocks_per_row();
        acts.clear();
        acts.resize(m * nb, F::Act::default());
        if nb > 0 {
            for (xr, ar) in x.chunks_exact(self.k).zip(acts.chunks_exact_mut(nb)) {
                F::Act::quantize_isa(exec.isa, xr, ar)?;
            }
        }
        let act: &[F::Act] = acts;
        weight_stationary::<GROUP_ROWS>(m, y, yt, exec, |row0, i0, rows, out| {
            let g = self.group_at(row0);
            let a = &act[i0 * nb..(i0 + rows) * nb];
            match gemm {
                // SAFETY: `f` comes from `kernels(exec.isa)`, which only
                // returns tables of ISAs the CPU supports; `g` satisfies the
                // RowGroup invariant, `a` holds `rows` activation rows of
                // blocks_per_row blocks and `out` 8 values per row.
                Some(f) if rows > 1 => unsafe { f(&g, a, out) },
                _ => {
                    for (ar, o) in a.chunks_exact(nb).zip(out.chunks_exact_mut(GROUP_ROWS)) {
                        let o: &mut [f32; GROUP_ROWS] = o.try_into().expect("8 slots");
                        // SAFETY: as above, one activation row.
                        unsafe { kern(&g, ar, o) };
                    }
                }
            }
        });
        Ok(())
    }
}

/// The format and row layout of a ggml container (precision `0x100 | ggml
/// id`, flags ROW_INTERLEAVE_4 / _8; neither flag = plain row-major).
fn sidecar_format(f: &WeightsFile<'_>) -> Result<(QuantFormat, RowLayout), KernelError> {
    let h = f.header();
    let Some(Precision::Ggml(id)) = h.precision() else {
        return Err(KernelError::Unsupported(format!(
            "precision {:#x} is not a ggml type",
            h.precision
        )));
    };
    let format = GgmlType::from_id(id)
        .and_then(QuantFormat::from_ggml)
        .ok_or_else(|| KernelError::Unsupported(format!("ggml type id {id}")))?;
    let layout = match h.interleave() {
        Some(il) => RowLayout::Interleaved(il.factor()),
        None => RowLayout::RowMajor,
    };
    Ok((format, layout))
}

/// The expert matrices of a MoE tensor `[E, N, K]` over borrowed bytes:
/// `E` matrices `[N, K]` stored one after the other, each laid out exactly
/// as a 2-D matrix of the same layout (`docs/FORMAT.md` §sidecar, "Expert
/// tensors"). [`GgmlExperts::expert`] is a [`GgmlMatrix`] over one expert's
/// bytes, so every tier runs the 2-D kernels on it unchanged.
#[derive(Debug, Clone, Copy)]
pub struct GgmlExperts<'a> {
    format: QuantFormat,
    layout: RowLayout,
    experts: usize,
    n: usize,
    k: usize,
    data: &'a [u8],
}

impl<'a> GgmlExperts<'a> {
    /// `experts` matrices of `n` rows of `k` weights stored as `format` in
    /// `layout`, one after the other in `data`.
    pub fn new(
        format: QuantFormat,
        layout: RowLayout,
        experts: usize,
        n: usize,
        k: usize,
        data: &'a [u8],
    ) -> Result<Self, KernelError> {
        if experts == 0 {
            return Err(KernelError::Shape(format!(
                "{} expert tensor with 0 experts",
                format.ggml_type()
            )));
        }
        // The geometry of one expert (checked like any 2-D matrix) ...
        let qk = format.block_weights();
        if n == 0 || k == 0 || !k.is_multiple_of(qk) {
            return Err(KernelError::Shape(format!(
                "{} experts {n} x {k}: K must be a positive multiple of {qk}",
                format.ggml_type()
            )));
        }
        let bytes = (k / qk)
            .checked_mul(format.block_bytes())
            .and_then(|rb| rb.checked_mul(n))
            .and_then(|eb| eb.checked_mul(experts))
            .ok_or_else(|| KernelError::Shape(format!("{experts} x {n} x {k} overflows")))?;
        // ... and all of them.
        check_len("ggml expert data", bytes, data.len())?;
        let m = GgmlExperts {
            format,
            layout,
            experts,
            n,
            k,
            data,
        };
        m.expert(0)?;
        Ok(m)
    }

    /// The experts of a 3-D sidecar container (`[E, N, K]`).
    pub fn from_file(f: &WeightsFile<'a>) -> Result<Self, KernelError> {
        let (format, layout) = sidecar_format(f)?;
        let h = f.header();
        if h.ndim != 3 {
            return Err(KernelError::Shape(format!(
                "ndim {} (an expert sidecar is 3-D)",
                h.ndim
            )));
        }
        let dim = |i: usize, what: &str| {
            usize::try_from(h.dims[i]).map_err(|_| KernelError::Shape(what.into()))
        };
        Self::new(
            format,
            layout,
            dim(0, "experts")?,
            dim(1, "N")?,
            dim(2, "K")?,
            f.data(),
        )
    }

    /// Number of experts `E`.
    pub fn experts(&self) -> usize {
        self.experts
    }
    /// The format.
    pub fn format(&self) -> QuantFormat {
        self.format
    }
    /// The row layout of each expert.
    pub fn layout(&self) -> RowLayout {
        self.layout
    }
    /// Rows `N` of each expert.
    pub fn rows(&self) -> usize {
        self.n
    }
    /// Weights `K` per row.
    pub fn cols(&self) -> usize {
        self.k
    }
    /// Bytes of one expert (`N x row bytes`).
    pub fn expert_bytes(&self) -> usize {
        self.data.len() / self.experts
    }

    /// Expert `e` as a 2-D matrix over its own bytes (`e < experts()`).
    pub fn expert(&self, e: usize) -> Result<GgmlMatrix<'a>, KernelError> {
        if e >= self.experts {
            return Err(KernelError::Shape(format!(
                "expert {e} of {}",
                self.experts
            )));
        }
        let eb = self.expert_bytes();
        let bytes = &self.data[e * eb..(e + 1) * eb];
        GgmlMatrix::new(self.format, self.layout, self.n, self.k, bytes)
    }

    /// `y = W_e x`: [`Gemv::gemv`] of expert `e`.
    pub fn gemv_expert(
        &self,
        e: usize,
        x: &[f32],
        y: &mut [f32],
        ws: &mut Workspace,
        exec: Exec,
    ) -> GemvResult {
        self.expert(e)?.gemv(x, y, ws, exec)
    }
}

impl Gemv for GgmlMatrix<'_> {
    fn dims(&self) -> Dims {
        Dims::new(self.n, self.k, self.data.len())
    }

    fn gemm_sized(
        &self,
        m: usize,
        x: &[f32],
        y: &mut [f32],
        ws: &mut Workspace,
        exec: Exec,
    ) -> GemvResult {
        let (a, b, t) = (&mut ws.q8_0, &mut ws.q8_k, &mut ws.yt);
        match self.format {
            QuantFormat::Q8_0 => self.run::<Q8_0>(m, x, y, a, t, exec),
            QuantFormat::Q4_0 => self.run::<Q4_0>(m, x, y, a, t, exec),
            QuantFormat::Q4_1 => self.run::<Q4_1>(m, x, y, a, t, exec),
            QuantFormat::Q5_0 => self.run::<Q5_0>(m, x, y, a, t, exec),
            QuantFormat::Q5_1 => self.run::<Q5_1>(m, x, y, a, t, exec),
            QuantFormat::Q4K => self.run::<Q4K>(m, x, y, b, t, exec),
            QuantFormat::Q5K => self.run::<Q5K>(m, x, y, b, t, exec),
            QuantFormat::Q6K => self.run::<Q6K>(m, x, y, b, t, exec),
            QuantFormat::Q2K => self.run::<Q2K>(m, x, y, b, t, exec),
            QuantFormat::Q3K => self.run::<Q3K>(m, x, y, b, t, exec),
            QuantFormat::Iq4Nl => self.run::<Iq4Nl>(m, x, y, a, t, exec),
            QuantFormat::Iq4Xs => self.run::<Iq4Xs>(m, x, y, b, t, exec),
        }
    }
}
