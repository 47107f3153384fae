//! One tensor list for every source format.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ggml_quants::Dtype;
use serde_json::Value as Json;

use crate::error::{ErrorKind, Result, SourceError};
use crate::gguf::{GgufFile, Value, GGUF_MAGIC};
use crate::mmap::{io_kind, read_regular, MappedFile};
use crate::roles::{role_of, tied_embeddings, Role};
use crate::safetensors_file::SafetensorsFile;

/// Files of a Hugging Face folder that belong in an output bundle besides the weights.
pub const HF_AUX_FILES: &[&str] = &[
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "preprocessor_config.json",
];

/// The kind of source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceKind {
    /// A GGUF file.
    Gguf {
        /// 2 or 3.
        version: u32,
        /// Data alignment.
        alignment: u64,
    },
    /// One safetensors file.
    Safetensors,
    /// A Hugging Face folder (config.json + one or more safetensors files).
    HfFolder,
}

/// One tensor of the model, wherever it is stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// Name as the source spells it.
    pub name: String,
    /// Shape, row-major, outermost first (`[N, K]` for a matmul weight with N
    /// outputs and K inputs; GGUF's `ne` order reversed).
    pub shape: Vec<u64>,
    /// Source element type.
    pub dtype: Dtype,
    /// What it is for.
    pub role: Role,
    /// Index into [`Catalogue::files`].
    pub file: usize,
    /// Absolute byte offset in that file.
    pub offset: u64,
    /// Byte length.
    pub n_bytes: u64,
}

impl Tensor {
    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Row length (last dimension; 1 for a scalar).
    pub fn ncols(&self) -> u64 {
        self.shape.last().copied().unwrap_or(1)
    }

    /// Number of rows (product of all but the last dimension).
    pub fn nrows(&self) -> u64 {
        if self.shape.len() <= 1 {
            1
        } else {
            self.shape[..self.shape.len() - 1].iter().product()
        }
    }
}

/// The tensors of a model and the files they live in (kept mapped).
#[derive(Debug)]
pub struct Catalogue {
    /// What was opened.
    pub kind: SourceKind,
    /// The path the user gave.
    pub root: PathBuf,
    /// Mapped source files (one for GGUF / safetensors, the shards for a folder).
    pub files: Vec<MappedFile>,
    /// Every tensor, in file order (shards in index order).
    pub tensors: Vec<Tensor>,
    /// GGUF key/values in file order (empty for safetensors).
    pub gguf_metadata: Vec<(String, Value)>,
    /// safetensors `__metadata__` (first file).
    pub st_metadata: Vec<(String, String)>,
    /// The folder's `config.json`.
    pub hf_config: Option<Json>,
    /// Non-weight files of a folder to carry into a bundle (those that exist).
    pub aux_files: Vec<PathBuf>,
    /// Auxiliary files present but not carried, with the reason (a symbolic
    /// link out of the model folder, a FIFO, ...).
    pub skipped_files: Vec<(String, String)>,
    /// `general.architecture` or `config.json` `model_type`.
    pub architecture: Option<String>,
    /// Output projection tied to the token embedding.
    pub tied_embeddings: bool,
}

impl Catalogue {
    /// Open a GGUF file, a safetensors file or a Hugging Face folder.
    pub fn open(path: &Path) -> Result<Self> {
        let meta = std::fs::metadata(path).map_err(|e| SourceError::new(path, io_kind(e)))?;
        if meta.is_dir() {
            return open_hf_folder(path);
        }
        let map = MappedFile::open(path)?;
        let b = map.bytes();
        if b.len() >= 4 && u32::from_le_bytes([b[0], b[1], b[2], b[3]]) == GGUF_MAGIC {
            return Self::from_gguf(GgufFile::parse(map)?);
        }
        let looks_st =
            path.extension().is_some_and(|e| e == "safetensors") || (b.len() >= 9 && b[8] == b'{');
        if looks_st {
            drop(map);
            let st = SafetensorsFile::open(path)?;
            let st_metadata = st.metadata().to_vec();
            let mut cat = Self::from_safetensors(vec![st], path, SourceKind::Safetensors, None)?;
            cat.st_metadata = st_metadata;
            return Ok(cat);
        }
        if b.len() >= 4 && u32::from_be_bytes([b[0], b[1], b[2], b[3]]) == GGUF_MAGIC {
            return Err(SourceError::new(
                path,
                ErrorKind::UnknownFormat("big-endian GGUF files are not supported".into()),
            ));
        }
        Err(SourceError::new(
            path,
            ErrorKind::UnknownFormat(
                "neither GGUF (magic \"GGUF\") nor safetensors; give a .gguf file, a .safetensors file or a Hugging Face folder".into(),
            ),
        ))
    }

    fn from_gguf(g: GgufFile) -> Result<Self> {
        let kind = SourceKind::Gguf {
            version: g.version(),
            alignment: g.alignment(),
        };
        let root = g.path().to_path_buf();
        let architecture = g
            .get("general.architecture")
            .and_then(Value::as_str)
            .map(str::to_string);
        let (map, metadata, infos, data_offset) = g.into_parts();
        let tensors: Vec<Tensor> = infos
            .into_iter()
            .map(|t| {
                let shape = t.shape();
                Tensor {
                    role: role_of(&t.name, &shape),
                    name: t.name,
                    shape,
                    dtype: Dtype::of_ggml(t.ggml_type),
                    file: 0,
                    offset: data_offset + t.offset,
                    n_bytes: t.n_bytes,
                }
            })
            .collect();
        let roles: Vec<Role> = tensors.iter().map(|t| t.role).collect();
        Ok(Catalogue {
            kind,
            root,
            files: vec![map],
            tied_embeddings: tied_embeddings(&roles, None),
            tensors,
            gguf_metadata: metadata,
            st_metadata: Vec::new(),
            hf_config: None,
            aux_files: Vec::new(),
            skipped_files: Vec::new(),
            architecture,
        })
    }

    fn from_safetensors(
        files: Vec<SafetensorsFile>,
        root: &Path,
        kind: SourceKind,
        hf_config: Option<Json>,
    ) -> Result<Self> {
        let mut maps = Vec::new();
        let mut tensors = Vec::new();
        let mut seen: HashMap<String, PathBuf> = HashMap::new();
        for (i, f) in files.into_iter().enumerate() {
            let path = f.path().to_path_buf();
            let (map, infos) = f.into_parts();
            for t in infos {
                if let Some(first) = seen.insert(t.name.clone(), path.clone()) {
                    return Err(SourceError::new(
                        &path,
                        ErrorKind::BadFolder(format!(
                            "duplicate tensor name '{}' (also in {})",
                            t.name,
                            first.display()
                        )),
                    ));
                }
                tensors.push(Tensor {
                    role: role_of(&t.name, &t.shape),
                    name: t.name,
                    shape: t.shape,
                    dtype: t.dtype,
                    file: i,
                    offset: t.offset,
                    n_bytes: t.n_bytes,
                });
            }
            maps.push(map);
        }
        let roles: Vec<Role> = tensors.iter().map(|t| t.role).collect();
        let architecture = hf_config
            .as_ref()
            .and_then(|c| c.get("model_type"))
            .and_then(Json::as_str)
            .map(str::to_string);
        Ok(Catalogue {
            kind,
            root: root.to_path_buf(),
            files: maps,
            tied_embeddings: tied_embeddings(&roles, hf_config.as_ref()),
            tensors,
            gguf_metadata: Vec::new(),
            st_metadata: Vec::new(),
            hf_config,
            aux_files: Vec::new(),
            skipped_files: Vec::new(),
            architecture,
        })
    }

    /// The bytes of a tensor: a slice of its file's map.
    pub fn data(&self, t: &Tensor) -> &[u8] {
        &self.files[t.file].bytes()[t.offset as usize..(t.offset + t.n_bytes) as usize]
    }

    /// [`MappedFile::release`] of bytes `start .. end` of a tensor's data
    /// (clamped to the tensor): pages already read leave the resident set.
    pub fn release(&self, t: &Tensor, start: u64, end: u64) {
        let end = end.min(t.n_bytes);
        if start < end {
            self.files[t.file].release(t.offset + start, end - start);
        }
    }

    /// The path of the file a tensor is in.
    pub fn file_of(&self, t: &Tensor) -> &Path {
        self.files[t.file].path()
    }

    /// A tensor by name.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Total bytes of tensor data.
    pub fn total_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.n_bytes).sum()
    }
}

/// Largest config / index JSON read.
const MAX_JSON_BYTES: u64 = 64 << 20;
/// Largest auxiliary file (tokenizer.json of a 256k vocabulary is ~35 MB).
pub const MAX_AUX_BYTES: u64 = 512 << 20;

fn read_json(path: &Path) -> Result<Json> {
    let bytes = read_regular(path, MAX_JSON_BYTES)?;
    let bad = |m: String| SourceError::new(path, ErrorKind::BadFolder(m));
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| bad(format!("not UTF-8 text ({e}): not a JSON file")))?;
    // Bound the parsed tree before building it (see MAX_JSON_VALUES).
    let values = crate::safetensors_file::json_value_bound(text);
    if values > crate::safetensors_file::MAX_JSON_VALUES {
        return Err(bad(format!(
            "up to {values} JSON values, more than the {} allowed",
            crate::safetensors_file::MAX_JSON_VALUES
        )));
    }
    serde_json::from_str(text).map_err(|e| bad(format!("invalid JSON: {e}")))
}

/// Whether an auxiliary file of `dir` may be carried into a bundle: `None`
/// when it does not exist, `Some(Ok(path))` to carry it, `Some(Err(why))`
/// to skip it. A symbolic link is followed only to a regular file inside
/// the model folder or, for a Hugging Face hub cache snapshot
/// (`<repo>/snapshots/<rev>/`), inside the repository's `blobs/` folder.
fn aux_file(dir: &Path, name: &str) -> Option<std::result::Result<PathBuf, String>> {
    let path = dir.join(name);
    let meta = std::fs::symlink_metadata(&path).ok()?;
    if meta.file_type().is_symlink() {
        let (Ok(target), Ok(root)) = (path.canonicalize(), dir.canonicalize()) else {
            return Some(Err("a symbolic link that does not resolve".into()));
        };
        let in_cache = root
            .parent()
            .filter(|p| p.file_name().is_some_and(|n| n == "snapshots"))
            .and_then(Path::parent)
            .is_some_and(|repo| target.starts_with(repo.join("blobs")));
        if !target.starts_with(&root) && !in_cache {
            return Some(Err(format!(
                "a symbolic link to {} outside the model folder: not copied",
                target.display()
            )));
        }
    }
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => Some(Ok(path)),
        Ok(m) if m.is_dir() => Some(Err("a folder, not a file: not copied".into())),
        Ok(_) => Some(Err(
            "a FIFO, socket or device, not a regular file: not read".into(),
        )),
        Err(e) => Some(Err(format!("cannot be read: {e}"))),
    }
}

/// The shards a sharded index names, opened and checked against it: its
/// `weight_map` (tensor -> shard file name) must be non-empty, name plain
/// files of the folder, and agree exactly with what the shards hold.
fn indexed_shards(dir: &Path, index_path: &Path) -> Result<Vec<SafetensorsFile>> {
    let index = read_json(index_path)?;
    let bad = |m: String| SourceError::new(index_path, ErrorKind::BadFolder(m));
    let map = index
        .get("weight_map")
        .and_then(Json::as_object)
        .ok_or_else(|| bad("no \"weight_map\" object".into()))?;
    if map.is_empty() {
        return Err(bad(
            "the \"weight_map\" is empty: the index lists no tensor".into(),
        ));
    }
    // Shards in order of first appearance, then sorted by name for determinism.
    let mut shards: Vec<String> = Vec::new();
    for (tensor, shard) in map {
        let shard = shard
            .as_str()
            .ok_or_else(|| bad(format!("tensor '{tensor}': shard is not a string")))?;
        if shard.is_empty()
            || shard.contains('/')
            || shard.contains('\\')
            || shard == ".."
            || shard.chars().any(char::is_control)
        {
            return Err(bad(format!(
                "tensor '{tensor}': shard name {shard:?} is not a plain file name"
            )));
        }
        if !shards.iter().any(|s| s == shard) {
            shards.push(shard.to_string());
        }
    }
    shards.sort();
    let files = shards
        .iter()
        .map(|shard| SafetensorsFile::open(&dir.join(shard)))
        .collect::<Result<Vec<_>>>()?;
    // The index and the shards must agree.
    let mut found: HashMap<&str, &str> = HashMap::new();
    for (f, name) in files.iter().zip(&shards) {
        for t in f.tensors() {
            found.insert(t.name.as_str(), name.as_str());
        }
    }
    for (tensor, shard) in map {
        let shard = shard.as_str().unwrap_or_default();
        match found.get(tensor.as_str()) {
            Some(s) if *s == shard => {}
            Some(s) => {
                return Err(bad(format!(
                    "tensor '{tensor}' is listed in {shard} but stored in {s}"
                )))
            }
            None => {
                return Err(bad(format!(
                    "tensor '{tensor}' is listed in {shard} but not stored there"
                )))
            }
        }
    }
    for (name, shard) in &found {
        if !map.contains_key(*name) {
            return Err(bad(format!(
                "tensor '{name}' in {shard} is not listed in the index"
            )));
        }
    }
    Ok(files)
}

fn open_hf_folder(dir: &Path) -> Result<Catalogue> {
    let config_path = dir.join("config.json");
    let present = |p: &Path| std::fs::symlink_metadata(p).is_ok();
    if !present(&config_path) {
        return Err(SourceError::new(
            dir,
            ErrorKind::BadFolder("not a Hugging Face model folder: config.json is missing".into()),
        ));
    }
    let config = read_json(&config_path)?;
    let index_path = dir.join("model.safetensors.index.json");
    let single = dir.join("model.safetensors");
    let mut files = Vec::new();
    if present(&index_path) {
        files = indexed_shards(dir, &index_path)?;
    } else if present(&single) {
        files.push(SafetensorsFile::open(&single)?);
    } else {
        return Err(SourceError::new(
            dir,
            ErrorKind::BadFolder(
                "no model.safetensors or model.safetensors.index.json in the folder".into(),
            ),
        ));
    }
    let st_metadata = files
        .first()
        .map(|f| f.metadata().to_vec())
        .unwrap_or_default();
    let mut cat = Catalogue::from_safetensors(files, dir, SourceKind::HfFolder, Some(config))?;
    cat.st_metadata = st_metadata;
    let index_name = "model.safetensors.index.json";
    for name in HF_AUX_FILES.iter().copied().chain([index_name]) {
        match aux_file(dir, name) {
            None => {}
            Some(Ok(p)) => cat.aux_files.push(p),
            Some(Err(why)) => cat.skipped_files.push((name.to_string(), why)),
        }
    }
    Ok(cat)
}
