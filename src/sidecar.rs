//! ggml sidecar files: whole ggml blocks, rows interleaved in groups of 4 or 8.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use ggml_quants::{GgmlType, TorchDtype};
use model_sources::{Catalogue, Tensor};
use rayon::prelude::*;
use weights_file::format::{flags, GGML_PRECISION_BASE, SIDECAR_ALIGNMENT};
use weights_file::{interleave, Header};

use crate::convert::for_each_chunk_aligned;
use crate::failure::bad_input;
use crate::manifest::Entry;
use crate::output::HashedFile;

/// The header of a sidecar file.
pub fn sidecar_header(ty: GgmlType, factor: usize, n: u64, k: u64) -> Header {
    let mut dims = [0u64; 8];
    dims[0] = n;
    dims[1] = k;
    let bs = ty.block_size() as u64;
    Header {
        flags: if factor == 4 {
            flags::ROW_INTERLEAVE_4
        } else {
            flags::ROW_INTERLEAVE_8
        },
        alignment: SIDECAR_ALIGNMENT,
        ndim: 2,
        dims,
        precision: GGML_PRECISION_BASE | ty.id(),
        data_bytes: n * (k / bs) * ty.type_size() as u64,
        scales_bytes: 0,
        group_size: bs as u32,
        num_groups: (k / bs) as u32,
        original_n: n,
    }
}

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
#[allow(clippy::too_many_arguments)]
pub fn write_sidecar(
    cat: &Catalogue,
    t: &Tensor,
    ty: GgmlType,
    factor: usize,
    requantize: bool,
    dtype: TorchDtype,
    path: &Path,
    file: &str,
) -> Result<Entry> {
    let (n, k) = (t.shape[0], t.shape[1]);
    let bs = ty.block_size() as u64;
    if k % bs != 0 {
        return Err(bad_input(format!(
            "tensor '{}' in {}: row length {k} is not a multiple of the {ty} block size {bs}",
            t.name,
            cat.file_of(t).display()
        )));
    }
    let header = sidecar_header(ty, factor, n, k);
    let row_bytes = (k / bs) as usize * ty.type_size();
    let mut w = HashedFile::create(path)?;
    w.write_all(&weights_file::write::prefix(&header, &[])?)?;
    let mut buf = Vec::new();
    let ctx = || format!("tensor '{}' in {}", t.name, cat.file_of(t).display());
    if requantize {
        let mut q = Vec::new();
        for_each_chunk_aligned(cat, t, dtype, factor, |first_row, values| {
            let rows = values.len() / k as usize;
            q.resize(rows * row_bytes, 0);
            // Quantize in parallel, `factor` rows per task; bytes never depend on the split.
            q.par_chunks_mut(factor * row_bytes)
                .zip(values.par_chunks(factor * k as usize))
                .enumerate()
                .try_for_each(|(i, (dst, src))| {
                    ggml_quants::quantize_rows(ty, src, k as usize, dst)
                        .with_context(|| format!("rows from {}", first_row + i * factor))
                })
                .with_context(ctx)?;
            write_rows(&mut w, &q, row_bytes, ty.type_size(), factor, &mut buf)
        })?;
    } else {
        let data = cat.data(t);
        if data.len() as u64 != n * row_bytes as u64 {
            return Err(bad_input(format!(
                "{}: {} bytes of data, {n} rows of {row_bytes} bytes expected",
                ctx(),
                data.len()
            )));
        }
        // Groups of rows at a time: never the whole tensor twice in memory.
        let step = (8 << 20) / (factor * row_bytes).max(1) * factor;
        for chunk in data.chunks(step.max(factor) * row_bytes) {
            write_rows(&mut w, chunk, row_bytes, ty.type_size(), factor, &mut buf)
                .with_context(ctx)?;
        }
    }
    let done = w.commit()?;
    Ok(Entry {
        tensor: t.name.clone(),
        role: t.role.as_str().into(),
        shape: t.shape.clone(),
        source_dtype: t.dtype.to_string(),
        file: Some(file.into()),
        precision: ty.to_string(),
        layout: format!("ggml_r{factor}"),
        bytes: done.bytes,
        sha256: done.sha256,
        source_file: None,
        details: Some(details(ty, factor, n, k)),
    })
}
