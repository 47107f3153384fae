//! The conversion pipeline: catalogue -> plan -> jobs (into a staging
//! folder) -> manifest -> verify -> swap into the output folder.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use model_sources::{Catalogue, SourceKind};
use rayon::prelude::*;

use crate::cli::ConvertArgs;
use crate::digest;
use crate::extra::ExtraContent;
use crate::manifest::{
    self, source_name, Entry, ExtraFile, Manifest, SkippedFile, Source, SourceFile, Tool,
};
use crate::options::{Mode, Options};
use crate::outdir::{self, OutputDir};
use crate::plan::{self, Action, Plan};
use crate::shard;
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
    if args.dry_run {
        return dry_run(args, &cat, &plan, &opts, out, started);
    }
    if !args.quiet {
        eprint!("{}", plan::describe(&cat, &plan, &opts, out));
    }
    let mut inputs: Vec<PathBuf> = cat.files.iter().map(|f| f.path().to_path_buf()).collect();
    inputs.extend(cat.aux_files.iter().cloned());
    inputs.extend(opts.imatrix.iter().map(|m| m.path.clone()));
    if let Some(spec) = args.shard {
        return run_shard(args, &cat, &plan, &opts, &pool, spec, &inputs, started);
    }
    let dir = OutputDir::prepare(out, &inputs, args.force || args.resume, &plan.file_names())?;
    let resume = if args.resume {
        Resume::load(out, &opts, &cat, &plan)?
    } else {
        None
    };

    let result = pool.install(|| -> Result<(Manifest, usize)> {
        let portion = Portion::all(&cat, &plan);
        let check = !args.no_verify;
        if check {
            // A bad CONVERT_FORCE_ISA cap is bad input, as in `convert verify`.
            crate::verify::select_isas(crate::cli::IsaArg::All)?;
        }
        let done = write_portion(&cat, &plan, &dir, &portion, resume.as_ref(), args.quiet, &opts, check)?;
        if !done.failed.is_empty() {
            return Err(crate::verify::written_bundle_failed(&done.failed));
        }
        let reused = done.reused;
        let files = done.source_files(&cat);
        let entries = done.entries.into_iter().map(|(_, e)| e).collect();
        let extras = done.extras.into_iter().map(|(_, x)| x).collect();
        let header = manifest_of(&cat, &opts, files, Vec::new(), Vec::new());
        let manifest = assemble(header, entries, extras, engine_model_type(&cat, &plan), |n, b| {
            dir.write_small(n, b)
        })?;
        dir.write_small(outdir::MANIFEST, manifest.to_json().as_bytes())?;
        if check && !args.quiet && !args.json {
            eprintln!(
                "  verified: {} files on {}, each as it was written (sidecars against the source bytes, every file's GEMV against the f64 references)",
                done.checked,
                kernels::best().name()
            );
        }
        Ok((manifest, reused))
    });
    let (manifest, reused) = match result {
        Ok(m) => m,
        Err(e) => {
            dir.abort();
            return Err(e);
        }
    };
    dir.commit(&manifest)?;
    report(args, out, &manifest, reused, started);
    Ok(())
}

/// The model type the engine manifests are made for, when the plan has
/// them.
fn engine_model_type(cat: &Catalogue, plan: &Plan) -> Option<String> {
    plan.extra
        .iter()
        .any(|x| matches!(x.content, ExtraContent::EngineManifest))
        .then(|| crate::engine::model_type(cat))
}

/// The final manifest from its header (`tensors` and `extra_files` empty)
/// and every tensor entry and extra file in order: entries of tensors that
/// stay in the source get their file's sha256, then the engine manifests
/// (written through `write`) follow the extra files. A single run and
/// `convert merge` both end here, so their manifests are the same bytes.
pub fn assemble(
    mut header: Manifest,
    mut entries: Vec<Entry>,
    mut extra: Vec<ExtraFile>,
    engine_model_type: Option<String>,
    mut write: impl FnMut(&str, &[u8]) -> Result<outdir::Written>,
) -> Result<Manifest> {
    for e in entries.iter_mut().filter(|e| e.layout == "source") {
        if let Some(f) = header
            .source
            .files
            .iter()
            .find(|f| Some(&f.name) == e.source_file.as_ref())
        {
            e.sha256 = f.digest.clone();
        }
    }
    if let Some(model_type) = engine_model_type {
        for (name, bytes) in crate::engine::manifests(&model_type, &entries) {
            let w = write(name, &bytes)?;
            extra.push(ExtraFile {
                file: name.into(),
                what: "engine manifest".into(),
                bytes: w.bytes,
                sha256: w.sha256,
            });
        }
    }
    header.tensors = entries;
    header.extra_files = extra;
    Ok(header)
}

fn report(args: &ConvertArgs, out: &Path, manifest: &Manifest, reused: usize, started: Instant) {
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
            "reused_files": reused,
            "seconds": started.elapsed().as_secs_f64(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&summary).unwrap_or_default()
        );
    } else if !args.quiet {
        let written = manifest.tensors.iter().filter(|e| e.file.is_some()).count();
        // With --resume, say how much was kept: the point of a rerun.
        let resumed = if args.resume {
            format!(
                " ({reused} kept from the previous run, {} converted)",
                written.saturating_sub(reused)
            )
        } else {
            String::new()
        };
        eprintln!(
            "done: {} tensors, {written} files{resumed} in {} ({:.2} s)",
            manifest.tensors.len(),
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

/// The work one process does: indices of planned tensors, plan extra files
/// (engine manifests excluded) and source files to hash.
#[derive(Debug, Default)]
pub struct Portion {
    jobs: Vec<usize>,
    extras: Vec<usize>,
    sources: Vec<usize>,
}

impl Portion {
    /// Everything (a single run).
    fn all(cat: &Catalogue, plan: &Plan) -> Portion {
        Portion {
            jobs: (0..plan.jobs.len()).collect(),
            extras: (0..plan.extra.len())
                .filter(|&i| !matches!(plan.extra[i].content, ExtraContent::EngineManifest))
                .collect(),
            sources: (0..cat.files.len()).collect(),
        }
    }

    /// The items `partition` gives to shard `index`.
    fn of_shard(items: &[shard::Item], part: &[usize], index: usize) -> Portion {
        let mut p = Portion::default();
        for (it, _) in items.iter().zip(part).filter(|(_, &s)| s == index) {
            match it.kind {
                shard::ItemKind::Tensor => p.jobs.push(it.index),
                shard::ItemKind::Extra => p.extras.push(it.index),
                shard::ItemKind::SourceHash => p.sources.push(it.index),
            }
        }
        p.jobs.sort_unstable();
        p.extras.sort_unstable();
        p.sources.sort_unstable();
        p
    }

    /// The bundle files this portion writes.
    fn file_names(&self, plan: &Plan) -> Vec<String> {
        self.jobs
            .iter()
            .map(|&i| &plan.jobs[i])
            .filter(|j| j.action.writes_file())
            .map(|j| j.file.clone())
            .chain(self.extras.iter().map(|&i| plan.extra[i].name.clone()))
            .collect()
    }
}

/// What [`write_portion`] made, each with its index.
#[derive(Debug, Default)]
struct Done {
    entries: Vec<(usize, Entry)>,
    extras: Vec<(usize, ExtraFile)>,
    /// Source files whose non-tensor bytes were hashed here, with that
    /// sha256.
    sources: Vec<(usize, String)>,
    /// Files `--resume` kept.
    reused: usize,
    /// Files the self-check ran on.
    checked: usize,
    /// Files that failed it, with the reason.
    failed: Vec<(String, String)>,
}

impl Done {
    /// `source.files` of the manifest: every source file, with its digest
    /// when this portion made it (every tensor of the file and its
    /// non-tensor bytes hashed here: a whole run), empty otherwise.
    fn source_files(&self, cat: &Catalogue) -> Vec<SourceFile> {
        cat.files
            .iter()
            .enumerate()
            .map(|(i, f)| SourceFile {
                name: source_name(cat, f.path()),
                bytes: f.len(),
                digest: self.digest(cat, i).unwrap_or_default(),
            })
            .collect()
    }

    /// The digest of source file `file`, if this portion has every part.
    fn digest(&self, cat: &Catalogue, file: usize) -> Option<String> {
        let rest = &self.sources.iter().find(|(j, _)| *j == file)?.1;
        let hashes: Option<Vec<&str>> = digest::file_tensors(cat, file)
            .into_iter()
            .map(|i| {
                let (_, e) = self.entries.iter().find(|(j, _)| *j == i)?;
                e.source_sha256.as_deref()
            })
            .collect();
        digest::file_digest(rest, hashes?)
    }

    /// What merge needs of the source files hashed here (partial manifests).
    fn source_hashes(&self, cat: &Catalogue) -> Vec<shard::SourceHash> {
        self.sources
            .iter()
            .map(|(index, rest)| shard::SourceHash {
                index: *index,
                rest_sha256: rest.clone(),
                tensors: digest::file_tensors(cat, *index),
            })
            .collect()
    }
}

/// Whether this portion needs [`importance_estimate`]: `--input-scales
/// auto` and a CQ4 matrix without an `--imatrix` entry.
fn estimate_wanted(plan: &Plan, portion: &Portion, opts: &Options) -> bool {
    matches!(opts.mode, Mode::Cq4 { estimate: true, .. })
        && portion.jobs.iter().any(|&i| {
            let j = &plan.jobs[i];
            matches!(j.action, Action::Panels { .. }) && j.imatrix.is_none()
        })
}

/// `--input-scales auto`: the data-free importance estimate (FORMAT.md
/// §CQ4.17), when a CQ4 matrix of this portion has no `--imatrix` entry.
/// A model whose decoder the estimate does not recognise is converted
/// without one (said on stderr).
fn importance_estimate(
    cat: &Catalogue,
    plan: &Plan,
    portion: &Portion,
    opts: &Options,
    quiet: bool,
) -> Result<Option<crate::importance::Estimate>> {
    if !estimate_wanted(plan, portion, opts) {
        return Ok(None);
    }
    // Every CQ4 matrix that may take input scales from the estimate gets
    // its AWQ column sums from the estimate's read of it.
    let sums_wanted = portion
        .jobs
        .iter()
        .map(|&i| &plan.jobs[i])
        .filter(|j| matches!(j.action, Action::Panels { .. }) && j.imatrix.is_none())
        .filter(|j| j.transform.unpermute_heads.is_none())
        .map(|j| (j.tensor.name.clone(), j.transform.values))
        .collect();
    let t0 = Instant::now();
    match crate::importance::estimate(cat, opts.dtype, &sums_wanted)? {
        Ok(e) => {
            if !quiet {
                eprintln!(
                    "  input scales: importance estimated from the weights for {} matrices ({:.1} s)",
                    e.len(),
                    t0.elapsed().as_secs_f64()
                );
            }
            Ok(Some(e))
        }
        Err(why) => {
            if !quiet {
                eprintln!("  input scales: no estimate ({why}); matrices without --imatrix entries get scale 1");
            }
            Ok(None)
        }
    }
}

/// Make the codebooks and rotations the portion's CQ4 matrices take from
/// their bundle ([`cq4::Bundle::prepare`]). An error is left to the
/// tensor's encoder, which gives it with the tensor's name.
fn prepare_bundle(plan: &Plan, portion: &Portion) {
    // Each distinct (bundle, family, width) once, side by side (the
    // codebooks and the rotation are independent; `prepare` pads the width
    // and a cached one returns at once).
    let mut wanted: Vec<(&cq4::Bundle, cq4::Family, usize)> = Vec::new();
    for &i in &portion.jobs {
        let job = &plan.jobs[i];
        if let (Action::Panels { family, bundle }, [_, k]) = (&job.action, &job.tensor.shape[..]) {
            let (family, k) = (*family, *k as usize);
            if !wanted
                .iter()
                .any(|&(b, f, w)| std::ptr::eq(b, *bundle) && (f, w) == (family, k))
            {
                wanted.push((bundle, family, k));
            }
        }
    }
    wanted
        .par_iter()
        .with_max_len(1)
        .for_each(|&(bundle, family, k)| {
            let _ = bundle.prepare(family, k);
        });
}

/// Write a portion of the bundle into the staging folder; with `check`,
/// run the self-check on each tensor file right after it is written
/// ([`crate::verify::check_staged_file`]; failures are in [`Done::failed`]).
#[allow(clippy::too_many_arguments)]
fn write_portion(
    cat: &Catalogue,
    plan: &Plan,
    dir: &OutputDir,
    portion: &Portion,
    resume: Option<&Resume>,
    quiet: bool,
    opts: &Options,
    check: bool,
) -> Result<Done> {
    let total: u64 = portion
        .jobs
        .iter()
        .map(|&i| plan.jobs[i].tensor.n_bytes)
        .sum();
    // Every source byte is hashed once: the jobs' tensors two at a time in
    // groups (`hash_tensors`), the rest of each file (headers, metadata,
    // padding) by `digest::rest_sha256`. A job needs its tensor's hash only
    // for its manifest entry, so the hashing runs beside the estimate and
    // the jobs; with --resume a job first compares its tensor's hash with
    // the old manifest's, so the hashes come first (on every thread).
    let threads = rayon::current_num_threads();
    let stop = AtomicBool::new(false);
    let hash_tensors = |groups: usize| -> HashMap<usize, String> {
        // Groups of about equal bytes (longest first, each to the lightest
        // group), each hashed on one thread two tensors at a time.
        // (Without --resume the jobs of `hashes_own_source` hash their own.)
        let jobs: Vec<usize> = portion
            .jobs
            .iter()
            .copied()
            .filter(|&i| resume.is_some() || !writers::hashes_own_source(&plan.jobs[i]))
            .collect();
        let parts = digest::balanced_groups(jobs, |i| plan.jobs[i].tensor.n_bytes, groups);
        parts
            .par_iter()
            .with_max_len(1)
            .flat_map_iter(|jobs| {
                let tensors: Vec<_> = jobs.iter().map(|&i| plan.jobs[i].tensor).collect();
                jobs.iter()
                    .copied()
                    .zip(digest::tensors_sha256(cat, &tensors, &stop))
            })
            .collect()
    };
    let hash_all = |groups: usize| {
        rayon::join(
            || hash_tensors(groups),
            || -> Vec<(usize, String)> {
                portion
                    .sources
                    .par_iter()
                    .map(|&i| (i, digest::rest_sha256(cat, i)))
                    .collect()
            },
        )
    };
    type Job = (usize, Entry, bool, Option<(String, String)>);
    // The jobs by decreasing estimated cost (ties in plan order): the
    // longest start first and the short ones fill the end, so no thread
    // finishes a long job alone (results are put back in plan order).
    let mut order = portion.jobs.clone();
    order.sort_by_key(|&i| std::cmp::Reverse(shard::job_cost(&plan.jobs[i])));
    // The jobs, after the estimate; `hashed` (the tensors' hashes) is given
    // with --resume.
    let run_jobs = |hashed: Option<&HashMap<usize, String>>| -> Result<Vec<Job>> {
        // The estimate is a chain of layers that leaves a thread idle at
        // times; the bundle's codebooks and rotations (the orthogonal one
        // `O(Kp^3)`) fill it.
        let (estimate, ()) = rayon::join(
            || importance_estimate(cat, plan, portion, opts, quiet),
            || prepare_bundle(plan, portion),
        );
        let estimate = estimate?;
        let pb = progress(total, quiet);
        let ctx = writers::Ctx {
            cat,
            opts,
            out: dir,
            estimate: estimate.as_ref(),
            hash_source: hashed.is_none(),
            checked: check,
            parallel_done: None,
        };
        let run_one = |i: usize, ctx: &writers::Ctx<'_>| -> Result<Job> {
            let job = &plan.jobs[i];
            let t = job.tensor;
            let src = hashed.map(|h| match h.get(&i) {
                Some(h) => h.clone(),
                None => digest::tensor_sha256(cat, t),
            });
            let imp = writers::importance(ctx, job).map(|(a, _)| writers::importance_sha256(a));
            let kept = match (resume, &src) {
                (Some(r), Some(src)) => r.keep(i, job, src, imp.as_deref(), dir)?,
                _ => None,
            };
            let reused = kept.is_some();
            let mut entry = match kept {
                Some(e) => e,
                None => {
                    let mut e = writers::run(ctx, job)?;
                    if src.is_some() {
                        e.source_sha256 = src;
                    }
                    if matches!(job.action, Action::Source(_)) {
                        e.source_file = Some(source_name(cat, cat.file_of(t)));
                    }
                    e
                }
            };
            if matches!(job.action, Action::Source(_)) {
                // Filled from the source file's digest by `assemble`.
                entry.sha256 = String::new();
            }
            // The file's self-check while its pages are in the cache; a
            // sidecar of moved blocks is compared with the source bytes.
            let failed = match (&entry.file, check) {
                (Some(f), true) => {
                    let copied = matches!(
                        job.action,
                        Action::Sidecar {
                            requantize: false,
                            ..
                        }
                    );
                    crate::verify::check_staged_file(dir.staging(), f, copied.then(|| cat.data(t)))
                        .err()
                        .map(|why| (f.clone(), why))
                }
                _ => None,
            };
            // The tensor's mapped pages leave the resident set.
            cat.release(t, 0, t.n_bytes);
            pb.inc(t.n_bytes);
            Ok((i, entry, reused, failed))
        };
        let run_all = |jobs: &[usize]| -> Result<Vec<Job>> {
            jobs.par_iter()
                .with_max_len(1)
                .map(|&i| run_one(i, &ctx))
                .collect()
        };
        // A job that costs more than a thread's share is the run's long
        // pole: run among the others, it gets the other threads only once
        // they run out of jobs, and then ends the run alone with the part
        // of it that is one thread's (a CQ4 file's header and its hash read
        // back, the self-check's set-up). So it runs first on every thread
        // (the others take its encoding's tasks) until its writer says its
        // parallel part is done (`Ctx::parallel_done`), and the other jobs
        // start then, beside its sequential end.
        let costs: u64 = order.iter().map(|&i| shard::job_cost(&plan.jobs[i])).sum();
        // (Only a CQ4 matrix: its encoding is what runs on every thread and
        // its writer says when that is done; another job's writer may run
        // on one thread throughout, and would leave the others idle.)
        let pole = order.first().filter(|&&i| {
            let job = &plan.jobs[i];
            threads > 1
                && matches!(job.action, Action::Panels { .. })
                && shard::job_cost(job) > costs / threads as u64
        });
        let mut done: Vec<Job> = match pole {
            None => run_all(&order)?,
            Some(&first) => {
                let parallel_done = AtomicBool::new(false);
                let failed = AtomicBool::new(false);
                let pole_ctx = writers::Ctx {
                    parallel_done: Some(&parallel_done),
                    ..ctx
                };
                let (a, b) = rayon::join(
                    || {
                        let r = run_one(first, &pole_ctx);
                        failed.store(r.is_err(), Ordering::Relaxed);
                        parallel_done.store(true, Ordering::Release);
                        r
                    },
                    || {
                        while !parallel_done.load(Ordering::Acquire) {
                            // Help with the long job's tasks, or wait.
                            if rayon::yield_now() != Some(rayon::Yield::Executed) {
                                std::thread::sleep(std::time::Duration::from_micros(50));
                            }
                        }
                        if failed.load(Ordering::Relaxed) {
                            // (Its error is the run's: no other job starts.)
                            return Ok(Vec::new());
                        }
                        run_all(&order[1..])
                    },
                );
                let mut all = b?;
                all.push(a?);
                all
            }
        };
        pb.finish_and_clear();
        done.sort_by_key(|j| j.0);
        Ok(done)
    };
    let (hashed, sources, mut entries) = if resume.is_some() {
        let (hashed, sources) = hash_all(threads);
        let entries = run_jobs(Some(&hashed))?;
        (hashed, sources, entries)
    } else {
        // About one group per four threads: a group hashes several times
        // faster than a thread converts, and it runs beside the jobs. A
        // failed job stops the hashing (its results are not used then).
        let ((hashed, sources), entries) = rayon::join(
            || hash_all(threads / 4),
            || {
                let r = run_jobs(None);
                if r.is_err() {
                    stop.store(true, Ordering::Relaxed);
                }
                r
            },
        );
        (hashed, sources, entries?)
    };
    // Files written without their hash (`OutputDir::create_unhashed`),
    // hashed now from the staging folder, many at once on every thread.
    let (unhashed, names): (Vec<usize>, Vec<&str>) = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.1.sha256.is_empty())
        .filter_map(|(k, e)| Some((k, e.1.file.as_deref()?)))
        .unzip();
    if !unhashed.is_empty() {
        let hashes = digest::files_sha256(dir.staging(), &names, threads)?;
        for (k, h) in unhashed.into_iter().zip(hashes) {
            entries[k].1.sha256 = h;
        }
    }
    for (i, e, _, _) in entries.iter_mut() {
        if e.source_sha256.is_none() {
            e.source_sha256 = hashed.get(i).cloned();
        }
    }
    let reused = entries.iter().filter(|e| e.2).count();
    let checked = if check {
        entries.iter().filter(|e| e.1.file.is_some()).count()
    } else {
        0
    };
    let extras = write_extra_files(cat, plan, dir, &portion.extras)?;
    let mut failed = Vec::new();
    let entries = entries
        .into_iter()
        .map(|(i, e, _, f)| {
            failed.extend(f);
            (i, e)
        })
        .collect();
    Ok(Done {
        entries,
        extras,
        sources,
        reused,
        checked,
        failed,
    })
}

/// `--resume`: the previous bundle in the output folder and the rule for
/// keeping its files (`docs/FORMAT.md` §manifest, "Resume").
pub struct Resume {
    old: Manifest,
}

impl Resume {
    /// The bundle in `out` when it was written by this tool version with
    /// the same options from a source of the same kind and the same
    /// auxiliary files; `None` (everything is converted) otherwise.
    fn load(out: &Path, opts: &Options, cat: &Catalogue, plan: &Plan) -> Result<Option<Resume>> {
        if std::fs::symlink_metadata(out.join(outdir::MANIFEST)).is_err() {
            return Ok(None);
        }
        let old = Manifest::read(out)?;
        let this = Tool::this();
        let same = old.format_version == manifest::FORMAT_VERSION
            && old.tool.name == this.name
            && old.tool.version == this.version
            && old.options == opts.to_json()
            && old.source.architecture == cat.architecture
            && old.source.tied_embeddings == cat.tied_embeddings;
        if !same {
            return Ok(None);
        }
        // The non-tensor files (config, tokenizer, GGUF metadata) shape the
        // plan (engine names, transforms, head counts): a change to one of
        // them converts everything.
        for x in &plan.extra {
            let bytes = match &x.content {
                ExtraContent::GgufMetadata => gguf_metadata_json(cat)?.into_bytes(),
                ExtraContent::Copy(p) => {
                    model_sources::mmap::read_regular(p, model_sources::catalogue::MAX_AUX_BYTES)?
                }
                ExtraContent::Bytes(b) => b.clone(),
                ExtraContent::EngineManifest => continue,
            };
            let h = outdir::sha256(&bytes);
            if !old
                .extra_files
                .iter()
                .any(|o| o.file == x.name && o.sha256 == h)
            {
                return Ok(None);
            }
        }
        Ok(Some(Resume { old }))
    }

    /// The old entry of job `i` when its file can be kept: same tensor
    /// (name, shape, type, role, source bytes `src`), same planned file,
    /// layout and transforms, the same importance vector (`importance`:
    /// its sha256; the data-free estimate moves with other tensors), and
    /// the file in the output folder still has the recorded size and
    /// sha256. The file is then linked into the staging folder.
    fn keep(
        &self,
        i: usize,
        job: &plan::Job,
        src: &str,
        importance: Option<&str>,
        dir: &OutputDir,
    ) -> Result<Option<Entry>> {
        let t = job.tensor;
        let Some(e) = self.old.tensors.get(i) else {
            return Ok(None);
        };
        let layout = match job.action {
            Action::Plain | Action::Raw(_) => "row_major".to_string(),
            Action::Sidecar { interleave, .. } => format!("ggml_r{}", interleave.factor()),
            Action::Panels { .. } => "cq4_packed_panels".to_string(),
            Action::Source(_) | Action::Skip(_) => return Ok(None),
        };
        let family = match job.action {
            Action::Panels { family, .. } => Some(plan::family_name(family)),
            _ => None,
        };
        let old_family = e
            .details
            .as_ref()
            .and_then(|d| d.get("family"))
            .and_then(|f| f.as_str());
        let (hf_name, record) = match &job.engine {
            Some(x) => (Some(&x.hf_name), x.record.as_slice()),
            None => (None, &[][..]),
        };
        let old_importance = e
            .details
            .as_ref()
            .and_then(|d| d.get("input_scales"))
            .and_then(|s| s.get("importance_sha256"))
            .and_then(|h| h.as_str());
        let same = old_importance == importance
            && e.tensor == t.name
            && e.shape == t.shape
            && e.source_dtype == t.dtype.to_string()
            && e.role == t.role.as_str()
            && e.file.as_deref() == Some(job.file.as_str())
            && e.source_sha256.as_deref() == Some(src)
            && e.layout == layout
            && (family.is_none() || old_family == family)
            && e.hf_name.as_ref() == hf_name
            && e.transforms == record;
        if same && dir.adopt(&job.file, e.bytes, &e.sha256)? {
            Ok(Some(e.clone()))
        } else {
            Ok(None)
        }
    }
}

/// `--shard I/N`: this shard's files and its partial manifest.
#[allow(clippy::too_many_arguments)]
fn run_shard(
    args: &ConvertArgs,
    cat: &Catalogue,
    plan: &Plan,
    opts: &Options,
    pool: &rayon::ThreadPool,
    spec: shard::ShardSpec,
    inputs: &[PathBuf],
    started: Instant,
) -> Result<()> {
    let out = args.output.as_deref().context("OUTPUT is required")?;
    let items = shard::items(cat, plan);
    let part = shard::partition(&items, spec.count);
    let loads = shard::loads(&items, &part, spec.count);
    let plan_sha256 = shard::plan_sha256(cat, plan, opts, &items);
    let portion = Portion::of_shard(&items, &part, spec.index);
    let mine = portion.file_names(plan);
    let all: Vec<String> = plan
        .file_names()
        .into_iter()
        .filter(|n| n != outdir::MANIFEST)
        .collect();
    let dir = OutputDir::prepare_shard(out, inputs, spec, &mine, &all)?;
    let result = pool.install(|| -> Result<shard::ShardManifest> {
        let check = !args.no_verify;
        if check {
            crate::verify::select_isas(crate::cli::IsaArg::All)?;
        }
        let done = write_portion(cat, plan, &dir, &portion, None, args.quiet, opts, check)?;
        if !done.failed.is_empty() {
            return Err(crate::verify::written_bundle_failed(&done.failed));
        }
        let source_hashes = done.source_hashes(cat);
        let mut header = manifest_of(cat, opts, done.source_files(cat), Vec::new(), Vec::new());
        // Digests need every shard's tensors: merge makes them.
        for f in &mut header.source.files {
            f.digest.clear();
        }
        let partial = shard::ShardManifest {
            format: shard::FORMAT.into(),
            format_version: shard::FORMAT_VERSION,
            shard: spec,
            plan_sha256,
            tool: header.tool,
            source: header.source,
            options: header.options,
            skipped_files: header.skipped_files,
            totals: shard::Totals {
                tensors: plan.jobs.len(),
                extra_files: extra_ordinal(plan, plan.extra.len()),
                source_files: cat.files.len(),
            },
            engine_model_type: engine_model_type(cat, plan),
            estimated_cpu_ns: loads[spec.index],
            estimated_total_cpu_ns: loads.iter().sum(),
            tensors: done
                .entries
                .into_iter()
                .map(|(index, entry)| shard::IndexedEntry { index, entry })
                .collect(),
            extra_files: done
                .extras
                .into_iter()
                .map(|(i, file)| shard::IndexedExtra {
                    index: extra_ordinal(plan, i),
                    file,
                })
                .collect(),
            source_hashes,
        };
        dir.write_small(&spec.manifest_name(), partial.to_json().as_bytes())?;
        Ok(partial)
    });
    let partial = match result {
        Ok(p) => p,
        Err(e) => {
            dir.abort();
            return Err(e);
        }
    };
    let files: Vec<String> = partial.file_names().map(str::to_string).collect();
    dir.commit_shard(&files, &spec.manifest_name())?;
    if args.json {
        let summary = serde_json::json!({
            "output": out.display().to_string(),
            "shard": spec.to_string(),
            "tensors": partial.tensors.len(),
            "files": files.len(),
            "estimated_cpu_s": partial.estimated_cpu_ns as f64 / 1e9,
            "seconds": started.elapsed().as_secs_f64(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&summary).unwrap_or_default()
        );
    } else if !args.quiet {
        eprintln!(
            "done: shard {spec}: {} tensors, {} files in {} ({:.2} s; estimated {:.2} of {:.2} CPU s); run `convert merge {}` when every shard is done",
            partial.tensors.len(),
            files.len(),
            out.display(),
            started.elapsed().as_secs_f64(),
            partial.estimated_cpu_ns as f64 / 1e9,
            partial.estimated_total_cpu_ns as f64 / 1e9,
            out.display(),
        );
    }
    Ok(())
}

/// This process's peak resident set (Linux: `VmHWM` of /proc/self/status).
fn peak_rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The position of plan extra file `i` among those shards write (engine
/// manifests, which merge writes, not counted).
fn extra_ordinal(plan: &Plan, i: usize) -> usize {
    plan.extra[..i]
        .iter()
        .filter(|x| !matches!(x.content, ExtraContent::EngineManifest))
        .count()
}

/// `--dry-run`: the catalogue, the plan and the partition into `--shard`'s
/// N shards (1 without it), from the headers alone; nothing is written.
fn dry_run(
    args: &ConvertArgs,
    cat: &Catalogue,
    plan: &Plan,
    opts: &Options,
    out: &Path,
    started: Instant,
) -> Result<()> {
    let count = args.shard.map_or(1, |s| s.count);
    let items = shard::items(cat, plan);
    let part = shard::partition(&items, count);
    let loads = shard::loads(&items, &part, count);
    let files = plan.file_names().len();
    let out_bytes: u64 = plan
        .jobs
        .iter()
        .map(|j| plan::file_bytes(j.tensor, j.action))
        .sum();
    let shards: Vec<serde_json::Value> = loads
        .iter()
        .enumerate()
        .map(|(i, &l)| {
            let p = Portion::of_shard(&items, &part, i);
            serde_json::json!({
                "shard": format!("{i}/{count}"),
                "tensors": p.jobs.len(),
                "files": p.file_names(plan).len(),
                "estimated_cpu_s": l as f64 / 1e9,
            })
        })
        .collect();
    let summary = serde_json::json!({
        "output": out.display().to_string(),
        "tensors": cat.tensors.len(),
        "source_files": cat.files.len(),
        "source_bytes": cat.total_bytes(),
        "files": files,
        "tensor_file_bytes": out_bytes,
        "plan_sha256": shard::plan_sha256(cat, plan, opts, &items),
        "estimated_cpu_s": loads.iter().sum::<u64>() as f64 / 1e9,
        "shards": shards,
        "seconds": started.elapsed().as_secs_f64(),
        "peak_rss_kib": peak_rss_kib(),
    });
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&summary).unwrap_or_default()
        );
    } else if !args.quiet {
        eprint!("{}", plan::describe(cat, plan, opts, out));
        eprintln!(
            "  dry run: {files} files, {} of tensor files, estimated {:.1} CPU s in all",
            plan::human_bytes(out_bytes),
            loads.iter().sum::<u64>() as f64 / 1e9
        );
        for s in &shards {
            eprintln!(
                "    shard {}: {} tensors, {} files, estimated {:.1} CPU s",
                s["shard"].as_str().unwrap_or(""),
                s["tensors"],
                s["files"],
                s["estimated_cpu_s"].as_f64().unwrap_or(0.0)
            );
        }
    }
    Ok(())
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

/// The GGUF metadata and the copied auxiliary files of `which` (indices
/// into `plan.extra`, engine manifests excluded), in plan order.
fn write_extra_files(
    cat: &Catalogue,
    plan: &Plan,
    dir: &OutputDir,
    which: &[usize],
) -> Result<Vec<(usize, ExtraFile)>> {
    let mut extra = Vec::new();
    for &i in which {
        let x = &plan.extra[i];
        let bytes = match &x.content {
            ExtraContent::GgufMetadata => gguf_metadata_json(cat)?.into_bytes(),
            ExtraContent::Copy(p) => {
                model_sources::mmap::read_regular(p, model_sources::catalogue::MAX_AUX_BYTES)?
            }
            ExtraContent::Bytes(b) => b.clone(),
            ExtraContent::EngineManifest => continue,
        };
        let w = dir.write_small(&x.name, &bytes)?;
        extra.push((
            i,
            ExtraFile {
                file: x.name.clone(),
                what: x.what.into(),
                bytes: w.bytes,
                sha256: w.sha256,
            },
        ));
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
