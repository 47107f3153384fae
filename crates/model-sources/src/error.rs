//! The one error type of the readers: the file it concerns and what is wrong.

use std::path::PathBuf;

/// An error while opening or validating a model source.
///
/// `Display` is one line: `<path>: <problem>`.
#[derive(Debug, thiserror::Error)]
#[error("{}: {kind}", path.display())]
pub struct SourceError {
    /// The file (or folder) the problem is in.
    pub path: PathBuf,
    /// What is wrong.
    pub kind: ErrorKind,
}

impl SourceError {
    pub(crate) fn new(path: impl Into<PathBuf>, kind: ErrorKind) -> Self {
        SourceError {
            path: path.into(),
            kind,
        }
    }

    /// True when the problem is in the input (bad or unsupported file), false
    /// for I/O failures of the machine (the binary maps this to exit codes).
    pub fn is_bad_input(&self) -> bool {
        !matches!(self.kind, ErrorKind::Io(_))
    }
}

/// What is wrong with a source file. Variants carry the evidence.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Reading or mapping the file failed.
    #[error("I/O error: {0}")]
    Io(#[source] std::io::Error),
    /// The path does not exist or is not a file / folder as needed.
    #[error("not found or not readable: {0}")]
    NotFound(String),
    /// A FIFO, socket, device or folder where a regular file is needed.
    #[error("is {0}, not a regular file: refused without reading it")]
    NotRegular(String),
    /// The file is not of a format this tool reads.
    #[error("unrecognized model format: {0}")]
    UnknownFormat(String),
    /// The file ends before a structure it declares.
    #[error("truncated: {what} needs {needed} bytes at offset {offset}, file has {file_len}")]
    Truncated {
        /// The structure being read.
        what: String,
        /// Its offset.
        offset: u64,
        /// Bytes it needs.
        needed: u64,
        /// The file length.
        file_len: u64,
    },
    /// Wrong magic number.
    #[error("bad magic {found:#010x} (expected {expected:#010x}, \"GGUF\")")]
    BadMagic {
        /// What the file has.
        found: u32,
        /// What it should have.
        expected: u32,
    },
    /// GGUF version other than 2 or 3.
    #[error("unsupported GGUF version {0} (supported: 2, 3)")]
    UnsupportedVersion(u32),
    /// A count from the header is impossible for the file size.
    #[error(
        "absurd {what} count {count}: the file has only {remaining} bytes left at offset {offset}"
    )]
    AbsurdCount {
        /// What is counted.
        what: &'static str,
        /// The declared count.
        count: u64,
        /// Bytes remaining in the file.
        remaining: u64,
        /// Where the count was read.
        offset: u64,
    },
    /// A string that is too long or not UTF-8.
    #[error("bad string at offset {offset}: {problem}")]
    BadString {
        /// Where it starts.
        offset: u64,
        /// Why it is bad.
        problem: String,
    },
    /// Unknown metadata value type.
    #[error("metadata key '{key}': unknown value type {value_type}")]
    BadValueType {
        /// The key.
        key: String,
        /// The type id read.
        value_type: u32,
    },
    /// Metadata arrays nested too deep.
    #[error("metadata key '{key}': arrays nested deeper than {max}")]
    TooDeep {
        /// The key.
        key: String,
        /// The depth limit.
        max: usize,
    },
    /// The same metadata key twice.
    #[error("duplicate metadata key '{0}'")]
    DuplicateKey(String),
    /// A metadata value of the wrong type or value for its meaning.
    #[error("metadata key '{key}': {problem}")]
    BadMetadata {
        /// The key.
        key: String,
        /// The problem.
        problem: String,
    },
    /// The same tensor name twice.
    #[error("duplicate tensor name '{0}'")]
    DuplicateTensor(String),
    /// A tensor name that cannot be used safely.
    #[error(
        "tensor name {0:?} is not allowed (empty, control characters, '..' or path separators)"
    )]
    UnsafeName(String),
    /// Bad tensor dimensions.
    #[error("tensor '{tensor}': {problem}")]
    BadShape {
        /// The tensor.
        tensor: String,
        /// The problem.
        problem: String,
    },
    /// A ggml type id this tool does not know.
    #[error("tensor '{tensor}': unknown ggml type id {type_id}")]
    UnknownType {
        /// The tensor.
        tensor: String,
        /// The id read.
        type_id: u32,
    },
    /// A dtype the tool does not read (safetensors).
    #[error("tensor '{tensor}': unknown dtype {dtype:?}")]
    UnsupportedDtype {
        /// The tensor.
        tensor: String,
        /// The dtype.
        dtype: String,
    },
    /// Tensor bytes outside the data region, misaligned or overlapping.
    #[error("tensor '{tensor}': {problem}")]
    BadTensorData {
        /// The tensor.
        tensor: String,
        /// The problem.
        problem: String,
    },
    /// A safetensors header problem that concerns no single tensor.
    #[error("invalid safetensors header: {0}")]
    BadHeader(String),
    /// The safetensors crate rejected the file.
    #[error("invalid safetensors file: {0}")]
    Safetensors(String),
    /// A Hugging Face folder that is incomplete or inconsistent.
    #[error("{0}")]
    BadFolder(String),
    /// An importance matrix file that is not what llama.cpp writes.
    #[error("importance matrix: {0}")]
    BadImatrix(String),
    /// A Hessian file that is not what the engine's calibration writes.
    #[error("Hessians: {0}")]
    BadHessians(String),
}

/// Shorthand used in the readers.
pub type Result<T> = std::result::Result<T, SourceError>;

pub(crate) fn bad_shape(tensor: &str, problem: impl Into<String>) -> ErrorKind {
    ErrorKind::BadShape {
        tensor: tensor.to_string(),
        problem: problem.into(),
    }
}
