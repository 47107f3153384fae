//! The output folder: preparing it, file names, hashed atomic writes.

use std::collections::HashSet;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use weights_file::AtomicFile;

use crate::failure::bad_input;

/// Names `convert` itself writes besides tensor files.
pub const MANIFEST: &str = "manifest.json";
/// GGUF key/values of the source.
pub const GGUF_METADATA: &str = "gguf_metadata.json";

/// Turn a tensor name into a file-name stem: keeps `[A-Za-z0-9._-]`,
/// replaces anything else (path separators, spaces, control characters)
/// with `_`, and never yields `.`/`..`-only or hidden names.
pub fn safe_stem(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.starts_with('.') {
        s.insert(0, '_');
    }
    if s.is_empty() {
        s.push('_');
    }
    s
}

/// Hands out unique file names in one output folder.
#[derive(Debug, Default)]
pub struct NameAllocator {
    used: HashSet<String>,
}

impl NameAllocator {
    /// `stem + suffix`, or `stem~2 + suffix`, ... if taken (decided in tensor
    /// order, so deterministic).
    pub fn allocate(&mut self, tensor: &str, suffix: &str) -> String {
        let stem = safe_stem(tensor);
        let mut name = format!("{stem}{suffix}");
        let mut i = 2;
        while !self.used.insert(name.to_ascii_lowercase()) {
            name = format!("{stem}~{i}{suffix}");
            i += 1;
        }
        name
    }

    /// Reserve a fixed name (manifest.json, copied config files).
    pub fn reserve(&mut self, name: &str) {
        self.used.insert(name.to_ascii_lowercase());
    }
}

/// Create the output folder, or check it may be used.
///
/// - it may not be (or be inside) an input file's folder position that would
///   overwrite an input: no input path may lie directly in it;
/// - an existing non-empty folder needs `force`; then files of an earlier
///   bundle (`*.weights`, the manifest, metadata and copied config files)
///   are removed first so the folder holds exactly the new bundle.
pub fn prepare_dir(
    out: &Path,
    inputs: &[PathBuf],
    force: bool,
    extra_names: &[String],
) -> Result<()> {
    if out.exists() && !out.is_dir() {
        return Err(bad_input(format!(
            "output {} exists and is not a folder",
            out.display()
        )));
    }
    std::fs::create_dir_all(out)
        .with_context(|| format!("cannot create output folder {}", out.display()))?;
    let out_c = out
        .canonicalize()
        .with_context(|| format!("cannot resolve output folder {}", out.display()))?;
    for input in inputs {
        let ic = input.canonicalize().unwrap_or_else(|_| input.clone());
        if ic == out_c || ic.parent() == Some(out_c.as_path()) {
            return Err(bad_input(format!(
                "output folder {} holds the input {}: outputs may never overwrite inputs; choose another folder",
                out.display(),
                input.display()
            )));
        }
    }
    let entries: Vec<_> = std::fs::read_dir(out)
        .with_context(|| format!("cannot list {}", out.display()))?
        .collect::<io::Result<_>>()?;
    if entries.is_empty() {
        return Ok(());
    }
    if !force {
        return Err(bad_input(format!(
            "output folder {} is not empty (use --force to replace its bundle)",
            out.display()
        )));
    }
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let ours = name.ends_with(".weights")
            || name == MANIFEST
            || name == GGUF_METADATA
            || name.ends_with(".partial")
            || extra_names.contains(&name);
        if ours && e.file_type()?.is_file() {
            std::fs::remove_file(e.path())
                .with_context(|| format!("cannot remove {}", e.path().display()))?;
        }
    }
    Ok(())
}

/// An [`AtomicFile`] that hashes and counts what goes through it.
pub struct HashedFile {
    inner: AtomicFile,
    hasher: Sha256,
    bytes: u64,
}

/// What a finished file was.
#[derive(Debug, Clone)]
pub struct Written {
    /// Its length.
    pub bytes: u64,
    /// Lower-case hex sha256.
    pub sha256: String,
}

impl HashedFile {
    /// Start writing `path` (under a temporary name).
    pub fn create(path: &Path) -> Result<Self> {
        Ok(HashedFile {
            inner: AtomicFile::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
            hasher: Sha256::new(),
            bytes: 0,
        })
    }

    /// Rename into place; returns size and hash.
    pub fn commit(self) -> Result<Written> {
        let dest = self.inner.dest().to_path_buf();
        self.inner
            .commit()
            .with_context(|| format!("cannot write {}", dest.display()))?;
        Ok(Written {
            bytes: self.bytes,
            sha256: hex(&self.hasher.finalize()),
        })
    }
}

impl Write for HashedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Write a whole small file atomically and hash it.
pub fn write_small(path: &Path, bytes: &[u8]) -> Result<Written> {
    let mut f = HashedFile::create(path)?;
    f.write_all(bytes)
        .with_context(|| format!("cannot write {}", path.display()))?;
    f.commit()
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// sha256 of a byte slice.
pub fn sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems_are_safe() {
        assert_eq!(safe_stem("blk.0.attn_q.weight"), "blk.0.attn_q.weight");
        assert_eq!(safe_stem("a/b\\c d\n"), "a_b_c_d_");
        assert_eq!(safe_stem("..x"), "_..x");
        assert_eq!(safe_stem(""), "_");
        assert!(!safe_stem("../../etc/passwd").contains('/'));
    }

    #[test]
    fn allocator_is_unique_and_case_insensitive() {
        let mut a = NameAllocator::default();
        assert_eq!(a.allocate("x/y", ".weights"), "x_y.weights");
        assert_eq!(a.allocate("x_y", ".weights"), "x_y~2.weights");
        assert_eq!(a.allocate("X_Y", ".weights"), "X_Y~3.weights");
    }
}
