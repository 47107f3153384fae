//! Byte layout of the `.weights` container: constants and the header.
//!
//! Little-endian throughout. The normative description is `docs/FORMAT.md`
//! §container; this file is its executable form.

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
    /// Grouped int8 (engine legacy; read only).
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
}

/// Code offset of the ggml block types.
pub const GGML_PRECISION_BASE: u32 = 0x100;

impl Precision {
    /// Decode the field; `None` for unknown codes.
    pub fn from_code(code: u32) -> Option<Self> {
        Some(match code {
            0 => Precision::Int8,
            1 => Precision::Fp16,
            2 => Precision::Fp32,
            3..=6 => Precision::Cq((code - 2) as u8),
            c if c & !0xff == GGML_PRECISION_BASE => Precision::Ggml(c & 0xff),
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
        }
    }

    /// A display name (`FP16`, `CQ4`, `GGML(12)`).
    pub fn name(self) -> String {
        match self {
            Precision::Int8 => "INT8".into(),
            Precision::Fp16 => "FP16".into(),
            Precision::Fp32 => "FP32".into(),
            Precision::Cq(b) => format!("CQ{b}"),
            Precision::Ggml(t) => format!("GGML({t})"),
        }
    }
}

/// The decoded header.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Rows before padding (CQ: N), else dims[0].
    pub original_n: u64,
}

impl Header {
    /// A header for a plain row-major tensor (FP16 or FP32): no scales.
    pub fn plain(precision: Precision, shape: &[u64], data_bytes: u64) -> Self {
        let mut dims = [0u64; 8];
        dims[..shape.len()].copy_from_slice(shape);
        let extended = shape.len() > 4;
        Header {
            flags: if extended { flags::EXTENDED_SHAPE } else { 0 },
            alignment: DEFAULT_ALIGNMENT,
            ndim: shape.len() as u32,
            dims,
            precision: precision.code(),
            data_bytes,
            scales_bytes: 0,
            group_size: 0,
            num_groups: 0,
            original_n: shape.first().copied().unwrap_or(0),
        }
    }

    /// Header length on disk (84, or 116 with EXTENDED_SHAPE).
    pub fn len(&self) -> usize {
        if self.flags & flags::EXTENDED_SHAPE != 0 {
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

    /// The decoded precision, if known.
    pub fn precision(&self) -> Option<Precision> {
        Precision::from_code(self.precision)
    }

    /// Serialize (84 or 116 bytes).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.len());
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&self.flags.to_le_bytes());
        b.extend_from_slice(&self.alignment.to_le_bytes());
        b.extend_from_slice(&self.ndim.to_le_bytes());
        for d in &self.dims[..4] {
            b.extend_from_slice(&d.to_le_bytes());
        }
        b.extend_from_slice(&self.precision.to_le_bytes());
        b.extend_from_slice(&self.data_bytes.to_le_bytes());
        b.extend_from_slice(&self.scales_bytes.to_le_bytes());
        b.extend_from_slice(&self.group_size.to_le_bytes());
        b.extend_from_slice(&self.num_groups.to_le_bytes());
        b.extend_from_slice(&self.original_n.to_le_bytes());
        if self.flags & flags::EXTENDED_SHAPE != 0 {
            for d in &self.dims[4..] {
                b.extend_from_slice(&d.to_le_bytes());
            }
        }
        debug_assert_eq!(b.len(), self.len());
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
