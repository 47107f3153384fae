//! `convert qdq BUNDLE OUT`: the model a bundle holds, dequantized, in the
//! formats users evaluate models with (`docs/FORMAT.md` §qdq):
//!
//! - `model.safetensors`: F32 tensors under their Hugging Face names with
//!   every transform undone (llama.cpp's Q/K row order and norm offset,
//!   the engine's Gemma transforms), plus the bundle's `config.json` and
//!   Hugging Face tokenizer files when it has them;
//! - `model.gguf` (bundles made from a GGUF): F32 tensors under the
//!   source's names, in its order and value conventions, with the
//!   source's metadata (`gguf_metadata.json`), `general.file_type` set
//!   to F32.
//!
//! The values are the oracle's weights ([`kernel_check::oracle::weights`]),
//! the quantizer's own dequantization: with no value transform to undo
//! they are exported bit for bit.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use model_export::gguf::GgufWriter;
use model_export::safetensors::SafetensorsWriter;
use model_export::TensorSpec;
use model_sources::gguf::Value as GgufValue;
use model_sources::hf::{hf_tensor, unpermuted_source_row, HfTensor, Undo};
use model_sources::Catalogue;
use rayon::prelude::*;

use crate::cli::{QdqArgs, QdqFormat};
use crate::failure::bad_input;
use crate::manifest::{self, Entry, ExtraFile, Manifest, Source, SourceFile, Tool};
use crate::materialize::Affine;
use crate::outdir::{self, OutputDir, GGUF_METADATA};

/// The safetensors file of a qdq folder.
pub const SAFETENSORS: &str = "model.safetensors";
/// The GGUF file of a qdq folder.
pub const GGUF: &str = "model.gguf";
/// ggml's `LLAMA_FTYPE_ALL_F32`.
const FTYPE_ALL_F32: u32 = 0;

/// How one tensor goes back to Hugging Face and llama.cpp values.
#[derive(Debug, Clone)]
struct Export<'m> {
    entry: &'m Entry,
    /// Name in the safetensors file.
    hf_name: String,
    /// The stored values are in HF row order and convention, through
    /// `affine` (`stored = affine(hf)`); otherwise they are the GGUF's.
    stored_is_hf: bool,
    affine: Affine,
    /// llama.cpp stored `hf + offset`.
    offset: f32,
    /// llama.cpp permuted the rows per head.
    heads: Option<u64>,
}

impl Export<'_> {
    /// GGUF row of HF row `r`.
    fn gguf_row(&self, r: u64, rows: u64) -> Result<u64> {
        match self.heads {
            None => Ok(r),
            Some(h) => unpermuted_source_row(r, rows, h).ok_or_else(|| {
                bad_input(format!(
                    "tensor '{}': {rows} rows are not {h} heads of an even size",
                    self.entry.tensor
                ))
            }),
        }
    }

    /// Rows between the two orders: to HF order (`out[r] = from[g(r)]`)
    /// or to llama.cpp's (`out[g(r)] = from[r]`), `add` added to every
    /// value (skipped when 0: `v + 0.0` would turn -0.0 into +0.0).
    fn reorder(
        &self,
        from: &[f32],
        rows: u64,
        k: usize,
        to_gguf: bool,
        add: f32,
    ) -> Result<Vec<f32>> {
        let mut out = vec![0f32; from.len()];
        for r in 0..rows {
            let g = self.gguf_row(r, rows)? as usize;
            let (dst, src) = if to_gguf {
                (g * k, r as usize * k)
            } else {
                (r as usize * k, g * k)
            };
            let row = &from[src..src + k];
            if add == 0.0 {
                out[dst..dst + k].copy_from_slice(row);
            } else {
                for (d, &v) in out[dst..dst + k].iter_mut().zip(row) {
                    *d = v + add;
                }
            }
        }
        Ok(out)
    }

    /// Stored `rows x k` values to HF values.
    fn to_hf(&self, stored: &[f32], rows: u64, k: usize) -> Result<Vec<f32>> {
        if !self.stored_is_hf {
            return self.reorder(stored, rows, k, false, -self.offset);
        }
        if self.affine.is_identity() {
            return Ok(stored.to_vec());
        }
        Ok(stored.iter().map(|&v| self.affine.unapply(v)).collect())
    }

    /// Stored `rows x k` values to llama.cpp values (GGUF sources only).
    fn to_gguf(&self, stored: &[f32], rows: u64, k: usize) -> Result<Vec<f32>> {
        if !self.stored_is_hf {
            return Ok(stored.to_vec());
        }
        self.reorder(&self.to_hf(stored, rows, k)?, rows, k, true, self.offset)
    }
}

/// One tensor's values for the safetensors and the GGUF export.
type Exported = (Option<Vec<f32>>, Option<Vec<f32>>);

/// The undo steps a bundle's manifest recorded for `e` (engine layout).
fn recorded(e: &Entry) -> Result<(Affine, f32, Option<u64>)> {
    let (mut affine, mut offset, mut heads) = (Affine::IDENTITY, 0f32, None);
    let num = |t: &serde_json::Value, k: &str| -> Result<f64> {
        t.get(k).and_then(|v| v.as_f64()).ok_or_else(|| {
            bad_input(format!(
                "tensor '{}': manifest transform {t} has no number '{k}'",
                e.tensor
            ))
        })
    };
    for t in &e.transforms {
        match t.get("op").and_then(|v| v.as_str()) {
            Some("unpermute_rows") => heads = Some(num(t, "heads")? as u64),
            Some("add") => offset = -(num(t, "value")? as f32),
            Some("affine") => {
                affine = Affine {
                    add: num(t, "add")? as f32,
                    mul: num(t, "mul")? as f32,
                    then: num(t, "then")? as f32,
                }
            }
            _ => {
                return Err(bad_input(format!(
                    "tensor '{}': manifest transform {t} is not one qdq can undo",
                    e.tensor
                )))
            }
        }
    }
    if affine.mul == 0.0 || !affine.mul.is_finite() {
        return Err(bad_input(format!(
            "tensor '{}': manifest transform multiplies by {}",
            e.tensor, affine.mul
        )));
    }
    Ok((affine, offset, heads))
}

/// `gguf_metadata.json` of a bundle back to typed key/values.
fn gguf_metadata(dir: &Path) -> Result<Vec<(String, GgufValue)>> {
    let p = dir.join(GGUF_METADATA);
    let text = model_sources::mmap::read_regular(&p, 1 << 31)?;
    let bad = |why: String| bad_input(format!("{}: {why}", p.display()));
    let items: Vec<serde_json::Value> =
        serde_json::from_slice(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    items
        .iter()
        .map(|it| {
            let key = it.get("key").and_then(|k| k.as_str());
            let ty = it.get("type").and_then(|k| k.as_str());
            let (Some(key), Some(ty), Some(v)) = (key, ty, it.get("value")) else {
                return Err(bad("an entry lacks key, type or value".into()));
            };
            let v = GgufValue::from_typed_json(ty, v)
                .ok_or_else(|| bad(format!("key {key}: the value is not a {ty}")))?;
            Ok((key.to_string(), v))
        })
        .collect()
}

fn meta_str<'a>(meta: &'a [(String, GgufValue)], key: &str) -> Option<&'a str> {
    meta.iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| v.as_str())
}

/// What the export of `m` holds, tensor by tensor; skipped tensors are
/// reported on stderr.
fn exports<'m>(
    m: &'m Manifest,
    meta: &[(String, GgufValue)],
    have_source: bool,
    quiet: bool,
) -> Result<Vec<Export<'m>>> {
    let gguf = m.source.kind == "gguf";
    let arch = m
        .source
        .architecture
        .clone()
        .or_else(|| meta_str(meta, "general.architecture").map(str::to_string))
        .unwrap_or_default();
    let mut v = Vec::new();
    for e in &m.tensors {
        let in_source = e.file.is_none() && e.layout == "source";
        if in_source && !have_source {
            return Err(bad_input(format!(
                "tensor '{}' stays in the source file {} (layout source): give the model with --source",
                e.tensor,
                e.source_file.as_deref().unwrap_or("?"),
            )));
        }
        if e.file.is_none() && !in_source {
            if !quiet {
                eprintln!(
                    "  not exported: tensor '{}': the bundle does not hold it",
                    e.tensor
                );
            }
            continue;
        }
        let file = e.file.as_deref().unwrap_or_default();
        if !in_source && !outdir::is_plain_name(file) {
            return Err(bad_input(format!(
                "tensor '{}': manifest names a path outside the bundle: {file:?}",
                e.tensor
            )));
        }
        let x = if e.hf_name.is_some() || !e.transforms.is_empty() {
            let (affine, offset, heads) = recorded(e)?;
            Export {
                entry: e,
                hf_name: e.hf_name.clone().unwrap_or_else(|| e.tensor.clone()),
                stored_is_hf: true,
                affine,
                offset,
                heads,
            }
        } else if gguf {
            let (hf_name, undo) = match hf_tensor(&arch, &e.tensor, meta) {
                HfTensor::Mapped { name, undo } => (name, undo),
                HfTensor::Dropped(_) | HfTensor::Unknown => (e.tensor.clone(), Undo::None),
            };
            let (offset, heads) = match undo {
                Undo::None => (0.0, None),
                Undo::Offset(o) => (o, None),
                Undo::UnpermuteRows { heads } => (0.0, Some(heads as u64)),
            };
            Export {
                entry: e,
                hf_name,
                stored_is_hf: false,
                affine: Affine::IDENTITY,
                offset,
                heads,
            }
        } else {
            Export {
                entry: e,
                hf_name: e.tensor.clone(),
                stored_is_hf: true,
                affine: Affine::IDENTITY,
                offset: 0.0,
                heads: None,
            }
        };
        v.push(x);
    }
    Ok(v)
}

/// The stored values of one tensor file, `rows x k` (`k` the last
/// dimension of the manifest shape).
fn stored_values(
    dir: &Path,
    e: &Entry,
    source: Option<&Catalogue>,
) -> Result<(Vec<f32>, u64, usize)> {
    if let (None, Some(cat)) = (&e.file, source) {
        return source_values(cat, e);
    }
    let file = e.file.as_deref().unwrap_or_default();
    let path = dir.join(file);
    let at = || format!("tensor '{}' ({})", e.tensor, path.display());
    let bytes =
        crate::verify::read_aligned(&path).with_context(|| format!("cannot read {}", at()))?;
    let f = weights_file::WeightsFile::parse(bytes.as_slice())
        .map_err(|err| bad_input(format!("{}: {err}", at())))?;
    if f.header()
        .sidecar_shape()
        .is_some_and(|s| s.experts.is_some())
    {
        return expert_values(&f, e).map_err(|err| bad_input(format!("{}: {err}", at())));
    }
    let m = kernels::Matrix::from_file(&f).map_err(|err| {
        bad_input(format!(
            "{}: {err} (qdq exports float, ggml and CQ4 tensors)",
            at()
        ))
    })?;
    let w =
        kernel_check::oracle::weights(&m).map_err(|err| bad_input(format!("{}: {err}", at())))?;
    let g = m.as_gemv();
    let total: u64 = e.shape.iter().product();
    let k = *e.shape.last().unwrap_or(&1);
    let rows = total.checked_div(k).unwrap_or(0);
    let (fr, fc) = (g.rows() as u64, g.cols() as u64);
    if fr * fc == total {
        return Ok((w, rows, k as usize));
    }
    // Panels pad K to a multiple of 128: keep the first K columns.
    if fr == rows && fc >= k {
        let mut out = Vec::with_capacity(total as usize);
        for r in w.chunks_exact(fc as usize) {
            out.extend_from_slice(&r[..k as usize]);
        }
        return Ok((out, rows, k as usize));
    }
    Err(bad_input(format!(
        "{}: the file holds {fr} x {fc} values, the manifest says shape {:?}",
        at(),
        e.shape
    )))
}

/// The values of a 3-D expert sidecar, expert after expert (each the
/// oracle's weights of the 2-D matrix the kernels select): `E x N` rows.
fn expert_values(
    f: &weights_file::WeightsFile<'_>,
    e: &Entry,
) -> Result<(Vec<f32>, u64, usize), String> {
    let ex = kernels::GgmlExperts::from_file(f).map_err(|err| err.to_string())?;
    let (n, k) = (ex.rows(), ex.cols());
    if e.shape != [ex.experts() as u64, n as u64, k as u64] {
        return Err(format!(
            "the file holds {} experts of {n} x {k}, the manifest says shape {:?}",
            ex.experts(),
            e.shape
        ));
    }
    let mut w = Vec::new();
    for x in 0..ex.experts() {
        let m = kernels::Matrix::Ggml(ex.expert(x).map_err(|err| err.to_string())?);
        w.extend(kernel_check::oracle::weights(&m).map_err(|err| format!("expert {x}: {err}"))?);
    }
    Ok((w, (ex.experts() * n) as u64, k))
}

/// The source model of `m`, each of its files checked against the
/// manifest's digest.
fn open_source(path: &Path, m: &Manifest) -> Result<Catalogue> {
    let cat = Catalogue::open(path)?;
    for (i, f) in cat.files.iter().enumerate() {
        let name = match cat.kind {
            model_sources::SourceKind::HfFolder => f
                .path()
                .strip_prefix(&cat.root)
                .unwrap_or(f.path())
                .to_string_lossy()
                .into_owned(),
            _ => f
                .path()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        let want = m.source.files.iter().find(|s| s.name == name);
        let ok = want.is_some_and(|w| {
            w.bytes == f.len()
                && w.digest
                    == if m.format_version < 2 {
                        // Format 1 recorded the sha256 of the whole file.
                        outdir::sha256(f.bytes())
                    } else {
                        crate::digest::compute_file_digest(&cat, i)
                    }
        });
        if !ok {
            return Err(bad_input(format!(
                "--source {}: {name} is not the file the bundle was made from (its size or digest differs from the bundle's manifest)",
                path.display()
            )));
        }
    }
    Ok(cat)
}

/// A tensor that stays in the source, as f32 (`rows x k`).
fn source_values(cat: &Catalogue, e: &Entry) -> Result<(Vec<f32>, u64, usize)> {
    let t = cat
        .get(&e.tensor)
        .ok_or_else(|| bad_input(format!("--source: the model has no tensor '{}'", e.tensor)))?;
    let mut v = Vec::with_capacity(t.shape.iter().product::<u64>() as usize);
    crate::materialize::values(
        cat,
        t,
        ggml_quants::TorchDtype::Float32,
        crate::materialize::Transform::NONE,
        |chunk| {
            v.extend_from_slice(chunk);
            Ok(())
        },
    )?;
    let k = *e.shape.last().unwrap_or(&1);
    let rows = (v.len() as u64).checked_div(k).unwrap_or(0);
    Ok((v, rows, k as usize))
}

/// A bundle's tensors dequantized next to its source's values: what
/// `convert report` measures the reconstruction error with (the same
/// dequantization and undo steps as the export).
pub struct Pairs<'m> {
    dir: &'m Path,
    exports: Vec<Export<'m>>,
    source: Catalogue,
    gguf: bool,
}

impl<'m> Pairs<'m> {
    /// Bundle `dir` with manifest `m` and its source model `source` (each
    /// source file checked against the manifest's digest).
    pub fn open(dir: &'m Path, m: &'m Manifest, source: &Path) -> Result<Self> {
        let has_meta = m.extra_files.iter().any(|x| x.file == GGUF_METADATA);
        let meta = if has_meta {
            gguf_metadata(dir)?
        } else {
            Vec::new()
        };
        let source = open_source(source, m)?;
        let exports = exports(m, &meta, true, true)?;
        Ok(Pairs {
            dir,
            exports,
            source,
            gguf: m.source.kind == "gguf",
        })
    }

    /// `(dequantized, source)` values of tensor `name`, both in the
    /// source's element order and value convention (transforms undone);
    /// `None` when the bundle holds no file for it.
    pub fn values(&self, name: &str) -> Result<Option<(Vec<f32>, Vec<f32>)>> {
        let Some(x) = self
            .exports
            .iter()
            .find(|x| x.entry.tensor == name && x.entry.file.is_some())
        else {
            return Ok(None);
        };
        let (stored, rows, k) = stored_values(self.dir, x.entry, None)?;
        let deq = if self.gguf {
            x.to_gguf(&stored, rows, k)?
        } else {
            x.to_hf(&stored, rows, k)?
        };
        let (src, _, _) = source_values(&self.source, x.entry)?;
        if src.len() != deq.len() {
            return Err(bad_input(format!(
                "tensor '{name}': the bundle holds {} values, the source {}",
                deq.len(),
                src.len()
            )));
        }
        Ok(Some((deq, src)))
    }
}

/// `convert qdq`.
pub fn run(args: &QdqArgs) -> Result<()> {
    crate::signals::install()?;
    let bundle = &args.bundle;
    let m = Manifest::read(bundle)?;
    let gguf_source = m.source.kind == "gguf";
    let has_meta = m.extra_files.iter().any(|x| x.file == GGUF_METADATA);
    let (want_st, want_gguf) = match args.format {
        QdqFormat::Both => (true, gguf_source && has_meta),
        QdqFormat::Safetensors => (true, false),
        QdqFormat::Gguf => (false, true),
    };
    if want_gguf && !(gguf_source && has_meta) {
        return Err(bad_input(format!(
            "{}: the bundle was not made from a GGUF (or lacks {GGUF_METADATA}), so there is no llama.cpp metadata to write a GGUF with; export safetensors and run llama.cpp's convert_hf_to_gguf.py on it",
            bundle.display()
        )));
    }
    let meta = if has_meta {
        gguf_metadata(bundle)?
    } else {
        Vec::new()
    };
    let source = match &args.source {
        Some(p) => Some(open_source(p, &m)?),
        None => None,
    };
    let ex = exports(&m, &meta, source.is_some(), args.quiet)?;
    let copies: Vec<&ExtraFile> = if want_st {
        m.extra_files
            .iter()
            // The engine layout's own merges.txt etc. are not Hugging Face
            // files: only copies of the source's are carried on.
            .filter(|x| {
                model_sources::catalogue::HF_AUX_FILES.contains(&x.file.as_str())
                    && (x.what == crate::extra::COPIED || x.file == "config.json")
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut planned: Vec<String> = Vec::new();
    if want_st {
        planned.push(SAFETENSORS.into());
    }
    if want_gguf {
        planned.push(GGUF.into());
    }
    planned.extend(copies.iter().map(|x| x.file.clone()));
    planned.push(outdir::MANIFEST.into());
    let mut inputs: Vec<PathBuf> = m.file_names().map(|n| bundle.join(n)).collect();
    inputs.push(bundle.clone());
    if let Some(cat) = &source {
        inputs.extend(cat.files.iter().map(|f| f.path().to_path_buf()));
    }
    let dir = OutputDir::prepare(&args.output, &inputs, args.force, &planned)?;
    let job = ExportJob {
        args,
        source: source.as_ref(),
        manifest: &m,
        meta: &meta,
        exports: &ex,
        copies: &copies,
        want_st,
        want_gguf,
    };
    let result = job.write_all(&dir);
    match result {
        Ok(manifest) => {
            dir.commit(&manifest)?;
            if !args.quiet {
                eprintln!(
                    "done: {} tensors exported to {}",
                    ex.len(),
                    args.output.display()
                );
            }
            Ok(())
        }
        Err(e) => {
            dir.abort();
            Err(e)
        }
    }
}

/// Everything one export writes from.
struct ExportJob<'a> {
    args: &'a QdqArgs,
    source: Option<&'a Catalogue>,
    manifest: &'a Manifest,
    meta: &'a [(String, GgufValue)],
    exports: &'a [Export<'a>],
    copies: &'a [&'a ExtraFile],
    want_st: bool,
    want_gguf: bool,
}

impl ExportJob<'_> {
    fn write_all(&self, dir: &OutputDir) -> Result<Manifest> {
        let ExportJob {
            args,
            source,
            manifest: m,
            meta,
            exports: ex,
            copies,
            want_st,
            want_gguf,
        } = *self;
        let bundle = &args.bundle;
        let specs = |hf: bool| -> Vec<TensorSpec> {
            ex.iter()
                .map(|x| TensorSpec {
                    name: if hf {
                        x.hf_name.clone()
                    } else {
                        x.entry.tensor.clone()
                    },
                    shape: x.entry.shape.clone(),
                })
                .collect()
        };
        let show = |name: &str| args.output.join(name).display().to_string();
        let export_err = |name: &str| {
            let shown = show(name);
            move |e: model_export::ExportError| anyhow::anyhow!("cannot write {shown}: {e}")
        };
        let mut st = if want_st {
            let f = dir.create(SAFETENSORS)?;
            let meta = [("format".to_string(), "pt".to_string())];
            Some(SafetensorsWriter::new(f, &specs(true), &meta).map_err(export_err(SAFETENSORS))?)
        } else {
            None
        };
        let mut gg = if want_gguf {
            let mut meta = meta.to_vec();
            for (k, v) in meta.iter_mut() {
                if k == "general.file_type" {
                    *v = GgufValue::U32(FTYPE_ALL_F32);
                }
            }
            let f = dir.create(GGUF)?;
            Some(GgufWriter::new(f, &meta, &specs(false)).map_err(export_err(GGUF))?)
        } else {
            None
        };
        let pb = ProgressBar::with_draw_target(
            Some(ex.len() as u64),
            if args.quiet {
                ProgressDrawTarget::hidden()
            } else {
                ProgressDrawTarget::stderr()
            },
        );
        pb.set_style(
            ProgressStyle::with_template(
                "  [{elapsed_precise}] {wide_bar} {pos}/{len} tensors {msg}",
            )
            .expect("static template")
            .progress_chars("=> "),
        );
        // Dequantize a few tensors at once (in parallel), write them in order.
        let window = 2 * rayon::current_num_threads().max(1);
        for chunk in ex.chunks(window) {
            let done: Vec<Result<Exported>> = chunk
                .par_iter()
                .map(|x| {
                    let (stored, rows, k) = stored_values(bundle, x.entry, source)?;
                    let hf = want_st.then(|| x.to_hf(&stored, rows, k)).transpose()?;
                    let gv = want_gguf.then(|| x.to_gguf(&stored, rows, k)).transpose()?;
                    Ok((hf, gv))
                })
                .collect();
            for (x, r) in chunk.iter().zip(done) {
                let (hf, gv) = r?;
                if let (Some(w), Some(v)) = (st.as_mut(), hf) {
                    w.write_tensor(&v).map_err(export_err(SAFETENSORS))?;
                }
                if let (Some(w), Some(v)) = (gg.as_mut(), gv) {
                    w.write_tensor(&v).map_err(export_err(GGUF))?;
                }
                pb.set_message(x.entry.tensor.clone());
                pb.inc(1);
            }
        }
        pb.finish_and_clear();
        let mut extra_files = Vec::new();
        let mut record = |file: &str, what: &str, w: manifest::Written| {
            extra_files.push(ExtraFile {
                file: file.into(),
                what: what.into(),
                bytes: w.bytes,
                sha256: w.sha256,
            });
        };
        if let Some(w) = st {
            let f = w.finish().map_err(export_err(SAFETENSORS))?;
            record(
                SAFETENSORS,
                "dequantized tensors, Hugging Face names and values",
                f.commit()?,
            );
        }
        if let Some(w) = gg {
            let f = w.finish().map_err(export_err(GGUF))?;
            record(
                GGUF,
                "dequantized tensors, llama.cpp names and values, source metadata",
                f.commit()?,
            );
        }
        for x in copies {
            let p = bundle.join(&x.file);
            let bytes = model_sources::mmap::read_regular(&p, 1 << 31)?;
            if outdir::sha256(&bytes) != x.sha256 {
                return Err(bad_input(format!(
                    "{}: its sha256 differs from the bundle's manifest",
                    p.display()
                )));
            }
            record(
                &x.file,
                "copied from the bundle",
                dir.write_small(&x.file, &bytes)?,
            );
        }
        let mbytes = model_sources::mmap::read_regular(&bundle.join(outdir::MANIFEST), 1 << 30)?;
        let manifest = Manifest {
            format: manifest::FORMAT.into(),
            format_version: manifest::FORMAT_VERSION,
            tool: Tool {
                name: "convert".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
            source: Source {
                kind: "bundle".into(),
                gguf_version: None,
                architecture: m.source.architecture.clone(),
                tied_embeddings: m.source.tied_embeddings,
                files: vec![SourceFile {
                    name: outdir::MANIFEST.into(),
                    bytes: mbytes.len() as u64,
                    // No tensors: the digest of its bytes as a whole.
                    digest: crate::digest::file_digest(&outdir::sha256(&mbytes), [])
                        .expect("a sha256 is 64 hex digits"),
                }],
            },
            options: serde_json::json!({ "command": "qdq", "format": args.format.name() }),
            tensors: Vec::new(),
            extra_files,
            skipped_files: Vec::new(),
        };
        dir.write_small(outdir::MANIFEST, manifest.to_json().as_bytes())?;
        Ok(manifest)
    }
}
