//! Source tensors as f32 values under the `--torch-dtype` policy, streamed
//! in bounded chunks (memory never depends on the tensor's size).

use anyhow::{Context, Result};
use ggml_quants::{Dtype, MaterializeStats, TorchDtype};
use model_sources::{Catalogue, Tensor};

use crate::failure::bad_input;

/// f32 bytes per chunk (one row more when a single row is larger).
pub const CHUNK_BYTES: u64 = 16 << 20;

fn at(cat: &Catalogue, t: &Tensor) -> String {
    format!("tensor '{}' in {}", t.name, cat.file_of(t).display())
}

/// The ggml type of a tensor that can be materialized.
fn ggml_of(cat: &Catalogue, t: &Tensor) -> Result<ggml_quants::GgmlType> {
    match t.dtype {
        Dtype::Ggml(g) => Ok(g),
        Dtype::Raw(r) => Err(bad_input(format!(
            "{}: {r} values are not floats and cannot be materialized",
            at(cat, t)
        ))),
    }
}

/// Fails naming the tensor when values overflowed fp16 under `float16`.
fn check_stats(cat: &Catalogue, t: &Tensor, stats: &MaterializeStats) -> Result<()> {
    let Some(first) = stats.first_f16_overflow else {
        return Ok(());
    };
    let ncols = t.ncols().max(1);
    Err(bad_input(format!(
        "{}: {} values are beyond the float16 range (first: {} at row {}, column {}); \
         --torch-dtype float16 would turn them into inf: use --torch-dtype bfloat16 or float32",
        at(cat, t),
        stats.f16_overflows,
        first.value,
        first.index / ncols,
        first.index % ncols,
    )))
}

/// Materialize a tensor in chunks of whole rows, a multiple of `align` rows
/// each (but the last), calling `f(first_row, values)`. Stops calling `f`
/// at the first fp16 overflow and fails naming the tensor after scanning
/// it all (so the message counts every such value).
pub fn rows(
    cat: &Catalogue,
    t: &Tensor,
    dtype: TorchDtype,
    align: usize,
    mut f: impl FnMut(usize, &[f32]) -> Result<()>,
) -> Result<()> {
    let ty = ggml_of(cat, t)?;
    let ncols = t.ncols() as usize;
    let nrows = t.nrows() as usize;
    let data = cat.data(t);
    let row_bytes = data.len().checked_div(nrows).unwrap_or(0);
    let per_chunk = (CHUNK_BYTES / (ncols.max(1) as u64 * 4)).max(1) as usize;
    let per = (per_chunk / align).max(1) * align;
    let mut buf = vec![0f32; per.min(nrows) * ncols];
    let mut stats = MaterializeStats::default();
    let mut row = 0;
    while row < nrows {
        let n = per.min(nrows - row);
        let out = &mut buf[..n * ncols];
        let src = &data[row * row_bytes..(row + n) * row_bytes];
        let s = ggml_quants::materialize_rows(ty, src, ncols, dtype, out)
            .with_context(|| at(cat, t))?;
        stats.merge(&s, (row * ncols) as u64);
        if stats.is_clean() {
            f(row, out)?;
        }
        row += n;
    }
    check_stats(cat, t, &stats)
}

/// Materialize a tensor as a flat sequence of values in spans of whole
/// blocks (row boundaries do not matter), calling `f(values)` in order.
pub fn values(
    cat: &Catalogue,
    t: &Tensor,
    dtype: TorchDtype,
    mut f: impl FnMut(&[f32]) -> Result<()>,
) -> Result<()> {
    let ty = ggml_of(cat, t)?;
    let bs = ty.block_size();
    let block_bytes = ty.type_size();
    let data = cat.data(t);
    let blocks = data.len() / block_bytes;
    let per = ((CHUNK_BYTES / 4) as usize / bs).max(1);
    let mut buf = vec![0f32; per.min(blocks) * bs];
    let mut stats = MaterializeStats::default();
    let mut b = 0;
    while b < blocks {
        let n = per.min(blocks - b);
        let out = &mut buf[..n * bs];
        let src = &data[b * block_bytes..(b + n) * block_bytes];
        let s = ggml_quants::materialize_rows(ty, src, n * bs, dtype, out)
            .with_context(|| at(cat, t))?;
        stats.merge(&s, (b * bs) as u64);
        if stats.is_clean() {
            f(out)?;
        }
        b += n;
    }
    check_stats(cat, t, &stats)
}
