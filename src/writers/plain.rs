//! Plain FP16 / FP32 files and raw (copied) files.

use std::io::Write;

use anyhow::{Context, Result};
use ggml_quants::{GgmlType, RawType};
use weights_file::{Header, Precision};

use super::Ctx;
use crate::manifest::Entry;
use crate::materialize;
use crate::outdir::Written;
use crate::plan::Job;

/// True when every value of `v` survives fp16 conversion without becoming inf.
fn fits_fp16(v: &[f32]) -> bool {
    v.iter().all(|x| !x.is_finite() || x.abs() < 65520.0)
}

/// The stored shape (a 0-D tensor is `[1]`).
fn shape_of(shape: &[u64]) -> Vec<u64> {
    if shape.is_empty() {
        vec![1]
    } else {
        shape.to_vec()
    }
}

/// Row-major FP16, or FP32 when some value does not fit fp16.
pub fn write_plain(ctx: &Ctx, job: &Job) -> Result<Entry> {
    let t = job.tensor;
    let dtype = ctx.opts.dtype;
    // Pass 1: does everything fit fp16? (An fp16 source always does.)
    let mut fp16 = true;
    if t.dtype != GgmlType::F16.into() || !job.transform.is_none() {
        materialize::values(ctx.cat, t, dtype, job.transform, |v| {
            fp16 &= fits_fp16(v);
            Ok(())
        })?;
    }
    let (precision, es) = if fp16 {
        (Precision::Fp16, 2)
    } else {
        (Precision::Fp32, 4)
    };
    let header = Header::plain(precision, &shape_of(&t.shape), t.n_elements() * es);
    let mut w = ctx.out.create(&job.file)?;
    w.write_all(&weights_file::write::prefix(&header, &[])?)?;
    let mut bytes = Vec::new();
    materialize::values(ctx.cat, t, dtype, job.transform, |v| {
        bytes.clear();
        if fp16 {
            bytes.extend(v.iter().flat_map(|x| half::f16::from_f32(*x).to_le_bytes()));
        } else {
            bytes.extend(v.iter().flat_map(|x| x.to_le_bytes()));
        }
        Ok(w.write_all(&bytes)?)
    })?;
    let done = w.commit()?;
    Ok(row_major_entry(job, precision.name(), &done))
}

/// The source bytes as they are, in a raw container of their element type.
pub fn write_raw(ctx: &Ctx, job: &Job, ty: RawType) -> Result<Entry> {
    let t = job.tensor;
    let header = Header::raw(ty, &shape_of(&t.shape))
        .with_context(|| format!("{}: {ty} size overflows", ctx.at(job)))?;
    let mut w = ctx.out.create(&job.file)?;
    w.write_all(&weights_file::write::prefix(&header, &[])?)?;
    for chunk in ctx.cat.data(t).chunks(8 << 20) {
        w.write_all(chunk)?;
    }
    let done = w.commit()?;
    Ok(row_major_entry(job, ty.name(), &done))
}

/// The manifest entry of a row-major file of `precision` written for `job`.
fn row_major_entry(job: &Job, precision: impl Into<String>, done: &Written) -> Entry {
    Entry::new(
        job.tensor,
        Some(&job.file),
        precision,
        "row_major",
        Some(done),
        None,
    )
}
