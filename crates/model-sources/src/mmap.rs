//! The one place that maps files into memory.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{ErrorKind, Result, SourceError};

/// A read-only memory map of a whole file, with its path.
#[derive(Debug)]
pub struct MappedFile {
    path: PathBuf,
    map: Option<memmap2::Mmap>,
}

impl MappedFile {
    /// Map `path` read-only.
    ///
    /// The tool's contract with its user is that source files are not
    /// modified while `convert` runs (as with every mmap-based reader,
    /// truncating a mapped file under us would raise SIGBUS).
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| SourceError::new(path, io_kind(e)))?;
        let meta = file
            .metadata()
            .map_err(|e| SourceError::new(path, ErrorKind::Io(e)))?;
        if !meta.is_file() {
            return Err(SourceError::new(
                path,
                ErrorKind::NotFound("not a regular file".into()),
            ));
        }
        // A zero-length file cannot be mapped on every platform; it is simply empty.
        let map = if meta.len() == 0 {
            None
        } else {
            // SAFETY: the map is read-only and private to this process. Rust's
            // aliasing rules only hold if the file is not changed underneath
            // us; that is the documented contract of `convert` (inputs are
            // never written, and outputs may never be inputs: the binary checks
            // that before it writes).
            Some(
                unsafe { memmap2::Mmap::map(&file) }
                    .map_err(|e| SourceError::new(path, ErrorKind::Io(e)))?,
            )
        };
        Ok(MappedFile {
            path: path.to_path_buf(),
            map,
        })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.bytes().len() as u64
    }

    /// True for an empty file.
    pub fn is_empty(&self) -> bool {
        self.bytes().is_empty()
    }
}

pub(crate) fn io_kind(e: std::io::Error) -> ErrorKind {
    if e.kind() == std::io::ErrorKind::NotFound {
        ErrorKind::NotFound(e.to_string())
    } else {
        ErrorKind::Io(e)
    }
}
