//! llama.cpp importance matrices (`llama-imatrix` output), in both formats
//! its quantizer reads, turned into what the quantizer receives: per tensor,
//! the mean of `x^2` of each input column (per expert for MoE weights).
//!
//! - GGUF (the default): keys `imatrix.datasets`, `imatrix.chunk_count`,
//!   `imatrix.chunk_size` (all three required, as llama-quantize does);
//!   per tensor `<name>.in_sum2` (F32, ne `[K, n_mat]`, raw sums) and
//!   `<name>.counts` (F32, ne `[1, n_mat]`); value `sum / lround(count)` in
//!   f32, 1.0 for an expert with count 0.
//! - legacy `.dat`: i32 entry count; per entry an i32 name length, the
//!   name, i32 `ncall`, i32 `nval`, `nval` f32; an optional trailer (i32
//!   chunk count, i32 length, dataset name); value `stored / ncall` in f32.
//!
//! The GGUF form is tried first (by its magic), as llama.cpp's loader does.

use std::collections::BTreeMap;
use std::path::Path;

use ggml_quants::GgmlType;

use crate::error::{ErrorKind, Result, SourceError};
use crate::gguf::{GgufFile, Value, GGUF_MAGIC};
use crate::mmap::MappedFile;

/// Which of the two formats a file was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImatrixFormat {
    /// GGUF (`llama-imatrix` default).
    Gguf,
    /// Legacy `.dat` (`--output-format dat`).
    Dat,
}

/// One tensor's importance: `n_mat` vectors of `k` values, back to back.
#[derive(Debug, Clone, PartialEq)]
pub struct ImatrixEntry {
    /// Values per matrix (the weight's row length).
    pub k: usize,
    /// Matrices (experts; 1 for a 2-D weight).
    pub n_mat: usize,
    /// `n_mat * k` mean squares, as llama-quantize hands them to ggml.
    pub values: Vec<f32>,
}

/// A parsed importance matrix file.
#[derive(Debug, Clone)]
pub struct Imatrix {
    /// The format it was in.
    pub format: ImatrixFormat,
    /// Entries by GGUF tensor name.
    pub entries: BTreeMap<String, ImatrixEntry>,
    /// Calibration datasets it names.
    pub datasets: Vec<String>,
    /// Chunks it was computed on (0 when the file does not say).
    pub chunk_count: u64,
}

fn bad(path: &Path, why: impl Into<String>) -> SourceError {
    SourceError::new(path, ErrorKind::BadImatrix(why.into()))
}

/// At most this many values in one file (real ones have a few million).
pub const MAX_VALUES: u64 = 1 << 28;

/// Read `path` (GGUF or legacy `.dat`).
pub fn read(path: &Path) -> Result<Imatrix> {
    let map = MappedFile::open(path)?;
    let magic = map
        .bytes()
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    if magic == Some(GGUF_MAGIC) {
        return read_gguf(path, GgufFile::parse(map)?);
    }
    read_dat(path, map.bytes())
}

fn read_gguf(path: &Path, f: GgufFile) -> Result<Imatrix> {
    let meta = |k: &str| f.metadata().iter().find(|(n, _)| n == k).map(|(_, v)| v);
    for key in [
        "imatrix.datasets",
        "imatrix.chunk_count",
        "imatrix.chunk_size",
    ] {
        if meta(key).is_none() {
            return Err(bad(
                path,
                format!("GGUF without the key {key} (not written by llama-imatrix?)"),
            ));
        }
    }
    let datasets = match meta("imatrix.datasets") {
        Some(Value::Array(_, items)) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => return Err(bad(path, "imatrix.datasets is not an array of strings")),
    };
    let chunk_count = meta("imatrix.chunk_count")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let mut entries = BTreeMap::new();
    let mut total = 0u64;
    for t in f.tensors() {
        let Some(name) = t.name.strip_suffix(".in_sum2") else {
            if !t.name.ends_with(".counts") {
                return Err(bad(
                    path,
                    format!(
                        "tensor '{}' is neither <name>.in_sum2 nor <name>.counts",
                        t.name
                    ),
                ));
            }
            continue;
        };
        let counts_name = format!("{name}.counts");
        let c = f
            .tensor(&counts_name)
            .ok_or_else(|| bad(path, format!("'{}' has no '{counts_name}'", t.name)))?;
        if t.ggml_type != GgmlType::F32 || c.ggml_type != GgmlType::F32 {
            return Err(bad(
                path,
                format!("'{name}': in_sum2 and counts must be F32"),
            ));
        }
        let k = *t.dims.first().unwrap_or(&0);
        let n_mat: u64 = t.dims.iter().skip(1).product();
        let nc: u64 = c.dims.iter().product();
        if k == 0 || n_mat == 0 || nc != n_mat || c.dims.first() != Some(&1) {
            return Err(bad(
                path,
                format!(
                    "'{name}': in_sum2 dims {:?} and counts dims {:?} do not agree",
                    t.dims, c.dims
                ),
            ));
        }
        total = total.saturating_add(k.saturating_mul(n_mat));
        if total > MAX_VALUES {
            return Err(bad(path, format!("more than {MAX_VALUES} values")));
        }
        let sums = f32s(f.tensor_data(t));
        let counts = f32s(f.tensor_data(c));
        let (k, n_mat) = (k as usize, n_mat as usize);
        let mut values = Vec::with_capacity(k * n_mat);
        for (e, &cnt) in counts.iter().enumerate() {
            if !(cnt.is_finite() && cnt >= 0.0) {
                return Err(bad(path, format!("'{name}': count {cnt} of matrix {e}")));
            }
            // C's lround: half away from zero.
            let n = cnt.round();
            for &s in &sums[e * k..(e + 1) * k] {
                values.push(if n == 0.0 { 1.0 } else { s / n });
            }
        }
        check_values(path, name, &values)?;
        entries.insert(name.to_string(), ImatrixEntry { k, n_mat, values });
    }
    Ok(Imatrix {
        format: ImatrixFormat::Gguf,
        entries,
        datasets,
        chunk_count,
    })
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn check_values(path: &Path, name: &str, v: &[f32]) -> Result<()> {
    match v.iter().position(|x| !(x.is_finite() && *x >= 0.0)) {
        None => Ok(()),
        Some(i) => Err(bad(
            path,
            format!("'{name}': value {i} is {} (must be finite and >= 0)", v[i]),
        )),
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize, what: &str) -> std::result::Result<&[u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| {
                format!(
                    "truncated: {what} needs {n} bytes at offset {}, file has {}",
                    self.pos,
                    self.b.len()
                )
            })?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn i32(&mut self, what: &str) -> std::result::Result<i32, String> {
        let s = self.take(4, what)?;
        Ok(i32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    /// A non-negative i32 count no larger than `max`.
    fn count(&mut self, what: &str, max: u64) -> std::result::Result<usize, String> {
        let v = self.i32(what)?;
        if v < 0 || v as u64 > max {
            return Err(format!("{what} is {v}"));
        }
        Ok(v as usize)
    }
}

fn read_dat(path: &Path, b: &[u8]) -> Result<Imatrix> {
    let mut c = Cursor { b, pos: 0 };
    let parse = |c: &mut Cursor| -> std::result::Result<Imatrix, String> {
        let n = c.count("entry count", b.len() as u64 / 12)?;
        let mut entries = BTreeMap::new();
        for _ in 0..n {
            let len = c.count("name length", 4096)?;
            let name = std::str::from_utf8(c.take(len, "name")?)
                .map_err(|_| "a name is not UTF-8".to_string())?
                .to_string();
            let ncall = c.i32(&format!("'{name}' ncall"))?;
            if ncall <= 0 {
                return Err(format!("'{name}': ncall is {ncall}"));
            }
            let nval = c.count(&format!("'{name}' value count"), MAX_VALUES)?;
            if nval == 0 {
                return Err(format!("'{name}': no values"));
            }
            let raw = f32s(c.take(nval * 4, &format!("'{name}' values"))?);
            let values: Vec<f32> = raw.iter().map(|&v| v / ncall as f32).collect();
            if entries.contains_key(&name) {
                return Err(format!("'{name}' twice"));
            }
            // .dat does not store K and n_mat apart: the tensor's shape
            // decides (see `for_tensor`).
            entries.insert(
                name,
                ImatrixEntry {
                    k: nval,
                    n_mat: 1,
                    values,
                },
            );
        }
        let mut datasets = Vec::new();
        let mut chunk_count = 0;
        if c.pos < b.len() {
            chunk_count = c.count("chunk count", u32::MAX as u64)? as u64;
            let len = c.count("dataset name length", 1 << 20)?;
            let d = c.take(len, "dataset name")?;
            datasets.push(String::from_utf8_lossy(d).into_owned());
            if c.pos != b.len() {
                return Err(format!("{} bytes after the trailer", b.len() - c.pos));
            }
        }
        Ok(Imatrix {
            format: ImatrixFormat::Dat,
            entries,
            datasets,
            chunk_count,
        })
    };
    let m = parse(&mut c).map_err(|why| {
        bad(
            path,
            format!("neither a GGUF nor a legacy .dat importance matrix: {why}"),
        )
    })?;
    for (name, e) in &m.entries {
        check_values(path, name, &e.values)?;
    }
    Ok(m)
}

impl Imatrix {
    /// The importance of tensor `name` with rows of `k` values and `n_mat`
    /// matrices, as llama-quantize looks it up (exact name). `Ok(None)`
    /// when the file has no entry (the tensor is then quantized without
    /// one); an error when the entry's size is not `k * n_mat`.
    pub fn for_tensor(
        &self,
        name: &str,
        k: usize,
        n_mat: usize,
    ) -> std::result::Result<Option<&[f32]>, String> {
        let Some(e) = self.entries.get(name) else {
            return Ok(None);
        };
        if Some(e.values.len()) != k.checked_mul(n_mat) {
            return Err(format!(
                "its importance matrix entry has {} values, the tensor needs {k} x {n_mat}",
                e.values.len()
            ));
        }
        Ok(Some(&e.values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dat(entries: &[(&str, i32, &[f32])], trailer: Option<(i32, &str)>) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&(entries.len() as i32).to_le_bytes());
        for (name, ncall, vals) in entries {
            b.extend_from_slice(&(name.len() as i32).to_le_bytes());
            b.extend_from_slice(name.as_bytes());
            b.extend_from_slice(&ncall.to_le_bytes());
            b.extend_from_slice(&(vals.len() as i32).to_le_bytes());
            for v in *vals {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        if let Some((chunks, name)) = trailer {
            b.extend_from_slice(&chunks.to_le_bytes());
            b.extend_from_slice(&(name.len() as i32).to_le_bytes());
            b.extend_from_slice(name.as_bytes());
        }
        b
    }

    fn parse(bytes: &[u8]) -> Result<Imatrix> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.dat");
        std::fs::write(&p, bytes).unwrap();
        read(&p)
    }

    #[test]
    fn legacy_values_are_divided_by_ncall() {
        let m = parse(&dat(
            &[("blk.0.ffn_up.weight", 4, &[8.0, 2.0, 0.0])],
            Some((10, "wiki.txt")),
        ))
        .unwrap();
        assert_eq!(m.format, ImatrixFormat::Dat);
        assert_eq!(m.entries["blk.0.ffn_up.weight"].values, [2.0, 0.5, 0.0]);
        assert_eq!(
            (m.chunk_count, m.datasets.as_slice()),
            (10, &["wiki.txt".to_string()][..])
        );
        assert_eq!(
            m.for_tensor("blk.0.ffn_up.weight", 3, 1).unwrap().unwrap(),
            &[2.0, 0.5, 0.0]
        );
        assert!(m.for_tensor("blk.0.ffn_up.weight", 4, 1).is_err());
        assert!(m.for_tensor("blk.1.ffn_up.weight", 3, 1).unwrap().is_none());
    }

    #[test]
    fn hostile_legacy_files_are_errors() {
        for b in [
            vec![],
            dat(&[("x", 0, &[1.0])], None),
            dat(&[("x", 1, &[-1.0])], None),
            dat(&[("x", 1, &[f32::NAN])], None),
            dat(&[("x", 1, &[1.0]), ("x", 1, &[1.0])], None),
            {
                let mut b = dat(&[("x", 1, &[1.0])], None);
                b.truncate(b.len() - 1);
                b
            },
            (i32::MAX).to_le_bytes().to_vec(),
            {
                let mut b = dat(&[("x", 1, &[1.0])], Some((1, "d")));
                b.push(0);
                b
            },
        ] {
            let e = parse(&b).unwrap_err();
            assert!(e.is_bad_input(), "{e}");
        }
    }
}
