//! The conversion pipeline: catalogue -> plan -> jobs (into a staging
//! folder) -> manifest -> verify -> swap into the output folder.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use model_sources::{Catalogue, SourceKind};
use rayon::prelude::*;

use crate::cli::ConvertArgs;
use crate::extra::ExtraContent;
use crate::manifest::{self, Entry, ExtraFile, Manifest, SkippedFile, Source, SourceFile, Tool};
use crate::options::Options;
use crate::outdir::{self, OutputDir};
use crate::plan::{self, Action, Plan};
use crate::writers;

/// `convert INPUT OUTPUT`.
pub fn run(args: &ConvertArgs) -> Result<()> {
    let started = Instant::now();
    crate::signals::install()?;
    let input = args.input.as_deref().context("INPUT is required")?;
    let out = args.output.as_deref().context("OUTPUT is required")?;
    let opts = Options::from_args(args)?;
    let pool = opts.pool()?;

    let cat = Catalogue::open(input)?;
    let plan = plan::plan(&cat, &opts)?;
    if !args.quiet {
        eprint!("{}", plan::describe(&cat, &plan, &opts, out));
    }
    let mut inputs: Vec<PathBuf> = cat.files.iter().map(|f| f.path().to_path_buf()).collect();
    inputs.extend(cat.aux_files.iter().cloned());
    inputs.extend(opts.imatrix.iter().map(|m| m.path.clone()));
    let dir = OutputDir::prepare(out, &inputs, args.force, &plan.file_names())?;

    let result = pool.install(|| -> Result<Manifest> {
        let manifest = write_bundle(&cat, &plan, &opts, &dir, args.quiet)?;
        if !args.no_verify {
            let (files, isa) = crate::verify::check_written_bundle(dir.staging(), args.quiet)?;
            if !args.quiet && !args.json {
                eprintln!(
                    "  verified: {files} files on {isa}, against the manifest and the f64 references"
                );
            }
        }
        Ok(manifest)
    });
    let manifest = match result {
        Ok(m) => m,
        Err(e) => {
            dir.abort();
            return Err(e);
        }
    };
    dir.commit(&manifest)?;
    report(args, out, &manifest, started);
    Ok(())
}

fn report(args: &ConvertArgs, out: &Path, manifest: &Manifest, started: Instant) {
    let files = manifest.file_names().count();
    if args.json {
        let total: u64 = manifest
            .tensors
            .iter()
            .filter(|e| e.file.is_some())
            .map(|e| e.bytes)
            .sum();
        let summary = serde_json::json!({
            "output": out.display().to_string(),
            "tensors": manifest.tensors.len(),
            "files": files,
            "tensor_bytes": total,
            "seconds": started.elapsed().as_secs_f64(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&summary).unwrap_or_default()
        );
    } else if !args.quiet {
        eprintln!(
            "done: {} tensors, {} files in {} ({:.2} s)",
            manifest.tensors.len(),
            manifest.tensors.iter().filter(|e| e.file.is_some()).count(),
            out.display(),
            started.elapsed().as_secs_f64()
        );
    }
}

fn progress(total: u64, quiet: bool) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(
        Some(total),
        if quiet {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        },
    );
    pb.set_style(
        ProgressStyle::with_template(
            "  [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} {msg}",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    pb
}

fn source_name(cat: &Catalogue, path: &Path) -> String {
    match cat.kind {
        SourceKind::HfFolder => path
            .strip_prefix(&cat.root)
            .unwrap_or(path)
            .to_string_lossy()
            .into_owned(),
        _ => path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    }
}

/// Every file of the bundle into the staging folder; returns the manifest
/// (also written).
fn write_bundle(
    cat: &Catalogue,
    plan: &Plan,
    opts: &Options,
    dir: &OutputDir,
    quiet: bool,
) -> Result<Manifest> {
    let pb = progress(cat.total_bytes(), quiet);
    let ctx = writers::Ctx {
        cat,
        opts,
        out: dir,
    };
    // Hash the sources while the jobs run (hashing a multi-GB source alone
    // would otherwise be a serial phase); entries of tensors that stay in
    // the source get its hash afterwards.
    let hash_sources = || -> Vec<SourceFile> {
        cat.files
            .par_iter()
            .map(|f| SourceFile {
                name: source_name(cat, f.path()),
                bytes: f.len(),
                sha256: outdir::sha256(f.bytes()),
            })
            .collect()
    };
    let run_jobs = || -> Result<Vec<Entry>> {
        plan.jobs
            .par_iter()
            .map(|job| {
                let entry = writers::run(&ctx, job)?;
                pb.inc(job.tensor.n_bytes);
                Ok(entry)
            })
            .collect()
    };
    let (source_files, entries) = rayon::join(hash_sources, run_jobs);
    let mut entries = entries?;
    for (e, job) in entries.iter_mut().zip(&plan.jobs) {
        if matches!(job.action, Action::Source(_)) {
            let f = &source_files[job.tensor.file];
            e.sha256 = f.sha256.clone();
            e.source_file = Some(f.name.clone());
        }
    }
    pb.finish_and_clear();
    let mut extra = write_extra_files(cat, plan, dir)?;
    if plan
        .extra
        .iter()
        .any(|x| matches!(x.content, ExtraContent::EngineManifest))
    {
        for (name, bytes) in crate::engine::manifests(cat, &entries) {
            let w = dir.write_small(name, &bytes)?;
            extra.push(ExtraFile {
                file: name.into(),
                what: "engine manifest".into(),
                bytes: w.bytes,
                sha256: w.sha256,
            });
        }
    }
    let manifest = manifest_of(cat, opts, source_files, entries, extra);
    dir.write_small(outdir::MANIFEST, manifest.to_json().as_bytes())?;
    Ok(manifest)
}

/// The manifest of a bundle (`docs/FORMAT.md` §manifest).
fn manifest_of(
    cat: &Catalogue,
    opts: &Options,
    files: Vec<SourceFile>,
    tensors: Vec<Entry>,
    extra_files: Vec<ExtraFile>,
) -> Manifest {
    Manifest {
        format: manifest::FORMAT.into(),
        format_version: manifest::FORMAT_VERSION,
        tool: Tool::this(),
        source: Source {
            kind: match cat.kind {
                SourceKind::Gguf { .. } => "gguf",
                SourceKind::Safetensors => "safetensors",
                SourceKind::HfFolder => "hf_folder",
            }
            .into(),
            gguf_version: match cat.kind {
                SourceKind::Gguf { version, .. } => Some(version),
                _ => None,
            },
            architecture: cat.architecture.clone(),
            tied_embeddings: cat.tied_embeddings,
            files,
        },
        options: opts.to_json(),
        tensors,
        extra_files,
        skipped_files: cat
            .skipped_files
            .iter()
            .map(|(file, reason)| SkippedFile {
                file: file.clone(),
                reason: reason.clone(),
            })
            .collect(),
    }
}

/// The GGUF metadata and the copied auxiliary files, in plan order.
fn write_extra_files(cat: &Catalogue, plan: &Plan, dir: &OutputDir) -> Result<Vec<ExtraFile>> {
    let mut extra = Vec::new();
    for x in &plan.extra {
        let bytes = match &x.content {
            ExtraContent::GgufMetadata => gguf_metadata_json(cat)?.into_bytes(),
            ExtraContent::Copy(p) => {
                model_sources::mmap::read_regular(p, model_sources::catalogue::MAX_AUX_BYTES)?
            }
            ExtraContent::Bytes(b) => b.clone(),
            ExtraContent::EngineManifest => continue,
        };
        let w = dir.write_small(&x.name, &bytes)?;
        extra.push(ExtraFile {
            file: x.name.clone(),
            what: x.what.into(),
            bytes: w.bytes,
            sha256: w.sha256,
        });
    }
    Ok(extra)
}

fn gguf_metadata_json(cat: &Catalogue) -> Result<String> {
    let kv: Vec<serde_json::Value> = cat
        .gguf_metadata
        .iter()
        .map(|(k, v)| serde_json::json!({ "key": k, "type": v.type_name(), "value": v.to_json() }))
        .collect();
    let mut text = serde_json::to_string_pretty(&kv)?;
    text.push('\n');
    Ok(text)
}
