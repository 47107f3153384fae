//! `convert merge OUT`: the shards' partial manifests become the bundle's
//! `manifest.json` (`docs/SCALE_OUT.md`).
//!
//! Order: lock the folder exclusively (no shard may still run); read every
//! `manifest.shard-*.json`; each must be named after the shard it holds
//! (a copy under another name is a duplicate), all must agree (partition
//! size, plan fingerprint, tool, options, source), every shard 0..N-1 must
//! be there once and together they must cover every tensor, extra file and
//! source hash exactly once; every file they list must be in the folder
//! with the recorded size and sha256; then the conversion's self-check on
//! every tensor file; only then are the engine manifests and
//! `manifest.json` written (through a staging folder, renamed in) and the
//! partial manifests removed. Any failure before that leaves the folder as
//! it was, with no `manifest.json`.

use std::io;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use rayon::prelude::*;
use sha256x2::Sha256;

use crate::cli::MergeArgs;
use crate::failure::bad_input;
use crate::manifest::{self, Entry, ExtraFile, Manifest};
use crate::outdir::{self, OutputDir};
use crate::shard::{self, ShardManifest, SourceHash};

/// `convert merge OUT`.
pub fn run(args: &MergeArgs) -> Result<()> {
    let started = Instant::now();
    crate::signals::install()?;
    let dir = OutputDir::prepare_merge(&args.output)?;
    let (manifest, new_files, partials) = match merge(&dir, args) {
        Ok(m) => m,
        Err(e) => {
            dir.abort();
            return Err(e);
        }
    };
    dir.commit_merge(&new_files, &partials)?;
    let files = manifest.file_names().count();
    if args.json {
        let summary = serde_json::json!({
            "output": args.output.display().to_string(),
            "shards": partials.len(),
            "tensors": manifest.tensors.len(),
            "files": files,
            "seconds": started.elapsed().as_secs_f64(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&summary).unwrap_or_default()
        );
    } else if !args.quiet {
        eprintln!(
            "done: merged {} shards: {} tensors, {files} files in {} ({:.2} s)",
            partials.len(),
            manifest.tensors.len(),
            args.output.display(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// A partial manifest and its file name.
struct Part {
    name: String,
    m: ShardManifest,
}

impl Part {
    fn who(&self) -> String {
        format!("shard {} ({})", self.m.shard, self.name)
    }
}

/// Everything up to (not including) the swap: the final manifest (written
/// into the staging folder), the files merge wrote, the partial manifests.
fn merge(dir: &OutputDir, args: &MergeArgs) -> Result<(Manifest, Vec<String>, Vec<String>)> {
    let out = dir.out();
    let parts = read_parts(out)?;
    check_consistent(&parts)?;
    let first = &parts[0].m;
    let totals = first.totals;

    // Every item exactly once.
    let mut tensors: Vec<Option<(Entry, usize)>> = vec![None; totals.tensors];
    let mut extras: Vec<Option<(ExtraFile, usize)>> = vec![None; totals.extra_files];
    let mut hashes: Vec<Option<SourceHash>> = vec![None; totals.source_files];
    for (k, p) in parts.iter().enumerate() {
        let out_of_range = |what: &str, i: usize| {
            bad_input(format!(
                "{}: {what} index {i} is out of range; the partial manifest is damaged",
                p.who()
            ))
        };
        for e in &p.m.tensors {
            let slot = tensors
                .get_mut(e.index)
                .ok_or_else(|| out_of_range("tensor", e.index))?;
            if let Some((_, other)) = slot {
                return Err(bad_input(format!(
                    "tensor '{}' is in both {} and {}: a duplicated shard",
                    e.entry.tensor,
                    parts[*other].who(),
                    p.who()
                )));
            }
            *slot = Some((e.entry.clone(), k));
        }
        for x in &p.m.extra_files {
            let slot = extras
                .get_mut(x.index)
                .ok_or_else(|| out_of_range("extra file", x.index))?;
            if let Some((_, other)) = slot {
                return Err(bad_input(format!(
                    "{} is in both {} and {}: a duplicated shard",
                    x.file.file,
                    parts[*other].who(),
                    p.who()
                )));
            }
            *slot = Some((x.file.clone(), k));
        }
        for h in &p.m.source_hashes {
            let slot = hashes
                .get_mut(h.index)
                .ok_or_else(|| out_of_range("source file", h.index))?;
            if slot.is_some() {
                return Err(bad_input(format!(
                    "source file {} is hashed by two shards (one is {}): a duplicated shard",
                    h.index,
                    p.who()
                )));
            }
            *slot = Some(h.clone());
        }
    }
    let missing: Vec<String> = (tensors.iter().enumerate())
        .filter(|(_, t)| t.is_none())
        .map(|(i, _)| format!("tensor {i}"))
        .chain(
            (extras.iter().enumerate())
                .filter(|(_, x)| x.is_none())
                .map(|(i, _)| format!("extra file {i}")),
        )
        .chain(
            (hashes.iter().enumerate())
                .filter(|(_, h)| h.is_none())
                .map(|(i, _)| format!("the hash of source file {i}")),
        )
        .collect();
    if !missing.is_empty() {
        return Err(bad_input(format!(
            "{}: no shard has {} ({} in all): the partial manifests are not one partition of the same plan; rerun the shards; no manifest written",
            out.display(),
            missing[..missing.len().min(5)].join(", "),
            missing.len()
        )));
    }
    let tensors: Vec<(Entry, usize)> = tensors.into_iter().flatten().collect();
    let extras: Vec<(ExtraFile, usize)> = extras.into_iter().flatten().collect();

    // Every file in the folder with the size and sha256 its shard recorded.
    let files: Vec<(String, u64, String, usize, bool)> = tensors
        .iter()
        .filter_map(|(e, k)| {
            e.file
                .clone()
                .map(|f| (f, e.bytes, e.sha256.clone(), *k, true))
        })
        .chain(
            extras
                .iter()
                .map(|(x, k)| (x.file.clone(), x.bytes, x.sha256.clone(), *k, false)),
        )
        .collect();
    let problems: Vec<String> = files
        .par_iter()
        .filter_map(|(name, bytes, sha, k, _)| {
            let (name, bytes, sha, k) = (name.as_str(), *bytes, sha.as_str(), *k);
            check_file(out, name, bytes, sha)
                .map(|why| format!("{name} of {}: {why}", parts[k].who()))
        })
        .collect();
    if let Some(first_problem) = problems.first() {
        return Err(bad_input(format!(
            "{} file(s) of the shards do not match their partial manifests, e.g. {first_problem}{}; rerun those shards; no manifest written",
            problems.len(),
            if problems.len() > 1 {
                format!(" (and {})", problems[1..].join(", "))
            } else {
                String::new()
            }
        )));
    }

    // The final manifest, as a single run writes it: each source file's
    // digest from its non-tensor bytes' sha256 and its tensors' hashes.
    let mut source = first.source.clone();
    for (f, h) in source.files.iter_mut().zip(hashes.into_iter().flatten()) {
        let parts: Option<Vec<&str>> = h
            .tensors
            .iter()
            .map(|&i| tensors.get(i).and_then(|(e, _)| e.source_sha256.as_deref()))
            .collect();
        f.digest = parts
            .and_then(|p| crate::digest::file_digest(&h.rest_sha256, p))
            .ok_or_else(|| {
                bad_input(format!(
                    "{}: the tensors or hashes recorded for source file {} are not those of the partial manifests' entries; the partial manifests are damaged; no manifest written",
                    out.display(),
                    f.name
                ))
            })?;
    }
    let header = Manifest {
        format: manifest::FORMAT.into(),
        format_version: manifest::FORMAT_VERSION,
        tool: first.tool.clone(),
        source,
        options: first.options.clone(),
        tensors: Vec::new(),
        extra_files: Vec::new(),
        skipped_files: first.skipped_files.clone(),
    };
    let mut written = Vec::new();
    let manifest = crate::convert::assemble(
        header,
        tensors.into_iter().map(|(e, _)| e).collect(),
        extras.into_iter().map(|(x, _)| x).collect(),
        first.engine_model_type.clone(),
        |name, bytes| {
            written.push(name.to_string());
            dir.write_small(name, bytes)
        },
    )?;
    if !args.no_verify {
        let check: Vec<(String, bool)> = files
            .iter()
            .filter(|f| f.4)
            .map(|f| (f.0.clone(), true))
            .collect();
        let (n, isa) = crate::verify::check_files(out, &check)?;
        if !args.quiet && !args.json {
            eprintln!("  verified: {n} tensor files on {isa} against the f64 references; every file's sha256 against its shard's manifest");
        }
    }
    dir.write_small(outdir::MANIFEST, manifest.to_json().as_bytes())?;
    Ok((
        manifest,
        written,
        parts.into_iter().map(|p| p.name).collect(),
    ))
}

/// Why file `name` of the folder is not the one a shard recorded (`None`
/// when it is).
fn check_file(out: &Path, name: &str, bytes: u64, sha: &str) -> Option<String> {
    if !outdir::is_plain_name(name) {
        return Some("the partial manifest names a path outside the bundle".into());
    }
    let p = out.join(name);
    let meta = match std::fs::symlink_metadata(&p) {
        Ok(m) => m,
        Err(_) => return Some("missing".into()),
    };
    if !meta.is_file() {
        return Some("not a regular file".into());
    }
    if meta.len() != bytes {
        return Some(format!(
            "{} bytes, the partial manifest says {bytes}",
            meta.len()
        ));
    }
    let hash = || -> io::Result<String> {
        let mut f = model_sources::mmap::open_regular(&p).map_err(io::Error::other)?;
        let mut h = Sha256::new();
        io::copy(&mut f, &mut h)?;
        Ok(outdir::hex(&h.finalize()))
    };
    match hash() {
        Ok(h) if h == sha => None,
        Ok(_) => Some("sha256 differs from the partial manifest's".into()),
        Err(e) => Some(format!("cannot read: {e}")),
    }
}

/// Every partial manifest of the folder, by file name; each named after
/// the shard it holds; the shards 0..N-1 all there.
fn read_parts(out: &Path) -> Result<Vec<Part>> {
    let mut names: Vec<String> = std::fs::read_dir(out)
        .with_context(|| format!("cannot list {}", out.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| outdir::is_partial_name(n))
        .collect();
    names.sort();
    if names.is_empty() && out.join(crate::manifest::MANIFEST).is_file() {
        return Err(bad_input(format!(
            "{}: no partial manifests, and it holds a manifest.json: already merged (or a single run's bundle)",
            out.display()
        )));
    }
    if names.is_empty() {
        return Err(bad_input(format!(
            "{}: no partial manifests (manifest.shard-I-of-N.json): nothing to merge; run `convert --shard I/N` for every I first",
            out.display()
        )));
    }
    let mut parts = Vec::new();
    for name in names {
        let path = out.join(&name);
        let bytes = model_sources::mmap::read_regular(&path, 1 << 30)
            .map_err(|e| bad_input(format!("{e}")))?;
        let m: ShardManifest = serde_json::from_slice(&bytes).map_err(|e| {
            bad_input(format!(
                "{}: not a partial manifest convert can read: {e}",
                path.display()
            ))
        })?;
        if m.format != shard::FORMAT || m.format_version != shard::FORMAT_VERSION {
            return Err(bad_input(format!(
                "{}: format {:?} version {}, expected {:?} version {}",
                path.display(),
                m.format,
                m.format_version,
                shard::FORMAT,
                shard::FORMAT_VERSION
            )));
        }
        if m.shard.count == 0 || m.shard.index >= m.shard.count {
            return Err(bad_input(format!(
                "{}: shard {} is not a shard index below its count",
                path.display(),
                m.shard
            )));
        }
        if name != m.shard.manifest_name() {
            return Err(bad_input(format!(
                "{name} holds shard {}, whose partial manifest is {}: a duplicated (or renamed) shard; remove it and merge again",
                m.shard,
                m.shard.manifest_name()
            )));
        }
        parts.push(Part { name, m });
    }
    Ok(parts)
}

/// All partial manifests describe shards of the same conversion, and
/// every shard is there.
fn check_consistent(parts: &[Part]) -> Result<()> {
    let first = &parts[0];
    for p in &parts[1..] {
        let (a, b) = (&first.m, &p.m);
        let differs: Option<&str> = if a.shard.count != b.shard.count {
            Some("the number of shards N")
        } else if a.tool.name != b.tool.name || a.tool.version != b.tool.version {
            Some("the convert version")
        } else if a.options != b.options {
            Some("the options")
        } else if a.source.kind != b.source.kind
            || a.source.files.len() != b.source.files.len()
            || a.source
                .files
                .iter()
                .zip(&b.source.files)
                .any(|(x, y)| x.name != y.name || x.bytes != y.bytes)
        {
            Some("the source files")
        } else if a.plan_sha256 != b.plan_sha256 || a.totals != b.totals {
            Some("the plan (plan_sha256)")
        } else {
            None
        };
        if let Some(what) = differs {
            return Err(bad_input(format!(
                "{} does not match {}: {what} differ; every shard must convert the same source with the same options and convert version into a partition of the same N; no manifest written",
                p.who(),
                first.who()
            )));
        }
    }
    let count = first.m.shard.count;
    let mut seen = vec![false; count];
    for p in parts {
        seen[p.m.shard.index] = true;
    }
    let missing: Vec<String> = (0..count)
        .filter(|&i| !seen[i])
        .map(|i| {
            let s = shard::ShardSpec { index: i, count };
            format!("{s} ({})", s.manifest_name())
        })
        .collect();
    if !missing.is_empty() {
        return Err(bad_input(format!(
            "missing {} of {count} shards: {}; run them (or wait for them) and merge again; no manifest written",
            missing.len(),
            missing.join(", ")
        )));
    }
    Ok(())
}
