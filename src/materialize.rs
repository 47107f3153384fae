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
    f: impl FnMut(usize, &[f32]) -> Result<()>,
) -> Result<()> {
    let ncols = t.ncols() as usize;
    let nrows = t.nrows() as usize;
    let row_bytes = cat.data(t).len().checked_div(nrows).unwrap_or(0);
    let per_chunk = (CHUNK_BYTES / (ncols.max(1) as u64 * 4)).max(1) as usize;
    let per = (per_chunk / align).max(1) * align;
    let units = Units {
        count: nrows,
        bytes: row_bytes,
        values: ncols,
        per,
        decode_width: |_| ncols,
    };
    stream(cat, t, dtype, units, f)
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
    let units = Units {
        count: cat.data(t).len() / ty.type_size(),
        bytes: ty.type_size(),
        values: bs,
        per: ((CHUNK_BYTES / 4) as usize / bs).max(1),
        decode_width: |n| n * bs,
    };
    stream(cat, t, dtype, units, |_, v| f(v))
}

/// How a tensor is cut for [`stream`]: `count` units (rows or blocks) of
/// `bytes` source bytes and `values` values, `per` units a chunk, decoded
/// as rows of `decode_width(units)` values.
struct Units<W: Fn(usize) -> usize> {
    count: usize,
    bytes: usize,
    values: usize,
    per: usize,
    decode_width: W,
}

fn stream<W: Fn(usize) -> usize>(
    cat: &Catalogue,
    t: &Tensor,
    dtype: TorchDtype,
    u: Units<W>,
    mut f: impl FnMut(usize, &[f32]) -> Result<()>,
) -> Result<()> {
    let ty = ggml_of(cat, t)?;
    let data = cat.data(t);
    let mut buf = vec![0f32; u.per.min(u.count) * u.values];
    let mut stats = MaterializeStats::default();
    let mut i = 0;
    while i < u.count {
        let n = u.per.min(u.count - i);
        let out = &mut buf[..n * u.values];
        let src = &data[i * u.bytes..(i + n) * u.bytes];
        let s = ggml_quants::materialize_rows(ty, src, (u.decode_width)(n), dtype, out)
            .with_context(|| at(cat, t))?;
        stats.merge(&s, (i * u.values) as u64);
        if stats.is_clean() {
            f(i, out)?;
        }
        i += n;
    }
    check_stats(cat, t, &stats)
}
