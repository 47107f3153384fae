//! CQ4 packed-panel files.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use ggml_quants::TorchDtype;
use model_sources::{Catalogue, Tensor};

use crate::convert::{family_name, for_each_chunk_aligned};
use crate::manifest::Entry;
use crate::output::HashedFile;

/// Rows per super-block of the panel layout.
const SB: usize = 64;

/// Quantize one tensor and write its `.cq4p.weights` file.
#[allow(clippy::too_many_arguments)]
pub fn write_panels(
    cat: &Catalogue,
    t: &Tensor,
    family: cq4::Family,
    bundle: &cq4::Bundle,
    seed: u64,
    dtype: TorchDtype,
    path: &Path,
    file: &str,
) -> Result<Entry> {
    let ctx = || format!("tensor '{}' in {}", t.name, cat.file_of(t).display());
    let (n, k) = (t.shape[0] as usize, t.shape[1] as usize);
    let enc = bundle.encoder(family, n, k).with_context(ctx)?;
    let g = enc.geometry();
    let ng = g.num_groups();
    let sbb = g.superblock_bytes();
    // Panels are 1/8 of the f32 tensor; they are kept until the scales blob
    // (which needs every norm) has been written before them.
    let mut panels = vec![0u8; g.data_bytes()];
    let mut norms = vec![0u16; n * ng];
    for_each_chunk_aligned(cat, t, dtype, SB, |first_row, values| {
        let rows = values.len() / k;
        let sb0 = first_row / SB;
        let nsb = rows.div_ceil(SB);
        enc.encode_superblocks(
            first_row,
            values,
            &mut panels[sb0 * sbb..(sb0 + nsb) * sbb],
            &mut norms[first_row * ng..(first_row + rows) * ng],
        )
        .with_context(ctx)
    })?;
    let header = enc.header();
    let scales = enc.scales_blob(&norms).with_context(ctx)?;
    let mut w = HashedFile::create(path)?;
    w.write_all(&weights_file::write::prefix(&header, &scales)?)
        .and_then(|()| w.write_all(&panels))
        .with_context(|| format!("cannot write {}", path.display()))?;
    let done = w.commit()?;
    Ok(Entry {
        tensor: t.name.clone(),
        role: t.role.as_str().into(),
        shape: t.shape.clone(),
        source_dtype: t.dtype.to_string(),
        file: Some(file.into()),
        precision: "CQ4".into(),
        layout: "cq4_packed_panels".into(),
        bytes: done.bytes,
        sha256: done.sha256,
        source_file: None,
        details: Some(serde_json::json!({
            "family": family_name(family),
            "group_size": cq4::GROUP_SIZE,
            "k_padded": g.k(),
            "num_groups": ng,
            "super_blocks": g.sb64(),
            "seed": seed,
        })),
    })
}
