//! ggml sidecar files: whole ggml blocks, rows interleaved in groups of 4 or 8.

use std::io::Write;

use anyhow::{Context, Result};
use ggml_quants::GgmlType;
use rayon::prelude::*;
use weights_file::format::Interleave;
use weights_file::{interleave, Header};

use super::Ctx;
use crate::failure::bad_input;
use crate::manifest::Entry;
use crate::materialize;
use crate::outdir::HashedFile;
use crate::plan::Job;

/// Layout details for the manifest and `inspect`.
pub fn details(ty: GgmlType, factor: usize, n: u64, k: u64) -> serde_json::Value {
    let bs = ty.block_size() as u64;
    serde_json::json!({
        "ggml_type": ty.to_string(),
        "interleave": factor,
        "block_weights": bs,
        "block_bytes": ty.type_size(),
        "blocks_per_row": k / bs,
        "row_bytes": k / bs * ty.type_size() as u64,
        "interleaved_rows": n / factor as u64 * factor as u64,
        "tail_rows": n % factor as u64,
    })
}

/// Repack whole rows (`rows` of them, starting at a multiple of `factor`)
/// and write them: full groups interleaved, a final partial group plain.
fn write_rows(
    w: &mut HashedFile,
    src: &[u8],
    row_bytes: usize,
    block_bytes: usize,
    factor: usize,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let group = factor * row_bytes;
    let full = src.len() / group * group;
    buf.resize(full, 0);
    buf[..full]
        .par_chunks_mut(group)
        .zip(src[..full].par_chunks(group))
        .try_for_each(|(dst, s)| {
            interleave::repack_group(s, row_bytes, block_bytes, factor, dst)
        })?;
    w.write_all(&buf[..full])?;
    w.write_all(&src[full..])?;
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
    let (n, k) = (t.shape[0], t.shape[1]);
    let factor = il.factor();
    let header = Header::sidecar(ty, il, n, k).ok_or_else(|| {
        bad_input(format!(
            "{}: row length {k} is not a multiple of the {ty} block size {}",
            ctx.at(job),
            ty.block_size()
        ))
    })?;
    let row_bytes = (header.data_bytes / n) as usize;
    let mut w = ctx.out.create(&job.file)?;
    w.write_all(&weights_file::write::prefix(&header, &[])?)?;
    let mut buf = Vec::new();
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
                write_rows(&mut w, &q, row_bytes, ty.type_size(), factor, &mut buf)
            },
        )?;
    } else {
        let data = ctx.cat.data(t);
        if data.len() as u64 != header.data_bytes {
            return Err(bad_input(format!(
                "{}: {} bytes of data, {n} rows of {row_bytes} bytes expected",
                ctx.at(job),
                data.len()
            )));
        }
        // Groups of rows at a time: never the whole tensor twice in memory.
        let step = ((8 << 20) / (factor * row_bytes)).max(1) * factor;
        for chunk in data.chunks(step * row_bytes) {
            write_rows(&mut w, chunk, row_bytes, ty.type_size(), factor, &mut buf)
                .with_context(|| ctx.at(job))?;
        }
    }
    let done = w.commit()?;
    let mut d = details(ty, factor, n, k);
    if requantize {
        // Whether ggml's importance-weighted search made these bytes.
        d["importance_matrix"] =
            serde_json::json!(job.imatrix.is_some() && ggml_quants::uses_imatrix(ty));
    }
    Ok(Entry::new(
        t,
        Some(&job.file),
        ty.to_string(),
        format!("ggml_r{factor}"),
        Some(&done),
        Some(d),
    ))
}
