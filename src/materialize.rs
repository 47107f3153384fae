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

    /// `Some(e)` when the map is `v -> v * (+-2^e)`, `e != 0` (no
    /// additions): Gemma's `x16` and `/16`.
    pub fn pow2_exponent(&self) -> Option<i32> {
        let m = self.mul.abs();
        let plain = self.add == 0.0 && self.then == 0.0 && m != 1.0;
        (plain && m.is_normal() && m.to_bits() & 0x7F_FFFF == 0)
            .then(|| ((m.to_bits() >> 23) & 0xFF) as i32 - 127)
    }

    /// Whether the map carries every value of `rows` exactly: the identity
    /// does; a power-of-two scaling where each image is exact (see
    /// [`ColumnSumsUnder`]); any other map is not claimed to.
    pub fn carries_exactly(&self, rows: &[f32]) -> bool {
        match self.pow2_exponent() {
            Some(e) => cq4::simd::pow2_scaling_is_exact(e, rows),
            None => self.is_identity(),
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

/// AWQ column sums of rows under an [`Affine`] map, bit for bit those of
/// `ColumnSums::add_rows_mapped` with [`Affine::map_into`] (the identity:
/// `add_rows`), chunk after chunk.
///
/// A map `v -> v * 2^e` ([`Affine::pow2_exponent`]) is exact on every
/// finite value whose image is neither out of f32's range nor a subnormal
/// that lost bits, and a non-finite value stays one. On rows where it is
/// exact, every term `f64(2^e v)^2` is `4^e f64(v)^2` and every f64 sum of
/// such terms is `4^e` times the sum of the unmapped terms (a power-of-two
/// scaling commutes with each rounding; the sums of squares of f32 values
/// stay far inside f64's normal range), so those rows are summed as they
/// are, without a mapped copy, and the sums scaled by `4^e` when taken; at
/// the first chunk with a value the map does not carry exactly, the sums so
/// far are scaled (exactly) and that chunk and the rest are summed mapped.
pub struct ColumnSumsUnder {
    map: Affine,
    sums: cq4::awq::ColumnSums,
    /// `4^e` while the sums hold the unmapped rows' sums.
    owed: Option<f64>,
}

impl ColumnSumsUnder {
    /// Zero sums for rows of `k` values under `map`.
    pub fn new(map: Affine, k: usize) -> Self {
        ColumnSumsUnder {
            map,
            sums: cq4::awq::ColumnSums::new(k),
            owed: map.pow2_exponent().map(|e| 4f64.powi(e)),
        }
    }

    /// Add whole rows (a partial row at the end is ignored).
    pub fn add(&mut self, rows: &[f32]) {
        if self.map.is_identity() {
            return self.sums.add_rows(rows);
        }
        if let Some(owed) = self.owed {
            if self.map.carries_exactly(rows) {
                return self.sums.add_rows(rows);
            }
            self.sums.scale(owed);
            self.owed = None;
        }
        let map = self.map;
        self.sums
            .add_rows_mapped(rows, |src, out| map.map_into(src, out));
    }

    /// The sums.
    pub fn into_sums(self) -> Vec<f64> {
        let mut sums = self.sums;
        if let Some(owed) = self.owed {
            sums.scale(owed);
        }
        sums.into_sums()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn affine(mul: f32) -> Affine {
        Affine {
            add: 0.0,
            mul,
            then: 0.0,
        }
    }

    /// The map's sums, the reference way: every value mapped, then summed.
    fn mapped_sums(map: Affine, k: usize, chunks: &[Vec<f32>]) -> Vec<f64> {
        let mut s = cq4::awq::ColumnSums::new(k);
        for c in chunks {
            s.add_rows_mapped(c, |src, out| map.map_into(src, out));
        }
        s.into_sums()
    }

    #[test]
    fn pow2_exponent_only_for_plain_power_of_two_scalings() {
        assert_eq!(affine(16.0).pow2_exponent(), Some(4));
        assert_eq!(affine(1.0 / 16.0).pow2_exponent(), Some(-4));
        assert_eq!(affine(-16.0).pow2_exponent(), Some(4));
        assert_eq!(affine(2f32.powi(-127)).pow2_exponent(), None); // subnormal
        for mul in [1.0, 3.0, 0.0, f32::INFINITY, f32::NAN] {
            assert_eq!(affine(mul).pow2_exponent(), None, "{mul}");
        }
        let shifted = Affine {
            add: 1.0,
            mul: 16.0,
            then: -1.0,
        };
        assert_eq!(shifted.pow2_exponent(), None);
    }

    /// Under every map the sums are those of the mapped values, bit for
    /// bit: on rows the map carries exactly (summed unmapped and scaled),
    /// and after a chunk it does not (a value whose image is a subnormal
    /// that loses bits under /16, or overflows under x16), where the
    /// unmapped sums so far are scaled and the rest summed mapped. A
    /// direct sum of the unmapped rows, scaled, differs there (so the
    /// switch is needed, and tested).
    #[test]
    fn column_sums_under_a_map_are_the_mapped_values_sums() {
        let k = 37;
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut gauss = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 11) as f64 / (1u64 << 53) as f64 - 0.5) as f32 * 0.37
        };
        // Column 5 is 0 but for the odd value, so its sum is that value's
        // square (mapped or not); zeros of both signs elsewhere.
        let mut chunk = |rows: usize| -> Vec<f32> {
            let mut c: Vec<f32> = (0..k * rows).map(|_| gauss()).collect();
            (0..rows).for_each(|r| c[r * k + 5] = 0.0);
            c[k + 3] = 0.0;
            c[2 * k + 1] = -0.0;
            c
        };
        let normal: Vec<Vec<f32>> = (0..3).map(|_| chunk(50)).collect();
        let special: Vec<f32> = chunk(20);
        // A subnormal whose image under /16 drops its low bits; a value
        // that x16 sends past f32::MAX; an f32 subnormal that x16 makes normal.
        let tiny = f32::from_bits(0x0000_0123);
        let big = 3.0e37f32;
        for (mul, odd) in [
            (1.0 / 16.0, Some(tiny)),
            (16.0, Some(big)),
            (16.0, Some(tiny)),
            (-16.0, None),
            (3.0, None),
            (1.0, None),
        ] {
            let map = affine(mul);
            let mut chunks = normal.clone();
            if let Some(v) = odd {
                let mut c = special.clone();
                c[k + 5] = v;
                chunks.insert(1, c);
            }
            let mut under = ColumnSumsUnder::new(map, k);
            for c in &chunks {
                under.add(c);
            }
            let got = under.into_sums();
            let want = mapped_sums(map, k, &chunks);
            let bits = |v: &[f64]| v.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "x{mul} with {odd:?}");
            if let (Some(e), Some(v)) = (map.pow2_exponent(), odd) {
                let exact = cq4::simd::pow2_scaling_is_exact(e, &[v]);
                let mut plain = cq4::awq::ColumnSums::new(k);
                chunks.iter().for_each(|c| plain.add_rows(c));
                plain.scale(4f64.powi(e));
                let scaled = plain.into_sums();
                assert_eq!(bits(&scaled) == bits(&want), exact, "x{mul} with {v:e}");
            }
        }
    }
}
