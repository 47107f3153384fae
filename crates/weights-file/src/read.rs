//! Zero-copy, validating view of a `.weights` file.

use ggml_quants::GgmlType;
use zerocopy::FromBytes;

use crate::format::{
    flags, Header, Layout, Precision, RawExtension, RawHeader, CQ4_GROUP_SIZE, EXTENDED_HEADER_LEN,
    HEADER_LEN, MAGIC, MAX_ALIGNMENT,
};
use crate::panel::PanelGeometry;

/// Why a container is rejected. Variants carry the evidence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContainerError {
    /// Fewer bytes than the header needs.
    #[error("file is {len} bytes, shorter than the {needed}-byte header")]
    TooShort {
        /// File length.
        len: u64,
        /// Header length.
        needed: u64,
    },
    /// Magic is not "CACT".
    #[error("bad magic {found:#010x} (expected {MAGIC:#010x}, \"CACT\")")]
    BadMagic {
        /// What the file has.
        found: u32,
    },
    /// Flag bits this reader does not know.
    #[error("unknown flag bits {0:#x}")]
    UnknownFlags(u32),
    /// Alignment not a power of two in 1..=65536.
    #[error("alignment {0} is not a power of two between 1 and 65536")]
    BadAlignment(u32),
    /// ndim out of range, or dims inconsistent with it.
    #[error("bad shape: {0}")]
    BadShape(String),
    /// Precision code unknown.
    #[error("unknown precision code {0}")]
    UnknownPrecision(u32),
    /// A header field that is impossible for the precision and shape.
    #[error("{field} is {found}, but {expected_why}")]
    BadField {
        /// Field name.
        field: &'static str,
        /// Its value.
        found: u64,
        /// What it should be and why.
        expected_why: String,
    },
    /// Regions do not fit the file exactly.
    #[error("regions end at {expected} bytes (data at {data_offset}, {data_bytes} bytes) but the file has {file_len}")]
    LengthMismatch {
        /// Where the data region starts.
        data_offset: u64,
        /// Its length.
        data_bytes: u64,
        /// Where the last region ends.
        expected: u64,
        /// Actual file length.
        file_len: u64,
    },
    /// Non-zero bytes where the format has padding.
    #[error("non-zero padding byte at offset {0}")]
    NonZeroPadding(u64),
    /// A size computation overflowed.
    #[error("sizes overflow: {0}")]
    Overflow(&'static str),
}

impl ContainerError {
    /// Always true: every variant describes a file that is not a valid
    /// container.
    pub fn is_bad_input(&self) -> bool {
        true
    }
}

/// A validated view of a container's bytes.
#[derive(Debug, Clone, Copy)]
pub struct WeightsFile<'a> {
    raw: &'a RawHeader,
    header: Header,
    /// Region offsets.
    pub layout: Layout,
    bytes: &'a [u8],
}

/// Decode the header fields without validating them against anything but
/// the header's own length.
pub fn decode_header(bytes: &[u8]) -> Result<Header, ContainerError> {
    let (raw, rest) = RawHeader::ref_from_prefix(bytes).map_err(|_| ContainerError::TooShort {
        len: bytes.len() as u64,
        needed: HEADER_LEN as u64,
    })?;
    if raw.magic.get() != MAGIC {
        return Err(ContainerError::BadMagic {
            found: raw.magic.get(),
        });
    }
    let ext = if raw.flags.get() & flags::EXTENDED_SHAPE != 0 {
        let (ext, _) =
            RawExtension::ref_from_prefix(rest).map_err(|_| ContainerError::TooShort {
                len: bytes.len() as u64,
                needed: EXTENDED_HEADER_LEN as u64,
            })?;
        Some(ext)
    } else {
        None
    };
    Ok(Header::from_raw(raw, ext))
}

fn bad(field: &'static str, found: u64, why: impl Into<String>) -> ContainerError {
    ContainerError::BadField {
        field,
        found,
        expected_why: why.into(),
    }
}

/// Check the header fields against each other (not against a file): the
/// fields every file has, then the rules of its kind of precision.
pub fn validate_header(h: &Header) -> Result<Layout, ContainerError> {
    let elements = validate_common(h)?;
    let precision = h
        .precision()
        .ok_or(ContainerError::UnknownPrecision(h.precision))?;
    match precision {
        Precision::Fp16 => validate_row_major(h, elements.checked_mul(2), "fp16")?,
        Precision::Fp32 => validate_row_major(h, elements.checked_mul(4), "fp32")?,
        Precision::Raw(t) => validate_row_major(h, t.bytes_of(elements), t.name())?,
        Precision::Cq(bits) => validate_cq_panels(h, bits)?,
        Precision::Ggml(id) => validate_sidecar(h, id)?,
        Precision::Int8 => {
            return Err(bad(
                "precision",
                0,
                "INT8 (the engine's legacy grouped int8) is not a format convert reads",
            ))
        }
    }
    Layout::of(h).ok_or(ContainerError::Overflow("region offsets"))
}

/// Flags, alignment, ndim and dims; returns the element count.
fn validate_common(h: &Header) -> Result<u64, ContainerError> {
    if h.flags & !flags::KNOWN != 0 {
        return Err(ContainerError::UnknownFlags(h.flags & !flags::KNOWN));
    }
    if h.alignment == 0 || !h.alignment.is_power_of_two() || h.alignment > MAX_ALIGNMENT {
        return Err(ContainerError::BadAlignment(h.alignment));
    }
    let max_dims = if h.is_extended() { 8 } else { 4 };
    if h.ndim == 0 || h.ndim > max_dims {
        return Err(ContainerError::BadShape(format!(
            "ndim {} (allowed 1..={max_dims})",
            h.ndim
        )));
    }
    if h.is_extended() && h.ndim <= 4 {
        return Err(ContainerError::BadShape(format!(
            "EXTENDED_SHAPE is set but ndim is {} (it is only for more than 4 dims)",
            h.ndim
        )));
    }
    if let Some(i) = h.dims[h.ndim as usize..].iter().position(|&d| d != 0) {
        return Err(ContainerError::BadShape(format!(
            "dims[{}] = {} beyond ndim {}",
            h.ndim as usize + i,
            h.dims[h.ndim as usize + i],
            h.ndim
        )));
    }
    h.shape()
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .ok_or(ContainerError::Overflow("product of dims"))
}

/// Flags other than the ones a kind allows are an error.
fn only_flags(h: &Header, allowed: u32, kind: &str) -> Result<(), ContainerError> {
    let extra = h.flags & !allowed;
    if extra != 0 {
        return Err(bad(
            "flags",
            h.flags.into(),
            format!(
                "{kind} files may not set {}",
                flags::names(extra).join(" | ")
            ),
        ));
    }
    Ok(())
}

/// Plain FP16 / FP32 and raw files: row-major values, nothing else.
fn validate_row_major(h: &Header, want: Option<u64>, what: &str) -> Result<(), ContainerError> {
    only_flags(h, flags::EXTENDED_SHAPE, "plain")?;
    let want = want.ok_or(ContainerError::Overflow("data size"))?;
    if h.data_bytes != want {
        return Err(bad(
            "data_bytes",
            h.data_bytes,
            format!("{:?} {what} values take {want} bytes", h.shape()),
        ));
    }
    if h.scales_bytes != 0 {
        return Err(bad(
            "scales_bytes",
            h.scales_bytes,
            "plain files have no scales (0)",
        ));
    }
    if h.group_size != 0 || h.num_groups != 0 {
        return Err(bad(
            if h.group_size != 0 {
                "group_size"
            } else {
                "num_groups"
            },
            u64::from(h.group_size.max(h.num_groups)),
            "plain files have no groups (0)",
        ));
    }
    if h.original_n != h.dims[0] {
        return Err(bad(
            "original_N",
            h.original_n,
            format!("equals dims[0] = {}", h.dims[0]),
        ));
    }
    Ok(())
}

/// CQ4 packed panels, both rotation families.
fn validate_cq_panels(h: &Header, bits: u8) -> Result<(), ContainerError> {
    if h.flags & flags::PACKED_PANELS == 0 || bits != 4 {
        return Err(bad(
            "flags",
            h.flags.into(),
            format!("CQ{bits} without PACKED_PANELS: only CQ4 packed panels are supported"),
        ));
    }
    only_flags(
        h,
        flags::PACKED_PANELS | flags::ORTHOGONAL_ROTATION,
        "CQ4 packed-panel",
    )?;
    if h.ndim != 2 {
        return Err(ContainerError::BadShape(format!(
            "CQ files are 2-D, ndim is {}",
            h.ndim
        )));
    }
    let (n, k) = (h.dims[0], h.dims[1]);
    if h.group_size != CQ4_GROUP_SIZE {
        return Err(bad(
            "group_size",
            h.group_size.into(),
            format!("CQ4 packed panels have groups of {CQ4_GROUP_SIZE}"),
        ));
    }
    if k % u64::from(CQ4_GROUP_SIZE) != 0
        || k / u64::from(CQ4_GROUP_SIZE) != u64::from(h.num_groups)
    {
        return Err(bad(
            "num_groups",
            h.num_groups.into(),
            format!("K = {k} must be num_groups x {CQ4_GROUP_SIZE}"),
        ));
    }
    if h.original_n != n {
        return Err(bad(
            "original_N",
            h.original_n,
            format!("equals dims[0] = {n}"),
        ));
    }
    let (Ok(nu), Ok(ku)) = (usize::try_from(n), usize::try_from(k)) else {
        return Err(ContainerError::Overflow("panel shape"));
    };
    let g = PanelGeometry::new(nu, ku, CQ4_GROUP_SIZE as usize)
        .map_err(|e| ContainerError::BadShape(e.to_string()))?;
    if h.data_bytes != g.data_bytes() as u64 {
        return Err(bad(
            "data_bytes",
            h.data_bytes,
            format!(
                "ceil({n}/64) x 64 x {k} / 2 = {} for packed panels",
                g.data_bytes()
            ),
        ));
    }
    let family = h
        .rotation_family()
        .ok_or(ContainerError::Overflow("family"))?;
    let want = g.scales_layout(family).scales_bytes as u64;
    if h.scales_bytes != want {
        return Err(bad(
            "scales_bytes",
            h.scales_bytes,
            format!("the {family:?} scales blob of a {n} x {k} tensor is {want} bytes"),
        ));
    }
    Ok(())
}

/// ggml sidecars: whole blocks, rows interleaved by 4 or 8.
fn validate_sidecar(h: &Header, id: u32) -> Result<(), ContainerError> {
    let ty = GgmlType::from_id(id)
        .filter(|t| t.is_quantized())
        .ok_or(ContainerError::UnknownPrecision(h.precision))?;
    only_flags(
        h,
        flags::ROW_INTERLEAVE_4 | flags::ROW_INTERLEAVE_8,
        "sidecar",
    )?;
    if h.interleave().is_none() {
        return Err(bad(
            "flags",
            h.flags.into(),
            "a sidecar sets exactly one of ROW_INTERLEAVE_4 and ROW_INTERLEAVE_8",
        ));
    }
    // 2-D `[N, K]`, or 3-D `[E, N, K]`: E expert matrices one after the other.
    let Some(shape) = h.sidecar_shape() else {
        return Err(ContainerError::BadShape(format!(
            "sidecar files are 2-D (or 3-D expert tensors), ndim is {}",
            h.ndim
        )));
    };
    let (n, k) = (shape.n, shape.k);
    let bs = ty.block_size() as u64;
    if u64::from(h.group_size) != bs || k % bs != 0 || k / bs != u64::from(h.num_groups) {
        return Err(bad(
            "group_size",
            h.group_size.into(),
            format!(
                "{ty} block size {bs} with num_groups = K / {bs} (K = {k}, num_groups {})",
                h.num_groups
            ),
        ));
    }
    let rows = shape
        .rows()
        .ok_or(ContainerError::Overflow("sidecar rows"))?;
    let want = rows
        .checked_mul(u64::from(h.num_groups))
        .and_then(|v| v.checked_mul(ty.type_size() as u64))
        .ok_or(ContainerError::Overflow("sidecar data size"))?;
    if h.data_bytes != want {
        let experts = match shape.experts {
            Some(e) => format!("{e} experts x {n} rows"),
            None => format!("{n} rows"),
        };
        return Err(bad(
            "data_bytes",
            h.data_bytes,
            format!(
                "{experts} x {} blocks x {} bytes = {want}",
                h.num_groups,
                ty.type_size()
            ),
        ));
    }
    if h.scales_bytes != 0 {
        return Err(bad(
            "scales_bytes",
            h.scales_bytes,
            "sidecars have no scales (0)",
        ));
    }
    if h.original_n != h.dims[0] {
        return Err(bad(
            "original_N",
            h.original_n,
            format!("equals dims[0] = {}", h.dims[0]),
        ));
    }
    Ok(())
}

impl<'a> WeightsFile<'a> {
    /// Validate `bytes` as a whole container file.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, ContainerError> {
        let h = decode_header(bytes)?;
        let layout = validate_header(&h)?;
        let file_len = bytes.len() as u64;
        if layout.file_len != file_len {
            return Err(ContainerError::LengthMismatch {
                data_offset: layout.data_offset,
                data_bytes: layout.data_bytes,
                expected: layout.file_len,
                file_len,
            });
        }
        // Padding between the regions must be zero.
        let pads = [
            (layout.header_len, layout.scales_offset),
            (
                layout.scales_offset + layout.scales_bytes,
                layout.data_offset,
            ),
        ];
        for (a, b) in pads {
            if let Some(i) = bytes[a as usize..b as usize].iter().position(|&x| x != 0) {
                return Err(ContainerError::NonZeroPadding(a + i as u64));
            }
        }
        let (raw, _) = RawHeader::ref_from_prefix(bytes)
            .map_err(|_| ContainerError::Overflow("header view"))?;
        Ok(WeightsFile {
            raw,
            header: h,
            layout,
            bytes,
        })
    }

    /// The header.
    pub fn header(&self) -> Header {
        self.header
    }

    /// The stored fixed header.
    pub fn raw_header(&self) -> &'a RawHeader {
        self.raw
    }

    /// The raw header bytes (84 or 116).
    pub fn header_bytes(&self) -> &'a [u8] {
        &self.bytes[..self.layout.header_len as usize]
    }
    /// The scales region.
    pub fn scales(&self) -> &'a [u8] {
        let l = self.layout;
        &self.bytes[l.scales_offset as usize..(l.scales_offset + l.scales_bytes) as usize]
    }

    /// The data region.
    pub fn data(&self) -> &'a [u8] {
        let l = self.layout;
        &self.bytes[l.data_offset as usize..(l.data_offset + l.data_bytes) as usize]
    }

    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::prefix;

    fn plain_file() -> Vec<u8> {
        let h = Header::plain(Precision::Fp16, &[3, 5], 30);
        let mut b = prefix(&h, &[]).unwrap();
        b.extend((0..30u8).map(|i| i + 1));
        b
    }

    #[test]
    fn plain_round_trip() {
        let b = plain_file();
        assert_eq!(b.len(), 96 + 30);
        let f = WeightsFile::parse(&b).unwrap();
        assert_eq!(f.header().shape(), &[3, 5]);
        assert_eq!(f.layout.data_offset, 96);
        assert_eq!(f.data()[0], 1);
        assert_eq!(f.header().to_bytes(), f.header_bytes());
    }

    /// A 3-D expert sidecar: E x N x K Q8_0 (34-byte blocks of 32).
    fn expert_file(e: u64, n: u64, k: u64) -> Vec<u8> {
        let shape = crate::format::SidecarShape::experts(e, n, k);
        let h = Header::sidecar_of(GgmlType::Q8_0, crate::format::Interleave::R8, shape).unwrap();
        let mut b = prefix(&h, &[]).unwrap();
        b.resize(b.len() + h.data_bytes as usize, 0);
        b
    }

    #[test]
    fn expert_sidecars_are_3d_with_every_expert_counted() {
        let b = expert_file(3, 5, 64);
        let f = WeightsFile::parse(&b).unwrap();
        let h = f.header();
        assert_eq!((h.ndim, h.shape()), (3, &[3u64, 5, 64][..]));
        assert_eq!(h.data_bytes, 3 * 5 * 2 * 34);
        assert_eq!(h.original_n, 3, "original_N = dims[0], as in every file");
        assert_eq!(
            h.sidecar_shape(),
            Some(crate::format::SidecarShape::experts(3, 5, 64))
        );
        assert_eq!(
            f.layout.data_offset, 128,
            "the 84-byte header: no EXTENDED_SHAPE"
        );
        // A 2-D sidecar of the same bytes per expert still reads.
        let h2 = Header::sidecar(GgmlType::Q8_0, crate::format::Interleave::R8, 5, 64).unwrap();
        assert_eq!(h2.ndim, 2);
        assert_eq!(
            h2.sidecar_shape(),
            Some(crate::format::SidecarShape::matrix(5, 64))
        );
        // Data one expert short, original_N = N, ndim 4: rejected.
        let mut short = b.clone();
        short[52..60].copy_from_slice(&(2u64 * 5 * 2 * 34).to_le_bytes());
        short.truncate(short.len() - 5 * 2 * 34);
        assert!(matches!(
            WeightsFile::parse(&short),
            Err(ContainerError::BadField {
                field: "data_bytes",
                ..
            })
        ));
        let mut on = b.clone();
        on[76..84].copy_from_slice(&5u64.to_le_bytes());
        assert!(matches!(
            WeightsFile::parse(&on),
            Err(ContainerError::BadField {
                field: "original_N",
                ..
            })
        ));
        let mut d4 = b.clone();
        d4[12] = 4;
        d4[40..48].copy_from_slice(&1u64.to_le_bytes());
        assert!(matches!(
            WeightsFile::parse(&d4),
            Err(ContainerError::BadShape(_))
        ));
    }

    #[test]
    fn every_error() {
        let good = plain_file();
        let mut b = good.clone();
        b[0] = b'X';
        assert!(matches!(
            WeightsFile::parse(&b),
            Err(ContainerError::BadMagic { .. })
        ));
        assert!(matches!(
            WeightsFile::parse(&good[..50]),
            Err(ContainerError::TooShort { .. })
        ));
        let mut b = good.clone();
        b[8] = 3; // alignment 3
        assert!(matches!(
            WeightsFile::parse(&b),
            Err(ContainerError::BadAlignment(3))
        ));
        let mut b = good.clone();
        b[52] = 31; // data_bytes 31 for 15 fp16 values
        assert!(matches!(
            WeightsFile::parse(&b),
            Err(ContainerError::BadField {
                field: "data_bytes",
                ..
            })
        ));
        let mut b = good.clone();
        b[5] = 0x80; // flag bit 15
        assert!(matches!(
            WeightsFile::parse(&b),
            Err(ContainerError::UnknownFlags(_))
        ));
        let mut b = good.clone();
        b[48] = 99;
        assert!(matches!(
            WeightsFile::parse(&b),
            Err(ContainerError::UnknownPrecision(99))
        ));
        let mut b = good.clone();
        b[90] = 1;
        assert!(matches!(
            WeightsFile::parse(&b),
            Err(ContainerError::NonZeroPadding(90))
        ));
        let mut b = good.clone();
        b.push(0);
        assert!(matches!(
            WeightsFile::parse(&b),
            Err(ContainerError::LengthMismatch { .. })
        ));
        let mut b = good.clone();
        b[12] = 0;
        assert!(matches!(
            WeightsFile::parse(&b),
            Err(ContainerError::BadShape(_))
        ));
        let mut b = good.clone();
        b[52..60].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(WeightsFile::parse(&b).is_err());
    }
}
