//! Arguments resolved into typed options (the raw clap values become the
//! values the pipeline works with here, in one place).

use anyhow::{Context, Result};
use ggml_quants::TorchDtype;
use weights_file::format::Interleave;

use crate::cli::ConvertArgs;
use crate::failure::bad_input;

/// The conversion mode, with the data only that mode has.
#[derive(Debug)]
pub enum Mode {
    /// Sidecars for ggml-typed tensors, everything else stays in the source.
    Keep {
        /// `--qtype`: float 2-D weights are quantized first, to this type
        /// or mixture.
        qtype: Option<crate::mixture::Scheme>,
        /// `--tensor-type` rules.
        overrides: Vec<crate::mixture::Override>,
        /// Rows per interleave group.
        interleave: Interleave,
    },
    /// Plain FP16/FP32 for everything (raw types as they are).
    Plain,
    /// CQ4 panels for matmul weights, embeddings and lm_head; plain for the rest.
    Cq4 {
        /// Engine layout (names, policy, config and tokenizer files) or
        /// source names.
        engine: bool,
        /// `--keep-quant`: ggml-typed 2-D tensors stay ggml (sidecars).
        keep_quant: bool,
        /// Rows per interleave group of those sidecars.
        interleave: Interleave,
        /// `--tensor-type` rules: matching matrices become ggml sidecars of
        /// that type (requantized; source layout) or plain FP16 (`f16`).
        overrides: Vec<crate::mixture::Override>,
        /// `--mix auto`: the budget in bits per matrix weight within which
        /// the most sensitive matrices become FP16; `None` for `--mix none`.
        max_bpw: Option<f64>,
        /// `--input-scales auto`: matrices without an `--imatrix` entry
        /// get input scales from the data-free estimate (§CQ4.17).
        estimate: bool,
        /// Rotations, codebooks and the seed shared by every tensor.
        bundle: Box<cq4::Bundle>,
    },
}

/// `--imatrix`: the parsed file and what the manifest says of it.
#[derive(Debug)]
pub struct ImatrixInput {
    /// The path given.
    pub path: std::path::PathBuf,
    /// sha256 of the file.
    pub sha256: String,
    /// Its entries.
    pub data: model_sources::imatrix::Imatrix,
}

/// `--hessians`: the mapped file and its sha256.
#[derive(Debug)]
pub struct HessiansInput {
    /// sha256 of the file.
    pub sha256: String,
    /// Its entries.
    pub data: model_sources::hessians::Hessians,
    /// `hessian_metadata.json`'s `sample_counts` (empty without the file).
    pub samples: std::collections::BTreeMap<String, u64>,
}

/// Everything that decides the output bytes, plus how to run.
#[derive(Debug)]
pub struct Options {
    /// Materialization dtype.
    pub dtype: TorchDtype,
    /// `--imatrix` (with `--qtype`, or `--bits 4` for CQ4 input scales).
    pub imatrix: Option<ImatrixInput>,
    /// `--hessians` (with `--bits 4`: GPTQ for the Hadamard-family matrices).
    pub hessians: Option<HessiansInput>,
    /// The mode.
    pub mode: Mode,
    /// Worker threads (never changes bytes).
    pub threads: usize,
}

impl Options {
    /// Resolve the arguments.
    pub fn from_args(args: &ConvertArgs) -> Result<Self> {
        let interleave = args.interleave.map_or(Interleave::R8, Into::into);
        let mode = if args.bits.is_some() {
            let engine = args
                .layout
                .is_none_or(|l| l == crate::cli::LayoutArg::Engine);
            if engine && args.keep_quant {
                return Err(bad_input(
                    "--keep-quant needs --layout source: the engine does not read ggml sidecars",
                ));
            }
            // The engine reads CQ4 panels and FP16 only; the source layout
            // also carries ggml sidecars.
            let types = if engine {
                vec![ggml_quants::GgmlType::F16]
            } else {
                let mut t = crate::mixture::sidecar_types();
                t.push(ggml_quants::GgmlType::F16);
                t
            };
            if engine {
                if let Some(r) = args.tensor_type.iter().find(|r| {
                    !r.rsplit_once('=')
                        .is_some_and(|(_, t)| t.trim().eq_ignore_ascii_case("f16"))
                }) {
                    return Err(bad_input(format!(
                        "--tensor-type {r:?}: the engine layout takes only REGEX=f16 (the engine reads CQ4 panels and FP16); ggml types need --layout source"
                    )));
                }
            }
            if args.mix.is_some_and(|m| m == crate::cli::MixArg::None) && args.max_bpw.is_some() {
                return Err(bad_input(
                    "--max-bpw is the budget of --mix auto; it means nothing with --mix none",
                ));
            }
            let max_bpw = match args.mix.unwrap_or(crate::cli::MixArg::Auto) {
                crate::cli::MixArg::Auto => {
                    Some(args.max_bpw.unwrap_or(crate::mixture::DEFAULT_MAX_BPW))
                }
                crate::cli::MixArg::None => None,
            };
            Mode::Cq4 {
                engine,
                keep_quant: args.keep_quant,
                interleave,
                overrides: args
                    .tensor_type
                    .iter()
                    .map(|r| crate::mixture::parse_override(r, &types))
                    .collect::<Result<_>>()?,
                max_bpw,
                estimate: args
                    .input_scales
                    .unwrap_or(crate::cli::InputScalesArg::Auto)
                    == crate::cli::InputScalesArg::Auto,
                bundle: Box::new(cq4::Bundle::new(args.seed.unwrap_or(cq4::DEFAULT_SEED))),
            }
        } else if args.plain {
            Mode::Plain
        } else {
            if args.qtype.is_none() && !args.tensor_type.is_empty() {
                return Err(bad_input(
                    "--tensor-type needs --qtype (keep mode) or --bits 4 --layout source",
                ));
            }
            Mode::Keep {
                qtype: args.qtype.map(Into::into),
                overrides: args
                    .tensor_type
                    .iter()
                    .map(|r| crate::mixture::parse_override(r, &crate::mixture::sidecar_types()))
                    .collect::<Result<_>>()?,
                interleave,
            }
        };
        let threads = match args.threads {
            Some(0) => return Err(bad_input("--threads must be at least 1")),
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        if args.imatrix.is_some() && matches!(mode, Mode::Keep { qtype: None, .. }) {
            return Err(bad_input(
                "--imatrix needs --qtype (ggml types, as llama-quantize uses it) or --bits 4 (CQ4 input scales): keep mode copies the source's blocks as they are",
            ));
        }
        let imatrix = match &args.imatrix {
            None => None,
            Some(path) => {
                let data = model_sources::imatrix::read(path)?;
                let bytes = model_sources::mmap::read_regular(path, 1 << 34)?;
                Some(ImatrixInput {
                    path: path.clone(),
                    sha256: crate::outdir::sha256(&bytes),
                    data,
                })
            }
        };
        let hessians = match &args.hessians {
            None => None,
            Some(path) => {
                let data = model_sources::hessians::Hessians::open(path)?;
                let samples = match model_sources::hessians::metadata_path(path) {
                    None => Default::default(),
                    Some(m) => sample_counts(&m)?,
                };
                Some(HessiansInput {
                    sha256: crate::outdir::sha256(data.bytes()),
                    data,
                    samples,
                })
            }
        };
        Ok(Options {
            dtype: args.torch_dtype.into(),
            imatrix,
            hessians,
            mode,
            threads,
        })
    }

    /// The worker pool.
    pub fn pool(&self) -> Result<rayon::ThreadPool> {
        rayon::ThreadPoolBuilder::new()
            .num_threads(self.threads)
            .build()
            .context("cannot start worker threads")
    }

    /// The options that affect the bytes, for the manifest.
    pub fn to_json(&self) -> serde_json::Value {
        let mut j = self.mode_json();
        if let Some(im) = &self.imatrix {
            j["imatrix"] = serde_json::json!({
                "file": im.path.file_name().map(|n| n.to_string_lossy().into_owned()),
                "sha256": im.sha256,
                "format": match im.data.format {
                    model_sources::imatrix::ImatrixFormat::Gguf => "gguf",
                    model_sources::imatrix::ImatrixFormat::Dat => "dat",
                },
                "entries": im.data.entries.len(),
            });
        }
        if let Some(h) = &self.hessians {
            j["hessians"] = serde_json::json!({
                "file": h.data.path().file_name().map(|n| n.to_string_lossy().into_owned()),
                "sha256": h.sha256,
                "entries": h.data.len(),
            });
        }
        j
    }

    fn mode_json(&self) -> serde_json::Value {
        /// `j` plus the `--tensor-type` rules, when there are any.
        fn with_rules(
            mut j: serde_json::Value,
            rules: &[crate::mixture::Override],
        ) -> serde_json::Value {
            if !rules.is_empty() {
                j["tensor_type"] = rules
                    .iter()
                    .map(|o| format!("{}={}", o.pattern, o.ty))
                    .collect();
            }
            j
        }
        let dtype = self.dtype.name();
        match &self.mode {
            Mode::Plain => serde_json::json!({ "mode": "plain", "torch_dtype": dtype }),
            Mode::Keep {
                qtype,
                overrides,
                interleave,
            } => {
                let j = serde_json::json!({
                    "mode": "keep",
                    "torch_dtype": dtype,
                    "qtype": qtype.map(|q| q.name()),
                    "interleave": interleave.factor(),
                });
                with_rules(j, overrides)
            }
            Mode::Cq4 {
                engine,
                keep_quant,
                interleave,
                overrides,
                max_bpw,
                estimate,
                bundle,
            } => {
                let j = serde_json::json!({
                    "mode": "cq4",
                    "bits": 4,
                    "layout": if *engine { "engine" } else { "source" },
                    "torch_dtype": dtype,
                    "seed": bundle.seed(),
                    "keep_quant": keep_quant,
                    "interleave": interleave.factor(),
                    "mix": if max_bpw.is_some() { "auto" } else { "none" },
                    "max_bpw": max_bpw,
                    "input_scales": if *estimate { "auto" } else { "none" },
                });
                with_rules(j, overrides)
            }
        }
    }
}

/// `sample_counts` of the engine's `hessian_metadata.json` (module path ->
/// calibration samples); a file that is not a JSON object with such a map
/// of counts is bad input.
fn sample_counts(path: &std::path::Path) -> Result<std::collections::BTreeMap<String, u64>> {
    let bytes = model_sources::mmap::read_regular(path, 1 << 26)?;
    let bad = |why: &str| bad_input(format!("{}: {why}", path.display()));
    let j: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| bad(&format!("not JSON: {e}")))?;
    let Some(m) = j.get("sample_counts") else {
        return Ok(Default::default());
    };
    let m = m
        .as_object()
        .ok_or_else(|| bad("sample_counts is not an object"))?;
    m.iter()
        .map(|(k, v)| {
            v.as_u64()
                .map(|n| (k.clone(), n))
                .ok_or_else(|| bad(&format!("sample_counts['{k}'] is not a count")))
        })
        .collect()
}
