//! safetensors files (one file, or the shards of a Hugging Face folder).
//!
//! Header validation is the `safetensors` crate's (`read_metadata`: header
//! length within the file, JSON, sorted non-overlapping contiguous spans that
//! end exactly at the file end). This module adds dtype and name checks and
//! turns each tensor into a slice of the map.

use std::path::Path;

use ggml_quants::GgmlType;
use safetensors::Dtype;

use crate::error::{bad_shape, ErrorKind, Result, SourceError};
use crate::mmap::MappedFile;
use crate::names::check_tensor_name;

/// One tensor of a safetensors file.
#[derive(Debug, Clone, PartialEq)]
pub struct StTensorInfo {
    /// Tensor name.
    pub name: String,
    /// Shape, row-major, outermost first.
    pub shape: Vec<u64>,
    /// Element type (F32, F16 or BF16).
    pub dtype: GgmlType,
    /// Absolute byte offset in the file.
    pub offset: u64,
    /// Byte length.
    pub n_bytes: u64,
}

/// A parsed safetensors file.
#[derive(Debug)]
pub struct SafetensorsFile {
    map: MappedFile,
    tensors: Vec<StTensorInfo>,
    metadata: Vec<(String, String)>,
}

impl SafetensorsFile {
    /// Map and parse `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let map = MappedFile::open(path)?;
        let err = |kind| SourceError::new(path, kind);
        let (n, meta) = safetensors::SafeTensors::read_metadata(map.bytes())
            .map_err(|e| err(ErrorKind::Safetensors(e.to_string())))?;
        let base = 8u64 + n as u64;
        let mut tensors = Vec::new();
        for (name, info) in meta.tensors() {
            check_tensor_name(&name).map_err(err)?;
            let dtype = match info.dtype {
                Dtype::F32 => GgmlType::F32,
                Dtype::F16 => GgmlType::F16,
                Dtype::BF16 => GgmlType::BF16,
                other => {
                    return Err(err(ErrorKind::UnsupportedDtype {
                        tensor: name,
                        dtype: format!("{other:?}"),
                    }))
                }
            };
            if info.shape.len() > 4 {
                return Err(err(bad_shape(
                    &name,
                    format!("{} dimensions (at most 4 supported)", info.shape.len()),
                )));
            }
            let (start, end) = info.data_offsets;
            let offset = base + start as u64;
            let n_bytes = (end - start) as u64;
            if offset + n_bytes > map.len() {
                return Err(err(ErrorKind::BadTensorData {
                    tensor: name,
                    problem: format!("data ends beyond the file ({} bytes)", map.len()),
                }));
            }
            tensors.push(StTensorInfo {
                name,
                shape: info.shape.iter().map(|&d| d as u64).collect(),
                dtype,
                offset,
                n_bytes,
            });
        }
        tensors.sort_by_key(|t| t.offset);
        let mut metadata: Vec<(String, String)> = meta
            .metadata()
            .as_ref()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        metadata.sort();
        Ok(SafetensorsFile {
            map,
            tensors,
            metadata,
        })
    }

    /// Tensors in offset order.
    pub fn tensors(&self) -> &[StTensorInfo] {
        &self.tensors
    }

    /// The `__metadata__` string map, sorted by key.
    pub fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    /// The bytes of a tensor (a slice of the map).
    pub fn tensor_data(&self, t: &StTensorInfo) -> &[u8] {
        &self.map.bytes()[t.offset as usize..(t.offset + t.n_bytes) as usize]
    }

    /// The path.
    pub fn path(&self) -> &Path {
        self.map.path()
    }

    /// Give up the map and the tensor list.
    pub fn into_parts(self) -> (MappedFile, Vec<StTensorInfo>) {
        (self.map, self.tensors)
    }
}
