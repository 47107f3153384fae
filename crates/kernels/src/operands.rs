//! The operands the kernels of every tier take: a [`RowGroup`] of up to 8
//! ggml rows, a [`PanelBlock`] (one 64-channel super-block of a CQ4 tensor)
//! and its int8 codebook [`CbLut`]. A leaf module: the drivers build them,
//! the tiers read them, the tables name them.

use crate::error::{check_len, KernelError};

pub use weights_file::panel::SUPER_BLOCK;

/// Row slots per group kernel call.
pub const GROUP_ROWS: usize = 8;

/// Up to 8 rows of a ggml matrix, as a group kernel reads them.
///
/// Invariant (checked by [`RowGroup::new`]): for every slot `r` and block
/// `b < nblocks`, bytes `offsets[r] + b * strides[r] ..+ block_bytes` lie
/// inside `data`. The SIMD kernels rely on it.
#[derive(Debug, Clone, Copy)]
pub struct RowGroup<'a> {
    data: &'a [u8],
    offsets: [usize; GROUP_ROWS],
    strides: [usize; GROUP_ROWS],
    nblocks: usize,
    block_bytes: usize,
}

impl<'a> RowGroup<'a> {
    /// A group over `data`; fails unless every block of every slot is in bounds
    /// and `nblocks >= 1`.
    pub fn new(
        data: &'a [u8],
        offsets: [usize; GROUP_ROWS],
        strides: [usize; GROUP_ROWS],
        nblocks: usize,
        block_bytes: usize,
    ) -> Result<Self, KernelError> {
        if nblocks == 0 || block_bytes == 0 {
            return Err(KernelError::Shape("a row group needs blocks".into()));
        }
        for (o, s) in offsets.iter().zip(&strides) {
            let end = s
                .checked_mul(nblocks - 1)
                .and_then(|x| x.checked_add(*o))
                .and_then(|x| x.checked_add(block_bytes));
            if end.is_none_or(|e| e > data.len()) {
                return Err(KernelError::Shape(format!(
                    "row slot at offset {o} stride {s} x {nblocks} blocks leaves the {} data bytes",
                    data.len()
                )));
            }
        }
        Ok(RowGroup {
            data,
            offsets,
            strides,
            nblocks,
            block_bytes,
        })
    }

    /// The bytes all slots point into.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }
    /// Byte offset of block 0 of each slot.
    pub fn offsets(&self) -> &[usize; GROUP_ROWS] {
        &self.offsets
    }
    /// Bytes between consecutive blocks of each slot.
    pub fn strides(&self) -> &[usize; GROUP_ROWS] {
        &self.strides
    }
    /// Blocks per row.
    pub fn nblocks(&self) -> usize {
        self.nblocks
    }
    /// Bytes per block.
    pub fn block_bytes(&self) -> usize {
        self.block_bytes
    }
    /// Block `b` of slot `slot`.
    pub fn block(&self, slot: usize, b: usize) -> &'a [u8] {
        let o = self.offsets[slot] + b * self.strides[slot];
        &self.data[o..o + self.block_bytes]
    }
}

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

/// How far ahead (bytes, at least) the ggml group kernels prefetch each
/// slot's stream.
pub(crate) const PREFETCH_BYTES: usize = 1536;

/// Per-slot block pointers of a row group, advanced one block at a time
/// (the SIMD tiers' view of a [`RowGroup`]; each architecture adds its own
/// `prefetch`).
pub(crate) struct Slots {
    pub(crate) p: [*const u8; 8],
    pub(crate) stride: [usize; 8],
    /// Prefetch distance of each slot: whole blocks, >= PREFETCH_BYTES.
    pub(crate) ahead: [usize; 8],
    pub(crate) block_bytes: usize,
}

impl Slots {
    /// The slots of `g`, at block 0.
    #[inline(always)]
    pub(crate) fn new(g: &RowGroup<'_>) -> Self {
        let base = g.data().as_ptr();
        let mut p = [base; 8];
        for (q, &o) in p.iter_mut().zip(g.offsets()) {
            // wrapping_add: no dereference here; the RowGroup invariant
            // makes every pointer produced for b < nblocks in bounds.
            *q = base.wrapping_add(o);
        }
        let stride = *g.strides();
        let mut ahead = [0usize; 8];
        for (a, &st) in ahead.iter_mut().zip(&stride) {
            *a = PREFETCH_BYTES.div_ceil(st.max(1)) * st;
        }
        Slots {
            p,
            stride,
            ahead,
            block_bytes: g.block_bytes(),
        }
    }

    /// Pointer to the current block of slot `r`.
    #[inline(always)]
    pub(crate) fn at(&self, r: usize) -> *const u8 {
        self.p[r]
    }

    /// Move every slot to its next block.
    #[inline(always)]
    pub(crate) fn advance(&mut self) {
        for (q, &s) in self.p.iter_mut().zip(&self.stride) {
            *q = q.wrapping_add(s);
        }
    }
}

/// Read an unaligned little-endian u16.
///
/// # Safety
/// `p..p + 2` must be readable.
#[inline(always)]
pub(crate) unsafe fn read_u16(p: *const u8) -> u16 {
    // SAFETY: the caller guarantees 2 readable bytes; read_unaligned has no
    // alignment requirement (every target of the kernels is little-endian).
    u16::from_le(unsafe { p.cast::<u16>().read_unaligned() })
}

/// Read an unaligned little-endian u32.
///
/// # Safety
/// `p..p + 4` must be readable.
#[inline(always)]
pub(crate) unsafe fn read_u32(p: *const u8) -> u32 {
    // SAFETY: the caller guarantees 4 readable bytes; read_unaligned has no
    // alignment requirement.
    u32::from_le(unsafe { p.cast::<u32>().read_unaligned() })
}
