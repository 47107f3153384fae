//! Packed-panel (CQ4) layout math: where every 4-bit index lives in the data
//! region and where every region of the scales blob starts.
//!
//! This module is pure arithmetic; it never touches bytes. All sizes are
//! computed with checked arithmetic when a [`PanelGeometry`] is built, so every
//! accessor on a validated geometry is infallible and cannot overflow.
//!
//! # Data region
//! `SB64 = ceil(N / 64)` super-blocks of 64 output channels (rows). Rows past
//! `N` are padding (index nibble 0, norm 0). Layout `[SB64][ng][gs/4][128 B]`:
//! each 128-byte block holds 64 channels x 4 consecutive input columns as 256
//! nibbles, low nibble first. For weight `(n, k)`:
//!
//! ```text
//! sb = n / 64; c = n % 64; g = k / gs; kg = (k % gs) / 4; kc = k % 4
//! j  = 4*c + kc
//! byte = ((sb*ng + g) * (gs/4) + kg) * 128 + j/2      (low nibble if j even)
//! ```
//!
//! # Scales blob
//! In order: codebook fp16\[16\]; input_scale fp16\[K\]; recip fp16\[K\];
//! norms fp16\[N\]\[ng\]; zero padding to a 4-byte boundary; folded norms
//! fp32 \[SB64\]\[ng\]\[64\]; then the rotation: orthogonal R fp16\[K\]\[K\] and
//! R^T fp16\[K\]\[K\], or Hadamard left i8\[gs\], right i8\[gs\], perm u32\[gs\].
//! All multi-byte values are little-endian. The blob itself starts at file
//! offset 96; its internal offsets below are relative to its own start.

use thiserror::Error;

/// Output channels per super-block.
pub const SUPER_BLOCK: usize = 64;
/// Bytes per `kg`-block (64 channels x 4 input columns x 4 bits).
pub const KG_BLOCK_BYTES: usize = 128;
/// Input columns per `kg`-block.
pub const KG_WIDTH: usize = 4;
/// Entries in a 4-bit codebook.
pub const CODEBOOK_ENTRIES: usize = 16;

/// Why a panel shape or index is impossible.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PanelError {
    /// `N` (output channels) was zero.
    #[error("panel tensor has N = 0 output channels")]
    ZeroRows,
    /// `K` (input columns) was zero.
    #[error("panel tensor has K = 0 input columns")]
    ZeroCols,
    /// The group size was zero or not a multiple of 4.
    #[error("group size {gs} must be a positive multiple of 4")]
    BadGroupSize {
        /// The rejected group size.
        gs: usize,
    },
    /// `K` was not a multiple of the group size.
    #[error("K = {k} is not a multiple of the group size {gs}")]
    KNotMultipleOfGroup {
        /// Input columns.
        k: usize,
        /// Group size.
        gs: usize,
    },
    /// A size computation overflowed `usize` (or `u64` for the file fields).
    #[error("panel tensor {n} x {k} (gs {gs}): {what} overflows")]
    TooLarge {
        /// Output channels.
        n: usize,
        /// Input columns.
        k: usize,
        /// Group size.
        gs: usize,
        /// Which size overflowed.
        what: &'static str,
    },
    /// A region of the tensor does not have the length its shape implies.
    #[error("{what} is {got} bytes, the shape implies {expected}")]
    RegionLength {
        /// Which region (`scales blob`, `data region`).
        what: &'static str,
        /// Bytes the shape implies.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// A scales-blob or panel value that breaks the format's rules.
    #[error("invalid CQ4 panel tensor: {0}")]
    Invalid(&'static str),
    /// A folded norm that is not `f32(norm) * cb_scale` (0 for padding).
    #[error("folded norm of row {row}, group {group} is not f32(norm) * cb_scale")]
    FoldedMismatch {
        /// Row (>= N for padded channels).
        row: usize,
        /// Group.
        group: usize,
    },
    /// A weight index outside the (padded) tensor was asked for.
    #[error("weight index ({n}, {k}) outside the padded panel tensor {padded_n} x {k_total}")]
    IndexOutOfRange {
        /// Requested row.
        n: usize,
        /// Requested column.
        k: usize,
        /// Rows including padding (`SB64 * 64`).
        padded_n: usize,
        /// Columns.
        k_total: usize,
    },
}

impl PanelError {
    /// True for shapes the tensor makes impossible, false for an index
    /// outside the tensor (a caller mistake).
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, PanelError::IndexOutOfRange { .. })
    }
}

/// `cb_scale = max(max_i |stored_i| / 127, 1e-10)` in f32: the scale of
/// the int8 codebook the kernels (the engine's and ours) derive from a
/// file's stored fp16 codebook.
pub fn cb_scale_of(stored: &[f32; CODEBOOK_ENTRIES]) -> f32 {
    let mut mx = 0.0f32;
    for &v in stored {
        mx = mx.max(v.abs());
    }
    (mx / 127.0).max(1e-10)
}

/// `round_half_away_from_zero(v / cb_scale)` for each stored codebook value,
/// computed in f32: the int8 codebook the kernels use. Values outside the
/// i8 range saturate.
pub fn codebook_i8(stored: &[f32; CODEBOOK_ENTRIES], cb_scale: f32) -> [i8; CODEBOOK_ENTRIES] {
    let mut out = [0i8; CODEBOOK_ENTRIES];
    for (o, &v) in out.iter_mut().zip(stored) {
        *o = (v / cb_scale).round().clamp(-128.0, 127.0) as i8;
    }
    out
}

/// The rotation family of a CQ4 tensor; it decides the tail of the scales blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RotationFamily {
    /// Hadamard family: left i8\[gs\], right i8\[gs\], perm u32\[gs\].
    Hadamard,
    /// Orthogonal family: R fp16\[K\]\[K\] then R^T fp16\[K\]\[K\].
    Orthogonal,
}

/// Shape of a packed-panel tensor: `n` output channels (unpadded), `k` input
/// columns (already padded to a multiple of `gs`), group size `gs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PanelGeometry {
    n: usize,
    k: usize,
    gs: usize,
    sb64: usize,
    data_bytes: usize,
}

/// One contiguous region of the scales blob: `offset` from the blob start, `len` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Region {
    /// Byte offset from the start of the scales blob.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

impl Region {
    /// One past the last byte (`offset + len`).
    pub fn end(&self) -> usize {
        self.offset + self.len
    }

    /// The byte range, for slicing.
    pub fn range(&self) -> core::ops::Range<usize> {
        self.offset..self.end()
    }
}

/// The rotation regions at the end of the scales blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RotationRegions {
    /// Hadamard family.
    Hadamard {
        /// left signs, i8\[gs\].
        left: Region,
        /// right signs, i8\[gs\].
        right: Region,
        /// column permutation, u32\[gs\] little-endian.
        perm: Region,
    },
    /// Orthogonal family.
    Orthogonal {
        /// R, fp16\[K\]\[K\] row-major.
        r: Region,
        /// R^T, fp16\[K\]\[K\] row-major.
        r_t: Region,
    },
}

/// Byte offsets and lengths of every region of a panel tensor's scales blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScalesLayout {
    /// codebook fp16\[16\].
    pub codebook: Region,
    /// input_scale fp16\[K\].
    pub input_scale: Region,
    /// recip fp16\[K\].
    pub recip: Region,
    /// norms fp16\[N\]\[ng\] (unpadded N).
    pub norms: Region,
    /// zero padding to a 4-byte boundary (length 0 or 2).
    pub pad: Region,
    /// folded norms fp32 \[SB64\]\[ng\]\[64\].
    pub folded: Region,
    /// rotation data, by family.
    pub rotation: RotationRegions,
    /// Total blob length (the header's `scales_bytes`).
    pub scales_bytes: usize,
}

impl PanelGeometry {
    /// Validate a shape. `k` must already be padded to a multiple of `gs`;
    /// `gs` must be a positive multiple of 4. Fails if any size of the data
    /// region or either scales layout would overflow `usize` or `u64`.
    pub fn new(n: usize, k: usize, gs: usize) -> Result<Self, PanelError> {
        if n == 0 {
            return Err(PanelError::ZeroRows);
        }
        if k == 0 {
            return Err(PanelError::ZeroCols);
        }
        if gs == 0 || !gs.is_multiple_of(KG_WIDTH) {
            return Err(PanelError::BadGroupSize { gs });
        }
        if !k.is_multiple_of(gs) {
            return Err(PanelError::KNotMultipleOfGroup { k, gs });
        }
        let too_large = |what| PanelError::TooLarge { n, k, gs, what };
        let sb64 = n.div_ceil(SUPER_BLOCK);
        // sb64 * 64 * k / 2; k is even (multiple of 4).
        let data_bytes = sb64
            .checked_mul(SUPER_BLOCK)
            .and_then(|p| p.checked_mul(k / 2))
            .ok_or(too_large("data_bytes"))?;
        u64::try_from(data_bytes).map_err(|_| too_large("data_bytes"))?;
        let geom = PanelGeometry {
            n,
            k,
            gs,
            sb64,
            data_bytes,
        };
        // Make sure both scales layouts are representable, so that
        // `scales_layout` can be infallible.
        geom.checked_scales_layout(RotationFamily::Hadamard)
            .ok_or(too_large("scales_bytes (Hadamard)"))?;
        geom.checked_scales_layout(RotationFamily::Orthogonal)
            .ok_or(too_large("scales_bytes (orthogonal)"))?;
        Ok(geom)
    }

    /// Output channels, unpadded (`N`).
    pub fn n(&self) -> usize {
        self.n
    }

    /// Input columns (`K`, a multiple of `gs`).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Group size.
    pub fn gs(&self) -> usize {
        self.gs
    }

    /// Number of 64-channel super-blocks, `ceil(N / 64)`.
    pub fn sb64(&self) -> usize {
        self.sb64
    }

    /// Rows including padding, `SB64 * 64`.
    pub fn padded_n(&self) -> usize {
        self.sb64 * SUPER_BLOCK
    }

    /// Groups per row, `K / gs`.
    pub fn num_groups(&self) -> usize {
        self.k / self.gs
    }

    /// `kg`-blocks per group, `gs / 4`.
    pub fn kg_per_group(&self) -> usize {
        self.gs / KG_WIDTH
    }

    /// Size of the data region, `SB64 * 64 * K / 2`.
    pub fn data_bytes(&self) -> usize {
        self.data_bytes
    }

    /// Bytes of the data region covered by one super-block, `64 * K / 2`.
    pub fn superblock_bytes(&self) -> usize {
        SUPER_BLOCK * self.k / 2
    }

    /// Byte (within the data region) and nibble of weight `(n, k)`:
    /// `high == false` means the low nibble (bits 0..4). Rows up to
    /// `padded_n()` are valid (rows `>= N` are padding).
    pub fn nibble_position(&self, n: usize, k: usize) -> Result<(usize, bool), PanelError> {
        if n >= self.padded_n() || k >= self.k {
            return Err(PanelError::IndexOutOfRange {
                n,
                k,
                padded_n: self.padded_n(),
                k_total: self.k,
            });
        }
        let sb = n / SUPER_BLOCK;
        let c = n % SUPER_BLOCK;
        let g = k / self.gs;
        let kg = (k % self.gs) / KG_WIDTH;
        let kc = k % KG_WIDTH;
        let j = KG_WIDTH * c + kc;
        let block = (sb * self.num_groups() + g) * self.kg_per_group() + kg;
        Ok((block * KG_BLOCK_BYTES + j / 2, j % 2 == 1))
    }

    /// Index into the norms array fp16\[N\]\[ng\] of row `n`, group `g`
    /// (`n < N`, `g < ng`; `None` otherwise).
    pub fn norm_index(&self, n: usize, g: usize) -> Option<usize> {
        (n < self.n && g < self.num_groups()).then(|| n * self.num_groups() + g)
    }

    /// Index into the folded array fp32 \[SB64\]\[ng\]\[64\] of row `n`, group
    /// `g` (`n < padded_n()`, `g < ng`; `None` otherwise).
    pub fn folded_index(&self, n: usize, g: usize) -> Option<usize> {
        (n < self.padded_n() && g < self.num_groups())
            .then(|| ((n / SUPER_BLOCK) * self.num_groups() + g) * SUPER_BLOCK + n % SUPER_BLOCK)
    }

    /// The scales blob layout for `family`. Infallible: `new` checked that
    /// both families' layouts fit.
    pub fn scales_layout(&self, family: RotationFamily) -> ScalesLayout {
        // `new` verified this cannot fail; fall back to an empty layout rather
        // than panic if that invariant were ever broken.
        self.checked_scales_layout(family).unwrap_or(ScalesLayout {
            codebook: Region::default(),
            input_scale: Region::default(),
            recip: Region::default(),
            norms: Region::default(),
            pad: Region::default(),
            folded: Region::default(),
            rotation: RotationRegions::Hadamard {
                left: Region::default(),
                right: Region::default(),
                perm: Region::default(),
            },
            scales_bytes: 0,
        })
    }

    fn checked_scales_layout(&self, family: RotationFamily) -> Option<ScalesLayout> {
        let mut at = 0usize;
        let mut take = |len: usize| -> Option<Region> {
            let r = Region { offset: at, len };
            at = at.checked_add(len)?;
            Some(r)
        };
        let codebook = take(CODEBOOK_ENTRIES * 2)?;
        let input_scale = take(self.k.checked_mul(2)?)?;
        let recip = take(self.k.checked_mul(2)?)?;
        let norms = take(self.n.checked_mul(self.num_groups())?.checked_mul(2)?)?;
        let pad_len = (4 - norms.end() % 4) % 4;
        let pad = take(pad_len)?;
        let folded = take(
            self.sb64
                .checked_mul(self.num_groups())?
                .checked_mul(SUPER_BLOCK)?
                .checked_mul(4)?,
        )?;
        let rotation = match family {
            RotationFamily::Hadamard => RotationRegions::Hadamard {
                left: take(self.gs)?,
                right: take(self.gs)?,
                perm: take(self.gs.checked_mul(4)?)?,
            },
            RotationFamily::Orthogonal => {
                let rr = self.k.checked_mul(self.k)?.checked_mul(2)?;
                RotationRegions::Orthogonal {
                    r: take(rr)?,
                    r_t: take(rr)?,
                }
            }
        };
        u64::try_from(at).ok()?;
        Some(ScalesLayout {
            codebook,
            input_scale,
            recip,
            norms,
            pad,
            folded,
            rotation,
            scales_bytes: at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The formula, written independently of `nibble_position`.
    fn formula(n: usize, k: usize, ng: usize, gs: usize) -> (usize, bool) {
        let sb = n / 64;
        let c = n % 64;
        let g = k / gs;
        let kg = (k % gs) / 4;
        let kc = k % 4;
        let j = 4 * c + kc;
        (((sb * ng + g) * (gs / 4) + kg) * 128 + j / 2, j % 2 == 1)
    }

    const SHAPES: &[(usize, usize, usize)] = &[
        (64, 256, 128),
        (192, 512, 128),
        (100, 256, 128),
        (256, 256, 256),
        (1, 128, 128),
        (65, 128, 128),
        (1, 256, 128),
        (65, 384, 128),
        (3, 8, 4),
    ];

    #[test]
    fn positions_match_formula_and_are_a_bijection() {
        for &(n, k, gs) in SHAPES {
            let geom = PanelGeometry::new(n, k, gs).unwrap();
            assert_eq!(geom.sb64(), n.div_ceil(64));
            assert_eq!(geom.num_groups(), k / gs);
            assert_eq!(geom.data_bytes(), geom.sb64() * 64 * k / 2);
            // 2 bits per nibble slot: low, high.
            let mut seen = vec![[false; 2]; geom.data_bytes()];
            for row in 0..geom.padded_n() {
                for col in 0..k {
                    let pos = geom.nibble_position(row, col).unwrap();
                    assert_eq!(
                        pos,
                        formula(row, col, k / gs, gs),
                        "({row},{col}) in {n}x{k}/{gs}"
                    );
                    let slot = &mut seen[pos.0][pos.1 as usize];
                    assert!(!*slot, "({row},{col}) collides in {n}x{k}/{gs}");
                    *slot = true;
                }
            }
            // Every nibble of the data region is used by exactly one (padded) weight.
            assert!(seen.iter().all(|s| s[0] && s[1]));
            // Unpadded weights cover exactly N*K nibbles; the rest are padded channels.
            let mut real = vec![[false; 2]; geom.data_bytes()];
            for row in 0..n {
                for col in 0..k {
                    let (b, h) = geom.nibble_position(row, col).unwrap();
                    real[b][h as usize] = true;
                }
            }
            let used = real.iter().flatten().filter(|&&x| x).count();
            assert_eq!(used, n * k);
            for row in n..geom.padded_n() {
                for col in 0..k {
                    let (b, h) = geom.nibble_position(row, col).unwrap();
                    assert!(!real[b][h as usize]);
                }
            }
        }
    }

    #[test]
    fn block_structure() {
        // A 128-byte kg-block: vector v (32 bytes) holds channels 16v..16v+15,
        // each channel's 4 columns in 2 consecutive bytes, low nibble first.
        let geom = PanelGeometry::new(192, 512, 128).unwrap();
        assert_eq!(geom.nibble_position(0, 0).unwrap(), (0, false));
        assert_eq!(geom.nibble_position(0, 1).unwrap(), (0, true));
        assert_eq!(geom.nibble_position(0, 3).unwrap(), (1, true));
        assert_eq!(geom.nibble_position(1, 0).unwrap(), (2, false));
        assert_eq!(geom.nibble_position(16, 0).unwrap(), (32, false));
        assert_eq!(geom.nibble_position(63, 3).unwrap(), (127, true));
        assert_eq!(geom.nibble_position(0, 4).unwrap(), (128, false));
        assert_eq!(geom.nibble_position(0, 128).unwrap(), (32 * 128, false));
        assert_eq!(geom.nibble_position(64, 0).unwrap(), (4 * 32 * 128, false));
        assert!(geom.nibble_position(192, 0).is_err());
        assert!(geom.nibble_position(0, 512).is_err());
        // Padded rows exist up to 64*SB64.
        let g = PanelGeometry::new(65, 128, 128).unwrap();
        assert_eq!(g.padded_n(), 128);
        assert!(g.nibble_position(127, 127).is_ok());
        assert!(g.nibble_position(128, 0).is_err());
    }

    #[test]
    fn norm_and_folded_indices() {
        let geom = PanelGeometry::new(100, 256, 128).unwrap();
        assert_eq!(geom.norm_index(0, 1), Some(1));
        assert_eq!(geom.norm_index(99, 1), Some(199));
        assert_eq!(geom.norm_index(100, 0), None);
        assert_eq!(geom.folded_index(0, 0), Some(0));
        assert_eq!(geom.folded_index(5, 1), Some(64 + 5));
        assert_eq!(geom.folded_index(64, 0), Some(2 * 64));
        assert_eq!(geom.folded_index(127, 1), Some(3 * 64 + 63));
        assert_eq!(geom.folded_index(128, 0), None);
    }

    #[test]
    fn scales_layout_hadamard() {
        let geom = PanelGeometry::new(100, 256, 128).unwrap();
        let l = geom.scales_layout(RotationFamily::Hadamard);
        assert_eq!(l.codebook, Region { offset: 0, len: 32 });
        assert_eq!(
            l.input_scale,
            Region {
                offset: 32,
                len: 512
            }
        );
        assert_eq!(
            l.recip,
            Region {
                offset: 544,
                len: 512
            }
        );
        assert_eq!(
            l.norms,
            Region {
                offset: 1056,
                len: 400
            }
        );
        assert_eq!(
            l.pad,
            Region {
                offset: 1456,
                len: 0
            }
        );
        assert_eq!(
            l.folded,
            Region {
                offset: 1456,
                len: 2 * 2 * 64 * 4
            }
        );
        let f_end = 1456 + 1024;
        assert_eq!(
            l.rotation,
            RotationRegions::Hadamard {
                left: Region {
                    offset: f_end,
                    len: 128
                },
                right: Region {
                    offset: f_end + 128,
                    len: 128
                },
                perm: Region {
                    offset: f_end + 256,
                    len: 512
                },
            }
        );
        assert_eq!(l.scales_bytes, f_end + 768);
    }

    #[test]
    fn scales_layout_orthogonal_with_pad() {
        // N * ng odd -> norms end on a 2-byte boundary -> 2 bytes of padding.
        let geom = PanelGeometry::new(1, 128, 128).unwrap();
        let l = geom.scales_layout(RotationFamily::Orthogonal);
        assert_eq!(
            l.norms,
            Region {
                offset: 32 + 512,
                len: 2
            }
        );
        assert_eq!(
            l.pad,
            Region {
                offset: 546,
                len: 2
            }
        );
        assert_eq!(
            l.folded,
            Region {
                offset: 548,
                len: 256
            }
        );
        assert_eq!(
            l.rotation,
            RotationRegions::Orthogonal {
                r: Region {
                    offset: 804,
                    len: 128 * 128 * 2
                },
                r_t: Region {
                    offset: 804 + 32768,
                    len: 32768
                },
            }
        );
        assert_eq!(l.scales_bytes, 804 + 65536);
        // Regions are contiguous and in order.
        let regions = [l.codebook, l.input_scale, l.recip, l.norms, l.pad, l.folded];
        for w in regions.windows(2) {
            assert_eq!(w[0].end(), w[1].offset);
        }
        assert_eq!(l.folded.offset % 4, 0);
    }

    #[test]
    fn bad_shapes() {
        assert_eq!(PanelGeometry::new(0, 128, 128), Err(PanelError::ZeroRows));
        assert_eq!(PanelGeometry::new(1, 0, 128), Err(PanelError::ZeroCols));
        assert_eq!(
            PanelGeometry::new(1, 128, 0),
            Err(PanelError::BadGroupSize { gs: 0 })
        );
        assert_eq!(
            PanelGeometry::new(1, 130, 130),
            Err(PanelError::BadGroupSize { gs: 130 })
        );
        assert_eq!(
            PanelGeometry::new(1, 200, 128),
            Err(PanelError::KNotMultipleOfGroup { k: 200, gs: 128 })
        );
        assert!(matches!(
            PanelGeometry::new(usize::MAX, 128, 128),
            Err(PanelError::TooLarge { .. })
        ));
        assert!(matches!(
            PanelGeometry::new(1, 1 << 62, 128),
            Err(PanelError::TooLarge { .. })
        ));
        // K*K*2 overflows even though the data region would fit.
        assert!(matches!(
            PanelGeometry::new(1, 1 << 33, 128),
            Err(PanelError::TooLarge { .. })
        ));
    }
}
