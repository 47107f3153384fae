//! GGUF v2 / v3 reader over a memory map.
//!
//! The header, metadata and tensor infos are parsed into owned values (they
//! are small); tensor data is never copied: [`GgufFile::tensor_data`] returns a
//! slice of the map. Every count, length, offset and size read from the file
//! is checked against the bytes that remain, so a hostile file gives an
//! error, never a panic or a huge allocation.

use std::collections::HashSet;
use std::path::Path;

use ggml_quants::GgmlType;

use crate::error::{bad_shape, ErrorKind, Result, SourceError};
use crate::mmap::MappedFile;
use crate::names::check_tensor_name;

/// `"GGUF"` read as a little-endian u32.
pub const GGUF_MAGIC: u32 = 0x4655_4747;
/// Alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml tensors have at most this many dimensions.
pub const MAX_DIMS: usize = 4;
/// Arrays nested deeper than this are rejected.
pub const MAX_ARRAY_DEPTH: usize = 8;
/// At most this many metadata array elements in a file (all arrays
/// together). Each element costs 32 bytes in memory, and a string one more
/// heap block, however few bytes it takes in the file (9 for a one-byte
/// string), so this bounds the memory a header can claim to about 0.5 GB
/// (at 16M, 151 MB of one-byte strings made the reader hold 1.05 GB).
/// Real vocabularies (tokens, scores, merges) have well under a million.
pub const MAX_METADATA_ELEMENTS: u64 = 1 << 23;
/// At most this many metadata key/value pairs. A pair costs about 150
/// bytes in memory (its key is also kept in the duplicate-key set) for 13
/// in the file: unbounded, 200 MB of 10M pairs made the reader hold 1.6 GB.
/// Real files have a few dozen.
pub const MAX_METADATA_KEYS: u64 = 1 << 16;

/// A metadata value type id (`gguf_type`).
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// Bytes of one scalar of this type (strings and arrays: their minimum).
    fn min_size(self) -> u64 {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 => 8,
            String => 8,
            Array => 12,
        }
    }

    /// The type gguf-py names `name` ([`ValueType::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        (0..=12)
            .filter_map(ValueType::from_id)
            .find(|t| t.name() == name)
    }

    /// The type's id in the file.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The name gguf-py uses.
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "UINT8",
            I8 => "INT8",
            U16 => "UINT16",
            I16 => "INT16",
            U32 => "UINT32",
            I32 => "INT32",
            F32 => "FLOAT32",
            Bool => "BOOL",
            String => "STRING",
            Array => "ARRAY",
            U64 => "UINT64",
            I64 => "INT64",
            F64 => "FLOAT64",
        }
    }
}

/// One metadata value.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    /// Element type and elements (which may themselves be arrays).
    Array(ValueType, Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    /// The GGUF value type of this value.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(..) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// The value as an unsigned integer, if it is one of the integer types and fits.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as JSON (for the manifest and `inspect`). Non-finite floats become strings.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        let float = |f: f64| {
            serde_json::Number::from_f64(f)
                .map(J::Number)
                .unwrap_or_else(|| J::String(f.to_string()))
        };
        match self {
            Value::U8(v) => (*v).into(),
            Value::I8(v) => (*v).into(),
            Value::U16(v) => (*v).into(),
            Value::I16(v) => (*v).into(),
            Value::U32(v) => (*v).into(),
            Value::I32(v) => (*v).into(),
            Value::U64(v) => (*v).into(),
            Value::I64(v) => (*v).into(),
            Value::F32(v) => float(f64::from(*v)),
            Value::F64(v) => float(*v),
            Value::Bool(v) => (*v).into(),
            Value::String(s) => J::String(s.clone()),
            Value::Array(_, items) => J::Array(items.iter().map(Value::to_json).collect()),
        }
    }
}

impl Value {
    /// gguf-py's name of the value's type (`ARRAY[STRING]` for arrays):
    /// the `type` of an entry of a bundle's `gguf_metadata.json`.
    pub fn type_name(&self) -> String {
        match self {
            Value::Array(t, _) => format!("ARRAY[{}]", t.name()),
            v => v.value_type().name().into(),
        }
    }

    /// The inverse of [`Value::type_name`] plus [`Value::to_json`]: the value
    /// of type `type_name` whose JSON is `json`. `None` when they do not
    /// match (a number out of its type's range, a non-integer for an integer
    /// type, nested arrays, whose inner element types the JSON does not keep).
    pub fn from_typed_json(type_name: &str, json: &serde_json::Value) -> Option<Value> {
        if let Some(inner) = type_name
            .strip_prefix("ARRAY[")
            .and_then(|t| t.strip_suffix(']'))
        {
            let t = ValueType::from_name(inner)?;
            if t == ValueType::Array {
                return None;
            }
            let items = json
                .as_array()?
                .iter()
                .map(|j| Value::scalar_from_json(t, j))
                .collect::<Option<Vec<_>>>()?;
            return Some(Value::Array(t, items));
        }
        Value::scalar_from_json(ValueType::from_name(type_name)?, json)
    }

    fn scalar_from_json(t: ValueType, j: &serde_json::Value) -> Option<Value> {
        let int = || j.as_i64().map(i128::from).or(j.as_u64().map(i128::from));
        let float = || match j {
            serde_json::Value::String(s) => s.parse::<f64>().ok(),
            _ => j.as_f64(),
        };
        Some(match t {
            ValueType::U8 => Value::U8(int()?.try_into().ok()?),
            ValueType::I8 => Value::I8(int()?.try_into().ok()?),
            ValueType::U16 => Value::U16(int()?.try_into().ok()?),
            ValueType::I16 => Value::I16(int()?.try_into().ok()?),
            ValueType::U32 => Value::U32(int()?.try_into().ok()?),
            ValueType::I32 => Value::I32(int()?.try_into().ok()?),
            ValueType::U64 => Value::U64(int()?.try_into().ok()?),
            ValueType::I64 => Value::I64(int()?.try_into().ok()?),
            // f32 -> f64 -> shortest decimal -> f64 -> f32 is exact.
            ValueType::F32 => Value::F32(float()? as f32),
            ValueType::F64 => Value::F64(float()?),
            ValueType::Bool => Value::Bool(j.as_bool()?),
            ValueType::String => Value::String(j.as_str()?.to_owned()),
            ValueType::Array => return None,
        })
    }
}

/// One tensor info from the header.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufTensorInfo {
    /// Tensor name.
    pub name: String,
    /// Dimensions in GGUF (`ne`) order: `dims[0]` is the row length.
    pub dims: Vec<u64>,
    /// Element type.
    pub ggml_type: GgmlType,
    /// Offset relative to the start of the data section.
    pub offset: u64,
    /// Bytes of tensor data (checked against the file).
    pub n_bytes: u64,
}

impl GgufTensorInfo {
    /// Shape in row-major order, outermost first (the reverse of `dims`).
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }

    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A parsed GGUF file.
#[derive(Debug)]
pub struct GgufFile {
    map: MappedFile,
    version: u32,
    metadata: Vec<(String, Value)>,
    tensors: Vec<GgufTensorInfo>,
    alignment: u64,
    data_offset: u64,
}

impl GgufFile {
    /// Map and parse `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let map = MappedFile::open(path)?;
        Self::parse(map)
    }

    /// Parse an already mapped file.
    pub fn parse(map: MappedFile) -> Result<Self> {
        let header = parse(map.bytes()).map_err(|kind| SourceError::new(map.path(), kind))?;
        Ok(GgufFile {
            map,
            version: header.version,
            metadata: header.metadata,
            tensors: header.tensors,
            alignment: header.alignment,
            data_offset: header.data_offset,
        })
    }

    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The path it was read from.
    pub fn path(&self) -> &Path {
        self.map.path()
    }

    /// File size in bytes.
    pub fn file_len(&self) -> u64 {
        self.map.len()
    }

    /// Metadata key/value pairs in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// A metadata value by exact key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    /// A tensor info by name.
    pub fn tensor(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Alignment of the data section and of every tensor offset.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// The bytes of a tensor: a slice of the map, never a copy. Bounds were
    /// checked when the file was opened.
    pub fn tensor_data(&self, info: &GgufTensorInfo) -> &[u8] {
        let start = (self.data_offset + info.offset) as usize;
        &self.map.bytes()[start..start + info.n_bytes as usize]
    }

    /// The underlying map.
    pub fn mapped(&self) -> &MappedFile {
        &self.map
    }

    /// Give the map back (for a catalogue that keeps it).
    pub fn into_parts(self) -> (MappedFile, Vec<(String, Value)>, Vec<GgufTensorInfo>, u64) {
        (self.map, self.metadata, self.tensors, self.data_offset)
    }
}

/// Everything a GGUF file says before its data section.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufHeader {
    /// 2 or 3.
    pub version: u32,
    /// Key/values in file order.
    pub metadata: Vec<(String, Value)>,
    /// Tensor infos in file order.
    pub tensors: Vec<GgufTensorInfo>,
    /// Alignment of the data section and of every tensor offset.
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Metadata array elements still allowed ([`MAX_METADATA_ELEMENTS`]).
    elements_left: u64,
}

type KResult<T> = std::result::Result<T, ErrorKind>;

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &str) -> KResult<&'a [u8]> {
        if n > self.remaining() {
            return Err(ErrorKind::Truncated {
                what: what.to_string(),
                offset: self.pos as u64,
                needed: n,
                file_len: self.buf.len() as u64,
            });
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> KResult<[u8; N]> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> KResult<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> KResult<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> KResult<String> {
        let at = self.pos as u64;
        let len = self.u64(what)?;
        if len > self.remaining() {
            return Err(ErrorKind::BadString {
                offset: at,
                problem: format!(
                    "{what}: length {len} exceeds the {} bytes left in the file",
                    self.remaining()
                ),
            });
        }
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| ErrorKind::BadString {
            offset: at,
            problem: format!("{what}: not valid UTF-8"),
        })
    }

    /// A count of items each at least `min_size` bytes: it must fit in what remains.
    fn count(&mut self, what: &'static str, min_size: u64) -> KResult<u64> {
        let offset = self.pos as u64;
        let count = self.u64(what)?;
        if count.saturating_mul(min_size) > self.remaining() {
            if count <= self.remaining() {
                // Plausible count, but the file ends too early.
                return Err(ErrorKind::Truncated {
                    what: format!("{count} x {what}"),
                    offset,
                    needed: count.saturating_mul(min_size),
                    file_len: self.buf.len() as u64,
                });
            }
            return Err(ErrorKind::AbsurdCount {
                what,
                count,
                remaining: self.remaining(),
                offset,
            });
        }
        Ok(count)
    }

    fn value(&mut self, key: &str, ty: ValueType, depth: usize) -> KResult<Value> {
        let what = "metadata value";
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(what)?[0]),
            ValueType::I8 => Value::I8(self.array::<1>(what)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(what)?)),
            ValueType::U32 => Value::U32(self.u32(what)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(what)?)),
            ValueType::U64 => Value::U64(self.u64(what)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(what)?)),
            ValueType::Bool => {
                let b = self.array::<1>(what)?[0];
                if b > 1 {
                    return Err(ErrorKind::BadMetadata {
                        key: key.to_string(),
                        problem: format!("bool value {b} is neither 0 nor 1"),
                    });
                }
                Value::Bool(b == 1)
            }
            ValueType::String => Value::String(self.string("metadata string")?),
            ValueType::Array => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(ErrorKind::TooDeep {
                        key: key.to_string(),
                        max: MAX_ARRAY_DEPTH,
                    });
                }
                let id = self.u32("array element type")?;
                let elem = ValueType::from_id(id).ok_or_else(|| ErrorKind::BadValueType {
                    key: key.to_string(),
                    value_type: id,
                })?;
                let n = self.count("metadata array element", elem.min_size())?;
                self.elements_left =
                    self.elements_left
                        .checked_sub(n)
                        .ok_or_else(|| ErrorKind::BadMetadata {
                            key: key.to_string(),
                            problem: format!(
                            "more than {MAX_METADATA_ELEMENTS} metadata array elements in the file"
                        ),
                        })?;
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(self.value(key, elem, depth + 1)?);
                }
                Value::Array(elem, items)
            }
        })
    }
}

fn align_up(x: u64, a: u64) -> Option<u64> {
    x.checked_add(a - 1).map(|v| v / a * a)
}

/// Parse and validate a whole GGUF file's bytes: header, metadata, tensor
/// infos, and that every tensor's data lies in the file without overlaps.
/// Never panics and allocates only what the bytes can back.
pub fn parse(buf: &[u8]) -> KResult<GgufHeader> {
    let mut c = Cursor {
        buf,
        pos: 0,
        elements_left: MAX_METADATA_ELEMENTS,
    };
    let (version, n_tensors, n_kv) = preamble(&mut c)?;
    let metadata = metadata(&mut c, n_kv)?;
    let alignment = alignment_of(&metadata)?;
    let tensors = tensor_infos(&mut c, n_tensors, alignment)?;
    let data_offset = align_up(c.pos as u64, alignment).ok_or(ErrorKind::Truncated {
        what: "data section".into(),
        offset: c.pos as u64,
        needed: alignment,
        file_len: buf.len() as u64,
    })?;
    check_data(&tensors, data_offset, buf.len() as u64)?;
    Ok(GgufHeader {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

/// Magic, version and the two counts.
fn preamble(c: &mut Cursor<'_>) -> KResult<(u32, u64, u64)> {
    let magic = c.u32("GGUF magic")?;
    if magic != GGUF_MAGIC {
        return Err(ErrorKind::BadMagic {
            found: magic,
            expected: GGUF_MAGIC,
        });
    }
    let version = c.u32("GGUF version")?;
    if version != 2 && version != 3 {
        if version.swap_bytes() == 2 || version.swap_bytes() == 3 {
            return Err(ErrorKind::UnknownFormat(
                "big-endian GGUF files are not supported".into(),
            ));
        }
        return Err(ErrorKind::UnsupportedVersion(version));
    }
    // A tensor info needs at least 8 (name len) + 1 + 4 (n_dims) + 8 + 4 + 8 bytes.
    let n_tensors = c.count("tensor", 33)?;
    // A key/value needs at least 8 (key len) + 4 (type) + 1 bytes.
    let n_kv = c.count("metadata key/value", 13)?;
    Ok((version, n_tensors, n_kv))
}

/// The key/value pairs, in file order; keys unique.
fn metadata(c: &mut Cursor<'_>, n_kv: u64) -> KResult<Vec<(String, Value)>> {
    // Before room is reserved for them.
    if n_kv > MAX_METADATA_KEYS {
        return Err(ErrorKind::BadMetadata {
            key: "(all keys)".into(),
            problem: format!("{n_kv} key/value pairs, more than the {MAX_METADATA_KEYS} allowed"),
        });
    }
    let mut metadata: Vec<(String, Value)> = Vec::with_capacity(n_kv as usize);
    let mut keys = HashSet::new();
    for _ in 0..n_kv {
        let key = c.string("metadata key")?;
        let id = c.u32("metadata value type")?;
        let ty = ValueType::from_id(id).ok_or_else(|| ErrorKind::BadValueType {
            key: key.clone(),
            value_type: id,
        })?;
        let value = c.value(&key, ty, 0)?;
        if !keys.insert(key.clone()) {
            return Err(ErrorKind::DuplicateKey(key));
        }
        metadata.push((key, value));
    }
    Ok(metadata)
}

/// `general.alignment` (a power-of-two UINT32) or the default.
fn alignment_of(metadata: &[(String, Value)]) -> KResult<u64> {
    match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => Ok(DEFAULT_ALIGNMENT),
        Some((k, Value::U32(a))) => {
            let a = u64::from(*a);
            if a == 0 || !a.is_power_of_two() {
                return Err(ErrorKind::BadMetadata {
                    key: k.clone(),
                    problem: format!("alignment {a} is not a power of two"),
                });
            }
            Ok(a)
        }
        Some((k, v)) => Err(ErrorKind::BadMetadata {
            key: k.clone(),
            problem: format!("must be UINT32, found {}", v.value_type().name()),
        }),
    }
}

/// The tensor infos: names safe and unique, known types, shapes whose byte
/// size is computable, offsets aligned.
fn tensor_infos(c: &mut Cursor<'_>, n: u64, alignment: u64) -> KResult<Vec<GgufTensorInfo>> {
    let mut tensors: Vec<GgufTensorInfo> = Vec::with_capacity(n as usize);
    let mut names = HashSet::new();
    for _ in 0..n {
        let name = c.string("tensor name")?;
        let n_dims = c.u32("tensor n_dims")? as usize;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(bad_shape(
                &name,
                format!("{n_dims} dimensions (allowed 1..={MAX_DIMS})"),
            ));
        }
        let mut dims = Vec::with_capacity(n_dims);
        for _ in 0..n_dims {
            dims.push(c.u64("tensor dimension")?);
        }
        let type_id = c.u32("tensor type")?;
        let offset = c.u64("tensor offset")?;
        check_tensor_name(&name)?;
        if !names.insert(name.clone()) {
            return Err(ErrorKind::DuplicateTensor(name));
        }
        let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| ErrorKind::UnknownType {
            tensor: name.clone(),
            type_id,
        })?;
        let n_elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| bad_shape(&name, format!("dimensions {dims:?} overflow")))?;
        let row_bytes = ggml_type.row_bytes(dims[0]).ok_or_else(|| {
            bad_shape(
                &name,
                format!(
                    "row length {} is not a multiple of the {} block size {}",
                    dims[0],
                    ggml_type,
                    ggml_type.block_size()
                ),
            )
        })?;
        let rows = n_elements.checked_div(dims[0]).unwrap_or(0);
        let n_bytes = row_bytes
            .checked_mul(rows)
            .ok_or_else(|| bad_shape(&name, format!("size of dimensions {dims:?} overflows")))?;
        if offset % alignment != 0 {
            return Err(ErrorKind::BadTensorData {
                tensor: name,
                problem: format!("offset {offset} is not a multiple of the alignment {alignment}"),
            });
        }
        tensors.push(GgufTensorInfo {
            name,
            dims,
            ggml_type,
            offset,
            n_bytes,
        });
    }
    Ok(tensors)
}

/// Every tensor's bytes lie in the data section and no two share bytes.
fn check_data(tensors: &[GgufTensorInfo], data_offset: u64, file_len: u64) -> KResult<()> {
    if data_offset > file_len && !tensors.is_empty() {
        return Err(ErrorKind::Truncated {
            what: "data section".into(),
            offset: data_offset,
            needed: 0,
            file_len,
        });
    }
    let data_len = file_len.saturating_sub(data_offset);
    for t in tensors {
        match t.offset.checked_add(t.n_bytes) {
            Some(end) if end <= data_len => {}
            _ => {
                return Err(ErrorKind::BadTensorData {
                    tensor: t.name.clone(),
                    problem: format!(
                        "data [{}, +{}) relative to the data section at {} goes beyond the end of the file ({} bytes): truncated or bad offset",
                        t.offset, t.n_bytes, data_offset, file_len
                    ),
                })
            }
        }
    }
    let mut spans: Vec<(u64, u64, &str)> = tensors
        .iter()
        .filter(|t| t.n_bytes > 0)
        .map(|t| (t.offset, t.offset + t.n_bytes, t.name.as_str()))
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(ErrorKind::BadTensorData {
                tensor: w[1].2.to_string(),
                problem: format!("its data overlaps tensor '{}'", w[0].2),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v3 file with no tensors: `a = u8 0`, then `b = [u8; n]`.
    fn two_keys(n: u64) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(GGUF_MAGIC.to_le_bytes());
        b.extend(3u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend(2u64.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.push(b'a');
        b.extend((ValueType::U8 as u32).to_le_bytes());
        b.push(0);
        b.extend(1u64.to_le_bytes());
        b.push(b'b');
        b.extend((ValueType::Array as u32).to_le_bytes());
        b.extend((ValueType::U8 as u32).to_le_bytes());
        b.extend(n.to_le_bytes());
        b.resize(b.len() + n as usize, 0);
        b
    }

    #[test]
    fn metadata_bounds() {
        assert_eq!(parse(&two_keys(3)).unwrap().metadata.len(), 2);
        let e = parse(&two_keys(MAX_METADATA_ELEMENTS + 1)).unwrap_err();
        assert!(e.to_string().contains("array elements"), "{e}");
        // MAX + 1 pairs (u8 values, 13 bytes each) are refused up front.
        let mut b = two_keys(0);
        let n = MAX_METADATA_KEYS + 1;
        b[16..24].copy_from_slice(&n.to_le_bytes());
        b.resize(24 + 13 * n as usize, 0);
        let e = parse(&b).unwrap_err();
        assert!(e.to_string().contains("key/value pairs"), "{e}");
    }
}
