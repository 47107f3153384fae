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

/// Where a group kernel's prefetch of a slot goes once the distance runs
/// past the end of the slot's stream: onto the same slot of the next group.
///
/// The drivers run a matrix's groups one after another in memory order, so
/// past the end of its stream a slot's next bytes are the next group's.
/// Plain rows and R4 keep the slots in separate streams (rows; two units of
/// 4), so an address past slot `r`'s end falls in a stream of this group
/// that is being read already; the next group's slot `r` is two half
/// distances (`offsets[4] - offsets[0]`) on, i.e. `jump` bytes past the end.
/// R8 is one stream with the next group right after it: `jump` 0. Only a
/// hint's address depends on it (a wrong guess costs bandwidth, never a
/// value).
#[derive(Clone, Copy)]
pub(crate) struct Lookahead {
    /// Bytes of each stream walked so far, the streams' length
    /// (`nblocks * stride`) and the stride.
    pos: usize,
    span: usize,
    stride: usize,
    jump: usize,
}

impl Lookahead {
    /// For a group whose slots start at `offsets` and advance `strides`
    /// bytes per block for `nblocks` blocks (no jump unless every slot has
    /// the same stride).
    #[inline(always)]
    pub(crate) fn new(offsets: &[usize; 8], strides: &[usize; 8], nblocks: usize) -> Self {
        let stride = strides[0];
        let span = nblocks * stride;
        let halves_apart = offsets[4].saturating_sub(offsets[0]);
        let uniform = strides.iter().all(|&x| x == stride);
        let jump = if uniform && halves_apart >= span && span > 0 {
            (2 * halves_apart).saturating_sub(span)
        } else {
            0
        };
        Lookahead {
            pos: 0,
            span,
            stride,
            jump,
        }
    }

    /// The prefetch distance `ahead`, past the stream's end moved on to the
    /// next group.
    #[inline(always)]
    pub(crate) fn ahead(&self, ahead: usize) -> usize {
        if self.pos + ahead >= self.span {
            ahead + self.jump
        } else {
            ahead
        }
    }

    /// Bytes of each stream walked so far.
    #[inline(always)]
    pub(crate) fn walked(&self) -> usize {
        self.pos
    }

    /// One block further down the streams.
    #[inline(always)]
    pub(crate) fn advance(&mut self) {
        self.pos += self.stride;
    }
}

/// Per-slot block pointers of a row group, advanced one block at a time
/// (the SIMD tiers' view of a [`RowGroup`]; each architecture adds its own
/// `prefetch`).
pub(crate) struct Slots {
    pub(crate) p: [*const u8; 8],
    pub(crate) stride: [usize; 8],
    /// Prefetch distance of each slot: whole blocks, >= PREFETCH_BYTES.
    pub(crate) ahead: [usize; 8],
    pub(crate) block_bytes: usize,
    /// Past a stream's end, the next group (jump 0 unless every slot has
    /// the same stride).
    look: Lookahead,
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
        let look = Lookahead::new(g.offsets(), &stride, g.nblocks());
        Slots {
            p,
            stride,
            ahead,
            block_bytes: g.block_bytes(),
            look,
        }
    }

    /// Where slot `r`'s prefetch goes, in bytes past its current block:
    /// `ahead`, or into the next group once that runs past the stream's end.
    #[inline(always)]
    pub(crate) fn ahead_of(&self, r: usize) -> usize {
        self.look.ahead(self.ahead[r])
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
        self.look.advance();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GgmlMatrix, QuantFormat, RowLayout};

    /// Every prefetch address of a group's walk is the byte the drivers read
    /// `ahead` bytes later in their order: down the slot's own stream while
    /// it lasts, then the same slot of the next group (`group_at(8)`), for
    /// plain rows, R4 and R8 (with the jump of 0 this fails for plain rows
    /// and R4: the address lands in another slot of the same group).
    #[test]
    fn prefetch_runs_into_the_next_group() {
        for (format, k) in [(QuantFormat::Q6K, 2048), (QuantFormat::Q8_0, 4096)] {
            for layout in [
                RowLayout::RowMajor,
                RowLayout::Interleaved(4),
                RowLayout::Interleaved(8),
            ] {
                let n = 24;
                let bytes = n * k / format.block_weights() * format.block_bytes();
                let data = vec![0u8; bytes];
                let m = GgmlMatrix::new(format, layout, n, k, &data).unwrap();
                let (g0, g1) = (m.group_at(0), m.group_at(8));
                let mut s = Slots::new(&g0);
                let base = data.as_ptr() as usize;
                let mut checked = 0;
                for b in 0..g0.nblocks() {
                    let walked = b * g0.strides()[0];
                    for r in 0..8 {
                        let at = s.p[r] as usize - base;
                        assert_eq!(at, g0.offsets()[r] + walked);
                        let target = at + s.ahead_of(r);
                        let (a, span) = (s.ahead[r], g0.nblocks() * g0.strides()[r]);
                        let want = if walked + a < span {
                            g0.offsets()[r] + walked + a
                        } else if walked + a - span < span {
                            g1.offsets()[r] + walked + a - span
                        } else {
                            continue;
                        };
                        assert_eq!(target, want, "{format:?} {layout:?} block {b} slot {r}");
                        checked += 1;
                    }
                    s.advance();
                }
                assert!(checked >= 8 * (g0.nblocks() - 1), "{format:?} {layout:?}");
            }
        }
    }
}
