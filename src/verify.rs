//! `convert verify`: every emitted file is run, not just written.
//!
//! For a bundle folder: each file named in `manifest.json` (tensor files
//! and extra files) is hashed and compared with the manifest's sha256
//! (unless `--no-hash`); each tensor file is then parsed, validated and its
//! GEMV run on every requested ISA with the fixed seeded Gaussian
//! activations of [`kernel_check::check::activations`] (seed
//! [`kernel_check::check::SEED`]), compared with the dequantize-then-f64 oracle
//! and with the scalar tier bit for bit (`kernels::check`); a 3-D expert
//! sidecar is run expert by expert, every expert. For a single
//! `.weights` file there is no hash to check.
//!
//! Output: a table (or `--json`). Any failure exits 1 with a one-line
//! error naming the failing files; unusable arguments exit 2.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use indicatif::ProgressBar;
use kernel_check::check::{check_container_with, FileCheck};
use kernels::aligned::AlignedBytes;
use kernels::Isa;

use crate::cli::{IsaArg, VerifyArgs};
use crate::failure::bad_input;
use crate::manifest::Manifest;
use crate::outdir::{is_plain_name, sha256};

/// What the hash check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hash {
    Ok,
    Mismatch,
    Skipped,
    /// A single file: there is no manifest to compare with.
    NotApplicable,
}

impl Hash {
    fn as_str(self) -> &'static str {
        match self {
            Hash::Ok => "ok",
            Hash::Mismatch => "MISMATCH",
            Hash::Skipped => "skipped",
            Hash::NotApplicable => "-",
        }
    }
}

/// One file to verify.
struct Target {
    /// Name as shown (relative to the bundle).
    name: String,
    path: PathBuf,
    /// Expected sha256 (bundle files).
    sha256: Option<String>,
    /// A tensor container (false: an extra file, hash only).
    container: bool,
}

/// The outcome for one file.
pub struct Outcome {
    /// The file (relative to the bundle).
    pub name: String,
    hash: Hash,
    /// Could not read the file, bad manifest name, ...
    io_error: Option<String>,
    /// The numeric checks (tensor containers).
    pub check: Option<FileCheck>,
}

impl Outcome {
    /// Hash, validation and every ISA passed.
    pub fn pass(&self) -> bool {
        self.io_error.is_none()
            && self.hash != Hash::Mismatch
            && self.check.as_ref().is_none_or(FileCheck::pass)
    }

    /// A short reason for the failure line.
    fn reason(&self) -> String {
        if let Some(e) = &self.io_error {
            return e.clone();
        }
        let mut r = Vec::new();
        if self.hash == Hash::Mismatch {
            r.push("sha256 mismatch".to_string());
        }
        if let Some(c) = &self.check {
            r.extend(c.problems.iter().cloned());
            if let Some(a) = c.activation_ratio.filter(|a| a.is_nan() || *a > 1.0) {
                r.push(format!(
                    "activations deviate from x by {a:.3e} times the quantizer's rounding bound"
                ));
            }
            for i in &c.isas {
                if let Some(e) = &i.error {
                    r.push(format!("{}: {e}", i.isa));
                } else if !i.pass() {
                    if i.identical_to_scalar == Some(false) {
                        r.push(format!("{} differs from scalar", i.isa));
                    }
                    if i.gemm_identical == Some(false) {
                        r.push(format!(
                            "{}: the GEMM (M = {}) differs from the GEMV",
                            i.isa,
                            kernel_check::check::gemm_rows(i.isa)
                        ));
                    }
                    if !i.exact.pass() {
                        r.push(format!(
                            "{}: {} rows off the exact reference by more than the f32 rounding bound (worst: row {}, {:.3e} times the bound)",
                            i.isa, i.exact.failing_rows, i.exact.worst_row, i.exact.worst_ratio
                        ));
                    }
                }
            }
            if let Some(e) = c.embedding.as_ref().filter(|e| !e.pass()) {
                r.push(format!(
                    "embedding rows: max error {:.3e} of the row scale > {:.0e}",
                    e.rel_max, e.bound
                ));
            }
        }
        r.join("; ")
    }
}

pub fn run(args: &VerifyArgs) -> Result<()> {
    let isas = select_isas(args.isa)?;
    let p = &args.path;
    let (targets, bundle) = if p.is_dir() {
        (bundle_targets(p)?, true)
    } else if p.exists() {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| p.display().to_string());
        (
            vec![Target {
                name,
                path: p.clone(),
                sha256: None,
                container: true,
            }],
            false,
        )
    } else {
        return Err(bad_input(format!(
            "{}: no such file or folder",
            p.display()
        )));
    };
    let pb = crate::progress::bar(targets.len() as u64, "files", args.quiet);
    let outcomes = verify_targets(&targets, &isas, args.no_hash, &pb);
    pb.finish_and_clear();
    let text = if args.json {
        json_report(p, bundle, &isas, &outcomes)?
    } else {
        table_report(&isas, &outcomes)
    };
    print!("{text}");
    failures(&outcomes)
}

/// `Err` naming every failed file (`Ok` when all passed).
fn failures(outcomes: &[Outcome]) -> Result<()> {
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.pass()).collect();
    if failed.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = failed
        .iter()
        .map(|o| format!("{} ({})", o.name, o.reason()))
        .collect();
    Err(anyhow!(
        "verification failed: {} of {} files: {}",
        failed.len(),
        outcomes.len(),
        list.join(", ")
    ))
}

/// `convert verify` of bundle folder `dir` on `isas` (hashes checked, the
/// end-to-end error computed), one tick of `pb` per file: what `convert
/// report` shows.
pub fn verify_bundle(dir: &Path, isas: &[Isa], pb: &ProgressBar) -> Result<Vec<Outcome>> {
    let targets = bundle_targets(dir)?;
    pb.set_length(targets.len() as u64);
    Ok(verify_targets(&targets, isas, false, pb))
}

fn verify_targets(
    targets: &[Target],
    isas: &[Isa],
    no_hash: bool,
    pb: &ProgressBar,
) -> Vec<Outcome> {
    targets
        .iter()
        .map(|t| {
            pb.set_message(t.name.clone());
            let o = verify_one(t, isas, no_hash, true);
            pb.inc(1);
            o
        })
        .collect()
}

/// The self-check of one tensor file `name` of the staging folder `dir`,
/// right after it was written (what `convert` runs on every file it writes
/// unless `--no-verify`), on the best ISA this CPU has: `source`, when
/// given, is the tensor's bytes as stored in the source and the file is a
/// sidecar made of them ([`kernel_check::check::check_sidecar_copy`]: every
/// byte compared with the source, the kernels run on a sample of rows);
/// otherwise the container is validated and the GEMV of every row held to
/// the exact reference (independent decoder, proven bound), with the
/// activations and CQ4 embedding rows; no end-to-end sums, and no other
/// tier against scalar (a property of the kernels their tests prove;
/// `convert verify` checks it on any bundle). The file is
/// read through a read-only map (ours, in the locked staging folder), so
/// the check adds no copy of it to the process's own memory. `Err` is the
/// failure's reason.
pub fn check_staged_file(
    dir: &Path,
    name: &str,
    source: Option<&[u8]>,
) -> std::result::Result<(), String> {
    let isas = [kernels::best()];
    let map = model_sources::mmap::MappedFile::open(&dir.join(name))
        .map_err(|e| format!("cannot read: {e}"))?;
    let bytes = map.bytes();
    let check = match source {
        Some(src) => kernel_check::check::check_sidecar_copy(bytes, src, &isas),
        None => kernel_check::check::self_check_container(bytes, &isas),
    };
    let o = Outcome {
        name: name.to_string(),
        hash: Hash::NotApplicable,
        io_error: None,
        check: Some(check),
    };
    if o.pass() {
        Ok(())
    } else {
        Err(o.reason())
    }
}

/// The error of a written bundle whose self-check failed (`failed`: file
/// and reason).
pub fn written_bundle_failed(failed: &[(String, String)]) -> anyhow::Error {
    let list: Vec<String> = failed
        .iter()
        .map(|(f, why)| format!("{f} ({why})"))
        .collect();
    anyhow!(
        "the written bundle failed verification (a bug in convert; --no-verify keeps the files for a report): {}",
        list.join(", ")
    )
}

/// The check of [`check_staged_file`] without a source on the files
/// `files` of `dir` (name, and whether it is a tensor container), with no
/// manifest: what `convert merge` runs on a whole bundle before its
/// manifest exists. Hashes are not checked here.
pub fn check_files(dir: &Path, files: &[(String, bool)]) -> Result<(usize, &'static str)> {
    use rayon::prelude::*;
    select_isas(IsaArg::All)?;
    let isas = [kernels::best()];
    let outcomes: Vec<Outcome> = files
        .par_iter()
        .filter(|(_, container)| *container)
        .map(|(name, _)| {
            let t = Target {
                name: name.clone(),
                path: dir.join(name),
                sha256: None,
                container: true,
            };
            verify_one(&t, &isas, true, false)
        })
        .collect();
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.pass())
        .map(|o| format!("{} ({})", o.name, o.reason()))
        .collect();
    if failed.is_empty() {
        Ok((outcomes.len(), isas[0].name()))
    } else {
        Err(anyhow!(
            "the written files failed verification: {}",
            failed.join(", ")
        ))
    }
}

/// `all` = every ISA usable here; otherwise one named ISA, which must be
/// usable.
pub fn select_isas(arg: IsaArg) -> Result<Vec<Isa>> {
    if let Some(msg) = kernels::dispatch::force_error() {
        return Err(bad_input(msg.to_string()));
    }
    let Some(isa) = arg.isa() else {
        return Ok(kernels::available());
    };
    if !isa.is_available() {
        let why = if isa.hardware_supports() {
            format!(
                "capped by {}={}",
                kernels::dispatch::FORCE_ENV,
                kernels::dispatch::forced().map(Isa::name).unwrap_or("?")
            )
        } else {
            "this CPU does not support it".to_string()
        };
        return Err(bad_input(format!("--isa {isa}: not available ({why})")));
    }
    Ok(vec![isa])
}

/// Every file the manifest names: tensor files (not `layout: source`), then
/// the extra files (hash only).
fn bundle_targets(dir: &Path) -> Result<Vec<Target>> {
    let m = Manifest::read(dir)?;
    let mut v = Vec::new();
    for e in &m.tensors {
        if let Some(f) = &e.file {
            v.push(Target {
                name: f.clone(),
                path: dir.join(f),
                sha256: Some(e.sha256.clone()),
                container: true,
            });
        }
    }
    for e in &m.extra_files {
        v.push(Target {
            name: e.file.clone(),
            path: dir.join(&e.file),
            sha256: Some(e.sha256.clone()),
            container: false,
        });
    }
    Ok(v)
}

/// `e2e`: `convert verify`'s check, with the end-to-end error (reported,
/// decides nothing); otherwise the self-check's scope.
fn verify_one(t: &Target, isas: &[Isa], no_hash: bool, e2e: bool) -> Outcome {
    let mut o = Outcome {
        name: t.name.clone(),
        hash: Hash::NotApplicable,
        io_error: None,
        check: None,
    };
    if t.sha256.is_some() && !is_plain_name(&t.name) {
        o.io_error = Some("manifest names a path outside the bundle".into());
        return o;
    }
    // Read straight into a 64-byte aligned buffer: the kernels see what an
    // mmap of the file would give them, and the file is held once.
    let bytes = match read_aligned(&t.path) {
        Ok(b) => b,
        Err(e) => {
            o.io_error = Some(format!("cannot read: {e}"));
            return o;
        }
    };
    if let Some(want) = &t.sha256 {
        o.hash = if no_hash {
            Hash::Skipped
        } else if sha256(bytes.as_slice()) == *want {
            Hash::Ok
        } else {
            Hash::Mismatch
        };
    }
    if t.container {
        o.check = Some(if e2e {
            check_container_with(bytes.as_slice(), isas, true)
        } else {
            // The self-check's scope (merge): no end-to-end sums, no M = 2 GEMM.
            kernel_check::check::self_check_container(bytes.as_slice(), isas)
        });
    }
    o
}

/// The file's bytes in a 64-byte aligned buffer; FIFOs, sockets and
/// devices are refused without being read.
pub fn read_aligned(path: &Path) -> std::io::Result<AlignedBytes> {
    use std::io::Read;
    let mut f = model_sources::mmap::open_regular(path).map_err(std::io::Error::other)?;
    let len = usize::try_from(f.metadata()?.len())
        .map_err(|_| std::io::Error::other("file too large"))?;
    let mut buf = AlignedBytes::zeroed(len);
    f.read_exact(buf.as_mut_slice())?;
    // The file must not have grown meanwhile.
    let mut extra = [0u8; 1];
    if f.read(&mut extra)? != 0 {
        return Err(std::io::Error::other("file changed while being read"));
    }
    Ok(buf)
}

fn fmt_e(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.3e}")
    } else {
        format!("{v}")
    }
}

fn table_report(isas: &[Isa], outcomes: &[Outcome]) -> String {
    let mut rows: Vec<[String; 9]> = Vec::new();
    for o in outcomes {
        let verdict = if o.pass() { "pass" } else { "FAIL" };
        // One table row: the file's columns, then `isa, exact, e2e, act, result`.
        let mut row = |kind: &str, shape: &str, rest: [String; 5]| {
            let [isa, exact, e2e, act, result] = rest;
            let hash = o.hash.as_str().into();
            rows.push([
                o.name.clone(),
                kind.into(),
                shape.into(),
                hash,
                isa,
                exact,
                e2e,
                act,
                result,
            ]);
        };
        let dash = || "-".to_string();
        let Some(c) = &o.check else {
            let result = match &o.io_error {
                Some(e) => format!("FAIL: {e}"),
                None => verdict.into(),
            };
            row("-", "-", [dash(), dash(), dash(), dash(), result]);
            continue;
        };
        let shape = match c.experts {
            Some(e) => format!("{e}x{}x{} (experts)", c.shape.0, c.shape.1),
            None => format!("{}x{}", c.shape.0, c.shape.1),
        };
        if c.isas.is_empty() {
            let result = if c.problems.is_empty() && o.pass() {
                "pass (no matrix: container checked)".into()
            } else {
                format!("FAIL: {}", c.problems.join("; "))
            };
            row(&c.kind, &shape, [dash(), dash(), dash(), dash(), result]);
        }
        for i in &c.isas {
            let mut result = if i.pass() && c.problems.is_empty() && o.hash != Hash::Mismatch {
                "pass".to_string()
            } else {
                "FAIL".to_string()
            };
            if i.identical_to_scalar == Some(true) {
                result.push_str(" (= scalar)");
            }
            let act = c.activation_ratio.map_or_else(dash, fmt_e);
            let (exact, e2e) = (fmt_e(i.exact.worst_ratio), fmt_e(i.e2e.rel_l2));
            row(
                &c.kind,
                &shape,
                [i.isa.name().into(), exact, e2e, act, result],
            );
        }
        if let Some(e) = &c.embedding {
            let (rel, bound) = (format!("{:.3e} rel", e.rel_max), format!("{:.0e}", e.bound));
            let result = if e.pass() { "pass" } else { "FAIL" }.into();
            row(
                &c.kind,
                &shape,
                ["embed".into(), dash(), rel, bound, result],
            );
        }
    }
    let header = [
        "file",
        "kind",
        "shape",
        "sha256",
        "isa",
        "exact",
        "e2e_rel_l2",
        "act",
        "result",
    ];
    let mut w = header.map(str::len);
    for r in &rows {
        for (wi, c) in w.iter_mut().zip(r) {
            *wi = (*wi).max(c.len());
        }
    }
    let mut s = String::new();
    let line = |s: &mut String, cells: &[&str]| {
        let mut l = String::new();
        for (i, (c, wi)) in cells.iter().zip(&w).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<wi$}  ");
            }
        }
        s.push_str(l.trim_end());
        s.push('\n');
    };
    line(&mut s, &header);
    for r in &rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        line(&mut s, &cells);
    }
    let failed = outcomes.iter().filter(|o| !o.pass()).count();
    let names: Vec<&str> = isas.iter().map(|i| i.name()).collect();
    let _ = writeln!(
        s,
        "{} files, ISAs {}: {}",
        outcomes.len(),
        names.join(", "),
        if failed == 0 {
            "all passed".to_string()
        } else {
            format!("{failed} FAILED")
        }
    );
    s
}

fn json_report(path: &Path, bundle: bool, isas: &[Isa], outcomes: &[Outcome]) -> Result<String> {
    let files = files_json(outcomes);
    let v = serde_json::json!({
        "path": path.display().to_string(),
        "bundle": bundle,
        "isas": isas.iter().map(|i| i.name()).collect::<Vec<_>>(),
        "activation_seed": format!("{:#018x}", kernel_check::check::SEED),
        "files": files,
        "pass": outcomes.iter().all(Outcome::pass),
    });
    Ok(serde_json::to_string_pretty(&v).context("JSON report")? + "\n")
}

/// One JSON object per file, as `convert verify --json` prints them.
pub fn files_json(outcomes: &[Outcome]) -> Vec<serde_json::Value> {
    let num = |v: f64| {
        if v.is_finite() {
            serde_json::json!(v)
        } else {
            serde_json::json!(v.to_string())
        }
    };
    outcomes
        .iter()
        .map(|o| {
            let c = o.check.as_ref();
            serde_json::json!({
                "file": o.name,
                "sha256": match o.hash {
                    Hash::Ok => "ok",
                    Hash::Mismatch => "mismatch",
                    Hash::Skipped => "skipped",
                    Hash::NotApplicable => "not_applicable",
                },
                "kind": c.map(|c| c.kind.clone()),
                "shape": c.map(|c| vec![c.shape.0, c.shape.1]),
                "experts": c.and_then(|c| c.experts),
                "problems": c.map(|c| c.problems.clone()).unwrap_or_default(),
                "activation_ratio": c.and_then(|c| c.activation_ratio).map(num),
                "error": o.io_error,
                "results": c.map(|c| c.isas.iter().map(|i| serde_json::json!({
                    "isa": i.isa.name(),
                    "exact_worst_ratio": num(i.exact.worst_ratio),
                    "exact_worst_row": i.exact.worst_row,
                    "exact_failing_rows": i.exact.failing_rows,
                    "e2e_rel_l2": num(i.e2e.rel_l2),
                    "e2e_max_abs": num(i.e2e.max_abs),
                    "identical_to_scalar": i.identical_to_scalar,
                    "gemm_identical": i.gemm_identical,
                    "gemm_rows": kernel_check::check::gemm_rows(i.isa),
                    "error": i.error,
                    "pass": i.pass(),
                })).collect::<Vec<_>>()).unwrap_or_default(),
                "embedding": c.and_then(|c| c.embedding.as_ref()).map(|e| serde_json::json!({
                    "rows": e.rows,
                    "rel_max": num(e.rel_max as f64),
                    "bound": e.bound,
                    "pass": e.pass(),
                })),
                "pass": o.pass(),
            })
        })
        .collect()
}
