//! CQ4 packed-panel files.

use std::io::Write;

use anyhow::{Context, Result};

use super::Ctx;
use crate::manifest::Entry;
use crate::materialize;
use crate::plan::{family_name, Job};

/// Rows per super-block of the panel layout.
const SB: usize = weights_file::panel::SUPER_BLOCK;

/// Quantize one tensor and write its `.cq4p.weights` file.
pub fn write(ctx: &Ctx, job: &Job, family: cq4::Family, bundle: &cq4::Bundle) -> Result<Entry> {
    let t = job.tensor;
    let (n, k) = (t.shape[0] as usize, t.shape[1] as usize);
    let mut enc = bundle.encoder(family, n, k).with_context(|| ctx.at(job))?;
    let mut scaled_columns = None;
    if let Some((importance, from)) = super::importance(ctx, job) {
        // AWQ input scales need every row's column sums first: one more
        // pass over the source.
        let mut sums = cq4::awq::ColumnSums::new(k);
        materialize::rows(
            ctx.cat,
            t,
            ctx.opts.dtype,
            SB,
            job.transform,
            |_, values| {
                sums.add_rows(values);
                Ok(())
            },
        )?;
        let exps = cq4::awq::input_exponents(sums.sums(), importance);
        scaled_columns = Some((
            exps.iter().filter(|&&e| e != 0).count(),
            from,
            super::importance_sha256(importance),
        ));
        enc = enc
            .with_input_exponents(&exps)
            .with_context(|| ctx.at(job))?;
    }
    let g = enc.geometry();
    let ng = g.num_groups();
    let sbb = g.superblock_bytes();
    // Panels are 1/8 of the f32 tensor; they are kept until the scales blob
    // (which needs every norm) has been written before them.
    let mut panels = vec![0u8; g.data_bytes()];
    let mut norms = vec![0u16; n * ng];
    materialize::rows(
        ctx.cat,
        t,
        ctx.opts.dtype,
        SB,
        job.transform,
        |first_row, values| {
            let rows = values.len() / k;
            let sb0 = first_row / SB;
            let nsb = rows.div_ceil(SB);
            enc.encode_superblocks(
                first_row,
                values,
                &mut panels[sb0 * sbb..(sb0 + nsb) * sbb],
                &mut norms[first_row * ng..(first_row + rows) * ng],
            )
            .with_context(|| ctx.at(job))
        },
    )?;
    let header = enc.header();
    let scales = enc.scales_blob(&norms).with_context(|| ctx.at(job))?;
    let mut w = ctx.out.create(&job.file)?;
    w.write_all(&weights_file::write::prefix(&header, &scales)?)?;
    w.write_all(&panels)?;
    let done = w.commit()?;
    let mut details = serde_json::json!({
        "family": family_name(family),
        "group_size": cq4::GROUP_SIZE,
        "k_padded": g.k(),
        "num_groups": ng,
        "super_blocks": g.sb64(),
        "seed": bundle.seed(),
    });
    if let Some((c, from, sha)) = scaled_columns {
        details["input_scales"] =
            serde_json::json!({"from": from, "scaled_columns": c, "importance_sha256": sha});
    }
    Ok(Entry::new(
        t,
        Some(&job.file),
        "CQ4",
        "cq4_packed_panels",
        Some(&done),
        Some(details),
    ))
}
