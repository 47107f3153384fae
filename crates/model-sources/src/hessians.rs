//! The engine's calibration Hessians (`hessians.safetensors`, written by its
//! converter's calibration step or by `scripts/hessians`): per matmul, its
//! module path (`model.layers.0.mlp.down_proj`, `/` written as `__`) holds
//! the F32 `[K, K]` matrix `H = sum x x^T / n` of the module's inputs, and
//! `<key>.diag` its F32 `[K]` diagonal. The file is mapped, not read: a
//! tensor's bytes are handed out on demand.
//!
//! Read, then validate: the safetensors header through
//! [`crate::safetensors_file::parse`], then every entry's dtype and shape
//! and every `.diag`'s pairing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ggml_quants::{Dtype, GgmlType};

use crate::error::{ErrorKind, Result, SourceError};
use crate::mmap::MappedFile;

/// One module's Hessian.
#[derive(Debug, Clone, Copy)]
pub struct HessianRef<'a> {
    /// Input columns.
    pub k: usize,
    /// `k x k` f32, little-endian, row-major (any alignment).
    pub matrix: &'a [u8],
    /// Its `.diag` entry (`k` f32, little-endian), when the file has one.
    pub diag: Option<&'a [u8]>,
}

impl HessianRef<'_> {
    /// The importance of each input column (mean of `x^2`): the `.diag`
    /// entry when there is one, else the matrix's diagonal.
    pub fn diagonal(&self) -> Vec<f32> {
        let f = |b: &[u8], i: usize| {
            f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
        };
        match self.diag {
            Some(d) => (0..self.k).map(|i| f(d, i)).collect(),
            None => (0..self.k)
                .map(|i| f(self.matrix, i * self.k + i))
                .collect(),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Span {
    offset: usize,
    k: usize,
    diag: Option<usize>,
}

/// A mapped, validated Hessian file.
#[derive(Debug)]
pub struct Hessians {
    file: MappedFile,
    entries: BTreeMap<String, Span>,
}

fn bad(path: &Path, why: impl Into<String>) -> SourceError {
    SourceError::new(path, ErrorKind::BadHessians(why.into()))
}

impl Hessians {
    /// Map and validate `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let file = MappedFile::open(path)?;
        let header = crate::safetensors_file::parse(file.bytes())
            .map_err(|kind| SourceError::new(path, kind))?;
        let mut mats = BTreeMap::new();
        let mut diags = BTreeMap::new();
        for t in &header.tensors {
            if t.dtype != Dtype::Ggml(GgmlType::F32) {
                return Err(bad(
                    path,
                    format!("tensor '{}' is {:?}, not F32", t.name, t.dtype),
                ));
            }
            let offset = usize::try_from(t.offset)
                .map_err(|_| bad(path, format!("tensor '{}': offset too large", t.name)))?;
            match (t.name.strip_suffix(".diag"), t.shape.as_slice()) {
                (Some(key), &[k]) => {
                    diags.insert(key.to_string(), (offset, k as usize));
                }
                (None, &[a, b]) if a == b && a > 0 => {
                    mats.insert(t.name.replace("__", "/"), (offset, a as usize));
                }
                _ => {
                    return Err(bad(
                        path,
                        format!(
                            "tensor '{}' has shape {:?}: a Hessian is [K, K] (K > 0) and its '.diag' [K]",
                            t.name, t.shape
                        ),
                    ))
                }
            }
        }
        let mut entries = BTreeMap::new();
        for (name, (offset, k)) in mats {
            let diag = match diags.remove(&name.replace('/', "__")) {
                Some((o, dk)) if dk == k => Some(o),
                Some((_, dk)) => {
                    return Err(bad(
                        path,
                        format!("'{name}.diag' has {dk} values, its matrix is {k} x {k}"),
                    ))
                }
                None => None,
            };
            entries.insert(name, Span { offset, k, diag });
        }
        if let Some(orphan) = diags.keys().next() {
            return Err(bad(
                path,
                format!("'{orphan}.diag' has no matrix '{orphan}'"),
            ));
        }
        if entries.is_empty() {
            return Err(bad(path, "no Hessian in the file"));
        }
        Ok(Hessians { file, entries })
    }

    /// The module path's Hessian (`model.layers.0.mlp.down_proj`).
    pub fn get(&self, module: &str) -> Option<HessianRef<'_>> {
        let s = self.entries.get(module)?;
        let b = self.file.bytes();
        Some(HessianRef {
            k: s.k,
            matrix: &b[s.offset..s.offset + 4 * s.k * s.k],
            diag: s.diag.map(|o| &b[o..o + 4 * s.k]),
        })
    }

    /// Module paths, sorted.
    pub fn modules(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Never true for an opened file (an empty one is refused).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The file.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// The whole file's bytes (for its sha256).
    pub fn bytes(&self) -> &[u8] {
        self.file.bytes()
    }
}

/// The metadata file the engine writes beside the Hessians
/// (`hessian_metadata.json`), if present.
pub fn metadata_path(hessians: &Path) -> Option<PathBuf> {
    let p = hessians.with_file_name("hessian_metadata.json");
    p.is_file().then_some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, entries: &[(&str, Vec<usize>)]) -> PathBuf {
        let mut header = serde_json::Map::new();
        let mut data = Vec::new();
        for (name, shape) in entries {
            let n: usize = shape.iter().product();
            let start = data.len();
            for i in 0..n {
                data.extend_from_slice(&(i as f32).to_le_bytes());
            }
            header.insert(
                name.to_string(),
                serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [start, data.len()]}),
            );
        }
        let text = serde_json::Value::Object(header).to_string();
        let mut b = (text.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(text.as_bytes());
        b.extend_from_slice(&data);
        let p = dir.join("hessians.safetensors");
        std::fs::write(&p, b).unwrap();
        p
    }

    #[test]
    fn reads_matrices_and_diagonals() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            &[
                ("model.layers.0.mlp.down_proj", vec![3, 3]),
                ("model.layers.0.mlp.down_proj.diag", vec![3]),
                ("model__layers__1__mlp__up_proj", vec![2, 2]),
            ],
        );
        let h = Hessians::open(&p).unwrap();
        assert_eq!(h.len(), 2);
        let a = h.get("model.layers.0.mlp.down_proj").unwrap();
        assert_eq!((a.k, a.matrix.len()), (3, 36));
        assert_eq!(a.diagonal(), vec![0.0, 1.0, 2.0]);
        let b = h.get("model/layers/1/mlp/up_proj").unwrap();
        assert_eq!(b.diagonal(), vec![0.0, 3.0]);
        assert!(h.get("model.layers.0.mlp.up_proj").is_none());
    }

    #[test]
    fn refuses_what_is_not_a_hessian_file() {
        let d = tempfile::tempdir().unwrap();
        for (entries, says) in [
            (vec![("a", vec![2, 3])], "shape [2, 3]"),
            (vec![("a", vec![2, 2]), ("a.diag", vec![3])], "has 3 values"),
            (
                vec![("a", vec![2, 2]), ("b.diag", vec![2])],
                "has no matrix",
            ),
            (vec![("a.diag", vec![2])], "has no matrix"),
        ] {
            let p = write(d.path(), &entries);
            let e = Hessians::open(&p).unwrap_err().to_string();
            assert!(
                e.contains(says) && e.contains("hessians.safetensors"),
                "{e}"
            );
        }
        let p = d.path().join("hessians.safetensors");
        std::fs::write(&p, b"\x05\0\0\0\0\0\0\0{}").unwrap();
        assert!(Hessians::open(&p).is_err());
    }
}
