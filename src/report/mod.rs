//! `convert report BUNDLE`: what a bundle is worth, to look at.
//!
//! [`build`] gathers the data: the manifest (source, options, every
//! tensor's shape, layout and bytes), `convert verify` of the bundle on
//! every requested ISA ([`crate::verify::verify_bundle`]), the
//! reconstruction error of every tensor file against the source model when
//! it is given ([`crate::qdq::Pairs`]: the dequantization `convert qdq`
//! exports) and optional perplexity figures ([`perplexity`]). [`html`]
//! renders it as one self-contained page (inline CSS and SVG, no script,
//! nothing fetched); [`Report`] serializes as the JSON twin. Everything is
//! deterministic: no times, no absolute paths beyond the one given, sums
//! in a fixed order.

pub mod html;
pub mod perplexity;
mod svg;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use rayon::prelude::*;
use serde::Serialize;

use crate::cli::IsaArg;
use crate::manifest::{self, Entry, Manifest};
use crate::verify::Outcome;

/// `format` of the JSON twin.
pub const FORMAT: &str = "convert-report";
/// Bumped on incompatible changes of the JSON twin.
pub const FORMAT_VERSION: u32 = 1;

/// Element errors are binned relative to the tensor's RMS over
/// `[-HIST_RANGE, HIST_RANGE]` in [`HIST_BINS`] bins.
pub const HIST_RANGE: f64 = 0.5;
/// Bins of the error histogram.
pub const HIST_BINS: usize = 50;

/// What to report on.
pub struct Request<'a> {
    /// The bundle folder.
    pub bundle: &'a Path,
    /// Its source model (adds the reconstruction errors).
    pub source: Option<&'a Path>,
    /// Perplexity figures to show.
    pub perplexity: Option<&'a Path>,
    /// Verify's ISAs.
    pub isa: IsaArg,
    /// No progress bars.
    pub quiet: bool,
}

/// The whole report (the JSON twin is its serialization).
#[derive(Debug, Serialize)]
pub struct Report {
    /// [`FORMAT`].
    pub format: &'static str,
    /// [`FORMAT_VERSION`].
    pub format_version: u32,
    /// The bundle folder as given.
    pub bundle: String,
    /// The tool that wrote the bundle (from its manifest).
    pub tool: manifest::Tool,
    /// The source model (from the manifest).
    pub source: manifest::Source,
    /// Conversion options (from the manifest).
    pub options: serde_json::Value,
    /// Totals.
    pub summary: Summary,
    /// One row per tensor kind, by kind name.
    pub kinds: Vec<KindRow>,
    /// One row per manifest entry, in manifest order.
    pub tensors: Vec<TensorRow>,
    /// Element errors of every measured tensor (with a source).
    pub error_histogram: Option<Histogram>,
    /// `convert verify --json` of the bundle (`isas`, `activation_seed`,
    /// `files`, `pass`).
    pub verify: serde_json::Value,
    /// The figures of `--perplexity-json`.
    pub perplexity: Option<perplexity::Perplexity>,
}

/// Totals of a bundle.
#[derive(Debug, Serialize)]
pub struct Summary {
    /// Manifest entries.
    pub tensors: usize,
    /// Tensor files of the bundle.
    pub tensor_files: usize,
    /// Bytes of the tensor files.
    pub tensor_bytes: u64,
    /// Bytes of the other files (config, tokenizer, metadata).
    pub extra_bytes: u64,
    /// Weights (elements) of the tensors that have a file.
    pub weights: u64,
    /// `tensor_bytes * 8 / weights`.
    pub bpw: Option<f64>,
    /// Weights of the matrices (roles matmul, token_embedding, output) with a file.
    pub matrix_weights: u64,
    /// Bytes of their files.
    pub matrix_bytes: u64,
    /// Bits per matrix weight (what `--max-bpw` budgets).
    pub matrix_bpw: Option<f64>,
    /// Bytes of the source files.
    pub source_bytes: u64,
    /// Tensors whose reconstruction error was measured.
    pub measured: usize,
    /// Reconstruction SQNR over every measured weight, in dB.
    pub sqnr_db: Option<f64>,
    /// Every file passed verify.
    pub verify_pass: bool,
}

/// One tensor kind (the name without its layer number).
#[derive(Debug, Serialize)]
pub struct KindRow {
    /// e.g. `attn_q`, `self_attn.q_proj`, `token_embd`.
    pub kind: String,
    /// The role of its tensors (the first one's).
    pub role: String,
    /// Tensors of this kind.
    pub tensors: usize,
    /// Their weights that have a file.
    pub weights: u64,
    /// Bytes of their files.
    pub bytes: u64,
    /// Bits per weight.
    pub bpw: Option<f64>,
    /// Reconstruction SQNR over the kind's measured weights, in dB.
    pub sqnr_db: Option<f64>,
}

/// One manifest entry.
#[derive(Debug, Serialize)]
pub struct TensorRow {
    /// Name as in the source.
    pub tensor: String,
    /// Its file in the bundle (none: it stays in the source).
    pub file: Option<String>,
    /// Role (manifest).
    pub role: String,
    /// The name without its layer number and `.weight`.
    pub kind: String,
    /// The layer number in its name.
    pub layer: Option<u64>,
    /// Shape (manifest).
    pub shape: Vec<u64>,
    /// Source element type (manifest).
    pub source_dtype: String,
    /// Precision (manifest).
    pub precision: String,
    /// Layout (manifest).
    pub layout: String,
    /// Bytes (manifest).
    pub bytes: u64,
    /// sha256 (manifest).
    pub sha256: String,
    /// Elements.
    pub weights: u64,
    /// `bytes * 8 / weights`.
    pub bpw: Option<f64>,
    /// Against the source (with `--source`, tensors with a file).
    pub error: Option<ErrorStats>,
    /// Verify's verdict on its file.
    pub verify: Option<TensorVerify>,
}

/// Reconstruction error of one tensor.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ErrorStats {
    /// `||w' - w|| / ||w||` (none for an all-zero source tensor).
    pub rel_l2: Option<f64>,
    /// `-20 log10(rel_l2)` (none when exact or undefined).
    pub sqnr_db: Option<f64>,
    /// `max |w' - w|`.
    pub max_abs: f64,
    /// `sum (w' - w)^2` (for the kind and bundle totals).
    pub err_sq: f64,
    /// `sum w^2`.
    pub sig_sq: f64,
}

/// Verify's verdict on one file.
#[derive(Debug, Serialize)]
pub struct TensorVerify {
    /// The file passed.
    pub pass: bool,
    /// Per ISA run.
    pub isas: Vec<IsaVerdict>,
}

/// One ISA's result on one file.
#[derive(Debug, Serialize)]
pub struct IsaVerdict {
    /// The tier.
    pub isa: String,
    /// Passed.
    pub pass: bool,
    /// The GEMV's relative L2 error against the FP32 oracle.
    pub e2e_rel_l2: Option<f64>,
}

/// Element errors relative to their tensor's RMS.
#[derive(Debug, Serialize)]
pub struct Histogram {
    /// Lower edge of the first bin.
    pub lo: f64,
    /// Upper edge of the last bin.
    pub hi: f64,
    /// Counts per bin.
    pub bins: Vec<u64>,
    /// Below `lo`.
    pub below: u64,
    /// At or above `hi`.
    pub above: u64,
}

/// `blk.3.attn_q.weight` -> (`attn_q`, 3); `model.layers.0.mlp.up_proj.weight`
/// -> (`mlp.up_proj`, 0); `token_embd.weight` -> (`token_embd`, none).
pub fn kind_and_layer(name: &str) -> (String, Option<u64>) {
    let parts: Vec<&str> = name.split('.').collect();
    let at = parts
        .iter()
        .position(|p| !p.is_empty() && p.len() <= 9 && p.bytes().all(|b| b.is_ascii_digit()));
    let (rest, layer) = match at {
        Some(i) if i + 1 < parts.len() => (&parts[i + 1..], parts[i].parse().ok()),
        _ => (&parts[..], None),
    };
    let rest = match rest.split_last() {
        Some((&"weight", head)) if !head.is_empty() => head,
        _ => rest,
    };
    (rest.join("."), layer)
}

fn bpw(bytes: u64, weights: u64) -> Option<f64> {
    (weights > 0).then(|| bytes as f64 * 8.0 / weights as f64)
}

fn sqnr(err_sq: f64, sig_sq: f64) -> Option<f64> {
    (err_sq > 0.0 && sig_sq > 0.0).then(|| 10.0 * (sig_sq / err_sq).log10())
}

/// Error statistics of `deq` against `src` (same length), and the
/// element errors added to `hist`.
fn measure(deq: &[f32], src: &[f32], hist: &mut Histogram) -> ErrorStats {
    let (mut err_sq, mut sig_sq, mut max_abs) = (0f64, 0f64, 0f64);
    for (&d, &s) in deq.iter().zip(src) {
        let e = d as f64 - s as f64;
        err_sq += e * e;
        sig_sq += s as f64 * s as f64;
        max_abs = max_abs.max(e.abs());
    }
    let rms = (sig_sq / src.len().max(1) as f64).sqrt();
    if rms > 0.0 {
        let width = (hist.hi - hist.lo) / hist.bins.len() as f64;
        for (&d, &s) in deq.iter().zip(src) {
            let r = (d as f64 - s as f64) / rms;
            if r < hist.lo {
                hist.below += 1;
            } else if r >= hist.hi {
                hist.above += 1;
            } else {
                let i = (((r - hist.lo) / width) as usize).min(hist.bins.len() - 1);
                hist.bins[i] += 1;
            }
        }
    }
    let rel_l2 = (sig_sq > 0.0).then(|| (err_sq / sig_sq).sqrt());
    ErrorStats {
        rel_l2,
        sqnr_db: sqnr(err_sq, sig_sq),
        max_abs,
        err_sq,
        sig_sq,
    }
}

fn empty_histogram() -> Histogram {
    Histogram {
        lo: -HIST_RANGE,
        hi: HIST_RANGE,
        bins: vec![0; HIST_BINS],
        below: 0,
        above: 0,
    }
}

/// The errors of every tensor file against the source (manifest order),
/// and their histogram.
fn errors(
    req: &Request,
    m: &Manifest,
    source: &Path,
) -> Result<(Vec<Option<ErrorStats>>, Histogram)> {
    let pairs = crate::qdq::Pairs::open(req.bundle, m, source)?;
    let pb = crate::progress::bar(m.tensors.len() as u64, "tensors", req.quiet);
    pb.set_prefix("error");
    let measured: Vec<Result<(Option<ErrorStats>, Histogram)>> = m
        .tensors
        .par_iter()
        .map(|e| {
            let mut h = empty_histogram();
            let stats = pairs
                .values(&e.tensor)?
                .map(|(deq, src)| measure(&deq, &src, &mut h));
            pb.inc(1);
            Ok((stats, h))
        })
        .collect();
    pb.finish_and_clear();
    let mut hist = empty_histogram();
    let mut stats = Vec::with_capacity(measured.len());
    for r in measured {
        let (s, h) = r?;
        for (a, b) in hist.bins.iter_mut().zip(&h.bins) {
            *a += b;
        }
        hist.below += h.below;
        hist.above += h.above;
        stats.push(s);
    }
    Ok((stats, hist))
}

fn tensor_verify(o: &Outcome) -> TensorVerify {
    let isas = o
        .check
        .as_ref()
        .map(|c| {
            c.isas
                .iter()
                .map(|i| IsaVerdict {
                    isa: i.isa.name().into(),
                    pass: i.pass(),
                    e2e_rel_l2: Some(i.e2e.rel_l2).filter(|v| v.is_finite()),
                })
                .collect()
        })
        .unwrap_or_default();
    TensorVerify {
        pass: o.pass(),
        isas,
    }
}

fn is_matrix(e: &Entry) -> bool {
    matches!(e.role.as_str(), "matmul" | "token_embedding" | "output")
}

/// Gather the report of `req.bundle`.
pub fn build(req: &Request) -> Result<Report> {
    let m = Manifest::read(req.bundle)?;
    let perplexity = req.perplexity.map(perplexity::read).transpose()?;
    let isas = crate::verify::select_isas(req.isa)?;
    let (errors, histogram) = match req.source {
        Some(s) => {
            let (e, h) = errors(req, &m, s)?;
            (e, Some(h))
        }
        None => (vec![None; m.tensors.len()], None),
    };
    let pb = crate::progress::bar(0, "files", req.quiet);
    let outcomes = crate::verify::verify_bundle(req.bundle, &isas, &pb)?;
    pb.finish_and_clear();
    let by_file: BTreeMap<&str, &Outcome> = outcomes.iter().map(|o| (o.name.as_str(), o)).collect();

    let tensors: Vec<TensorRow> = m
        .tensors
        .iter()
        .zip(&errors)
        .map(|(e, err)| {
            let (kind, layer) = kind_and_layer(&e.tensor);
            let weights = e.shape.iter().product();
            TensorRow {
                tensor: e.tensor.clone(),
                file: e.file.clone(),
                role: e.role.clone(),
                kind,
                layer,
                shape: e.shape.clone(),
                source_dtype: e.source_dtype.clone(),
                precision: e.precision.clone(),
                layout: e.layout.clone(),
                bytes: e.bytes,
                sha256: e.sha256.clone(),
                weights,
                bpw: bpw(e.bytes, weights),
                error: *err,
                verify: e
                    .file
                    .as_deref()
                    .and_then(|f| by_file.get(f))
                    .map(|o| tensor_verify(o)),
            }
        })
        .collect();

    let mut kinds: BTreeMap<String, KindRow> = BTreeMap::new();
    let mut kind_err: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (t, e) in tensors.iter().zip(&m.tensors) {
        let k = kinds.entry(t.kind.clone()).or_insert_with(|| KindRow {
            kind: t.kind.clone(),
            role: t.role.clone(),
            tensors: 0,
            weights: 0,
            bytes: 0,
            bpw: None,
            sqnr_db: None,
        });
        k.tensors += 1;
        if e.file.is_some() {
            k.weights += t.weights;
            k.bytes += t.bytes;
        }
        if let Some(s) = &t.error {
            let ke = kind_err.entry(t.kind.clone()).or_default();
            ke.0 += s.err_sq;
            ke.1 += s.sig_sq;
        }
    }
    for k in kinds.values_mut() {
        k.bpw = bpw(k.bytes, k.weights);
        k.sqnr_db = kind_err.get(&k.kind).and_then(|&(e, s)| sqnr(e, s));
    }

    let with_file = || tensors.iter().filter(|t| t.file.is_some());
    let (tensor_bytes, weights) =
        with_file().fold((0, 0), |(b, w), t| (b + t.bytes, w + t.weights));
    let (matrix_bytes, matrix_weights) = with_file()
        .zip(m.tensors.iter().filter(|e| e.file.is_some()))
        .filter(|(_, e)| is_matrix(e))
        .fold((0, 0), |(b, w), (t, _)| (b + t.bytes, w + t.weights));
    let (err_sq, sig_sq) = tensors
        .iter()
        .filter_map(|t| t.error)
        .fold((0.0, 0.0), |(e, s), x| (e + x.err_sq, s + x.sig_sq));
    let summary = Summary {
        tensors: tensors.len(),
        tensor_files: with_file().count(),
        tensor_bytes,
        extra_bytes: m.extra_files.iter().map(|x| x.bytes).sum(),
        weights,
        bpw: bpw(tensor_bytes, weights),
        matrix_weights,
        matrix_bytes,
        matrix_bpw: bpw(matrix_bytes, matrix_weights),
        source_bytes: m.source.files.iter().map(|f| f.bytes).sum(),
        measured: tensors.iter().filter(|t| t.error.is_some()).count(),
        sqnr_db: sqnr(err_sq, sig_sq),
        verify_pass: outcomes.iter().all(Outcome::pass),
    };
    let verify = serde_json::json!({
        "isas": isas.iter().map(|i| i.name()).collect::<Vec<_>>(),
        "activation_seed": format!("{:#018x}", kernel_check::check::SEED),
        "files": crate::verify::files_json(&outcomes),
        "pass": summary.verify_pass,
    });
    Ok(Report {
        format: FORMAT,
        format_version: FORMAT_VERSION,
        bundle: req.bundle.display().to_string(),
        tool: m.tool,
        source: m.source,
        options: m.options,
        summary,
        kinds: kinds.into_values().collect(),
        tensors,
        error_histogram: histogram,
        verify,
        perplexity,
    })
}

impl Report {
    /// The JSON twin (pretty, trailing newline).
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// What `convert report` wrote.
pub struct Written {
    /// The HTML file.
    pub html: PathBuf,
    /// The JSON file.
    pub json: Option<PathBuf>,
    /// Files verify failed (the report shows them; not an error).
    pub failed_files: usize,
}

/// Build the report and write `html` (and `json`), each atomically.
pub fn write(req: &Request, html: &Path, json: Option<&Path>) -> Result<Written> {
    refuse_bundle_files(req.bundle, html, json)?;
    let report = build(req)?;
    crate::outdir::write_file(html, html::render(&report).as_bytes())?;
    if let Some(j) = json {
        crate::outdir::write_file(j, report.to_json().as_bytes())?;
    }
    let failed_files = report
        .verify
        .get("files")
        .and_then(|f| f.as_array())
        .map_or(0, |f| {
            f.iter()
                .filter(|x| x.get("pass") != Some(&serde_json::Value::Bool(true)))
                .count()
        });
    Ok(Written {
        html: html.to_path_buf(),
        json: json.map(Path::to_path_buf),
        failed_files,
    })
}

/// The report files must not replace a file of the bundle (nor each other).
fn refuse_bundle_files(bundle: &Path, html: &Path, json: Option<&Path>) -> Result<()> {
    if json == Some(html) {
        return Err(crate::failure::bad_input(format!(
            "--json {}: the same file as the HTML report",
            html.display()
        )));
    }
    let m = Manifest::read(bundle)?;
    let dir = std::fs::canonicalize(bundle).ok();
    for p in std::iter::once(html).chain(json) {
        let parent = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let same_dir = dir.is_some() && std::fs::canonicalize(parent).ok() == dir;
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
        if same_dir && name.is_some_and(|n| m.file_names().any(|f| f == n)) {
            return Err(crate::failure::bad_input(format!(
                "{}: a file of the bundle; write the report elsewhere",
                p.display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_layers_from_names() {
        assert_eq!(
            kind_and_layer("blk.3.attn_q.weight"),
            ("attn_q".into(), Some(3))
        );
        assert_eq!(
            kind_and_layer("model.layers.12.mlp.up_proj.weight"),
            ("mlp.up_proj".into(), Some(12))
        );
        assert_eq!(
            kind_and_layer("token_embd.weight"),
            ("token_embd".into(), None)
        );
        assert_eq!(
            kind_and_layer("blk.0.attn_q.bias"),
            ("attn_q.bias".into(), Some(0))
        );
        assert_eq!(kind_and_layer("weight"), ("weight".into(), None));
        assert_eq!(kind_and_layer("x.7"), ("x.7".into(), None));
    }

    #[test]
    fn measure_counts_every_element_and_gives_the_sqnr() {
        let src = [1.0f32, -1.0, 1.0, -1.0];
        let deq = [1.1f32, -1.0, 0.9, 3.0];
        let mut h = empty_histogram();
        let s = measure(&deq, &src, &mut h);
        let total: u64 = h.bins.iter().sum::<u64>() + h.below + h.above;
        assert_eq!(total, 4);
        assert_eq!(h.above, 1, "the error of 4 RMS is beyond the range");
        let want = (0.01f64 + 0.01 + 16.0) / 4.0;
        assert!((s.rel_l2.unwrap() - want.sqrt()).abs() < 1e-6, "{s:?}");
        assert!((s.max_abs - 4.0).abs() < 1e-6);
        assert!((s.sqnr_db.unwrap() + 10.0 * want.log10()).abs() < 1e-6);
        let exact = measure(&src, &src, &mut h);
        assert_eq!((exact.rel_l2, exact.sqnr_db), (Some(0.0), None));
    }
}
