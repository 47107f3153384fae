//! `manifest.json`: what a bundle holds. Deterministic: no times, no
//! absolute paths, no thread counts.

use std::fmt;
use std::path::Path;

use model_sources::{Catalogue, SourceKind};
use serde::{Deserialize, Serialize};

/// The manifest's file name in a bundle.
pub const MANIFEST: &str = "manifest.json";

/// What a finished file was.
#[derive(Debug, Clone)]
pub struct Written {
    /// Its length.
    pub bytes: u64,
    /// Lower-case hex sha256.
    pub sha256: String,
}

/// Value of the `format` field.
pub const FORMAT: &str = "convert-bundle";
/// Bumped on incompatible manifest changes (2: source files carry a
/// `digest` instead of the sha256 of the whole file).
pub const FORMAT_VERSION: u32 = 2;

/// The whole manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`FORMAT_VERSION`].
    pub format_version: u32,
    /// The tool that wrote it.
    pub tool: Tool,
    /// The model it came from.
    pub source: Source,
    /// Options that affect the bytes.
    pub options: serde_json::Value,
    /// One entry per source tensor, in source order.
    pub tensors: Vec<Entry>,
    /// Non-tensor files of the bundle (metadata, config, tokenizer).
    pub extra_files: Vec<ExtraFile>,
    /// Files of the source folder that were not carried, with the reason.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub skipped_files: Vec<SkippedFile>,
}

/// A source file that is not in the bundle.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SkippedFile {
    /// Its name in the source folder.
    pub file: String,
    /// Why it was not carried.
    pub reason: String,
}

/// Tool name and version.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tool {
    /// "convert".
    pub name: String,
    /// Cargo package version.
    pub version: String,
}

/// The source model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Source {
    /// "gguf", "safetensors" or "hf_folder".
    pub kind: String,
    /// GGUF version.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gguf_version: Option<u32>,
    /// `general.architecture` / `model_type`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub architecture: Option<String>,
    /// Output projection tied to the token embedding.
    pub tied_embeddings: bool,
    /// Files read (names relative to the input), with size and digest.
    pub files: Vec<SourceFile>,
}

/// One source file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceFile {
    /// File name (relative to the input folder, or the file's own name).
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// The file's digest (`crate::digest`, docs/FORMAT.md §source digest):
    /// the sha256 of a tag, the sha256 of its non-tensor bytes and each
    /// tensor's `source_sha256`; not the sha256 of the file. (Read from
    /// `sha256`, the sha256 of the whole file, in format version 1.)
    #[serde(alias = "sha256", default)]
    pub digest: String,
}

/// One tensor of the bundle.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Entry {
    /// Tensor name as in the source.
    pub tensor: String,
    /// Role (matmul, token_embedding, output, norm, bias, other_1d, other).
    pub role: String,
    /// Shape, row-major, outermost first.
    pub shape: Vec<u64>,
    /// Source element type (ggml spelling, upper case: F32, BF16, Q4_K, ...).
    pub source_dtype: String,
    /// Output file in the bundle; absent when the tensor stays in the source.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub file: Option<String>,
    /// Container precision (FP16, FP32, CQ4, Q4_K, ...), or the source type.
    pub precision: String,
    /// Data layout: row_major, cq4_packed_panels, ggml_r4, ggml_r8, source.
    pub layout: String,
    /// Bytes of the output file (or of the tensor in the source).
    pub bytes: u64,
    /// sha256 of the output file (or the digest of the source file it
    /// stays in).
    pub sha256: String,
    /// Source file the tensor stays in (layout "source").
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub source_file: Option<String>,
    /// sha256 of the tensor's bytes as stored in the source (what
    /// `--resume` compares).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub source_sha256: Option<String>,
    /// Layout details (group size, interleave, rotation family, ...).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub details: Option<serde_json::Value>,
    /// Engine layout: the Hugging Face parameter name.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub hf_name: Option<String>,
    /// Every transform applied to the values on the way, in order, with
    /// its parameters (enough to undo it).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub transforms: Vec<serde_json::Value>,
}

/// A non-tensor file of the bundle.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExtraFile {
    /// File name in the bundle.
    pub file: String,
    /// What it is.
    pub what: String,
    /// Size.
    pub bytes: u64,
    /// sha256.
    pub sha256: String,
}

impl Entry {
    /// The entry of tensor `t` written to `file` (`None`: stays in the
    /// source) with `precision` and `layout`; `bytes` / `sha256` of the file.
    pub fn new(
        t: &model_sources::Tensor,
        file: Option<&str>,
        precision: impl Into<String>,
        layout: impl Into<String>,
        written: Option<&Written>,
        details: Option<serde_json::Value>,
    ) -> Self {
        Entry {
            tensor: t.name.clone(),
            role: t.role.as_str().into(),
            shape: t.shape.clone(),
            source_dtype: t.dtype.to_string(),
            file: file.map(str::to_string),
            precision: precision.into(),
            layout: layout.into(),
            bytes: written.map_or(t.n_bytes, |w| w.bytes),
            sha256: written.map(|w| w.sha256.clone()).unwrap_or_default(),
            source_file: None,
            source_sha256: None,
            details,
            hf_name: None,
            transforms: Vec::new(),
        }
    }
}

impl Tool {
    /// This build of convert.
    pub fn this() -> Tool {
        Tool {
            name: "convert".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        }
    }
}

impl Manifest {
    /// Read and parse the `manifest.json` of bundle folder `dir` (bad input
    /// when it is missing, not a regular file or not a manifest).
    pub fn read(dir: &std::path::Path) -> anyhow::Result<Manifest> {
        let mpath = dir.join(MANIFEST);
        let text = model_sources::mmap::read_regular(&mpath, 1 << 30)
            .map_err(|e| crate::failure::bad_input(format!("{e} (not a bundle folder?)")))?;
        serde_json::from_slice(&text).map_err(|e| {
            crate::failure::bad_input(format!("{}: invalid manifest: {e}", mpath.display()))
        })
    }

    /// Every file of the bundle: tensor files, extra files and the manifest
    /// itself.
    pub fn file_names(&self) -> impl Iterator<Item = String> + '_ {
        self.tensors
            .iter()
            .filter_map(|e| e.file.clone())
            .chain(self.extra_files.iter().map(|x| x.file.clone()))
            .chain([MANIFEST.to_string()])
    }

    /// Pretty JSON with a trailing newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("manifest serializes");
        s.push('\n');
        s
    }
}

/// A source file's name in the manifest: relative to the model folder,
/// or the file's own name.
pub fn source_name(cat: &Catalogue, path: &Path) -> String {
    match cat.kind {
        SourceKind::HfFolder => path
            .strip_prefix(&cat.root)
            .unwrap_or(path)
            .to_string_lossy()
            .into_owned(),
        _ => path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    }
}

// Partial manifests of `--shard I/N` (docs/FORMAT.md §manifest, "Partial
// manifests"; src/shard.rs makes them, src/merge.rs reads them).

/// Value of a partial manifest's `format` field.
pub const SHARD_FORMAT: &str = "convert-bundle-shard";
/// Bumped on incompatible partial-manifest changes (2: `source_hashes`
/// hold a file's non-tensor bytes' sha256 and its tensors).
pub const SHARD_FORMAT_VERSION: u32 = 2;
/// Largest N of `--shard I/N`.
pub const MAX_SHARDS: usize = 100_000;
/// Prefix of every partial manifest's file name.
pub const PARTIAL_PREFIX: &str = "manifest.shard-";

/// `--shard I/N`: shard `index` (0-based) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardSpec {
    /// 0-based: 0 ..= count - 1.
    pub index: usize,
    /// Number of shards.
    pub count: usize,
}

impl fmt::Display for ShardSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl ShardSpec {
    /// `manifest.shard-I-of-N.json`.
    pub fn manifest_name(self) -> String {
        format!("{PARTIAL_PREFIX}{}-of-{}.json", self.index, self.count)
    }
}

/// How many of each item the whole bundle has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Manifest tensor entries.
    pub tensors: usize,
    /// Plan extra files (engine manifests excluded).
    pub extra_files: usize,
    /// Source files.
    pub source_files: usize,
}

/// A tensor entry and its index in the manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IndexedEntry {
    /// Position in the manifest's `tensors`.
    pub index: usize,
    /// The entry.
    #[serde(flatten)]
    pub entry: Entry,
}

/// An extra file and its index in the plan.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IndexedExtra {
    /// Position in the plan's extra files.
    pub index: usize,
    /// The file.
    #[serde(flatten)]
    pub file: ExtraFile,
}

/// What the digest of source file `index` is made of, besides its
/// tensors' `source_sha256` (which the shards that convert them record).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceHash {
    /// Position in the manifest's `source.files`.
    pub index: usize,
    /// Lower-case hex sha256 of the file's bytes that no tensor covers.
    pub rest_sha256: String,
    /// The manifest positions of the file's tensors, in order.
    pub tensors: Vec<usize>,
}

/// `manifest.shard-I-of-N.json` (`docs/FORMAT.md` §partial manifests).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShardManifest {
    /// Always [`SHARD_FORMAT`].
    pub format: String,
    /// [`SHARD_FORMAT_VERSION`].
    pub format_version: u32,
    /// Which shard.
    pub shard: ShardSpec,
    /// `shard::plan_sha256`.
    pub plan_sha256: String,
    /// The tool that wrote it.
    pub tool: Tool,
    /// The source; every `files[i].digest` is empty (merge makes them).
    pub source: Source,
    /// The options, as in the final manifest.
    pub options: serde_json::Value,
    /// The final manifest's `skipped_files`.
    #[serde(default)]
    pub skipped_files: Vec<SkippedFile>,
    /// Sizes of the lists of the whole bundle.
    pub totals: Totals,
    /// Engine layout: the model type the engine manifests are made for
    /// (merge writes them from every shard's entries).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub engine_model_type: Option<String>,
    /// This shard's estimated cost (CPU ns) and the whole bundle's.
    pub estimated_cpu_ns: u64,
    /// The whole bundle's estimated cost (CPU ns).
    pub estimated_total_cpu_ns: u64,
    /// The tensor entries this shard made.
    pub tensors: Vec<IndexedEntry>,
    /// The extra files this shard wrote.
    pub extra_files: Vec<IndexedExtra>,
    /// The source files whose non-tensor bytes this shard hashed.
    pub source_hashes: Vec<SourceHash>,
}

impl ShardManifest {
    /// Pretty JSON with a trailing newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("shard manifest serializes");
        s.push('\n');
        s
    }

    /// Every file this shard wrote (tensor files and extra files).
    pub fn file_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.tensors
            .iter()
            .filter_map(|e| e.entry.file.as_deref())
            .chain(self.extra_files.iter().map(|x| x.file.file.as_str()))
    }
}
