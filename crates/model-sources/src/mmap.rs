//! The one place that maps files into memory.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{ErrorKind, Result, SourceError};

/// `bytes` as the little-endian `f32` values they hold, without a copy,
/// when they can be viewed so: a little-endian target, the first byte
/// 4-byte aligned and a whole number of values (mapped files are
/// page-aligned, so a tensor at a 4-byte-aligned offset qualifies).
/// `None` otherwise: the caller decodes a copy.
pub fn f32_le_view(bytes: &[u8]) -> Option<&[f32]> {
    if cfg!(target_endian = "big") {
        return None;
    }
    // SAFETY: every 32-bit pattern is a valid f32, and `align_to` only
    // gives the middle part at f32 alignment, inside `bytes` and borrowed
    // from it; on a little-endian target its values are the bytes' LE f32s.
    let (head, mid, tail) = unsafe { bytes.align_to::<f32>() };
    (head.is_empty() && tail.is_empty()).then_some(mid)
}

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
        let file = open_regular(path)?;
        let meta = file
            .metadata()
            .map_err(|e| SourceError::new(path, ErrorKind::Io(e)))?;
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

    /// Hand the pages of bytes `offset .. offset + len` back to the system:
    /// they leave this process's resident set (they stay in the page cache)
    /// and a later read of them maps them again, with the same bytes. Call
    /// it on source ranges that have been read, so that the mapped source
    /// adds to the resident set only what is being read. Out-of-range parts
    /// are ignored; the kernel rounds the range out to whole pages, which
    /// is harmless (a page of a neighbouring range is read again). A hint:
    /// failures are ignored.
    pub fn release(&self, offset: u64, len: u64) {
        let Some(map) = &self.map else { return };
        let size = map.len() as u64;
        let start = offset.min(size);
        let len = len.min(size - start);
        if len == 0 {
            return;
        }
        #[cfg(unix)]
        {
            use memmap2::UncheckedAdvice;
            // SAFETY: the map is read-only (`Mmap`, PROT_READ) and private,
            // and this process never writes to it, so it holds no private
            // (copy-on-write) pages: MADV_DONTNEED only unmaps clean pages of
            // the file, and the next access faults the file's pages back in.
            // A reference into the range that is still alive (another thread
            // reading the same tensor) therefore keeps seeing the same bytes,
            // under the same contract as the map itself (the file is not
            // modified while `convert` runs). The range is inside the map
            // (clamped above).
            let _ = unsafe {
                map.unchecked_advise_range(UncheckedAdvice::DontNeed, start as usize, len as usize)
            };
        }
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

/// Open `path` for reading only if it is a regular file (symbolic links
/// followed). FIFOs, sockets and devices are refused without being read:
/// the open is non-blocking (a FIFO without a writer would block forever)
/// and the opened handle is checked, so the file cannot be swapped between
/// the check and the read.
pub fn open_regular(path: &Path) -> Result<File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| SourceError::new(path, io_kind(e)))?;
    let ft = file
        .metadata()
        .map_err(|e| SourceError::new(path, ErrorKind::Io(e)))?
        .file_type();
    if !ft.is_file() {
        let what = if ft.is_dir() {
            "a folder"
        } else if ft.is_fifo() {
            "a FIFO (named pipe)"
        } else if ft.is_socket() {
            "a socket"
        } else if ft.is_block_device() || ft.is_char_device() {
            "a device"
        } else {
            "not a regular file"
        };
        return Err(SourceError::new(
            path,
            ErrorKind::NotRegular(what.to_string()),
        ));
    }
    Ok(file)
}

/// Read a small regular file whole (config and index JSON, tokenizer
/// files), refusing FIFOs, sockets and devices (see [`open_regular`]) and
/// files larger than `limit` bytes.
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    let f = open_regular(path)?;
    let mut buf = Vec::new();
    f.take(limit.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| SourceError::new(path, ErrorKind::Io(e)))?;
    if buf.len() as u64 > limit {
        return Err(SourceError::new(
            path,
            ErrorKind::BadFolder(format!("larger than the {limit}-byte limit for this file")),
        ));
    }
    Ok(buf)
}

pub(crate) fn io_kind(e: std::io::Error) -> ErrorKind {
    if e.kind() == std::io::ErrorKind::NotFound {
        ErrorKind::NotFound(e.to_string())
    } else {
        ErrorKind::Io(e)
    }
}
