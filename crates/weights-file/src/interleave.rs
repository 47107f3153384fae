//! Row-interleave (R4 / R8) layout math for ggml block rows.
//!
//! A 2-D tensor of `rows` rows, each `row_bytes` long and made of whole
//! blocks of `block_bytes`, is stored with groups of `factor` (F = 4 or 8)
//! consecutive rows interleaved block by block: block `b` of row `r`,
//! originally at `r*row_bytes + b*block_bytes`, moves to
//!
//! ```text
//! (r / F) * F * row_bytes + (b * F + r % F) * block_bytes
//! ```
//!
//! for rows in full groups. The `rows % F` tail rows after the last full group
//! keep their plain row-major offsets. Whole blocks move; bytes inside a block
//! are untouched, so this module knows nothing of quant formats beyond
//! `block_bytes`. The total size never changes.
//!
//! Streaming: a caller that reads a tensor F rows at a time calls
//! [`repack_group`] for every full group and copies the tail rows verbatim;
//! group `g` lands at byte `g * F * row_bytes` of the output, exactly where
//! [`repack`] would put it.

use thiserror::Error;

/// The interleave factors the format defines.
pub const FACTORS: [usize; 2] = [4, 8];

/// Why an interleave request is impossible.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum InterleaveError {
    /// The factor is not 4 or 8.
    #[error("interleave factor {factor} is not 4 or 8")]
    BadFactor {
        /// The rejected factor.
        factor: usize,
    },
    /// `block_bytes` was zero.
    #[error("block size in bytes is zero")]
    ZeroBlockBytes,
    /// `row_bytes` is zero or not a whole number of blocks.
    #[error("row of {row_bytes} bytes is not a positive multiple of the {block_bytes}-byte block")]
    RowNotWholeBlocks {
        /// Bytes per row.
        row_bytes: usize,
        /// Bytes per block.
        block_bytes: usize,
    },
    /// `rows * row_bytes` does not fit in `usize`.
    #[error("{rows} rows of {row_bytes} bytes overflow the address space")]
    SizeOverflow {
        /// Number of rows.
        rows: usize,
        /// Bytes per row.
        row_bytes: usize,
    },
    /// A buffer does not have exactly the length the geometry needs.
    #[error("{what} has {actual} bytes, expected {expected}")]
    Length {
        /// Which buffer (`src`, `dst`, `group src`, `group dst`).
        what: &'static str,
        /// Bytes required.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// A (row, block) position outside the tensor.
    #[error(
        "position (row {row}, block {block}) is outside {rows} rows x {blocks_per_row} blocks"
    )]
    OutOfRange {
        /// Requested row.
        row: usize,
        /// Requested block.
        block: usize,
        /// Rows of the tensor.
        rows: usize,
        /// Blocks per row.
        blocks_per_row: usize,
    },
}

impl InterleaveError {
    /// True for geometry that the tensor itself makes impossible (rows that
    /// are not whole blocks, sizes that overflow), false for buffers of the
    /// wrong length or positions outside the tensor (caller mistakes).
    pub fn is_bad_input(&self) -> bool {
        !matches!(
            self,
            InterleaveError::Length { .. } | InterleaveError::OutOfRange { .. }
        )
    }
}

/// Checks factor, block and row sizes; returns the total byte size
/// `rows * row_bytes`.
pub fn validate(
    rows: usize,
    row_bytes: usize,
    block_bytes: usize,
    factor: usize,
) -> Result<usize, InterleaveError> {
    if !FACTORS.contains(&factor) {
        return Err(InterleaveError::BadFactor { factor });
    }
    if block_bytes == 0 {
        return Err(InterleaveError::ZeroBlockBytes);
    }
    if row_bytes == 0 || !row_bytes.is_multiple_of(block_bytes) {
        return Err(InterleaveError::RowNotWholeBlocks {
            row_bytes,
            block_bytes,
        });
    }
    rows.checked_mul(row_bytes)
        .ok_or(InterleaveError::SizeOverflow { rows, row_bytes })
}

/// Rows covered by full groups of `factor` (the rest are the plain tail).
/// Zero for a zero factor.
pub fn full_group_rows(rows: usize, factor: usize) -> usize {
    match factor {
        0 => 0,
        f => rows - rows % f,
    }
}

/// Byte offset in the interleaved layout of block `block` of row `row`.
///
/// Pure formula, no checks: for arguments that [`validate`] accepts and an
/// in-range position it is exact (use [`checked_interleaved_offset`] to get
/// the checks). It never panics: a zero factor yields the row-major offset
/// and arithmetic wraps.
pub fn interleaved_offset(
    row: usize,
    block: usize,
    rows: usize,
    row_bytes: usize,
    block_bytes: usize,
    factor: usize,
) -> usize {
    if factor == 0 || row >= full_group_rows(rows, factor) {
        return row
            .wrapping_mul(row_bytes)
            .wrapping_add(block.wrapping_mul(block_bytes));
    }
    (row / factor)
        .wrapping_mul(factor)
        .wrapping_mul(row_bytes)
        .wrapping_add(
            block
                .wrapping_mul(factor)
                .wrapping_add(row % factor)
                .wrapping_mul(block_bytes),
        )
}

/// [`interleaved_offset`] after validating the geometry and the position.
pub fn checked_interleaved_offset(
    row: usize,
    block: usize,
    rows: usize,
    row_bytes: usize,
    block_bytes: usize,
    factor: usize,
) -> Result<usize, InterleaveError> {
    validate(rows, row_bytes, block_bytes, factor)?;
    let blocks_per_row = row_bytes / block_bytes;
    if row >= rows || block >= blocks_per_row {
        return Err(InterleaveError::OutOfRange {
            row,
            block,
            rows,
            blocks_per_row,
        });
    }
    // In range and rows * row_bytes fits, so no step below can overflow.
    Ok(interleaved_offset(
        row,
        block,
        rows,
        row_bytes,
        block_bytes,
        factor,
    ))
}

fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<(), InterleaveError> {
    if expected == actual {
        Ok(())
    } else {
        Err(InterleaveError::Length {
            what,
            expected,
            actual,
        })
    }
}

/// Interleaves one group: `src` holds `factor` consecutive rows (exactly
/// `factor * row_bytes` bytes) and `dst` receives their interleaved bytes
/// (same length): block `b` of row `r` goes to block slot `b * factor + r`.
pub fn repack_group(
    src: &[u8],
    row_bytes: usize,
    block_bytes: usize,
    factor: usize,
    dst: &mut [u8],
) -> Result<(), InterleaveError> {
    move_group(src, row_bytes, block_bytes, factor, dst, Direction::Repack)
}

/// Inverse of [`repack_group`]: `src` holds one interleaved group, `dst`
/// receives its `factor` rows in row-major order.
pub fn unpack_group(
    src: &[u8],
    row_bytes: usize,
    block_bytes: usize,
    factor: usize,
    dst: &mut [u8],
) -> Result<(), InterleaveError> {
    move_group(src, row_bytes, block_bytes, factor, dst, Direction::Unpack)
}

/// Move the blocks of one group: block `b` of row `r` (row-major offset
/// `r * row_bytes + b * block_bytes`) <-> interleaved slot `b * factor + r`.
fn move_group(
    src: &[u8],
    row_bytes: usize,
    block_bytes: usize,
    factor: usize,
    dst: &mut [u8],
    direction: Direction,
) -> Result<(), InterleaveError> {
    let total = validate(factor, row_bytes, block_bytes, factor)?;
    check_len("group src", total, src.len())?;
    check_len("group dst", total, dst.len())?;
    let blocks = row_bytes / block_bytes;
    for r in 0..factor {
        for b in 0..blocks {
            let plain = r * row_bytes + b * block_bytes;
            let packed = (b * factor + r) * block_bytes;
            let (from, to) = match direction {
                Direction::Repack => (plain, packed),
                Direction::Unpack => (packed, plain),
            };
            dst[to..to + block_bytes].copy_from_slice(&src[from..from + block_bytes]);
        }
    }
    Ok(())
}

/// Which way [`transform`] moves blocks.
#[derive(Clone, Copy)]
enum Direction {
    Repack,
    Unpack,
}

fn transform(
    src: &[u8],
    dst: &mut [u8],
    (rows, row_bytes, block_bytes, factor): (usize, usize, usize, usize),
    direction: Direction,
) -> Result<(), InterleaveError> {
    let total = validate(rows, row_bytes, block_bytes, factor)?;
    check_len("src", total, src.len())?;
    check_len("dst", total, dst.len())?;
    let split = full_group_rows(rows, factor) * row_bytes;
    let (src_groups, src_tail) = src.split_at(split);
    let (dst_groups, dst_tail) = dst.split_at_mut(split);
    let group_bytes = factor * row_bytes;
    for (s, d) in src_groups
        .chunks_exact(group_bytes)
        .zip(dst_groups.chunks_exact_mut(group_bytes))
    {
        move_group(s, row_bytes, block_bytes, factor, d, direction)?;
    }
    dst_tail.copy_from_slice(src_tail);
    Ok(())
}

/// Interleaves a whole tensor: `src` is `rows` row-major rows of `row_bytes`,
/// `dst` (same length) receives the interleaved layout.
pub fn repack(
    src: &[u8],
    rows: usize,
    row_bytes: usize,
    block_bytes: usize,
    factor: usize,
    dst: &mut [u8],
) -> Result<(), InterleaveError> {
    let shape = (rows, row_bytes, block_bytes, factor);
    transform(src, dst, shape, Direction::Repack)
}

/// Inverse of [`repack`]: `src` is the interleaved layout, `dst` (same
/// length) receives the row-major rows.
pub fn unpack(
    src: &[u8],
    rows: usize,
    row_bytes: usize,
    block_bytes: usize,
    factor: usize,
    dst: &mut [u8],
) -> Result<(), InterleaveError> {
    let shape = (rows, row_bytes, block_bytes, factor);
    transform(src, dst, shape, Direction::Unpack)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes of Q8_0, Q5_0, Q4_K, Q5_K, Q6_K blocks.
    const BLOCK_BYTES: [usize; 5] = [34, 22, 144, 176, 210];
    const ROW_COUNTS: [usize; 10] = [1, 3, 4, 5, 7, 8, 9, 15, 16, 17];

    /// Distinct-ish bytes so a misplaced block cannot go unnoticed.
    fn pattern(len: usize, seed: u64) -> Vec<u8> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn unpack_inverts_repack_for_every_block_size_factor_and_row_count() {
        for factor in FACTORS {
            for block_bytes in BLOCK_BYTES {
                for blocks_per_row in [1, 3, 90] {
                    for rows in ROW_COUNTS {
                        let row_bytes = block_bytes * blocks_per_row;
                        let src = pattern(rows * row_bytes, (rows * 1000 + block_bytes) as u64);
                        let mut packed = vec![0u8; src.len()];
                        repack(&src, rows, row_bytes, block_bytes, factor, &mut packed).unwrap();
                        let mut back = vec![0u8; src.len()];
                        unpack(&packed, rows, row_bytes, block_bytes, factor, &mut back).unwrap();
                        assert!(
                            back == src,
                            "F={factor} block={block_bytes} blocks/row={blocks_per_row} M={rows}"
                        );
                        if rows >= factor && blocks_per_row > 1 {
                            assert_ne!(packed, src, "a full group must move blocks");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_block_lands_at_the_formula_offset() {
        for factor in FACTORS {
            for block_bytes in BLOCK_BYTES {
                for rows in ROW_COUNTS {
                    let blocks_per_row = 5;
                    let row_bytes = block_bytes * blocks_per_row;
                    let src = pattern(rows * row_bytes, rows as u64);
                    let mut packed = vec![0u8; src.len()];
                    repack(&src, rows, row_bytes, block_bytes, factor, &mut packed).unwrap();
                    let mut seen = vec![false; rows * blocks_per_row];
                    for r in 0..rows {
                        for b in 0..blocks_per_row {
                            let from = r * row_bytes + b * block_bytes;
                            let to = interleaved_offset(r, b, rows, row_bytes, block_bytes, factor);
                            assert_eq!(to % block_bytes, 0);
                            assert_eq!(
                                &packed[to..to + block_bytes],
                                &src[from..from + block_bytes]
                            );
                            let slot = to / block_bytes;
                            assert!(!seen[slot], "two blocks at slot {slot}");
                            seen[slot] = true;
                            assert_eq!(
                                checked_interleaved_offset(
                                    r,
                                    b,
                                    rows,
                                    row_bytes,
                                    block_bytes,
                                    factor
                                ),
                                Ok(to)
                            );
                        }
                    }
                    assert!(seen.iter().all(|s| *s), "the layout is a permutation");
                }
            }
        }
    }

    #[test]
    fn specific_offsets() {
        // Q8_0 rows of 4 blocks (136 bytes), F = 4, 6 rows: rows 4 and 5 are tail.
        let (rb, bb) = (136, 34);
        assert_eq!(interleaved_offset(0, 0, 6, rb, bb, 4), 0);
        assert_eq!(interleaved_offset(1, 0, 6, rb, bb, 4), 34);
        assert_eq!(interleaved_offset(3, 0, 6, rb, bb, 4), 102);
        assert_eq!(interleaved_offset(0, 1, 6, rb, bb, 4), 136);
        assert_eq!(interleaved_offset(2, 3, 6, rb, bb, 4), (3 * 4 + 2) * 34);
        assert_eq!(interleaved_offset(4, 0, 6, rb, bb, 4), 4 * 136);
        assert_eq!(interleaved_offset(5, 2, 6, rb, bb, 4), 5 * 136 + 2 * 34);
        // F = 8, 17 rows of Q6_K pairs: row 9 is in group 1, row 16 is tail.
        let (rb, bb) = (420, 210);
        assert_eq!(
            interleaved_offset(9, 1, 17, rb, bb, 8),
            8 * 420 + (8 + 1) * 210
        );
        assert_eq!(interleaved_offset(16, 1, 17, rb, bb, 8), 16 * 420 + 210);
        // Fewer rows than the factor: nothing moves.
        assert_eq!(interleaved_offset(2, 1, 3, rb, bb, 4), 2 * 420 + 210);
    }

    #[test]
    fn tail_rows_are_untouched() {
        for factor in FACTORS {
            for rows in ROW_COUNTS {
                let (bb, rb) = (22, 22 * 7);
                let src = pattern(rows * rb, 11);
                let mut packed = vec![0u8; src.len()];
                repack(&src, rows, rb, bb, factor, &mut packed).unwrap();
                let tail_start = full_group_rows(rows, factor) * rb;
                assert_eq!(
                    &packed[tail_start..],
                    &src[tail_start..],
                    "F={factor} M={rows}"
                );
            }
        }
    }

    #[test]
    fn group_streaming_matches_the_whole_tensor() {
        let (factor, bb, rb, rows) = (8, 176, 176 * 4, 19);
        let src = pattern(rows * rb, 5);
        let mut whole = vec![0u8; src.len()];
        repack(&src, rows, rb, bb, factor, &mut whole).unwrap();
        let mut streamed = Vec::new();
        let mut group = vec![0u8; factor * rb];
        for rows_in in src.chunks(factor * rb) {
            if rows_in.len() == factor * rb {
                repack_group(rows_in, rb, bb, factor, &mut group).unwrap();
                streamed.extend_from_slice(&group);
            } else {
                streamed.extend_from_slice(rows_in);
            }
        }
        assert_eq!(streamed, whole);
        let mut back = vec![0u8; factor * rb];
        unpack_group(&whole[..factor * rb], rb, bb, factor, &mut back).unwrap();
        assert_eq!(&back[..], &src[..factor * rb]);
    }

    #[test]
    fn bad_arguments_are_errors() {
        let src = vec![0u8; 4 * 68];
        let mut dst = vec![0u8; 4 * 68];
        for factor in [0, 1, 2, 3, 5, 16] {
            assert_eq!(
                repack(&src, 4, 68, 34, factor, &mut dst),
                Err(InterleaveError::BadFactor { factor })
            );
        }
        assert_eq!(
            repack(&src, 4, 68, 0, 4, &mut dst),
            Err(InterleaveError::ZeroBlockBytes)
        );
        assert_eq!(
            repack(&src, 4, 68, 22, 4, &mut dst),
            Err(InterleaveError::RowNotWholeBlocks {
                row_bytes: 68,
                block_bytes: 22
            })
        );
        assert!(matches!(
            repack(&src, 4, 0, 34, 4, &mut dst),
            Err(InterleaveError::RowNotWholeBlocks { .. })
        ));
        assert_eq!(
            repack(&src[1..], 4, 68, 34, 4, &mut dst),
            Err(InterleaveError::Length {
                what: "src",
                expected: 272,
                actual: 271
            })
        );
        assert_eq!(
            unpack(&src, 4, 68, 34, 4, &mut dst[..270]),
            Err(InterleaveError::Length {
                what: "dst",
                expected: 272,
                actual: 270
            })
        );
        assert_eq!(
            repack(&src, usize::MAX, 68, 34, 4, &mut dst),
            Err(InterleaveError::SizeOverflow {
                rows: usize::MAX,
                row_bytes: 68
            })
        );
        assert!(matches!(
            repack_group(&src[..3 * 68], 68, 34, 4, &mut dst[..3 * 68]),
            Err(InterleaveError::Length {
                what: "group src",
                ..
            })
        ));
        assert!(matches!(
            checked_interleaved_offset(4, 0, 4, 68, 34, 4),
            Err(InterleaveError::OutOfRange { row: 4, .. })
        ));
        assert!(matches!(
            checked_interleaved_offset(0, 2, 4, 68, 34, 4),
            Err(InterleaveError::OutOfRange { block: 2, .. })
        ));
        // The unchecked formula never panics.
        let _ = interleaved_offset(usize::MAX, usize::MAX, usize::MAX, usize::MAX, 1, 4);
        let _ = interleaved_offset(3, 1, 8, 68, 34, 0);
        // Zero rows is an empty, valid tensor.
        repack(&[], 0, 68, 34, 8, &mut []).unwrap();
    }
}
