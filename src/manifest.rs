//! `manifest.json`: what a bundle holds. Deterministic: no times, no
//! absolute paths, no thread counts.

use serde::{Deserialize, Serialize};

/// Value of the `format` field.
pub const FORMAT: &str = "convert-bundle";
/// Bumped on incompatible manifest changes.
pub const FORMAT_VERSION: u32 = 1;

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
    /// Files read (names relative to the input), with size and sha256.
    pub files: Vec<SourceFile>,
}

/// One source file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceFile {
    /// File name (relative to the input folder, or the file's own name).
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// sha256 of the whole file.
    pub sha256: String,
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
    /// sha256 of the output file (or of the source file it stays in).
    pub sha256: String,
    /// Source file the tensor stays in (layout "source").
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub source_file: Option<String>,
    /// Layout details (group size, interleave, rotation family, ...).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub details: Option<serde_json::Value>,
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

impl Manifest {
    /// Pretty JSON with a trailing newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("manifest serializes");
        s.push('\n');
        s
    }
}
