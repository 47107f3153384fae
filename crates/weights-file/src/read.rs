//! Zero-copy, validating view of a `.weights` file.

use crate::format::{
    flags, Header, Layout, Precision, EXTENDED_HEADER_LEN, HEADER_LEN, MAGIC, MAX_ALIGNMENT,
};

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

/// ggml block geometry of the sidecar types: (ggml id, weights per block, bytes per block).
pub const SIDECAR_BLOCKS: [(u32, u32, u64); 5] = [
    (8, 32, 34),
    (6, 32, 22),
    (12, 256, 144),
    (13, 256, 176),
    (14, 256, 210),
];

/// A validated view of a container's bytes.
#[derive(Debug, Clone, Copy)]
pub struct WeightsFile<'a> {
    /// The decoded header.
    header: &'a [u8],
    parsed: HeaderFields,
    /// Region offsets.
    pub layout: Layout,
    bytes: &'a [u8],
}

#[derive(Debug, Clone, Copy)]
struct HeaderFields {
    flags: u32,
    alignment: u32,
    ndim: u32,
    dims: [u64; 8],
    precision: u32,
    data_bytes: u64,
    scales_bytes: u64,
    group_size: u32,
    num_groups: u32,
    original_n: u64,
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

/// Decode the header fields without validating them against anything but
/// the header's own length.
pub fn decode_header(bytes: &[u8]) -> Result<Header, ContainerError> {
    if bytes.len() < HEADER_LEN {
        return Err(ContainerError::TooShort {
            len: bytes.len() as u64,
            needed: HEADER_LEN as u64,
        });
    }
    let magic = u32_at(bytes, 0);
    if magic != MAGIC {
        return Err(ContainerError::BadMagic { found: magic });
    }
    let mut dims = [0u64; 8];
    for (i, d) in dims.iter_mut().take(4).enumerate() {
        *d = u64_at(bytes, 16 + 8 * i);
    }
    let flags_v = u32_at(bytes, 4);
    if flags_v & flags::EXTENDED_SHAPE != 0 {
        if bytes.len() < EXTENDED_HEADER_LEN {
            return Err(ContainerError::TooShort {
                len: bytes.len() as u64,
                needed: EXTENDED_HEADER_LEN as u64,
            });
        }
        for (i, d) in dims.iter_mut().skip(4).enumerate() {
            *d = u64_at(bytes, HEADER_LEN + 8 * i);
        }
    }
    Ok(Header {
        flags: flags_v,
        alignment: u32_at(bytes, 8),
        ndim: u32_at(bytes, 12),
        dims,
        precision: u32_at(bytes, 48),
        data_bytes: u64_at(bytes, 52),
        scales_bytes: u64_at(bytes, 60),
        group_size: u32_at(bytes, 68),
        num_groups: u32_at(bytes, 72),
        original_n: u64_at(bytes, 76),
    })
}

fn bad(field: &'static str, found: u64, why: String) -> ContainerError {
    ContainerError::BadField {
        field,
        found,
        expected_why: why,
    }
}

/// Check the header fields against each other (not against a file).
pub fn validate_header(h: &Header) -> Result<Layout, ContainerError> {
    if h.flags & !flags::KNOWN != 0 {
        return Err(ContainerError::UnknownFlags(h.flags & !flags::KNOWN));
    }
    if h.alignment == 0 || !h.alignment.is_power_of_two() || h.alignment > MAX_ALIGNMENT {
        return Err(ContainerError::BadAlignment(h.alignment));
    }
    let max_dims = if h.flags & flags::EXTENDED_SHAPE != 0 {
        8
    } else {
        4
    };
    if h.ndim == 0 || h.ndim > max_dims {
        return Err(ContainerError::BadShape(format!(
            "ndim {} (allowed 1..={max_dims})",
            h.ndim
        )));
    }
    let shape = h.shape();
    if let Some(i) = h.dims[h.ndim as usize..].iter().position(|&d| d != 0) {
        return Err(ContainerError::BadShape(format!(
            "dims[{}] = {} beyond ndim {}",
            h.ndim as usize + i,
            h.dims[h.ndim as usize + i],
            h.ndim
        )));
    }
    let elements = shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .ok_or(ContainerError::Overflow("product of dims"))?;
    let precision = h
        .precision()
        .ok_or(ContainerError::UnknownPrecision(h.precision))?;
    match precision {
        Precision::Fp16 | Precision::Fp32 => {
            let es = if precision == Precision::Fp16 { 2 } else { 4 };
            let want = elements
                .checked_mul(es)
                .ok_or(ContainerError::Overflow("data size"))?;
            if h.data_bytes != want {
                return Err(bad(
                    "data_bytes",
                    h.data_bytes,
                    format!("{shape:?} x {es} bytes = {want}"),
                ));
            }
            if h.scales_bytes != 0 {
                return Err(bad(
                    "scales_bytes",
                    h.scales_bytes,
                    "plain files have no scales (0)".into(),
                ));
            }
        }
        Precision::Cq(bits) => {
            if h.ndim != 2 {
                return Err(ContainerError::BadShape(format!(
                    "CQ files are 2-D, ndim is {}",
                    h.ndim
                )));
            }
            let (n, k) = (h.dims[0], h.dims[1]);
            let gs = u64::from(h.group_size);
            if gs == 0 || gs % 4 != 0 || k % gs != 0 || k / gs != u64::from(h.num_groups) {
                return Err(bad(
                    "num_groups",
                    h.num_groups.into(),
                    format!("K = {k} must be num_groups x group_size (group_size {gs}, a multiple of 4)"),
                ));
            }
            if h.original_n != n {
                return Err(bad(
                    "original_N",
                    h.original_n,
                    format!("equals dims[0] = {n}"),
                ));
            }
            if h.flags & flags::PACKED_PANELS != 0 {
                if bits != 4 {
                    return Err(bad(
                        "precision",
                        h.precision.into(),
                        "packed panels are CQ4 only".into(),
                    ));
                }
                let want = n
                    .div_ceil(64)
                    .checked_mul(64 * k / 2)
                    .ok_or(ContainerError::Overflow("panel data size"))?;
                if h.data_bytes != want {
                    return Err(bad(
                        "data_bytes",
                        h.data_bytes,
                        format!("ceil({n}/64) x 64 x {k} / 2 = {want} for packed panels"),
                    ));
                }
            }
        }
        Precision::Ggml(id) => {
            let (_, bs, ts) = SIDECAR_BLOCKS
                .iter()
                .copied()
                .find(|(t, _, _)| *t == id)
                .ok_or(ContainerError::UnknownPrecision(h.precision))?;
            if h.ndim != 2 {
                return Err(ContainerError::BadShape(format!(
                    "sidecar files are 2-D, ndim is {}",
                    h.ndim
                )));
            }
            let (n, k) = (h.dims[0], h.dims[1]);
            if h.group_size != bs
                || k % u64::from(bs) != 0
                || k / u64::from(bs) != u64::from(h.num_groups)
            {
                return Err(bad(
                    "group_size",
                    h.group_size.into(),
                    format!(
                        "block size {bs} with num_groups = K / {bs} (K = {k}, num_groups {})",
                        h.num_groups
                    ),
                ));
            }
            let want = n
                .checked_mul(u64::from(h.num_groups))
                .and_then(|v| v.checked_mul(ts))
                .ok_or(ContainerError::Overflow("sidecar data size"))?;
            if h.data_bytes != want {
                return Err(bad(
                    "data_bytes",
                    h.data_bytes,
                    format!("{n} rows x {} blocks x {ts} bytes = {want}", h.num_groups),
                ));
            }
            let il = h.flags & (flags::ROW_INTERLEAVE_4 | flags::ROW_INTERLEAVE_8);
            if il == flags::ROW_INTERLEAVE_4 | flags::ROW_INTERLEAVE_8 {
                return Err(ContainerError::UnknownFlags(il));
            }
        }
        Precision::Int8 => {}
    }
    Layout::of(h).ok_or(ContainerError::Overflow("region offsets"))
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
        Ok(WeightsFile {
            header: &bytes[..layout.header_len as usize],
            parsed: HeaderFields {
                flags: h.flags,
                alignment: h.alignment,
                ndim: h.ndim,
                dims: h.dims,
                precision: h.precision,
                data_bytes: h.data_bytes,
                scales_bytes: h.scales_bytes,
                group_size: h.group_size,
                num_groups: h.num_groups,
                original_n: h.original_n,
            },
            layout,
            bytes,
        })
    }

    /// The header.
    pub fn header(&self) -> Header {
        let p = self.parsed;
        Header {
            flags: p.flags,
            alignment: p.alignment,
            ndim: p.ndim,
            dims: p.dims,
            precision: p.precision,
            data_bytes: p.data_bytes,
            scales_bytes: p.scales_bytes,
            group_size: p.group_size,
            num_groups: p.num_groups,
            original_n: p.original_n,
        }
    }

    /// The raw header bytes.
    pub fn header_bytes(&self) -> &'a [u8] {
        self.header
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
