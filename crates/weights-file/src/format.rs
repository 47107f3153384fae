//! Byte layout of the `.weights` container: constants, flag bits, precision
//! codes, the on-disk header struct and the decoded [`Header`].
//!
//! Little-endian throughout. The normative description is `docs/FORMAT.md`
//! §container; this file is its executable form. [`RawHeader`] *is* the
//! byte layout (a `#[repr(C)]` struct of little-endian fields, alignment 1),
//! used by both the reader (a zero-copy view of the file's first 84 bytes)
//! and the writer ([`Header::to_bytes`]), so the two cannot disagree.

use ggml_quants::{GgmlType, RawType};
use zerocopy::byteorder::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::panel::{PanelGeometry, RotationFamily};

/// `"CACT"` in file order, read as a little-endian u32.
pub const MAGIC: u32 = 0x5443_4143;
/// Length of the fixed header.
pub const HEADER_LEN: usize = 84;
/// Header length with [`flags::EXTENDED_SHAPE`] (four more u64 dims).
pub const EXTENDED_HEADER_LEN: usize = 116;
/// Alignment of the regions in CQ and plain files.
pub const DEFAULT_ALIGNMENT: u32 = 32;
/// Alignment of the regions in ggml sidecar files.
pub const SIDECAR_ALIGNMENT: u32 = 64;
/// Largest alignment a reader accepts.
pub const MAX_ALIGNMENT: u32 = 1 << 16;
/// Weights per group of every CQ4 packed-panel file `convert` writes.
pub const CQ4_GROUP_SIZE: u32 = 128;

/// The fixed 84-byte header exactly as stored.
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct RawHeader {
    /// [`MAGIC`].
    pub magic: U32,
    /// [`flags`] bits.
    pub flags: U32,
    /// Region alignment.
    pub alignment: U32,
    /// Meaningful dims.
    pub ndim: U32,
    /// `dims[0..4]`, outermost first.
    pub dims: [U64; 4],
    /// [`Precision`] code.
    pub precision: U32,
    /// Data region length.
    pub data_bytes: U64,
    /// Scales region length.
    pub scales_bytes: U64,
    /// Weights per group / block.
    pub group_size: U32,
    /// Groups / blocks per row.
    pub num_groups: U32,
    /// Rows before padding.
    pub original_n: U64,
}
const _: () = assert!(core::mem::size_of::<RawHeader>() == HEADER_LEN);

/// The 32 bytes that follow [`RawHeader`] with [`flags::EXTENDED_SHAPE`].
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct RawExtension {
    /// `dims[4..8]`.
    pub dims: [U64; 4],
}
const _: () = assert!(HEADER_LEN + core::mem::size_of::<RawExtension>() == EXTENDED_HEADER_LEN);

/// Header flag bits.
pub mod flags {
    /// Plain INT8 files: a scales region is present (engine legacy writer).
    pub const HAS_SCALES: u32 = 1 << 0;
    /// CQ files: the orthogonal rotation family (R and R^T stored).
    pub const ORTHOGONAL_ROTATION: u32 = 1 << 1;
    /// CQ files: legacy 4-row interleave (never written by `convert`).
    pub const INTERLEAVED_4ROW: u32 = 1 << 2;
    /// Plain INT8 files: legacy interleave (never written by `convert`).
    pub const INTERLEAVED: u32 = 1 << 3;
    /// Four more u64 dimensions follow the header (116-byte header).
    pub const EXTENDED_SHAPE: u32 = 1 << 4;
    /// CQ4 data region in the packed-panel layout `[SB64][ng][gs/4][128B]`.
    pub const PACKED_PANELS: u32 = 1 << 5;
    /// ggml sidecar: rows interleaved in groups of 4 (R4).
    pub const ROW_INTERLEAVE_4: u32 = 1 << 6;
    /// ggml sidecar: rows interleaved in groups of 8 (R8).
    pub const ROW_INTERLEAVE_8: u32 = 1 << 7;
    /// Every bit a reader understands.
    pub const KNOWN: u32 = (1 << 8) - 1;

    /// Names of the set bits, for `inspect`.
    pub fn names(f: u32) -> Vec<&'static str> {
        const ALL: [(u32, &str); 8] = [
            (HAS_SCALES, "HAS_SCALES"),
            (ORTHOGONAL_ROTATION, "ORTHOGONAL_ROTATION"),
            (INTERLEAVED_4ROW, "INTERLEAVED_4ROW"),
            (INTERLEAVED, "INTERLEAVED"),
            (EXTENDED_SHAPE, "EXTENDED_SHAPE"),
            (PACKED_PANELS, "PACKED_PANELS"),
            (ROW_INTERLEAVE_4, "ROW_INTERLEAVE_4"),
            (ROW_INTERLEAVE_8, "ROW_INTERLEAVE_8"),
        ];
        ALL.iter()
            .filter(|(b, _)| f & b != 0)
            .map(|(_, n)| *n)
            .collect()
    }
}

/// The `precision` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// Grouped int8 (engine legacy; never written, rejected by the reader).
    Int8,
    /// IEEE half, row-major.
    Fp16,
    /// IEEE single, row-major.
    Fp32,
    /// 1-, 2-, 3- or 4-bit codebook quantization (`CQ1`..`CQ4`).
    Cq(u8),
    /// A ggml block type stored as whole ggml blocks (sidecar files):
    /// code `0x100 | ggml_type_id`.
    Ggml(u32),
    /// Raw elements of a non-float type, row-major, copied from the source
    /// (`I64` position ids, `BOOL` masks, FP8 ...): code `0x200 + id`.
    Raw(RawType),
}

/// Code offset of the ggml block types.
pub const GGML_PRECISION_BASE: u32 = 0x100;
/// Code offset of the raw element types.
pub const RAW_PRECISION_BASE: u32 = 0x200;

impl Precision {
    /// Decode the field; `None` for unknown codes.
    pub fn from_code(code: u32) -> Option<Self> {
        Some(match code {
            0 => Precision::Int8,
            1 => Precision::Fp16,
            2 => Precision::Fp32,
            3..=6 => Precision::Cq((code - 2) as u8),
            c if c & !0xff == GGML_PRECISION_BASE => Precision::Ggml(c & 0xff),
            c if c & !0xff == RAW_PRECISION_BASE => Precision::Raw(RawType::from_id(c & 0xff)?),
            _ => return None,
        })
    }

    /// The field value.
    pub fn code(self) -> u32 {
        match self {
            Precision::Int8 => 0,
            Precision::Fp16 => 1,
            Precision::Fp32 => 2,
            Precision::Cq(b) => 2 + u32::from(b),
            Precision::Ggml(t) => GGML_PRECISION_BASE | t,
            Precision::Raw(t) => RAW_PRECISION_BASE + t.id(),
        }
    }

    /// The precision of a ggml sidecar of type `t`.
    pub fn ggml(t: GgmlType) -> Self {
        Precision::Ggml(t.id())
    }

    /// The ggml type of a sidecar precision (`None` for other precisions or
    /// unknown ids).
    pub fn ggml_type(self) -> Option<GgmlType> {
        match self {
            Precision::Ggml(id) => GgmlType::from_id(id),
            _ => None,
        }
    }

    /// A display name (`FP16`, `CQ4`, `Q4_K`, `I64`; `GGML(99)` for an
    /// unknown ggml id).
    pub fn name(self) -> String {
        match self {
            Precision::Int8 => "INT8".into(),
            Precision::Fp16 => "FP16".into(),
            Precision::Fp32 => "FP32".into(),
            Precision::Cq(b) => format!("CQ{b}"),
            Precision::Ggml(t) => {
                GgmlType::from_id(t).map_or(format!("GGML({t})"), |t| t.to_string())
            }
            Precision::Raw(t) => t.name().into(),
        }
    }
}

/// Rows per interleave group of a ggml sidecar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Interleave {
    /// R4.
    R4,
    /// R8.
    R8,
}

impl Interleave {
    /// 4 or 8.
    pub fn factor(self) -> usize {
        match self {
            Interleave::R4 => 4,
            Interleave::R8 => 8,
        }
    }

    /// The flag bit.
    pub fn flag(self) -> u32 {
        match self {
            Interleave::R4 => flags::ROW_INTERLEAVE_4,
            Interleave::R8 => flags::ROW_INTERLEAVE_8,
        }
    }

    /// From a factor (4 or 8).
    pub fn from_factor(f: usize) -> Option<Self> {
        match f {
            4 => Some(Interleave::R4),
            8 => Some(Interleave::R8),
            _ => None,
        }
    }
}

/// The shape of a sidecar: one matrix `[n, k]` (ndim 2), or `experts`
/// matrices `[n, k]` stored one after the other (ndim 3, `[experts, n, k]`:
/// a MoE expert tensor, `docs/FORMAT.md` §sidecar, "Expert tensors").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SidecarShape {
    /// `Some(E)` for a 3-D expert tensor, `None` for a 2-D matrix.
    pub experts: Option<u64>,
    /// Rows of each matrix.
    pub n: u64,
    /// Weights per row.
    pub k: u64,
}

impl SidecarShape {
    /// A 2-D matrix `[n, k]`.
    pub fn matrix(n: u64, k: u64) -> Self {
        SidecarShape {
            experts: None,
            n,
            k,
        }
    }

    /// `experts` matrices `[n, k]` (`[experts, n, k]`).
    pub fn experts(experts: u64, n: u64, k: u64) -> Self {
        SidecarShape {
            experts: Some(experts),
            n,
            k,
        }
    }

    /// The shape of a source tensor: 2-D `[n, k]` or 3-D `[e, n, k]`
    /// (`None` for other ranks).
    pub fn of(shape: &[u64]) -> Option<Self> {
        match *shape {
            [n, k] => Some(Self::matrix(n, k)),
            [e, n, k] => Some(Self::experts(e, n, k)),
            _ => None,
        }
    }

    /// Matrices stored (1 for a 2-D sidecar).
    pub fn count(&self) -> u64 {
        self.experts.unwrap_or(1)
    }

    /// Rows of all matrices together (`count x n`; `None` on overflow).
    pub fn rows(&self) -> Option<u64> {
        self.count().checked_mul(self.n)
    }
}

/// The decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Flag bits ([`flags`]).
    pub flags: u32,
    /// Alignment of the scales and data regions (a power of two).
    pub alignment: u32,
    /// Number of meaningful dims (1..=4, up to 8 with EXTENDED_SHAPE).
    pub ndim: u32,
    /// Dimensions, outermost first; unused entries are 0. Eight entries; the
    /// last four are only stored with EXTENDED_SHAPE.
    pub dims: [u64; 8],
    /// Raw precision code.
    pub precision: u32,
    /// Bytes of the data region.
    pub data_bytes: u64,
    /// Bytes of the scales region.
    pub scales_bytes: u64,
    /// Weights per group (CQ), per block (ggml), else 0.
    pub group_size: u32,
    /// Groups / blocks per row, else 0.
    pub num_groups: u32,
    /// Rows before padding (CQ: N), else `dims[0]`.
    pub original_n: u64,
}

fn dims_of(shape: &[u64]) -> [u64; 8] {
    let mut dims = [0u64; 8];
    for (d, s) in dims.iter_mut().zip(shape) {
        *d = *s;
    }
    dims
}

impl Header {
    /// A row-major file of `shape` without scales: FP16 / FP32 (plain) or a
    /// raw element type. `data_bytes` must be what the shape implies.
    fn row_major(precision: Precision, shape: &[u64], data_bytes: u64) -> Self {
        let extended = shape.len() > 4;
        Header {
            flags: if extended { flags::EXTENDED_SHAPE } else { 0 },
            alignment: DEFAULT_ALIGNMENT,
            ndim: shape.len() as u32,
            dims: dims_of(shape),
            precision: precision.code(),
            data_bytes,
            scales_bytes: 0,
            group_size: 0,
            num_groups: 0,
            original_n: shape.first().copied().unwrap_or(0),
        }
    }

    /// A header for a plain row-major tensor (FP16 or FP32): no scales.
    pub fn plain(precision: Precision, shape: &[u64], data_bytes: u64) -> Self {
        Self::row_major(precision, shape, data_bytes)
    }

    /// A header for raw elements of `ty` (`None` when the byte size is not
    /// whole or overflows).
    pub fn raw(ty: RawType, shape: &[u64]) -> Option<Self> {
        let elements = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
        Some(Self::row_major(
            Precision::Raw(ty),
            shape,
            ty.bytes_of(elements)?,
        ))
    }

    /// A header for a ggml sidecar `[n, k]` of type `ty` (`None` when `k` is
    /// not whole blocks or the size overflows).
    pub fn sidecar(ty: GgmlType, interleave: Interleave, n: u64, k: u64) -> Option<Self> {
        Self::sidecar_of(ty, interleave, SidecarShape::matrix(n, k))
    }

    /// A header for a ggml sidecar of `shape` (2-D, or 3-D `[experts, n, k]`
    /// for MoE expert tensors; `None` when `k` is not whole blocks or the
    /// size overflows). `original_N` is `dims[0]`, as in every file.
    pub fn sidecar_of(ty: GgmlType, interleave: Interleave, shape: SidecarShape) -> Option<Self> {
        let SidecarShape { experts, n, k } = shape;
        let bs = ty.block_size() as u64;
        let row_bytes = ty.row_bytes(k)?;
        let (ndim, dims) = match experts {
            None => (2, dims_of(&[n, k])),
            Some(e) => (3, dims_of(&[e, n, k])),
        };
        Some(Header {
            flags: interleave.flag(),
            alignment: SIDECAR_ALIGNMENT,
            ndim,
            dims,
            precision: Precision::ggml(ty).code(),
            data_bytes: shape.rows()?.checked_mul(row_bytes)?,
            scales_bytes: 0,
            group_size: u32::try_from(bs).ok()?,
            num_groups: u32::try_from(k / bs).ok()?,
            original_n: dims[0],
        })
    }

    /// The matrix shape of a sidecar header (`None` for other precisions
    /// or an `ndim` other than 2 and 3; nothing else is validated).
    pub fn sidecar_shape(&self) -> Option<SidecarShape> {
        self.precision()?.ggml_type()?;
        let d = &self.dims;
        match self.ndim {
            2 => Some(SidecarShape::matrix(d[0], d[1])),
            3 => Some(SidecarShape::experts(d[0], d[1], d[2])),
            _ => None,
        }
    }

    /// A header for a CQ4 packed-panel tensor of geometry `g` (group size
    /// 128) and rotation family `family`; `scales_bytes` from the layout.
    pub fn panels(g: &PanelGeometry, family: RotationFamily) -> Self {
        let mut f = flags::PACKED_PANELS;
        if family == RotationFamily::Orthogonal {
            f |= flags::ORTHOGONAL_ROTATION;
        }
        Header {
            flags: f,
            alignment: DEFAULT_ALIGNMENT,
            ndim: 2,
            dims: dims_of(&[g.n() as u64, g.k() as u64]),
            precision: Precision::Cq(4).code(),
            data_bytes: g.data_bytes() as u64,
            scales_bytes: g.scales_layout(family).scales_bytes as u64,
            group_size: g.gs() as u32,
            num_groups: g.num_groups() as u32,
            original_n: g.n() as u64,
        }
    }

    /// Decode the stored fields (nothing is validated).
    pub fn from_raw(raw: &RawHeader, ext: Option<&RawExtension>) -> Self {
        let mut dims = [0u64; 8];
        for (d, r) in dims.iter_mut().zip(&raw.dims) {
            *d = r.get();
        }
        if let Some(e) = ext {
            for (d, r) in dims[4..].iter_mut().zip(&e.dims) {
                *d = r.get();
            }
        }
        Header {
            flags: raw.flags.get(),
            alignment: raw.alignment.get(),
            ndim: raw.ndim.get(),
            dims,
            precision: raw.precision.get(),
            data_bytes: raw.data_bytes.get(),
            scales_bytes: raw.scales_bytes.get(),
            group_size: raw.group_size.get(),
            num_groups: raw.num_groups.get(),
            original_n: raw.original_n.get(),
        }
    }

    /// The stored form of the fixed part.
    pub fn to_raw(&self) -> RawHeader {
        RawHeader {
            magic: MAGIC.into(),
            flags: self.flags.into(),
            alignment: self.alignment.into(),
            ndim: self.ndim.into(),
            dims: [0, 1, 2, 3].map(|i| self.dims[i].into()),
            precision: self.precision.into(),
            data_bytes: self.data_bytes.into(),
            scales_bytes: self.scales_bytes.into(),
            group_size: self.group_size.into(),
            num_groups: self.num_groups.into(),
            original_n: self.original_n.into(),
        }
    }

    /// True when [`flags::EXTENDED_SHAPE`] is set (116-byte header).
    pub fn is_extended(&self) -> bool {
        self.flags & flags::EXTENDED_SHAPE != 0
    }

    /// Header length on disk (84, or 116 with EXTENDED_SHAPE).
    pub fn len(&self) -> usize {
        if self.is_extended() {
            EXTENDED_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Never empty; present for API symmetry with `len`.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The meaningful dims.
    pub fn shape(&self) -> &[u64] {
        &self.dims[..(self.ndim as usize).min(8)]
    }

    /// The stored dims (4, or 8 with EXTENDED_SHAPE).
    pub fn stored_dims(&self) -> &[u64] {
        &self.dims[..if self.is_extended() { 8 } else { 4 }]
    }

    /// The decoded precision, if known.
    pub fn precision(&self) -> Option<Precision> {
        Precision::from_code(self.precision)
    }

    /// The interleave of a sidecar (`None` when neither or both bits are set).
    pub fn interleave(&self) -> Option<Interleave> {
        let il = self.flags & (flags::ROW_INTERLEAVE_4 | flags::ROW_INTERLEAVE_8);
        match il {
            flags::ROW_INTERLEAVE_4 => Some(Interleave::R4),
            flags::ROW_INTERLEAVE_8 => Some(Interleave::R8),
            _ => None,
        }
    }

    /// The rotation family of a CQ4 packed-panel file (`None` for other files).
    pub fn rotation_family(&self) -> Option<RotationFamily> {
        if self.precision() != Some(Precision::Cq(4)) || self.flags & flags::PACKED_PANELS == 0 {
            return None;
        }
        Some(if self.flags & flags::ORTHOGONAL_ROTATION != 0 {
            RotationFamily::Orthogonal
        } else {
            RotationFamily::Hadamard
        })
    }

    /// Serialize (84 or 116 bytes).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = self.to_raw().as_bytes().to_vec();
        if self.is_extended() {
            let ext = RawExtension {
                dims: [4, 5, 6, 7].map(|i| self.dims[i].into()),
            };
            b.extend_from_slice(ext.as_bytes());
        }
        b
    }
}

/// Round `x` up to a multiple of the power of two `a`; `None` on overflow.
pub fn align_up(x: u64, a: u64) -> Option<u64> {
    x.checked_add(a - 1).map(|v| v & !(a - 1))
}

/// Where each region of a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Header length.
    pub header_len: u64,
    /// Offset of the scales region (= align(header_len)).
    pub scales_offset: u64,
    /// Its length.
    pub scales_bytes: u64,
    /// Offset of the data region (= align(scales_offset + scales_bytes)).
    pub data_offset: u64,
    /// Its length.
    pub data_bytes: u64,
    /// Total file length (= data_offset + data_bytes).
    pub file_len: u64,
}

impl Layout {
    /// The layout a header implies, or `None` if it overflows.
    pub fn of(h: &Header) -> Option<Self> {
        let a = u64::from(h.alignment);
        if a == 0 || !a.is_power_of_two() {
            return None;
        }
        let header_len = h.len() as u64;
        let scales_offset = align_up(header_len, a)?;
        let data_offset = align_up(scales_offset.checked_add(h.scales_bytes)?, a)?;
        let file_len = data_offset.checked_add(h.data_bytes)?;
        Some(Layout {
            header_len,
            scales_offset,
            scales_bytes: h.scales_bytes,
            data_offset,
            data_bytes: h.data_bytes,
            file_len,
        })
    }
}
