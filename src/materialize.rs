//! Source tensors as f32 values under the `--torch-dtype` policy, streamed
//! in bounded chunks (memory never depends on the tensor's size).

use anyhow::{Context, Result};
use ggml_quants::{Dtype, MaterializeStats, TorchDtype};
use model_sources::{Catalogue, Tensor};
use rayon::prelude::*;

use crate::failure::bad_input;

/// f32 bytes per chunk (one row more when a single row is larger).
pub const CHUNK_BYTES: u64 = 16 << 20;

/// f32 bytes per piece of a chunk decoded on one thread.
const PIECE_BYTES: usize = 1 << 20;

/// A value transform `v -> ((v + add) * mul) + then`, in f32, in that
/// order (steps that are the identity are skipped).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Affine {
    /// Added first.
    pub add: f32,
    /// Then multiplied.
    pub mul: f32,
    /// Then added.
    pub then: f32,
}

impl Affine {
    /// The identity.
    pub const IDENTITY: Affine = Affine {
        add: 0.0,
        mul: 1.0,
        then: 0.0,
    };

    /// True for the identity.
    pub fn is_identity(&self) -> bool {
        *self == Self::IDENTITY
    }

    /// Apply to one value.
    #[inline]
    pub fn apply(&self, v: f32) -> f32 {
        let mut x = v;
        if self.add != 0.0 {
            x += self.add;
        }
        if self.mul != 1.0 {
            x *= self.mul;
        }
        if self.then != 0.0 {
            x += self.then;
        }
        x
    }

    /// Append [`Affine::apply`] of every value of `src` to `out` (one pass,
    /// the fields in registers: the loop vectorizes).
    pub fn map_into(&self, src: &[f32], out: &mut Vec<f32>) {
        let a = *self;
        out.extend(src.iter().map(|&v| a.apply(v)));
    }

    /// Add `rows` under this map to AWQ column sums (mapped a few rows at a
    /// time in cache; the identity adds them as they are).
    pub fn add_column_sums(&self, sums: &mut cq4::awq::ColumnSums, rows: &[f32]) {
        if self.is_identity() {
            sums.add_rows(rows);
        } else {
            sums.add_rows_mapped(rows, |src, out| self.map_into(src, out));
        }
    }

    /// The inverse of [`Affine::apply`]: `((v - then) / mul) - add`, the
    /// same steps skipped. Exact when `mul` is a power of two and `add` and
    /// `then` are zero; otherwise within an ulp or two of the value that
    /// went in.
    #[inline]
    pub fn unapply(&self, v: f32) -> f32 {
        let mut x = v;
        if self.then != 0.0 {
            x -= self.then;
        }
        if self.mul != 1.0 {
            x /= self.mul;
        }
        if self.add != 0.0 {
            x -= self.add;
        }
        x
    }
}

/// What happens to a tensor's values on the way from the source: rows
/// taken in another order (llama.cpp's q/k permutation undone), then an
/// [`Affine`] on every value (llama.cpp's offsets undone, the engine's
/// transforms), after the dtype policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transform {
    /// Output row `r` is source row `unpermuted_source_row(r, rows, heads)`.
    pub unpermute_heads: Option<usize>,
    /// Applied to every value.
    pub values: Affine,
}

impl Transform {
    /// Nothing.
    pub const NONE: Transform = Transform {
        unpermute_heads: None,
        values: Affine::IDENTITY,
    };

    /// True when values pass unchanged.
    pub fn is_none(&self) -> bool {
        *self == Self::NONE
    }
}

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
    tf: Transform,
    mut f: impl FnMut(usize, &[f32]) -> Result<()>,
) -> Result<()> {
    rows_with(cat, t, dtype, align, tf, false, |i, v, _| f(i, v))
}

/// [`rows`], except that where the values are F32 read in place from the
/// mapped source (an F32 tensor under the float32 policy, rows in source
/// order) the transform's affine is **not** applied: `f(first_row, values,
/// affine)` gets the source values and the affine still to apply, value by
/// value with [`Affine::apply`] ([`Affine::IDENTITY`] where it was applied,
/// as in [`rows`]). The caller applies it where it uses the values, a few
/// rows at a time in cache, instead of through a chunk buffer of
/// [`CHUNK_BYTES`] written and then read back from memory.
pub fn rows_deferred(
    cat: &Catalogue,
    t: &Tensor,
    dtype: TorchDtype,
    align: usize,
    tf: Transform,
    f: impl FnMut(usize, &[f32], Affine) -> Result<()>,
) -> Result<()> {
    rows_with(cat, t, dtype, align, tf, true, f)
}

fn rows_with(
    cat: &Catalogue,
    t: &Tensor,
    dtype: TorchDtype,
    align: usize,
    tf: Transform,
    defer: bool,
    f: impl FnMut(usize, &[f32], Affine) -> Result<()>,
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
    let source_row = match tf.unpermute_heads {
        None => None,
        Some(heads) => {
            // Every output row must have a source row.
            if model_sources::hf::unpermuted_source_row(0, nrows as u64, heads as u64).is_none() {
                return Err(bad_input(format!(
                    "{}: {nrows} rows cannot be un-permuted in {heads} heads (llama.cpp's q/k order needs rows = heads x an even head size)",
                    at(cat, t)
                )));
            }
            Some(move |r: usize| {
                model_sources::hf::unpermuted_source_row(r as u64, nrows as u64, heads as u64)
                    .unwrap_or(0) as usize
            })
        }
    };
    stream(cat, t, dtype, units, source_row, tf.values, defer, f)
}

/// Materialize a tensor as a flat sequence of values in spans of whole
/// blocks (row boundaries do not matter), calling `f(values)` in order.
pub fn values(
    cat: &Catalogue,
    t: &Tensor,
    dtype: TorchDtype,
    tf: Transform,
    mut f: impl FnMut(&[f32]) -> Result<()>,
) -> Result<()> {
    if tf.unpermute_heads.is_some() {
        return rows(cat, t, dtype, 1, tf, |_, v| f(v));
    }
    let ty = ggml_of(cat, t)?;
    let bs = ty.block_size();
    let units = Units {
        count: cat.data(t).len() / ty.type_size(),
        bytes: ty.type_size(),
        values: bs,
        per: ((CHUNK_BYTES / 4) as usize / bs).max(1),
        decode_width: |n| n * bs,
    };
    stream(
        cat,
        t,
        dtype,
        units,
        None::<fn(usize) -> usize>,
        tf.values,
        false,
        |_, v, _| f(v),
    )
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

/// Decode `u.count` units in chunks; unit `i` of the output is source unit
/// `source(i)` when given (whole rows moved as bytes), then `affine` on
/// every value; with `defer`, F32 values read in place are handed out
/// without it, with `affine` as the third argument of `f` (see
/// [`rows_deferred`]; otherwise that argument is the identity).
#[allow(clippy::too_many_arguments)]
fn stream<W: Fn(usize) -> usize + Sync>(
    cat: &Catalogue,
    t: &Tensor,
    dtype: TorchDtype,
    u: Units<W>,
    source: Option<impl Fn(usize) -> usize>,
    affine: Affine,
    defer: bool,
    mut f: impl FnMut(usize, &[f32], Affine) -> Result<()>,
) -> Result<()> {
    let ty = ggml_of(cat, t)?;
    let data = cat.data(t);
    // F32 values in source row order under the float32 policy are read
    // straight out of the mapped source (decoding them is a bit-for-bit
    // copy and the policy changes nothing: no overflow to count): handed
    // out without a copy when no affine map applies, else mapped into the
    // chunk buffer in one pass (the same f32 operations, value by value, as
    // decoding and then applying `affine` in place).
    if ty == ggml_quants::GgmlType::F32
        && dtype == TorchDtype::Float32
        && source.is_none()
        && u.bytes == 4 * u.values
    {
        if let Some(all) = model_sources::mmap::f32_le_view(data) {
            let mut buf = Vec::new();
            let mut i = 0;
            while i < u.count {
                let n = u.per.min(u.count - i);
                let vals = all.get(i * u.values..(i + n) * u.values).ok_or_else(|| {
                    bad_input(format!("{}: data shorter than its shape", at(cat, t)))
                })?;
                if affine.is_identity() || defer {
                    f(i, vals, affine)?;
                } else {
                    buf.clear();
                    affine.map_into(vals, &mut buf);
                    f(i, &buf, Affine::IDENTITY)?;
                }
                // Read: the chunk's mapped pages leave the resident set.
                cat.release(t, (i * u.bytes) as u64, ((i + n) * u.bytes) as u64);
                i += n;
            }
            return Ok(());
        }
    }
    let mut buf = vec![0f32; u.per.min(u.count) * u.values];
    let mut gathered = Vec::new();
    let mut stats = MaterializeStats::default();
    let mut i = 0;
    while i < u.count {
        let n = u.per.min(u.count - i);
        let out = &mut buf[..n * u.values];
        let src = match &source {
            None => &data[i * u.bytes..(i + n) * u.bytes],
            Some(map) => {
                gathered.clear();
                for r in i..i + n {
                    let from = map(r);
                    gathered.extend_from_slice(&data[from * u.bytes..(from + 1) * u.bytes]);
                }
                &gathered[..]
            }
        };
        // Decoded in pieces of whole units on rayon's threads (the same
        // values: decoding is unit by unit), their stats merged in order.
        let piece = (PIECE_BYTES / (4 * u.values).max(1)).max(1);
        let pieces: Vec<ggml_quants::MaterializeStats> = src
            .par_chunks(piece * u.bytes)
            .zip(out.par_chunks_mut(piece * u.values))
            .map(|(src, out)| {
                let m = out.len() / u.values;
                ggml_quants::materialize_rows(ty, src, (u.decode_width)(m), dtype, out)
            })
            .collect::<Result<_, _>>()
            .with_context(|| at(cat, t))?;
        for (p, s) in pieces.iter().enumerate() {
            stats.merge(s, ((i + p * piece) * u.values) as u64);
        }
        if stats.is_clean() {
            if !affine.is_identity() {
                out.iter_mut().for_each(|v| *v = affine.apply(*v));
            }
            f(i, out, Affine::IDENTITY)?;
        }
        if source.is_none() {
            // Used: the chunk's mapped pages leave the resident set (after
            // `f`, which may read the chunk's source bytes, e.g. to hash
            // them; the rows of a permuted tensor go when its job ends).
            cat.release(t, (i * u.bytes) as u64, ((i + n) * u.bytes) as u64);
        }
        i += n;
    }
    check_stats(cat, t, &stats)
}
