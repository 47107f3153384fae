//! The output folder: locking it, staging a bundle next to it, swapping the
//! finished bundle in, file names, hashed writes.
//!
//! The rules (`docs/FORMAT.md` §bundle folder):
//! - the output folder is locked (`flock` on the folder) for the whole run;
//!   a second run into the same folder fails at once;
//! - every file is written into a fresh staging folder next to the output
//!   (`.<name>.convert-staging`), each under a temporary name created with
//!   create-new semantics, then renamed; nothing is ever opened for writing
//!   in the output folder itself;
//! - only a complete (and verified) bundle is swapped in: the old manifest
//!   is removed first, the new files are renamed over the old ones, files
//!   the old manifest listed and the new bundle lacks are removed, the new
//!   manifest comes last; so at every instant a manifest present in the
//!   folder describes files that are all there;
//! - `--force` replaces exactly the files the previous manifest lists; any
//!   other file of the folder is left alone, and the run refuses to start
//!   when one has the name of a file it would write;
//! - on any failure (or SIGINT / SIGTERM, see [`interrupt`]) the staging
//!   folder is removed and the output folder is as it was.

use std::collections::{BTreeSet, HashSet};
use std::fs::File;
use std::io::{self, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Mutex};

use anyhow::{anyhow, Context, Result};
use sha256x2::Sha256;
use weights_file::AtomicFile;

use crate::failure::{bad_input, signal_name};
use crate::manifest::Manifest;

pub use crate::manifest::{Written, MANIFEST};

/// GGUF key/values of the source.
pub const GGUF_METADATA: &str = "gguf_metadata.json";
/// Marker file inside a staging folder (so only ours are ever removed).
const STAGING_MARKER: &str = ".convert-staging";
/// Longest file name `convert` writes (bytes), leaving room for the
/// temporary's `.` prefix and `.partial` suffix within the 255 of Linux,
/// macOS and Windows file systems.
pub const MAX_FILE_NAME: usize = 200;

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
    /// order, so deterministic). A name longer than [`MAX_FILE_NAME`] keeps
    /// the first 120 bytes of its stem and gets `~` and 16 hex digits of the
    /// sha256 of the whole tensor name instead of the rest.
    pub fn allocate(&mut self, tensor: &str, suffix: &str) -> String {
        let mut stem = safe_stem(tensor);
        if stem.len() + suffix.len() + 4 > MAX_FILE_NAME {
            stem.truncate(120);
            stem.push('~');
            stem.push_str(&sha256(tensor.as_bytes())[..16]);
        }
        self.allocate_exact(&stem, suffix)
    }

    /// `stem + suffix` for a stem that is already a safe file name (engine
    /// names), with the same collision rule as [`NameAllocator::allocate`].
    pub fn allocate_exact(&mut self, stem: &str, suffix: &str) -> String {
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

/// A manifest file name must be a plain name inside the bundle.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && Path::new(name).is_relative()
}

/// What the signal handler must undo while a run is active.
#[derive(Debug)]
struct Active {
    staging: PathBuf,
    /// The output folder, when this run created it (removed if still empty).
    created: Option<PathBuf>,
    out: PathBuf,
    /// The swap has started: let it finish.
    committed: bool,
}

/// The run in progress (at most one per process). The signal thread and the
/// commit take this lock, so a signal never lands in the middle of a swap.
static ACTIVE: Mutex<Option<Active>> = Mutex::new(None);

fn remove_staging(staging: &Path) {
    // Rename first: a worker still writing can then no longer create files
    // in it (its paths no longer resolve), so the removal cannot race.
    let trash = staging.with_extension(format!("trash-{}", std::process::id()));
    let target = if std::fs::rename(staging, &trash).is_ok() {
        trash
    } else {
        staging.to_path_buf()
    };
    for _ in 0..3 {
        if std::fs::remove_dir_all(&target).is_ok() || !target.exists() {
            return;
        }
    }
}

/// Called by the signal thread: undo the active run and exit with
/// 128 + `sig`. A swap in progress is finished first (the new bundle is
/// then complete and stays).
pub fn interrupt(sig: i32) -> ! {
    let guard = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
    let msg = match guard.as_ref() {
        Some(a) if a.committed => format!(
            "interrupted by {} after the new bundle was complete in {}",
            signal_name(sig),
            a.out.display()
        ),
        Some(a) => {
            remove_staging(&a.staging);
            if let Some(c) = &a.created {
                let _ = std::fs::remove_dir(c);
            }
            format!(
                "interrupted by {}: removed the unfinished bundle; {} is as it was",
                signal_name(sig),
                a.out.display()
            )
        }
        None => format!("interrupted by {}", signal_name(sig)),
    };
    eprintln!("error: {msg}");
    std::process::exit(128 + sig)
}

/// A locked output folder with a staging folder next to it.
#[derive(Debug)]
pub struct OutputDir {
    out: PathBuf,
    staging: PathBuf,
    created: bool,
    /// Files the previous manifest lists (replaced or removed on commit).
    old_files: BTreeSet<String>,
    /// Held for the lifetime of the run (the lock is on this handle).
    _lock: File,
    /// A shard's lock on its own staging folder.
    _staging_lock: Option<File>,
    /// Syncs the staged files in the background.
    syncer: Syncer,
}

/// Sync threads, i.e. files synced at once. One thread syncs the files one
/// by one, a journal commit (with a cache flush) each; ext4 and the other
/// journaling file systems fold concurrent fsyncs into one commit. Keep mode
/// on a 1 GB GGUF (193 files, 2-core machine, docs/BENCHMARKS.md session 7):
/// 2.62 s with one thread, 2.43 s with four (`cp` + `sync`: 1.95 s).
const SYNC_THREADS: usize = 4;

/// Syncs (fsync) the files written into the staging folder on background
/// threads while the conversion goes on, instead of each writer waiting for
/// its own file's sync (on the machines measured, 245 such waits were
/// ~0.8 s of a CQ4 conversion). A file is renamed to its name in the
/// staging folder before its sync; every commit waits for all syncs first,
/// so nothing reaches the output folder before its data is on disk.
#[derive(Debug)]
struct Syncer {
    tx: Option<mpsc::Sender<(File, PathBuf)>>,
    threads: Vec<std::thread::JoinHandle<std::result::Result<(), String>>>,
}

impl Syncer {
    fn start() -> Syncer {
        let (tx, rx) = mpsc::channel::<(File, PathBuf)>();
        let rx = std::sync::Arc::new(Mutex::new(rx));
        let threads: Vec<_> = (0..SYNC_THREADS)
            .filter_map(|i| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("convert-sync-{i}"))
                    .spawn(move || {
                        let mut first = Ok(());
                        loop {
                            let next = rx
                                .lock()
                                .map_err(|_| ())
                                .and_then(|r| r.recv().map_err(|_| ()));
                            let Ok((f, shown)) = next else { break };
                            if let Err(e) = f.sync_all() {
                                if first.is_ok() {
                                    first = Err(format!("cannot write {}: {e}", shown.display()));
                                }
                            }
                        }
                        first
                    })
                    .ok()
            })
            .collect();
        Syncer {
            tx: (!threads.is_empty()).then_some(tx),
            threads,
        }
    }

    /// A sender for [`HashedFile`]s (none when the thread could not start:
    /// they then sync on their own).
    fn sender(&self) -> Option<mpsc::Sender<(File, PathBuf)>> {
        self.tx.clone()
    }

    /// Wait until every file handed over is synced; the first failure.
    fn finish(&mut self) -> Result<()> {
        self.tx = None;
        let mut first = Ok(());
        for h in self.threads.drain(..) {
            let r = h
                .join()
                .map_err(|_| anyhow!("the file sync thread failed"))
                .and_then(|r| r.map_err(|e| anyhow!(e)));
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl OutputDir {
    /// Create or check the output folder, lock it and create the staging
    /// folder. `planned` are the names the bundle will have; `inputs` the
    /// source files (none may be in the output folder).
    pub fn prepare(
        out: &Path,
        inputs: &[PathBuf],
        force: bool,
        planned: &[String],
    ) -> Result<Self> {
        if out.exists() && !out.is_dir() {
            return Err(bad_input(format!(
                "output {} exists and is not a folder",
                out.display()
            )));
        }
        let created = !out.exists();
        std::fs::create_dir_all(out)
            .with_context(|| format!("cannot create output folder {}", out.display()))?;
        let undo = |e: anyhow::Error| {
            if created {
                let _ = std::fs::remove_dir(out);
            }
            e
        };
        let lock = lock_folder(out).map_err(undo)?;
        let out_c = out
            .canonicalize()
            .with_context(|| format!("cannot resolve output folder {}", out.display()))?;
        check_inputs(out, &out_c, inputs).map_err(undo)?;
        let old_files = existing_bundle(out, force).map_err(undo)?;
        // A file of the folder that the new bundle would replace but that no
        // previous bundle wrote is the user's: refuse rather than lose it.
        for name in planned {
            let p = out.join(name);
            if std::fs::symlink_metadata(&p).is_ok() && !old_files.contains(name) {
                return Err(undo(bad_input(format!(
                    "output folder {} already holds {name}, which no previous bundle's manifest lists: convert would replace it; move it away or choose another folder",
                    out.display()
                ))));
            }
        }
        let staging = staging_path(&out_c)?;
        clear_stale_staging(&staging).map_err(undo)?;
        std::fs::create_dir(&staging)
            .and_then(|()| File::create_new(staging.join(STAGING_MARKER)).map(drop))
            .with_context(|| format!("cannot create the staging folder {}", staging.display()))
            .map_err(undo)?;
        *ACTIVE.lock().unwrap_or_else(|p| p.into_inner()) = Some(Active {
            staging: staging.clone(),
            created: created.then(|| out.to_path_buf()),
            out: out.to_path_buf(),
            committed: false,
        });
        Ok(OutputDir {
            out: out.to_path_buf(),
            staging,
            created,
            old_files,
            _lock: lock,
            _staging_lock: None,
            syncer: Syncer::start(),
        })
    }

    /// `--shard I/N`: like [`OutputDir::prepare`], for one of several
    /// processes writing the same folder at once (`docs/SCALE_OUT.md`
    /// §output folder). The folder gets a shared lock (shards coexist; a
    /// single run or `convert merge` cannot start while one runs), and its
    /// own staging folder `.<name>.convert-shard-I-of-N`, locked while the
    /// shard runs (a second process of the same shard exits 2). The folder
    /// may hold only files of this bundle (`all`) and partial manifests;
    /// one of this shard's files (`mine`) already there must be listed by a
    /// partial manifest (an earlier attempt of a shard), else it is the
    /// user's and the shard refuses to start.
    pub fn prepare_shard(
        out: &Path,
        inputs: &[PathBuf],
        spec: crate::manifest::ShardSpec,
        mine: &[String],
        all: &[String],
    ) -> Result<Self> {
        if out.exists() && !out.is_dir() {
            return Err(bad_input(format!(
                "output {} exists and is not a folder",
                out.display()
            )));
        }
        std::fs::create_dir_all(out)
            .with_context(|| format!("cannot create output folder {}", out.display()))?;
        let lock = lock_folder_shared(out)?;
        let out_c = out
            .canonicalize()
            .with_context(|| format!("cannot resolve output folder {}", out.display()))?;
        check_inputs(out, &out_c, inputs)?;
        let all: BTreeSet<&str> = all.iter().map(String::as_str).collect();
        let mut partials = Vec::new();
        for e in std::fs::read_dir(out).with_context(|| format!("cannot list {}", out.display()))? {
            let e = e.with_context(|| format!("cannot list {}", out.display()))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name == MANIFEST {
                return Err(bad_input(format!(
                    "output folder {} holds a finished bundle ({MANIFEST}): shards write into an empty folder or one holding only shards of the same conversion",
                    out.display()
                )));
            }
            if is_partial_name(&name) {
                partials.push(e.path());
                continue;
            }
            if !all.contains(name.as_str()) {
                return Err(bad_input(format!(
                    "output folder {} holds {name}, which is no file of this bundle: shards write into an empty folder or one holding only shards of the same conversion",
                    out.display()
                )));
            }
        }
        let present: Vec<&String> = mine
            .iter()
            .filter(|n| std::fs::symlink_metadata(out.join(n)).is_ok())
            .collect();
        // Only when some of this shard's files are there already (a rerun)
        // are the partial manifests read: which shard wrote them?
        let mut listed: BTreeSet<String> = BTreeSet::new();
        if !present.is_empty() {
            for p in &partials {
                if let Ok(bytes) = model_sources::mmap::read_regular(p, 1 << 30) {
                    if let Ok(m) = serde_json::from_slice::<crate::manifest::ShardManifest>(&bytes)
                    {
                        listed.extend(m.file_names().map(str::to_string));
                    }
                }
            }
        }
        for name in present {
            if !listed.contains(name) {
                return Err(bad_input(format!(
                    "output folder {} already holds {name}, which no shard manifest lists: shard {spec} would replace it; move it away or choose another folder",
                    out.display()
                )));
            }
        }
        let staging = with_suffix(
            &out_c,
            &format!(".convert-shard-{}-of-{}", spec.index, spec.count),
        )?;
        let in_use = || {
            bad_input(format!(
                "shard {spec} is already being written into {} by another process ({} is locked)",
                out.display(),
                staging.display()
            ))
        };
        if std::fs::symlink_metadata(&staging).is_ok() {
            // Stale (killed run) unless its owner still holds its lock.
            let d = File::open(&staging).map_err(|_| in_use())?;
            if matches!(d.try_lock(), Err(std::fs::TryLockError::WouldBlock)) {
                return Err(in_use());
            }
            clear_stale_staging(&staging)?;
        }
        std::fs::create_dir(&staging).map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                in_use()
            } else {
                anyhow!(e).context(format!(
                    "cannot create the staging folder {}",
                    staging.display()
                ))
            }
        })?;
        let staging_lock = File::open(&staging)
            .and_then(|d| d.try_lock().map_err(io::Error::other).map(|()| d))
            .map_err(|_| in_use())?;
        File::create_new(staging.join(STAGING_MARKER))
            .with_context(|| format!("cannot create the staging folder {}", staging.display()))?;
        *ACTIVE.lock().unwrap_or_else(|p| p.into_inner()) = Some(Active {
            staging: staging.clone(),
            created: None,
            out: out.to_path_buf(),
            committed: false,
        });
        Ok(OutputDir {
            out: out.to_path_buf(),
            staging,
            created: false,
            old_files: BTreeSet::new(),
            _lock: lock,
            _staging_lock: Some(staging_lock),
            syncer: Syncer::start(),
        })
    }

    /// `convert merge`: lock the folder (exclusively: no shard may still
    /// run) and create the staging folder for the files merge writes.
    pub fn prepare_merge(out: &Path) -> Result<Self> {
        if !out.is_dir() {
            return Err(bad_input(format!(
                "{}: no such folder (convert merge takes the folder the shards wrote)",
                out.display()
            )));
        }
        let lock = lock_folder(out)?;
        let out_c = out
            .canonicalize()
            .with_context(|| format!("cannot resolve output folder {}", out.display()))?;
        let staging = staging_path(&out_c)?;
        clear_stale_staging(&staging)?;
        std::fs::create_dir(&staging)
            .and_then(|()| File::create_new(staging.join(STAGING_MARKER)).map(drop))
            .with_context(|| format!("cannot create the staging folder {}", staging.display()))?;
        *ACTIVE.lock().unwrap_or_else(|p| p.into_inner()) = Some(Active {
            staging: staging.clone(),
            created: None,
            out: out.to_path_buf(),
            committed: false,
        });
        Ok(OutputDir {
            out: out.to_path_buf(),
            staging,
            created: false,
            old_files: BTreeSet::new(),
            _lock: lock,
            _staging_lock: None,
            syncer: Syncer::start(),
        })
    }

    /// The output folder.
    pub fn out(&self) -> &Path {
        &self.out
    }

    /// `--resume`: take over `name` from the output folder when it is a
    /// regular file of `bytes` bytes whose sha256 is `sha256` (hashed
    /// again here): it is hard-linked into the staging folder (copied
    /// where links are not supported), so the swap keeps it. False when it
    /// does not match.
    pub fn adopt(&self, name: &str, bytes: u64, sha256_hex: &str) -> Result<bool> {
        if !is_plain_name(name) {
            return Ok(false);
        }
        let src = self.out.join(name);
        let regular =
            std::fs::symlink_metadata(&src).is_ok_and(|m| m.is_file() && m.len() == bytes);
        if !regular {
            return Ok(false);
        }
        let hash = || -> io::Result<String> {
            let mut f = model_sources::mmap::open_regular(&src).map_err(io::Error::other)?;
            let mut h = Sha256::new();
            io::copy(&mut f, &mut h)?;
            Ok(hex(&h.finalize()))
        };
        if hash().ok().as_deref() != Some(sha256_hex) {
            return Ok(false);
        }
        let dst = self.staging.join(name);
        if std::fs::hard_link(&src, &dst).is_err() {
            let mut f = self.create(name)?;
            let mut from = model_sources::mmap::open_regular(&src)
                .with_context(|| format!("cannot read {}", src.display()))?;
            io::copy(&mut from, &mut f)
                .with_context(|| format!("cannot write {}", src.display()))?;
            f.commit()?;
        }
        Ok(true)
    }

    /// Swap a shard's files in: its old partial manifest goes first, then
    /// each file is renamed into the output folder, the new partial
    /// manifest `partial` last (so a partial manifest present always
    /// describes files that are all there).
    pub fn commit_shard(mut self, files: &[String], partial: &str) -> Result<()> {
        self.syncer.finish()?;
        let mut guard = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = guard.as_mut() {
            a.committed = true;
        }
        let ctx =
            |what: &str, name: &str| format!("cannot {what} {}", self.out.join(name).display());
        remove_if_file(&self.out.join(partial)).with_context(|| ctx("remove", partial))?;
        for name in files {
            std::fs::rename(self.staging.join(name), self.out.join(name))
                .with_context(|| ctx("move into place", name))?;
        }
        std::fs::rename(self.staging.join(partial), self.out.join(partial))
            .with_context(|| ctx("move into place", partial))?;
        if let Ok(d) = File::open(&self.out) {
            let _ = d.sync_all();
        }
        remove_staging(&self.staging);
        *guard = None;
        Ok(())
    }

    /// Finish a merge: the files merge wrote (`files`, the engine
    /// manifests) are renamed in, then `manifest.json`, and only then are
    /// the partial manifests (`partials`) removed.
    pub fn commit_merge(mut self, files: &[String], partials: &[String]) -> Result<()> {
        self.syncer.finish()?;
        let mut guard = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = guard.as_mut() {
            a.committed = true;
        }
        let ctx =
            |what: &str, name: &str| format!("cannot {what} {}", self.out.join(name).display());
        for name in files.iter().filter(|n| *n != MANIFEST) {
            std::fs::rename(self.staging.join(name), self.out.join(name))
                .with_context(|| ctx("move into place", name))?;
        }
        std::fs::rename(self.staging.join(MANIFEST), self.out.join(MANIFEST))
            .with_context(|| ctx("move into place", MANIFEST))?;
        for name in partials {
            remove_if_file(&self.out.join(name)).with_context(|| ctx("remove", name))?;
        }
        if let Ok(d) = File::open(&self.out) {
            let _ = d.sync_all();
        }
        remove_staging(&self.staging);
        *guard = None;
        Ok(())
    }

    /// The staging folder (the bundle while it is being written).
    pub fn staging(&self) -> &Path {
        &self.staging
    }

    /// Start writing bundle file `name` (in the staging folder).
    pub fn create(&self, name: &str) -> Result<HashedFile> {
        HashedFile::create(
            &self.staging.join(name),
            self.out.join(name),
            self.syncer.sender(),
        )
    }

    /// [`OutputDir::create`] for a file whose hash the caller makes from
    /// the staged file once written (`digest::files_sha256`, many files at
    /// once): nothing is hashed while writing and
    /// [`HashedFile::commit`] gives an empty `sha256`.
    pub fn create_unhashed(&self, name: &str) -> Result<HashedFile> {
        let mut f = self.create(name)?;
        f.hasher = None;
        Ok(f)
    }

    /// Write a whole small bundle file and hash it.
    pub fn write_small(&self, name: &str, bytes: &[u8]) -> Result<Written> {
        let mut f = self.create(name)?;
        f.write_all(bytes)
            .with_context(|| format!("cannot write {}", self.out.join(name).display()))?;
        f.commit()
    }

    /// Swap the staged bundle in (see the module docs for the order).
    pub fn commit(mut self, manifest: &Manifest) -> Result<()> {
        self.syncer.finish()?;
        let mut guard = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = guard.as_mut() {
            a.committed = true;
        }
        let new: BTreeSet<String> = manifest.file_names().collect();
        let ctx =
            |what: &str, name: &str| format!("cannot {what} {}", self.out.join(name).display());
        remove_if_file(&self.out.join(MANIFEST)).with_context(|| ctx("remove", MANIFEST))?;
        for name in new.iter().filter(|n| *n != MANIFEST) {
            std::fs::rename(self.staging.join(name), self.out.join(name))
                .with_context(|| ctx("move into place", name))?;
        }
        for name in self.old_files.difference(&new) {
            remove_if_file(&self.out.join(name)).with_context(|| ctx("remove", name))?;
        }
        std::fs::rename(self.staging.join(MANIFEST), self.out.join(MANIFEST))
            .with_context(|| ctx("move into place", MANIFEST))?;
        if let Ok(d) = File::open(&self.out) {
            let _ = d.sync_all();
        }
        remove_staging(&self.staging);
        *guard = None;
        Ok(())
    }

    /// Remove everything this run wrote; the output folder is as it was.
    pub fn abort(mut self) {
        let _ = self.syncer.finish();
        let mut guard = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
        remove_staging(&self.staging);
        if self.created {
            let _ = std::fs::remove_dir(&self.out);
        }
        *guard = None;
    }
}

/// No input may be in the output folder (or be it).
fn check_inputs(out: &Path, out_c: &Path, inputs: &[PathBuf]) -> Result<()> {
    for input in inputs {
        let ic = input.canonicalize().unwrap_or_else(|_| input.clone());
        if ic == out_c || ic.parent() == Some(out_c) {
            return Err(bad_input(format!(
                "output folder {} holds the input {}: outputs may never overwrite inputs; choose another folder",
                out.display(),
                input.display()
            )));
        }
    }
    Ok(())
}

/// A partial manifest's name (`manifest.shard-*.json`).
pub fn is_partial_name(name: &str) -> bool {
    name.starts_with(crate::manifest::PARTIAL_PREFIX) && name.ends_with(".json")
}

/// A shared `flock` on the folder (shards of one conversion).
fn lock_folder_shared(out: &Path) -> Result<File> {
    let dir = File::open(out).with_context(|| format!("cannot open {}", out.display()))?;
    match dir.try_lock_shared() {
        Ok(()) => Ok(dir),
        Err(std::fs::TryLockError::WouldBlock) => Err(bad_input(format!(
            "output folder {} is in use by a convert run or merge (it holds a lock on the folder); wait for it or choose another folder",
            out.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(anyhow!(e).context(format!("cannot lock output folder {}", out.display())))
        }
    }
}

/// `.<name><suffix>` beside the (resolved) output folder.
fn with_suffix(out_c: &Path, suffix: &str) -> Result<PathBuf> {
    let name = out_c
        .file_name()
        .ok_or_else(|| bad_input(format!("output folder {} has no name", out_c.display())))?;
    let mut s = std::ffi::OsString::from(".");
    s.push(name);
    s.push(suffix);
    Ok(out_c.with_file_name(s))
}

/// `flock` the folder itself (no lock file is left behind).
fn lock_folder(out: &Path) -> Result<File> {
    let dir = File::open(out).with_context(|| format!("cannot open {}", out.display()))?;
    match dir.try_lock() {
        Ok(()) => Ok(dir),
        Err(std::fs::TryLockError::WouldBlock) => Err(bad_input(format!(
            "output folder {} is in use by another convert run (it holds a lock on the folder); wait for it or choose another folder",
            out.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(anyhow!(e).context(format!("cannot lock output folder {}", out.display())))
        }
    }
}

/// `.<name>.convert-staging` beside the (resolved) output folder.
fn staging_path(out_c: &Path) -> Result<PathBuf> {
    let name = out_c
        .file_name()
        .ok_or_else(|| bad_input(format!("output folder {} has no name", out_c.display())))?;
    let mut s = std::ffi::OsString::from(".");
    s.push(name);
    s.push(".convert-staging");
    Ok(out_c.with_file_name(s))
}

/// A staging folder left by a killed run (we hold the output lock, so no
/// live run owns it) is removed, but only if it carries our marker.
fn clear_stale_staging(staging: &Path) -> Result<()> {
    match std::fs::symlink_metadata(staging) {
        Err(_) => Ok(()),
        Ok(m) if m.is_dir() && staging.join(STAGING_MARKER).is_file() => {
            std::fs::remove_dir_all(staging).with_context(|| {
                format!(
                    "cannot remove the stale staging folder {}",
                    staging.display()
                )
            })
        }
        Ok(_) => Err(bad_input(format!(
            "{} exists and is not a staging folder of convert; move it away",
            staging.display()
        ))),
    }
}

/// The files of the bundle already in `out`: empty for an empty folder;
/// with `force`, the files its manifest lists (none without a manifest);
/// without `force`, an error for a non-empty folder.
fn existing_bundle(out: &Path, force: bool) -> Result<BTreeSet<String>> {
    let mut entries =
        std::fs::read_dir(out).with_context(|| format!("cannot list {}", out.display()))?;
    if entries.next().is_none() {
        return Ok(BTreeSet::new());
    }
    if !force {
        return Err(bad_input(format!(
            "output folder {} is not empty (use --force to replace its bundle)",
            out.display()
        )));
    }
    let mpath = out.join(MANIFEST);
    let is_file = std::fs::symlink_metadata(&mpath).is_ok_and(|m| m.is_file());
    if !is_file {
        return Ok(BTreeSet::new());
    }
    let bytes = model_sources::mmap::read_regular(&mpath, 1 << 30)?;
    let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| {
        bad_input(format!(
            "{}: not a manifest convert can read ({e}); --force replaces only the files a previous bundle's manifest lists: move the folder's contents away",
            mpath.display()
        ))
    })?;
    let names: BTreeSet<String> = m.file_names().filter(|n| is_plain_name(n)).collect();
    Ok(names)
}

/// Remove `p` if it is a file (or a link); a missing entry is fine.
fn remove_if_file(p: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => Err(io::Error::other("is a folder")),
        Ok(_) => std::fs::remove_file(p),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// The largest single `write` a [`HashedFile`] issues. Big buffers go out
/// in pieces of this size: on the machines measured (ext4 in a VM), one
/// write of many MiB cost up to 2x the system time of the same bytes in
/// 1 MiB pieces (docs/BENCHMARKS.md).
const WRITE_CHUNK: usize = 1 << 20;

/// An [`AtomicFile`] in the staging folder that hashes and counts what goes
/// through it; errors name the file's final path in the output folder.
/// Committed, it is renamed to its name in the staging folder and synced
/// by the folder's [`Syncer`].
pub struct HashedFile {
    inner: AtomicFile,
    shown: PathBuf,
    /// `None` for a file of [`OutputDir::create_unhashed`]
    /// ([`HashedFile::commit`] then gives an empty `sha256`).
    hasher: Option<Sha256>,
    bytes: u64,
    sync: Option<mpsc::Sender<(File, PathBuf)>>,
    /// Bytes left at the start by [`HashedFile::reserve_prefix`].
    reserved: Option<u64>,
}

impl HashedFile {
    fn create(
        path: &Path,
        shown: PathBuf,
        sync: Option<mpsc::Sender<(File, PathBuf)>>,
    ) -> Result<Self> {
        Ok(HashedFile {
            inner: AtomicFile::create(path)
                .with_context(|| format!("cannot create {}", shown.display()))?,
            shown,
            hasher: Some(Sha256::new()),
            bytes: 0,
            sync,
            reserved: None,
        })
    }

    /// Rename into place (the sync follows in the background); returns
    /// size and hash.
    pub fn commit(self) -> Result<Written> {
        if self.reserved.is_some() {
            return Err(anyhow!(
                "{}: a reserved prefix was never written (a bug in convert)",
                self.shown.display()
            ));
        }
        let sha256 = self.hasher.map_or_else(String::new, |h| hex(&h.finalize()));
        Self::finish(self.inner, &self.shown, self.sync.as_ref())?;
        Ok(Written {
            bytes: self.bytes,
            sha256,
        })
    }

    /// [`AtomicFile::allocate`]: the file system reserves the file's
    /// final length `len` up front (a hint for writers that know it).
    pub fn allocate(&self, len: u64) {
        self.inner.allocate(len);
    }

    /// Leave the first `len` bytes of the file for
    /// [`HashedFile::commit_with_prefix`]: what is written next goes after
    /// them. Only before anything is written. For files whose first bytes
    /// (a header with the scales of every row) are known only once the rest
    /// has been written, so that the rest need not be held in memory.
    pub fn reserve_prefix(&mut self, len: u64) -> Result<()> {
        if self.bytes != 0 || self.reserved.is_some() {
            return Err(anyhow!(
                "{}: prefix reserved after writing (a bug in convert)",
                self.shown.display()
            ));
        }
        self.inner
            .seek(io::SeekFrom::Start(len))
            .with_context(|| format!("cannot write {}", self.shown.display()))?;
        self.reserved = Some(len);
        self.bytes = len;
        Ok(())
    }

    /// Write the prefix reserved by [`HashedFile::reserve_prefix`] (exactly
    /// that long), rename into place and hash the file by reading it back
    /// (the prefix comes first, so the hash cannot run while the rest is
    /// written; each byte is still hashed once, from the page cache).
    pub fn commit_with_prefix(mut self, prefix: &[u8]) -> Result<Written> {
        let shown = self.shown.clone();
        let ctx = || format!("cannot write {}", shown.display());
        if self.reserved != Some(prefix.len() as u64) {
            return Err(anyhow!(
                "{}: prefix of {} bytes for a reserved {:?} (a bug in convert)",
                shown.display(),
                prefix.len(),
                self.reserved
            ));
        }
        self.inner.seek(io::SeekFrom::Start(0)).with_context(ctx)?;
        self.inner.write_all(prefix).with_context(ctx)?;
        let path = self.inner.dest().to_path_buf();
        Self::finish(self.inner, &shown, self.sync.as_ref())?;
        let mut f = model_sources::mmap::open_regular(&path).with_context(ctx)?;
        let mut h = Sha256::new();
        let n = io::copy(&mut f, &mut h).with_context(ctx)?;
        if n != self.bytes {
            return Err(anyhow!(
                "{}: {n} bytes read back, {} written",
                shown.display(),
                self.bytes
            ));
        }
        Ok(Written {
            bytes: self.bytes,
            sha256: hex(&h.finalize()),
        })
    }

    /// Rename `inner` into place and hand it to the syncer (or sync it here).
    fn finish(
        inner: AtomicFile,
        shown: &Path,
        sync: Option<&mpsc::Sender<(File, PathBuf)>>,
    ) -> Result<()> {
        let file = inner
            .commit_unsynced()
            .with_context(|| format!("cannot write {}", shown.display()))?;
        let unsent = match sync {
            Some(tx) => tx.send((file, shown.to_path_buf())).err().map(|e| e.0 .0),
            None => Some(file),
        };
        if let Some(f) = unsent {
            f.sync_all()
                .with_context(|| format!("cannot write {}", shown.display()))?;
        }
        Ok(())
    }
}

impl HashedFile {
    /// Write `data` as [`Write::write_all`] does, its hash made together
    /// with `other`'s of `other_data` (`sha256x2::update_pair`: two
    /// messages at once; fastest when as long as `data`).
    pub fn write_all_beside(
        &mut self,
        data: &[u8],
        other: &mut Sha256,
        other_data: &[u8],
    ) -> io::Result<()> {
        if let Some(h) = self.hasher.as_mut().filter(|_| self.reserved.is_none()) {
            sha256x2::update_pair(h, data, other, other_data);
        } else {
            // (With a reserved prefix the hash is made on commit.)
            other.update(other_data);
        }
        for piece in data.chunks(WRITE_CHUNK) {
            self.inner.write_all(piece).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot write {}: {e}", self.shown.display()),
                )
            })?;
            self.bytes += piece.len() as u64;
        }
        Ok(())
    }
}

impl Write for HashedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let buf = &buf[..buf.len().min(WRITE_CHUNK)];
        let n = self.inner.write(buf).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot write {}: {e}", self.shown.display()),
            )
        })?;
        if let Some(h) = self.hasher.as_mut().filter(|_| self.reserved.is_none()) {
            // (With a reserved prefix the hash is made on commit.)
            h.update(&buf[..n]);
        }
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Write `bytes` to `path` as a whole (a report, not part of a bundle): a
/// create-new temporary beside it, synced, then renamed over `path`, so
/// there is never a half-written file and a link at `path` is replaced,
/// not followed.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f =
        AtomicFile::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.commit())
        .with_context(|| format!("cannot write {}", path.display()))
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

    #[test]
    fn long_names_are_shortened_deterministically() {
        let long = "a".repeat(300);
        let mut a = NameAllocator::default();
        let n1 = a.allocate(&long, ".q8_0.r8.weights");
        assert!(n1.len() <= MAX_FILE_NAME, "{}", n1.len());
        assert!(n1.starts_with(&"a".repeat(120)));
        let mut b = NameAllocator::default();
        assert_eq!(b.allocate(&long, ".q8_0.r8.weights"), n1);
        let other = format!("{}b", "a".repeat(299));
        assert_ne!(a.allocate(&other, ".q8_0.r8.weights"), n1);
    }
}
