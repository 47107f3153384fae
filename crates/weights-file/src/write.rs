//! Writing container files: temporary name, then rename.

use std::fs::File;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::format::{Header, Layout};

/// A file written under a temporary name in the destination folder and
/// renamed into place by [`AtomicFile::commit`]. Dropped without commit, the
/// temporary file is removed, so a failed conversion leaves nothing behind.
///
/// The temporary is created with create-new semantics (`O_CREAT | O_EXCL`):
/// if anything already has its name, a file or a symbolic link planted
/// there, creation fails instead of following or truncating it.
#[derive(Debug)]
pub struct AtomicFile {
    tmp: PathBuf,
    dest: PathBuf,
    file: Option<BufWriter<File>>,
}

impl AtomicFile {
    /// Create `.<name>.partial` beside `dest`.
    pub fn create(dest: &Path) -> io::Result<Self> {
        let name = dest.file_name().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "destination has no file name")
        })?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(".partial");
        let tmp = dest.with_file_name(tmp_name);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        Ok(AtomicFile {
            tmp,
            dest: dest.to_path_buf(),
            file: Some(BufWriter::with_capacity(1 << 20, file)),
        })
    }

    /// Flush, sync and rename into place (the rename replaces a directory
    /// entry; it never writes through a link at the destination).
    pub fn commit(mut self) -> io::Result<()> {
        if let Some(w) = self.file.take() {
            let f = w.into_inner().map_err(|e| e.into_error())?;
            f.sync_all()?;
            drop(f);
            std::fs::rename(&self.tmp, &self.dest)?;
        }
        Ok(())
    }

    /// Flush and rename into place *without* syncing: the data may still be
    /// only in the page cache. Returns the file, which the caller must
    /// `sync_all` before anything relies on the contents being on disk
    /// (e.g. before a later rename makes the file visible elsewhere). For
    /// writers that sync many files in the background instead of waiting
    /// for each.
    pub fn commit_unsynced(mut self) -> io::Result<File> {
        let w = self
            .file
            .take()
            .ok_or_else(|| io::Error::other("file already committed"))?;
        let f = match w.into_inner() {
            Ok(f) => f,
            Err(e) => {
                let _ = std::fs::remove_file(&self.tmp);
                return Err(e.into_error());
            }
        };
        if let Err(e) = std::fs::rename(&self.tmp, &self.dest) {
            let _ = std::fs::remove_file(&self.tmp);
            return Err(e);
        }
        Ok(f)
    }

    /// Ask the file system to reserve `len` bytes for the file up front,
    /// without changing its size (`fallocate` with `FALLOC_FL_KEEP_SIZE`
    /// on Linux; nothing elsewhere). A hint for a writer that knows the
    /// final length: ext4 then writes into blocks already reserved instead
    /// of reserving them page by page (1 GB written in 1 MiB pieces: 0.13
    /// instead of 0.19 - 0.20 s of system time; docs/BENCHMARKS.md, session
    /// 26). Failures (a file system without it, a full disk: the writes
    /// then report it) are ignored, and the bytes are what is written.
    pub fn allocate(&self, len: u64) {
        #[cfg(target_os = "linux")]
        if let Some(w) = self.file.as_ref().filter(|_| len > 0) {
            let _ =
                rustix::fs::fallocate(w.get_ref(), rustix::fs::FallocateFlags::KEEP_SIZE, 0, len);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = len;
    }

    /// The final path.
    pub fn dest(&self) -> &Path {
        &self.dest
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.file {
            Some(f) => f.write(buf),
            None => Err(io::Error::other("file already committed")),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut self.file {
            Some(f) => f.write_all(buf),
            None => Err(io::Error::other("file already committed")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.file {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

/// Writers that fill a region later (a header whose contents are known
/// only at the end) seek back to it; the buffer is flushed first.
impl Seek for AtomicFile {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        match &mut self.file {
            Some(f) => f.seek(pos),
            None => Err(io::Error::other("file already committed")),
        }
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Everything of a file before its data region: header, zero padding,
/// scales, zero padding. Write this, then exactly `header.data_bytes` bytes
/// of data. `scales.len()` must equal `header.scales_bytes`.
pub fn prefix(header: &Header, scales: &[u8]) -> io::Result<Vec<u8>> {
    if scales.len() as u64 != header.scales_bytes {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "scales blob is {} bytes, header says {}",
                scales.len(),
                header.scales_bytes
            ),
        ));
    }
    let layout = Layout::of(header)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "header regions overflow"))?;
    let mut out = header.to_bytes();
    out.resize(layout.scales_offset as usize, 0);
    out.extend_from_slice(scales);
    out.resize(layout.data_offset as usize, 0);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_follows_a_planted_temporary() {
        let dir = std::env::temp_dir().join(format!("wf-atomic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join(".x.weights.partial")).unwrap();
        let e = AtomicFile::create(&dir.join("x.weights")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let mut f = AtomicFile::create(&dir.join("y.weights")).unwrap();
        f.write_all(b"abc").unwrap();
        f.commit().unwrap();
        assert_eq!(std::fs::read(dir.join("y.weights")).unwrap(), b"abc");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `allocate` reserves space only: the file is exactly what was
    /// written, shorter or longer than the reservation (a reservation
    /// that set the length would leave zeros after a short write).
    #[test]
    fn allocate_never_changes_the_bytes() {
        let dir = std::env::temp_dir().join(format!("wf-allocate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        for (reserve, bytes) in [(1 << 20, 1000usize), (64, 5000), (0, 7)] {
            let data: Vec<u8> = (0..bytes).map(|i| (i * 7 + 3) as u8).collect();
            let path = dir.join(format!("r{reserve}.weights"));
            let mut f = AtomicFile::create(&path).unwrap();
            f.allocate(reserve);
            f.write_all(&data).unwrap();
            f.commit().unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), data, "reserved {reserve}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
