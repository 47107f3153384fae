//! The conversion: catalogue -> plan -> per-tensor jobs -> files + manifest.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, Result};
use ggml_quants::{GgmlType, TorchDtype};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use model_sources::{Catalogue, Role, SourceKind, Tensor};
use rayon::prelude::*;
use weights_file::{Header, Precision};

use crate::cli::ConvertArgs;
use crate::failure::bad_input;
use crate::manifest::{self, Entry, ExtraFile, Manifest, Source, SourceFile, Tool};
use crate::output::{self, HashedFile, NameAllocator, Written};

/// Rows are materialized in chunks of about this many f32 bytes.
const CHUNK_BYTES: u64 = 16 << 20;

/// What happens to one tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Plain row-major FP16 (FP32 when a value does not fit fp16).
    Plain,
    /// A ggml sidecar of type `ty` with rows interleaved by `factor`;
    /// `requantize` when the source is float and is quantized first.
    Sidecar {
        ty: GgmlType,
        factor: usize,
        requantize: bool,
    },
    /// Stays in the source file; only listed in the manifest.
    Source,
    /// CQ4 packed panels of the given rotation family.
    Panels(cq4::Family),
}

impl Action {
    fn describe(self) -> String {
        match self {
            Action::Plain => "plain FP16 (FP32 if out of fp16 range)".into(),
            Action::Sidecar {
                ty,
                factor,
                requantize,
            } => format!(
                "{ty} R{factor} sidecar{}",
                if requantize {
                    " (quantized from float)"
                } else {
                    ""
                }
            ),
            Action::Source => "stays in the source file".into(),
            Action::Panels(f) => format!("CQ4 packed panels, {} rotation", family_name(f)),
        }
    }

    fn suffix(self) -> String {
        match self {
            Action::Plain => ".weights".into(),
            Action::Sidecar { ty, factor, .. } => {
                format!(".{}.r{factor}.weights", ty.name().to_ascii_lowercase())
            }
            Action::Source => String::new(),
            Action::Panels(_) => ".cq4p.weights".into(),
        }
    }

    fn writes_file(self) -> bool {
        self != Action::Source
    }
}

/// The ggml types sidecar files hold.
pub const SIDECAR_TYPES: [GgmlType; 5] = [
    GgmlType::Q8_0,
    GgmlType::Q5_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// The conversion mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Sidecars for ggml-typed tensors, everything else stays in the source.
    Keep {
        qtype: Option<GgmlType>,
        factor: usize,
    },
    /// Plain FP16/FP32 for everything.
    Plain,
    /// CQ4 panels for matmul weights, embeddings and lm_head; plain for the rest.
    Cq4 {
        keep_quant: bool,
        factor: usize,
        seed: u64,
    },
}

/// "hadamard" or "orthogonal".
pub fn family_name(f: cq4::Family) -> &'static str {
    match f {
        cq4::Family::Hadamard => "hadamard",
        cq4::Family::Orthogonal => "orthogonal",
    }
}

/// One planned job.
pub struct Job<'c> {
    tensor: &'c Tensor,
    action: Action,
    file: String,
}

/// Options resolved from the arguments.
pub struct Options {
    pub dtype: TorchDtype,
    pub mode: Mode,
    /// CQ4 bundle state (rotations, codebooks) shared by all tensors.
    pub bundle: Option<cq4::Bundle>,
}

impl Options {
    fn from_args(args: &ConvertArgs) -> Result<Self> {
        let factor = args
            .interleave
            .as_deref()
            .map_or(8, |f| if f == "4" { 4 } else { 8 });
        let mode = if let Some(bits) = args.bits {
            if bits != 4 {
                return Err(bad_input(format!(
                    "--bits {bits} is not supported: only --bits 4 (CQ4 packed panels) is"
                )));
            }
            Mode::Cq4 {
                keep_quant: args.keep_quant,
                factor,
                seed: args.seed.unwrap_or(cq4::DEFAULT_SEED),
            }
        } else if args.plain {
            Mode::Plain
        } else {
            Mode::Keep {
                qtype: args.qtype.map(Into::into),
                factor,
            }
        };
        let bundle = match mode {
            Mode::Cq4 { seed, .. } => Some(cq4::Bundle::new(seed)),
            _ => None,
        };
        Ok(Options {
            dtype: args.torch_dtype.into(),
            mode,
            bundle,
        })
    }

    fn to_json(&self) -> serde_json::Value {
        match self.mode {
            Mode::Plain => serde_json::json!({ "mode": "plain", "torch_dtype": self.dtype.name() }),
            Mode::Keep { qtype, factor } => serde_json::json!({
                "mode": "keep",
                "torch_dtype": self.dtype.name(),
                "qtype": qtype.map(|q| q.to_string()),
                "interleave": factor,
            }),
            Mode::Cq4 {
                keep_quant,
                factor,
                seed,
            } => serde_json::json!({
                "mode": "cq4",
                "bits": 4,
                "torch_dtype": self.dtype.name(),
                "seed": seed,
                "keep_quant": keep_quant,
                "interleave": factor,
            }),
        }
    }
}

pub fn run(args: &ConvertArgs) -> Result<()> {
    let started = Instant::now();
    let input = args.input.as_deref().expect("clap requires INPUT");
    let out = args.output.as_deref().expect("clap requires OUTPUT");
    let opts = Options::from_args(args)?;
    let threads = match args.threads {
        Some(0) => return Err(bad_input("--threads must be at least 1")),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("cannot start worker threads")?;

    let cat = Catalogue::open(input)?;
    let jobs = plan(&cat, &opts)?;
    if !args.quiet {
        eprint!("{}", describe_plan(&cat, &jobs, &opts, out, threads));
    }

    let mut inputs: Vec<PathBuf> = cat.files.iter().map(|f| f.path().to_path_buf()).collect();
    inputs.extend(cat.aux_files.iter().cloned());
    let aux_names: Vec<String> = cat
        .aux_files
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    let created = !out.exists();
    output::prepare_dir(out, &inputs, args.force, &aux_names)?;

    let written: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let result = pool.install(|| {
        let manifest = convert_all(&cat, &jobs, &opts, out, args, &written)?;
        if !args.no_verify {
            let (files, isas) = crate::verify::check_written_bundle(out)?;
            if !args.quiet && !args.json {
                eprintln!("  verified: {files} files, {isas} ISA(s), against the manifest and the FP32 oracle");
            }
        }
        Ok(manifest)
    });
    match result {
        Ok(manifest) => {
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
                    "files": manifest.tensors.iter().filter(|e| e.file.is_some()).count() + manifest.extra_files.len() + 1,
                    "tensor_bytes": total,
                    "seconds": started.elapsed().as_secs_f64(),
                });
                println!("{}", serde_json::to_string_pretty(&summary)?);
            } else if !args.quiet {
                eprintln!(
                    "done: {} tensors, {} files in {} ({:.2} s)",
                    manifest.tensors.len(),
                    manifest.tensors.iter().filter(|e| e.file.is_some()).count(),
                    out.display(),
                    started.elapsed().as_secs_f64()
                );
            }
            Ok(())
        }
        Err(e) => {
            // Leave nothing half-done behind: remove what this run wrote.
            for p in written.into_inner().unwrap_or_default() {
                let _ = std::fs::remove_file(p);
            }
            if created {
                let _ = std::fs::remove_dir(out);
            }
            Err(e)
        }
    }
}

/// Decide what happens to every tensor and name its file.
fn plan<'c>(cat: &'c Catalogue, opts: &Options) -> Result<Vec<Job<'c>>> {
    let mut names = NameAllocator::default();
    names.reserve(output::MANIFEST);
    names.reserve(output::GGUF_METADATA);
    for p in &cat.aux_files {
        if let Some(n) = p.file_name() {
            names.reserve(&n.to_string_lossy());
        }
    }
    let mut jobs = Vec::with_capacity(cat.tensors.len());
    for t in &cat.tensors {
        let action = action_for(cat, t, opts)?;
        let file = if action.writes_file() {
            names.allocate(&t.name, &action.suffix())
        } else {
            String::new()
        };
        jobs.push(Job {
            tensor: t,
            action,
            file,
        });
    }
    Ok(jobs)
}

fn is_float(t: GgmlType) -> bool {
    matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}

/// Fail early (before any file is written) for types that cannot be decoded.
fn decodable(cat: &Catalogue, t: &Tensor) -> Result<()> {
    if ggml_quants::supports_decode(t.dtype) {
        Ok(())
    } else {
        Err(bad_input(format!(
            "tensor '{}' in {}: ggml type {} cannot be decoded (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)",
            t.name,
            cat.file_of(t).display(),
            t.dtype
        )))
    }
}

fn action_for(cat: &Catalogue, t: &Tensor, opts: &Options) -> Result<Action> {
    let matrix = t.shape.len() == 2;
    Ok(match opts.mode {
        Mode::Plain => {
            decodable(cat, t)?;
            Action::Plain
        }
        Mode::Cq4 {
            keep_quant, factor, ..
        } => {
            if keep_quant && matrix && SIDECAR_TYPES.contains(&t.dtype) {
                Action::Sidecar {
                    ty: t.dtype,
                    factor,
                    requantize: false,
                }
            } else if matrix && matches!(t.role, Role::TokenEmbedding | Role::Output) {
                decodable(cat, t)?;
                Action::Panels(cq4::Family::Orthogonal)
            } else if matrix && t.role == Role::Matmul {
                decodable(cat, t)?;
                Action::Panels(cq4::Family::Hadamard)
            } else {
                decodable(cat, t)?;
                Action::Plain
            }
        }
        Mode::Keep { qtype, factor } => {
            if matrix && SIDECAR_TYPES.contains(&t.dtype) {
                Action::Sidecar {
                    ty: t.dtype,
                    factor,
                    requantize: false,
                }
            } else if let Some(q) = qtype.filter(|_| {
                matrix
                    && is_float(t.dtype)
                    && matches!(t.role, Role::Matmul | Role::TokenEmbedding | Role::Output)
            }) {
                let bs = q.block_size() as u64;
                if !t.ncols().is_multiple_of(bs) {
                    return Err(bad_input(format!(
                        "tensor '{}' in {}: row length {} is not a multiple of the {q} block size {bs}, so --qtype {} cannot quantize it",
                        t.name,
                        cat.file_of(t).display(),
                        t.ncols(),
                        q.name().to_ascii_lowercase(),
                    )));
                }
                Action::Sidecar {
                    ty: q,
                    factor,
                    requantize: true,
                }
            } else {
                Action::Source
            }
        }
    })
}

fn human_bytes(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

fn kind_name(k: &SourceKind) -> String {
    match k {
        SourceKind::Gguf { version, alignment } => {
            format!("GGUF v{version}, alignment {alignment}")
        }
        SourceKind::Safetensors => "safetensors".into(),
        SourceKind::HfFolder => "Hugging Face folder".into(),
    }
}

fn describe_plan(
    cat: &Catalogue,
    jobs: &[Job],
    opts: &Options,
    out: &Path,
    threads: usize,
) -> String {
    let mut s = format!(
        "convert {}: {} ({}{}, {} tensors, {}) -> {}\n  torch dtype: {}   threads: {}   tied embeddings: {}\n  plan:\n",
        env!("CARGO_PKG_VERSION"),
        cat.root.display(),
        kind_name(&cat.kind),
        cat.architecture.as_deref().map(|a| format!(", {a}")).unwrap_or_default(),
        cat.tensors.len(),
        human_bytes(cat.total_bytes()),
        out.display(),
        opts.dtype,
        threads,
        if cat.tied_embeddings { "yes" } else { "no" },
    );
    let mut groups: BTreeMap<String, BTreeMap<&str, (usize, u64)>> = BTreeMap::new();
    for j in jobs {
        let e = groups
            .entry(j.action.describe())
            .or_default()
            .entry(j.tensor.role.as_str())
            .or_default();
        e.0 += 1;
        e.1 += j.tensor.n_bytes;
    }
    for (action, roles) in groups {
        let n: usize = roles.values().map(|v| v.0).sum();
        let b: u64 = roles.values().map(|v| v.1).sum();
        let detail: Vec<String> = roles.iter().map(|(r, (c, _))| format!("{r} {c}")).collect();
        s += &format!(
            "    {n:>5} tensors  {:>10}  {action}  ({})\n",
            human_bytes(b),
            detail.join(", ")
        );
    }
    s
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

fn convert_all(
    cat: &Catalogue,
    jobs: &[Job],
    opts: &Options,
    out: &Path,
    args: &ConvertArgs,
    written: &Mutex<Vec<PathBuf>>,
) -> Result<Manifest> {
    let pb = progress(cat.total_bytes(), args.quiet);
    let track = |p: PathBuf| written.lock().map(|mut w| w.push(p)).ok();

    // Hash the sources while the jobs run (hashing a multi-GB source alone
    // would otherwise be a serial phase); entries of tensors that stay in
    // the source get its hash afterwards.
    let hash_sources = || -> Vec<SourceFile> {
        cat.files
            .par_iter()
            .map(|f| SourceFile {
                name: source_name(cat, f.path()),
                bytes: f.len(),
                sha256: output::sha256(f.bytes()),
            })
            .collect()
    };
    let run_jobs = || -> Result<Vec<Entry>> {
        jobs.par_iter()
            .map(|job| {
                let path = out.join(&job.file);
                if job.action.writes_file() {
                    track(path.clone());
                } else if opts.dtype == TorchDtype::Float16 && is_float(job.tensor.dtype) {
                    // Nothing is materialized, but the bundle promises the
                    // tensor in the requested dtype: check that it fits.
                    for_each_chunk(cat, job.tensor, opts.dtype, |_, _| Ok(()))?;
                }
                let entry = run_job(cat, job, opts, &path)?;
                pb.inc(job.tensor.n_bytes);
                Ok(entry)
            })
            .collect()
    };
    let (source_files, entries) = rayon::join(hash_sources, run_jobs);
    let mut entries = entries?;
    for (e, job) in entries.iter_mut().zip(jobs) {
        if job.action == Action::Source {
            let f = &source_files[job.tensor.file];
            e.sha256 = f.sha256.clone();
            e.source_file = Some(f.name.clone());
        }
    }
    pb.finish_and_clear();

    let mut extra = Vec::new();
    if !cat.gguf_metadata.is_empty() {
        let kv: Vec<serde_json::Value> = cat
            .gguf_metadata
            .iter()
            .map(|(k, v)| serde_json::json!({ "key": k, "type": value_type_name(v), "value": v.to_json() }))
            .collect();
        let mut text = serde_json::to_string_pretty(&kv)?;
        text.push('\n');
        let path = out.join(output::GGUF_METADATA);
        track(path.clone());
        let w = output::write_small(&path, text.as_bytes())?;
        extra.push(extra_file(
            output::GGUF_METADATA,
            "all GGUF key/values of the source",
            w,
        ));
    }
    for p in &cat.aux_files {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let bytes = std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
        let path = out.join(&name);
        track(path.clone());
        let w = output::write_small(&path, &bytes)?;
        extra.push(extra_file(&name, "copied from the source folder", w));
    }

    let manifest = Manifest {
        format: manifest::FORMAT.into(),
        format_version: manifest::FORMAT_VERSION,
        tool: Tool {
            name: "convert".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
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
            files: source_files,
        },
        options: opts.to_json(),
        tensors: entries,
        extra_files: extra,
    };
    let path = out.join(output::MANIFEST);
    track(path.clone());
    output::write_small(&path, manifest.to_json().as_bytes())?;
    Ok(manifest)
}

fn extra_file(name: &str, what: &str, w: Written) -> ExtraFile {
    ExtraFile {
        file: name.into(),
        what: what.into(),
        bytes: w.bytes,
        sha256: w.sha256,
    }
}

/// gguf-py's name of a value's type (`ARRAY[STRING]` for arrays).
fn value_type_name(v: &model_sources::gguf::Value) -> String {
    match v {
        model_sources::gguf::Value::Array(t, _) => format!("ARRAY[{}]", t.name()),
        v => v.value_type().name().into(),
    }
}

/// One job; entries of tensors that stay in the source get the source's
/// hash and name from the caller.
fn run_job(cat: &Catalogue, job: &Job, opts: &Options, path: &Path) -> Result<Entry> {
    let t = job.tensor;
    match job.action {
        Action::Plain => write_plain(cat, t, opts.dtype, path, &job.file),
        Action::Sidecar {
            ty,
            factor,
            requantize,
        } => crate::sidecar::write_sidecar(
            cat, t, ty, factor, requantize, opts.dtype, path, &job.file,
        ),
        Action::Panels(family) => {
            let Mode::Cq4 { seed, .. } = opts.mode else {
                unreachable!("panels only in cq4 mode")
            };
            let bundle = opts.bundle.as_ref().expect("cq4 mode has a bundle");
            crate::panels::write_panels(cat, t, family, bundle, seed, opts.dtype, path, &job.file)
        }
        Action::Source => Ok(Entry {
            tensor: t.name.clone(),
            role: t.role.as_str().into(),
            shape: t.shape.clone(),
            source_dtype: t.dtype.to_string(),
            file: None,
            precision: t.dtype.to_string(),
            layout: "source".into(),
            bytes: t.n_bytes,
            sha256: String::new(),
            source_file: None,
            details: Some(serde_json::json!({ "offset": t.offset })),
        }),
    }
}

/// Rows per materialization chunk for a tensor.
pub fn rows_per_chunk(t: &Tensor) -> usize {
    let row = t.ncols().max(1) * 4;
    (CHUNK_BYTES / row).max(1) as usize
}

/// Materialize a tensor chunk by chunk, calling `f(first_row, values)`.
/// Fails naming the tensor when values overflow fp16 under `float16`.
pub fn for_each_chunk(
    cat: &Catalogue,
    t: &Tensor,
    dtype: TorchDtype,
    f: impl FnMut(usize, &[f32]) -> Result<()>,
) -> Result<()> {
    for_each_chunk_aligned(cat, t, dtype, 1, f)
}

/// [`for_each_chunk`] with chunks that are a multiple of `align` rows (but
/// the last).
pub fn for_each_chunk_aligned(
    cat: &Catalogue,
    t: &Tensor,
    dtype: TorchDtype,
    align: usize,
    mut f: impl FnMut(usize, &[f32]) -> Result<()>,
) -> Result<()> {
    let ncols = t.ncols() as usize;
    let nrows = t.nrows() as usize;
    let data = cat.data(t);
    let row_bytes = data.len().checked_div(nrows).unwrap_or(0);
    let per = (rows_per_chunk(t) / align).max(1) * align;
    let mut buf = vec![0f32; per.min(nrows.max(1)) * ncols];
    let mut stats = ggml_quants::MaterializeStats::default();
    let mut row = 0;
    while row < nrows {
        let n = per.min(nrows - row);
        let out = &mut buf[..n * ncols];
        let src = &data[row * row_bytes..(row + n) * row_bytes];
        let s = ggml_quants::materialize_rows(t.dtype, src, ncols, dtype, out)
            .with_context(|| format!("tensor '{}' in {}", t.name, cat.file_of(t).display()))?;
        stats.merge(&s, (row * ncols) as u64);
        if stats.is_clean() {
            f(row, out)?;
        }
        row += n;
    }
    if let Some(first) = stats.first_f16_overflow {
        return Err(bad_input(format!(
            "tensor '{}' in {}: {} values are beyond the float16 range (first: {} at row {}, column {}); \
             --torch-dtype float16 would turn them into inf: use --torch-dtype bfloat16 or float32",
            t.name,
            cat.file_of(t).display(),
            stats.f16_overflows,
            first.value,
            first.index / ncols as u64,
            first.index % ncols as u64,
        )));
    }
    Ok(())
}

/// True when every value of `v` survives fp16 conversion without becoming inf.
fn fits_fp16(v: &[f32]) -> bool {
    v.iter().all(|x| !x.is_finite() || x.abs() < 65520.0)
}

fn write_plain(
    cat: &Catalogue,
    t: &Tensor,
    dtype: TorchDtype,
    path: &Path,
    file: &str,
) -> Result<Entry> {
    // Pass 1: does everything fit fp16? (An fp16 source always does.)
    let mut fp16 = true;
    if t.dtype != GgmlType::F16 {
        for_each_chunk(cat, t, dtype, |_, v| {
            fp16 &= fits_fp16(v);
            Ok(())
        })?;
    }
    let precision = if fp16 {
        Precision::Fp16
    } else {
        Precision::Fp32
    };
    let es = if fp16 { 2 } else { 4 };
    let shape: Vec<u64> = if t.shape.is_empty() {
        vec![1]
    } else {
        t.shape.clone()
    };
    let header = Header::plain(precision, &shape, t.n_elements() * es);
    let mut w = HashedFile::create(path)?;
    w.write_all(&weights_file::write::prefix(&header, &[])?)?;
    let mut bytes = Vec::new();
    for_each_chunk(cat, t, dtype, |_, v| {
        bytes.clear();
        if fp16 {
            bytes.extend(v.iter().flat_map(|x| half::f16::from_f32(*x).to_le_bytes()));
        } else {
            bytes.extend(v.iter().flat_map(|x| x.to_le_bytes()));
        }
        w.write_all(&bytes)
            .with_context(|| format!("cannot write {}", path.display()))
    })?;
    let done = w.commit()?;
    Ok(Entry {
        tensor: t.name.clone(),
        role: t.role.as_str().into(),
        shape: t.shape.clone(),
        source_dtype: t.dtype.to_string(),
        file: Some(file.into()),
        precision: precision.name(),
        layout: "row_major".into(),
        bytes: done.bytes,
        sha256: done.sha256,
        source_file: None,
        details: None,
    })
}
