//! Files a bundle carries besides its tensors: what the plan lists and
//! where their bytes come from.

/// The `what` of an extra file copied from the source folder.
pub const COPIED: &str = "copied from the source folder";

/// A non-tensor file of the bundle.
#[derive(Debug, Clone)]
pub struct Extra {
    /// Its name in the bundle.
    pub name: String,
    /// What it is (for the manifest).
    pub what: &'static str,
    /// Where its bytes come from.
    pub content: ExtraContent,
}

/// The bytes of an [`Extra`].
#[derive(Debug, Clone)]
pub enum ExtraContent {
    /// Copied from a source file.
    Copy(std::path::PathBuf),
    /// Every GGUF key/value of the source, as JSON.
    GgufMetadata,
    /// Made at plan time (engine config and tokenizer files).
    Bytes(Vec<u8>),
    /// An engine manifest, made from the tensor entries after the jobs.
    EngineManifest,
}
