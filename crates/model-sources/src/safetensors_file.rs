//! safetensors files (one file, or the shards of a Hugging Face folder).
//!
//! Read, then validate, in named steps, each error naming the tensor it is
//! about: [`header_text`] (length prefix and UTF-8), [`tensor_infos`] (the
//! JSON entries: dtype, shape, offsets, name), [`check_spans`] (the data
//! region is covered exactly, in order, without holes or overlaps). The
//! `safetensors` crate's own validation (`read_metadata`) then runs as a
//! second opinion; it never accepts what these steps reject, and if it
//! rejects something they accept its message is passed on.

use std::path::Path;

use ggml_quants::{Dtype, GgmlType, RawType};
use serde_json::Value as Json;

use crate::error::{bad_shape, ErrorKind, Result, SourceError};
use crate::mmap::MappedFile;
use crate::names::check_tensor_name;

/// Largest JSON header accepted (the `safetensors` crate's limit).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;
/// safetensors tensors may have up to this many dimensions here (the
/// container's extended shape).
pub const MAX_DIMS: usize = 8;

/// One tensor of a safetensors file.
#[derive(Debug, Clone, PartialEq)]
pub struct StTensorInfo {
    /// Tensor name.
    pub name: String,
    /// Shape, row-major, outermost first.
    pub shape: Vec<u64>,
    /// Element type.
    pub dtype: Dtype,
    /// Absolute byte offset in the file.
    pub offset: u64,
    /// Byte length.
    pub n_bytes: u64,
}

/// The parsed header of a safetensors file.
#[derive(Debug, Clone, PartialEq)]
pub struct StHeader {
    /// Tensors in offset order.
    pub tensors: Vec<StTensorInfo>,
    /// `__metadata__`, sorted by key.
    pub metadata: Vec<(String, String)>,
    /// Absolute offset of the data region (`8 + header length`).
    pub data_offset: u64,
}

/// Most JSON values a header (or a folder's config / index) may hold.
///
/// A parsed value takes 32 bytes or more (an array's growth up to twice
/// that) while `0,` takes 2 bytes of text, so without a bound a 100 MB
/// header of `[0,0,0,...]` made `serde_json` hold over 3 GB before any
/// check could see it (3.6 GB peak RSS). Real headers hold about a dozen
/// values per tensor: 2M values allow 170k tensors in one file and bound
/// what a header can make the reader hold to about 0.5 GB (its worst case,
/// 1M `__metadata__` strings).
pub const MAX_JSON_VALUES: u64 = 1 << 21;

/// An upper bound on the number of values in the JSON `text` (valid or
/// not), without parsing it: every value but the first follows a `[`, `,`
/// or `:` outside a string.
pub fn json_value_bound(text: &str) -> u64 {
    let (mut n, mut in_string, mut escaped) = (1u64, false, false);
    for &b in text.as_bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'[' | b',' | b':' => n += 1,
                _ => {}
            }
        }
    }
    n
}

/// Parse and validate the whole file `bytes` (header and data extent).
pub fn parse(bytes: &[u8]) -> std::result::Result<StHeader, ErrorKind> {
    let (data_offset, text) = header_text(bytes)?;
    let values = json_value_bound(text);
    if values > MAX_JSON_VALUES {
        return Err(ErrorKind::BadHeader(format!(
            "header has up to {values} JSON values, more than the {MAX_JSON_VALUES} allowed"
        )));
    }
    let json: serde_json::Map<String, Json> = serde_json::from_str(text)
        .map_err(|e| ErrorKind::BadHeader(format!("header is not a JSON object: {e}")))?;
    let (mut tensors, metadata) = tensor_infos(&json)?;
    let data_len = bytes.len() as u64 - data_offset;
    check_spans(&mut tensors, data_len)?;
    for t in &mut tensors {
        t.offset += data_offset;
    }
    // Second opinion from the reference implementation.
    safetensors::SafeTensors::read_metadata(bytes)
        .map_err(|e| ErrorKind::Safetensors(e.to_string()))?;
    Ok(StHeader {
        tensors,
        metadata,
        data_offset,
    })
}

/// Step 1: the u64 length prefix and the UTF-8 header it delimits.
/// Returns (data offset, header text).
pub fn header_text(bytes: &[u8]) -> std::result::Result<(u64, &str), ErrorKind> {
    let len = bytes.len() as u64;
    let Some(prefix) = bytes.first_chunk::<8>() else {
        return Err(ErrorKind::Truncated {
            what: "safetensors header length".into(),
            offset: 0,
            needed: 8,
            file_len: len,
        });
    };
    let n = u64::from_le_bytes(*prefix);
    if n > MAX_HEADER_BYTES {
        return Err(ErrorKind::BadHeader(format!(
            "header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit"
        )));
    }
    if n > len - 8 {
        return Err(ErrorKind::Truncated {
            what: "safetensors JSON header".into(),
            offset: 8,
            needed: n,
            file_len: len,
        });
    }
    let text = std::str::from_utf8(&bytes[8..8 + n as usize])
        .map_err(|e| ErrorKind::BadHeader(format!("header is not UTF-8: {e}")))?;
    Ok((8 + n, text))
}

fn dtype_of(name: &str, s: &str) -> std::result::Result<Dtype, ErrorKind> {
    Ok(match s {
        "F32" => Dtype::Ggml(GgmlType::F32),
        "F16" => Dtype::Ggml(GgmlType::F16),
        "BF16" => Dtype::Ggml(GgmlType::BF16),
        other => {
            Dtype::Raw(
                RawType::from_name(other).ok_or_else(|| ErrorKind::UnsupportedDtype {
                    tensor: name.to_string(),
                    dtype: other.to_string(),
                })?,
            )
        }
    })
}

/// Bytes of `elements` values of `dtype`.
fn dtype_bytes(dtype: Dtype, elements: u64) -> Option<u64> {
    match dtype {
        Dtype::Ggml(t) => elements.checked_mul(t.type_size() as u64),
        Dtype::Raw(r) => r.bytes_of(elements),
    }
}

/// Step 2: every entry of the JSON header. Offsets are relative to the data
/// region; sizes agree with dtype and shape.
#[allow(clippy::type_complexity)]
pub fn tensor_infos(
    json: &serde_json::Map<String, Json>,
) -> std::result::Result<(Vec<StTensorInfo>, Vec<(String, String)>), ErrorKind> {
    let mut tensors = Vec::with_capacity(json.len());
    let mut metadata = Vec::new();
    for (name, v) in json {
        if name == "__metadata__" {
            let obj = v.as_object().ok_or_else(|| {
                ErrorKind::BadHeader("__metadata__ is not an object of strings".into())
            })?;
            for (k, v) in obj {
                let s = v.as_str().ok_or_else(|| {
                    ErrorKind::BadHeader(format!("__metadata__ key '{k}' is not a string"))
                })?;
                metadata.push((k.clone(), s.to_string()));
            }
            continue;
        }
        check_tensor_name(name)?;
        let bad = |p: String| ErrorKind::BadTensorData {
            tensor: name.clone(),
            problem: p,
        };
        let obj = v
            .as_object()
            .ok_or_else(|| bad("its header entry is not an object".into()))?;
        let dtype = obj
            .get("dtype")
            .and_then(Json::as_str)
            .ok_or_else(|| bad("no \"dtype\" string".into()))?;
        let dtype = dtype_of(name, dtype)?;
        let shape = obj
            .get("shape")
            .and_then(Json::as_array)
            .ok_or_else(|| bad("no \"shape\" array".into()))?;
        if shape.len() > MAX_DIMS {
            return Err(bad_shape(
                name,
                format!("{} dimensions (at most {MAX_DIMS})", shape.len()),
            ));
        }
        let shape: Vec<u64> = shape
            .iter()
            .map(|d| {
                d.as_u64().ok_or_else(|| {
                    bad_shape(name, format!("dimension {d} is not an unsigned integer"))
                })
            })
            .collect::<std::result::Result<_, _>>()?;
        let offsets = obj
            .get("data_offsets")
            .and_then(Json::as_array)
            .filter(|a| a.len() == 2)
            .ok_or_else(|| bad("no \"data_offsets\" pair".into()))?;
        let (Some(start), Some(end)) = (offsets[0].as_u64(), offsets[1].as_u64()) else {
            return Err(bad("data_offsets are not unsigned integers".into()));
        };
        if end < start {
            return Err(bad(format!(
                "data_offsets [{start}, {end}] end before they start"
            )));
        }
        let elements = shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .ok_or_else(|| bad_shape(name, format!("dimensions {shape:?} overflow")))?;
        let want = dtype_bytes(dtype, elements).ok_or_else(|| {
            bad_shape(
                name,
                format!("{elements} {dtype} values do not fill whole bytes or overflow"),
            )
        })?;
        if end - start != want {
            return Err(bad(format!(
                "data_offsets [{start}, {end}] span {} bytes, shape {shape:?} of {dtype} needs {want}",
                end - start
            )));
        }
        tensors.push(StTensorInfo {
            name: name.clone(),
            shape,
            dtype,
            offset: start,
            n_bytes: want,
        });
    }
    metadata.sort();
    Ok((tensors, metadata))
}

/// Step 3: sorted by offset, the spans tile `[0, data_len)` exactly.
pub fn check_spans(
    tensors: &mut [StTensorInfo],
    data_len: u64,
) -> std::result::Result<(), ErrorKind> {
    tensors.sort_by_key(|t| (t.offset, t.n_bytes));
    let mut end = 0u64;
    for t in tensors.iter() {
        if t.offset != end {
            let problem = if t.offset < end {
                format!(
                    "its data at {} overlaps the tensor before it (which ends at {end})",
                    t.offset
                )
            } else {
                format!(
                    "a hole of {} bytes precedes its data at {}",
                    t.offset - end,
                    t.offset
                )
            };
            return Err(ErrorKind::BadTensorData {
                tensor: t.name.clone(),
                problem,
            });
        }
        end = t.offset + t.n_bytes;
        if end > data_len {
            return Err(ErrorKind::BadTensorData {
                tensor: t.name.clone(),
                problem: format!(
                    "data ends at {end}, beyond the {data_len}-byte data region (truncated file?)"
                ),
            });
        }
    }
    if end != data_len {
        return Err(ErrorKind::BadHeader(format!(
            "the tensors cover {end} bytes of the {data_len}-byte data region (trailing bytes)"
        )));
    }
    Ok(())
}

/// A parsed safetensors file.
#[derive(Debug)]
pub struct SafetensorsFile {
    map: MappedFile,
    header: StHeader,
}

impl SafetensorsFile {
    /// Map and parse `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let map = MappedFile::open(path)?;
        let header = parse(map.bytes()).map_err(|kind| SourceError::new(path, kind))?;
        Ok(SafetensorsFile { map, header })
    }

    /// Tensors in offset order.
    pub fn tensors(&self) -> &[StTensorInfo] {
        &self.header.tensors
    }

    /// The `__metadata__` string map, sorted by key.
    pub fn metadata(&self) -> &[(String, String)] {
        &self.header.metadata
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
        (self.map, self.header.tensors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str, data: usize) -> Vec<u8> {
        let mut b = (header.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(header.as_bytes());
        b.resize(b.len() + data, 0);
        b
    }

    fn err(header: &str, data: usize) -> String {
        parse(&file(header, data)).unwrap_err().to_string()
    }

    #[test]
    fn every_dtype_and_zero_size_tensors() {
        let h = r#"{"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},"b":{"dtype":"BOOL","shape":[3],"data_offsets":[16,19]},"c":{"dtype":"F32","shape":[0,5],"data_offsets":[19,19]},"d":{"dtype":"F4","shape":[2],"data_offsets":[19,20]}}"#;
        let p = parse(&file(h, 20)).unwrap();
        let names: Vec<&str> = p.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        assert_eq!(p.tensors[0].dtype, Dtype::Raw(RawType::I64));
        assert_eq!(p.tensors[0].offset, 8 + h.len() as u64);
    }

    #[test]
    fn json_values_are_bounded_before_parsing() {
        // object, array, 1, 2, "x,[:\"]": 5 values, bound 6 (a member separator
        // counts too).
        assert_eq!(json_value_bound(r#"{"a":[1,2],"b":"x,[:\"]"}"#), 6);
        // Not found by fuzzing (inputs there are at most 64 KB): a header
        // of 2M + 1 zeros took over 16x its size in memory once parsed.
        let zeros = vec!["0"; MAX_JSON_VALUES as usize].join(",");
        let h = format!(r#"{{"a":{{"dtype":"U8","shape":[{zeros}],"data_offsets":[0,0]}}}}"#);
        let e = err(&h, 0);
        assert!(e.contains("JSON values"), "{e}");
    }

    #[test]
    fn errors_name_the_tensor() {
        let cases: [(&str, usize, &[&str]); 7] = [
            (
                r#"{"w":{"dtype":"Q9","shape":[2],"data_offsets":[0,2]}}"#,
                2,
                &["'w'", "Q9"],
            ),
            (
                r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#,
                4,
                &["'w'", "needs 8"],
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}"#,
                6,
                &["'b'", "overlaps"],
            ),
            (
                r#"{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#,
                2,
                &["'w'", "beyond"],
            ),
            (
                r#"{"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,4]}}"#,
                4,
                &["'w'"],
            ),
            (
                r#"{"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}"#,
                2,
                &["'w'", "whole bytes"],
            ),
            (
                r#"{"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#,
                3,
                &["trailing"],
            ),
        ];
        for (header, data, needles) in cases {
            let e = err(header, data);
            for n in needles {
                assert!(e.contains(n), "{n:?} in {e}");
            }
        }
        assert!(err("[1]", 0).contains("not a JSON object"));
    }
}
