//! ggml sidecar files: whole ggml blocks, rows interleaved in groups of 4 or 8
//! (a 3-D expert tensor: each expert's rows, expert after expert).

use std::io::Write;

use anyhow::{Context, Result};
use ggml_quants::GgmlType;
use rayon::prelude::*;
use weights_file::format::Interleave;
use weights_file::{interleave, Header, SidecarShape};

use super::Ctx;
use crate::failure::bad_input;
use crate::manifest::Entry;
use crate::materialize;
use crate::outdir::HashedFile;
use crate::plan::Job;
use sha256x2::Sha256;

thread_local! {
    /// The repack buffer of the last sidecar this thread wrote (up to one
    /// 8 MiB chunk), handed to the next: a fresh buffer per tensor cost a
    /// zeroing pass and a page fault per 4 KiB of every chunk (keep mode
    /// writes hundreds of tensors). Taken, not borrowed: a thread waiting in
    /// a parallel repack may start another tensor's write, which then finds
    /// it empty and allocates its own.
    static REPACK: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Layout details for the manifest and `inspect` (per expert for an expert
/// sidecar, with `experts` and `expert_bytes`).
pub fn details(ty: GgmlType, factor: usize, shape: SidecarShape) -> serde_json::Value {
    let SidecarShape { experts, n, k } = shape;
    let bs = ty.block_size() as u64;
    let row_bytes = k / bs * ty.type_size() as u64;
    let mut d = serde_json::json!({
        "ggml_type": ty.to_string(),
        "interleave": factor,
        "block_weights": bs,
        "block_bytes": ty.type_size(),
        "blocks_per_row": k / bs,
        "row_bytes": row_bytes,
        "interleaved_rows": n / factor as u64 * factor as u64,
        "tail_rows": n % factor as u64,
    });
    if let Some(e) = experts {
        d["experts"] = serde_json::json!(e);
        d["expert_bytes"] = serde_json::json!(n.saturating_mul(row_bytes));
    }
    d
}

/// Repack whole rows (`rows` of them, starting at a multiple of `factor`)
/// and write them: full groups interleaved, a final partial group plain.
///
/// With `src_hash`, `src` is added to it beside the file's own hash (the
/// same number of bytes: two messages hashed at once).
fn write_rows(
    w: &mut HashedFile,
    src: &[u8],
    row_bytes: usize,
    block_bytes: usize,
    factor: usize,
    buf: &mut Vec<u8>,
    src_hash: Option<&mut Sha256>,
) -> Result<()> {
    let group = factor * row_bytes;
    let full = src.len() / group * group;
    // Grown, never shrunk: every byte of `buf[..full]` is written below,
    // so a reused buffer is not zeroed again.
    if buf.len() < full {
        buf.resize(full, 0);
    }
    buf[..full]
        .par_chunks_mut(group)
        .zip(src[..full].par_chunks(group))
        .try_for_each(|(dst, s)| {
            interleave::repack_group(s, row_bytes, block_bytes, factor, dst)
        })?;
    match src_hash {
        Some(h) => {
            w.write_all_beside(&buf[..full], h, &src[..full])?;
            w.write_all_beside(&src[full..], h, &src[full..])?;
        }
        None => {
            w.write_all(&buf[..full])?;
            w.write_all(&src[full..])?;
        }
    }
    Ok(())
}

/// Write one sidecar file and return its manifest entry.
pub fn write(
    ctx: &Ctx,
    job: &Job,
    ty: GgmlType,
    il: Interleave,
    requantize: bool,
) -> Result<Entry> {
    let t = job.tensor;
    let shape = crate::plan::sidecar_shape(t).ok_or_else(|| {
        bad_input(format!(
            "{}: shape {:?} is neither a matrix nor a 3-D expert tensor",
            ctx.at(job),
            t.shape
        ))
    })?;
    let (n, k) = (shape.n, shape.k);
    let factor = il.factor();
    let header = Header::sidecar_of(ty, il, shape).ok_or_else(|| {
        bad_input(format!(
            "{}: row length {k} is not a multiple of the {ty} block size {}",
            ctx.at(job),
            ty.block_size()
        ))
    })?;
    if requantize && shape.experts.is_some() {
        // The plan requantizes 2-D matrices only (Stay::Experts).
        return Err(anyhow::anyhow!(
            "{}: expert tensors are not requantized",
            ctx.at(job)
        ));
    }
    let row_bytes = (header.data_bytes / shape.rows().unwrap_or(1).max(1)) as usize;
    // Where the CPU hashes sixteen messages at once, the sidecars are
    // hashed together after the jobs (`convert.rs`).
    let mut w = if sha256x2::many_supported() {
        ctx.out.create_unhashed(&job.file)?
    } else {
        ctx.out.create(&job.file)?
    };
    let layout = weights_file::Layout::of(&header)
        .with_context(|| format!("{}: header regions overflow", ctx.at(job)))?;
    w.allocate(layout.file_len);
    w.write_all(&weights_file::write::prefix(&header, &[])?)?;
    let mut buf = REPACK.with(|b| b.take());
    // The tensor's hash, beside the file's (see `writers::hashes_own_source`).
    let mut src_hash = (ctx.hash_source && super::hashes_own_source(job)).then(Sha256::new);
    if requantize {
        let mut q = Vec::new();
        materialize::rows(
            ctx.cat,
            t,
            ctx.opts.dtype,
            factor,
            job.transform,
            |first_row, values| {
                let rows = values.len() / k as usize;
                q.resize(rows * row_bytes, 0);
                // Quantize in parallel, `factor` rows per task; bytes never depend on the split.
                q.par_chunks_mut(factor * row_bytes)
                    .zip(values.par_chunks(factor * k as usize))
                    .enumerate()
                    .try_for_each(|(i, (dst, src))| {
                        match job.imatrix {
                            Some(im) => {
                                ggml_quants::quantize_rows_imatrix(ty, src, k as usize, im, dst)
                            }
                            None => ggml_quants::quantize_rows(ty, src, k as usize, dst),
                        }
                        .with_context(|| format!("rows from {}", first_row + i * factor))
                    })
                    .with_context(|| ctx.at(job))?;
                write_rows(
                    &mut w,
                    &q,
                    row_bytes,
                    ty.type_size(),
                    factor,
                    &mut buf,
                    None,
                )
            },
        )?;
    } else {
        let data = ctx.cat.data(t);
        if data.len() as u64 != header.data_bytes {
            return Err(bad_input(format!(
                "{}: {} bytes of data, {} rows of {row_bytes} bytes expected",
                ctx.at(job),
                data.len(),
                shape.rows().unwrap_or(u64::MAX)
            )));
        }
        // Groups of rows at a time: never the whole tensor twice in memory.
        // Experts one after the other, each interleaved as a 2-D matrix of
        // `n` rows (its own tail rows plain).
        let step = ((8 << 20) / (factor * row_bytes)).max(1) * factor;
        let mut at = 0u64;
        for expert in data.chunks(n as usize * row_bytes) {
            for chunk in expert.chunks(step * row_bytes) {
                let h = src_hash.as_mut();
                write_rows(
                    &mut w,
                    chunk,
                    row_bytes,
                    ty.type_size(),
                    factor,
                    &mut buf,
                    h,
                )
                .with_context(|| ctx.at(job))?;
                // Copied: its mapped pages leave the resident set (unless
                // the self-check, which reads them again, follows).
                if !ctx.checked {
                    ctx.cat.release(t, at, at + chunk.len() as u64);
                }
                at += chunk.len() as u64;
            }
        }
    }
    REPACK.with(|b| b.set(buf));
    let done = w.commit()?;
    let source_sha256 = src_hash.map(|h| crate::outdir::hex(&h.finalize()));
    let mut d = details(ty, factor, shape);
    if requantize {
        // Whether ggml's importance-weighted search made these bytes.
        d["importance_matrix"] =
            serde_json::json!(job.imatrix.is_some() && ggml_quants::uses_imatrix(ty));
    }
    Ok(Entry {
        source_sha256,
        ..Entry::new(
            t,
            Some(&job.file),
            ty.to_string(),
            format!("ggml_r{factor}"),
            Some(&done),
            Some(d),
        )
    })
}
