//! CQ4 packed-panel files.

use std::io::Write;

use anyhow::{Context, Result};
use sha256x2::Sha256;

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
        // (Made by the estimate when it read this tensor under the same
        // transform: the same sums.)
        let made = ctx
            .estimate
            .and_then(|e| e.column_sums(&t.name, &job.transform));
        let exps = match made {
            Some(sums) => cq4::awq::input_exponents(sums, importance),
            None => {
                let mut sums = None;
                materialize::rows_deferred(
                    ctx.cat,
                    t,
                    ctx.opts.dtype,
                    SB,
                    job.transform,
                    |_, values, affine| {
                        // (One affine for every chunk of a tensor.)
                        sums.get_or_insert_with(|| materialize::ColumnSumsUnder::new(affine, k))
                            .add(values);
                        Ok(())
                    },
                )?;
                let sums =
                    sums.map_or_else(|| vec![0.0; k], materialize::ColumnSumsUnder::into_sums);
                cq4::awq::input_exponents(&sums, importance)
            }
        };
        scaled_columns = Some((
            exps.iter().filter(|&&e| e != 0).count(),
            from,
            super::importance_sha256(importance),
        ));
        enc = enc
            .with_input_exponents(&exps)
            .with_context(|| ctx.at(job))?;
    }
    let mut gptq = None;
    if let Some(h) = &job.hessian {
        let exps = enc.input_exponents();
        let gq = cq4::gptq::Gptq::new(h.matrix.matrix, k, Some(&exps[..k])).with_context(|| {
            format!(
                "{}: GPTQ with {}",
                ctx.at(job),
                ctx.opts.hessians.as_ref().map_or_else(String::new, |h| h
                    .data
                    .path()
                    .display()
                    .to_string())
            )
        })?;
        enc = enc
            .with_gptq(std::sync::Arc::new(gq))
            .with_context(|| ctx.at(job))?;
        let samples = ctx
            .opts
            .hessians
            .as_ref()
            .and_then(|hs| hs.samples.get(&h.module).copied())
            .unwrap_or(0);
        gptq = Some(serde_json::json!({"module": h.module, "k": k, "samples": samples}));
    }
    let g = enc.geometry();
    let ng = g.num_groups();
    let sbb = g.superblock_bytes();
    // The panels go to the file as each chunk is encoded, after a space
    // left for the header and scales blob, which need every row's norm and
    // are written last: memory holds one chunk's panels and the norms
    // (1/256 of the f32 tensor), never the whole tensor's panels.
    let header = enc.header();
    let layout = weights_file::Layout::of(&header)
        .with_context(|| format!("{}: header regions overflow", ctx.at(job)))?;
    let mut w = ctx.out.create(&job.file)?;
    w.allocate(layout.file_len);
    w.reserve_prefix(layout.data_offset)?;
    // A chunk's panels are written while the next chunk is encoded (the
    // write, a copy into the page cache, would otherwise leave the other
    // threads idle between chunks).
    let mut panels = Vec::new();
    let mut written = Vec::new();
    // The tensor's hash (see `writers::hashes_own_source`): each chunk's
    // source bytes (rows in file order, so the bytes in order) beside its
    // encoding, while the chunk's pages are mapped; `hashed` bytes so far.
    let data = ctx.cat.data(t);
    let mut src_hash = (ctx.hash_source && super::hashes_own_source(job)).then(Sha256::new);
    let mut hashed = 0usize;
    let row_bytes = data.len() / n.max(1);
    let mut norms = vec![0u16; n * ng];
    // F32 sources under an engine transform are mapped super-block by
    // super-block inside the encoder (in cache), not through a chunk buffer.
    materialize::rows_deferred(
        ctx.cat,
        t,
        ctx.opts.dtype,
        SB,
        job.transform,
        |first_row, values, affine| {
            let rows = values.len() / k;
            panels.clear();
            panels.resize(rows.div_ceil(SB) * sbb, 0);
            let norms = &mut norms[first_row * ng..(first_row + rows) * ng];
            // (Chunks come in row order from row 0: `hashed` is where this
            // one starts.)
            let upto = ((first_row + rows) * row_bytes).min(data.len());
            let chunk = &data[hashed..upto];
            hashed = upto;
            let (wrote, encoded) = rayon::join(
                || {
                    if let Some(h) = src_hash.as_mut() {
                        h.update(chunk);
                    }
                    w.write_all(&written)
                },
                || {
                    if affine.is_identity() {
                        enc.encode_superblocks(first_row, values, &mut panels, norms)
                    } else {
                        enc.encode_superblocks_mapped(
                            first_row,
                            values,
                            |src, out| affine.map_into(src, out),
                            &mut panels,
                            norms,
                        )
                    }
                },
            );
            wrote?;
            encoded.with_context(|| ctx.at(job))?;
            std::mem::swap(&mut panels, &mut written);
            Ok(())
        },
    )?;
    if let Some(done) = ctx.parallel_done {
        // The rest (the last chunk's write, the scales blob, the hash read
        // back) is one thread's.
        done.store(true, std::sync::atomic::Ordering::Release);
    }
    w.write_all(&written)?;
    let source_sha256 = src_hash.map(|mut h| {
        // (Bytes past the last whole row, if the rows do not divide them.)
        h.update(&data[hashed..]);
        crate::outdir::hex(&h.finalize())
    });
    let scales = enc.scales_blob(&norms).with_context(|| ctx.at(job))?;
    let done = w.commit_with_prefix(&weights_file::write::prefix(&header, &scales)?)?;
    let mut details = serde_json::json!({
        "family": family_name(family),
        "group_size": cq4::GROUP_SIZE,
        "k_padded": g.k(),
        "num_groups": ng,
        "super_blocks": g.sb64(),
        "seed": bundle.seed(),
    });
    if let Some(g) = gptq {
        details["gptq"] = g;
    }
    if let Some((c, from, sha)) = scaled_columns {
        details["input_scales"] =
            serde_json::json!({"from": from, "scaled_columns": c, "importance_sha256": sha});
    }
    Ok(Entry {
        source_sha256,
        ..Entry::new(
            t,
            Some(&job.file),
            "CQ4",
            "cq4_packed_panels",
            Some(&done),
            Some(details),
        )
    })
}
