//! Command-line arguments (clap derive). Validation only; no I/O here.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Convert LLM weights (GGUF, safetensors, Hugging Face folders) into
/// kernel-ready `.weights` files: CQ4 packed panels, row-interleaved ggml
/// sidecars, or plain FP16/FP32.
///
/// Typical use in a build pipeline:
///
///   convert --bits 4 --torch-dtype bf16 model.gguf out/
///
///   convert inspect out/blk.0.attn_q.weight.cq4p.weights
///
/// Exit codes: 0 success, 2 bad input (malformed or unsupported model,
/// bad arguments, values that do not fit the requested dtype), 1 internal
/// failure (I/O errors, bugs).
#[derive(Debug, Parser)]
#[command(
    name = "convert",
    version,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub convert: ConvertArgs,
}

/// Subcommands besides the default conversion.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show the header, flags and region layout of a `.weights` file, or the
    /// table of files of an output folder (from its manifest.json).
    Inspect(InspectArgs),
    /// Re-check every file of a bundle (or one file): sha256 against the
    /// manifest, container validation, and a GEMV over the file's own bytes
    /// on every available ISA compared with a dequantize-then-FP32 oracle.
    /// Exit code 1 on any failure.
    Verify(VerifyArgs),
    /// Export the model a bundle holds, dequantized, for evaluation with
    /// other tools: OUT/model.safetensors (F32, Hugging Face names, every
    /// transform undone, with the bundle's config.json and tokenizer
    /// files) and, for bundles made from a GGUF, OUT/model.gguf (F32,
    /// llama.cpp names and values, the source's metadata). The values are
    /// the quantizer's own dequantization (what `verify` checks kernels
    /// against).
    ///
    ///   convert qdq out/ eval/ && llama-perplexity -m eval/model.gguf -f text.txt
    Qdq(QdqArgs),
    /// Finish a conversion run as N `--shard I/N` tasks: check that every
    /// shard's partial manifest (manifest.shard-I-of-N.json) is in OUTPUT,
    /// exactly once, and that they agree (tool version, options, source,
    /// plan), check every file's size and sha256, run the self-check of a
    /// conversion on every file, then write manifest.json (byte-identical
    /// to a single run's) and remove the partial manifests. A missing,
    /// duplicated or mismatched shard exits 2 naming it, and no
    /// manifest.json is written (docs/SCALE_OUT.md).
    ///
    ///   convert merge out/
    Merge(MergeArgs),
    /// Write a self-contained HTML quality report of a bundle (and the same
    /// data as JSON with --json): source, options, sizes and bits per
    /// weight overall and per tensor kind; per tensor its shape, layout,
    /// bytes, bits per weight, reconstruction error against the source
    /// (with --source) and the verify result on every ISA; inline SVG plots
    /// (error per layer and kind, bytes per kind, error histogram); the
    /// perplexity table of --perplexity-json. No network, no scripts.
    ///
    ///   convert report out/ -o report.html --json report.json --source model/
    Report(ReportArgs),
    /// Print the completion script of a shell (bash, zsh, fish) on stdout,
    /// generated from these very argument definitions.
    ///
    ///   convert completions bash > ~/.local/share/bash-completion/completions/convert
    Completions(CompletionsArgs),
    /// Print the man page convert(1) (roff) on stdout.
    ///
    ///   convert man > ~/.local/share/man/man1/convert.1
    Man,
}

/// `convert merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The output folder the shards wrote.
    pub output: PathBuf,
    /// Skip the GEMV self-check (sizes and sha256 are always checked).
    #[arg(long)]
    pub no_verify: bool,
    /// No summary on stderr.
    #[arg(long, short)]
    pub quiet: bool,
    /// Print a JSON summary on stdout when done.
    #[arg(long)]
    pub json: bool,
}

/// `convert report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A bundle folder (with manifest.json) written by convert.
    pub bundle: PathBuf,
    /// The HTML file to write (replaced atomically if it exists).
    #[arg(long, short, value_name = "FILE", default_value = "report.html")]
    pub output: PathBuf,
    /// Also write the report's data as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// The model the bundle was made from (file or folder; its files must
    /// have the sha256 the manifest records): adds the reconstruction error
    /// of every tensor.
    #[arg(long, value_name = "MODEL")]
    pub source: Option<PathBuf>,
    /// Perplexity figures to show (JSON, schema `convert-perplexity` v1:
    /// README, "Reports"; `scripts/quality` does not write it yet).
    #[arg(long, value_name = "FILE")]
    pub perplexity_json: Option<PathBuf>,
    /// Which kernels verify runs: all (every ISA this CPU has), scalar,
    /// avx2, avx512, neon, sme2.
    #[arg(long, value_enum, default_value = "all")]
    pub isa: IsaArg,
    /// No progress bar or summary on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `convert completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: ShellArg,
}

/// Shells `convert completions` writes scripts for.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShellArg {
    Bash,
    Zsh,
    Fish,
}

/// `convert qdq`.
#[derive(Debug, Args)]
pub struct QdqArgs {
    /// A bundle folder (with manifest.json) written by convert.
    pub bundle: PathBuf,
    /// The output folder (created if missing; must be empty unless --force).
    pub output: PathBuf,
    /// What to write: both (safetensors, plus GGUF when the bundle came
    /// from a GGUF), safetensors, or gguf.
    #[arg(long, value_enum, default_value = "both")]
    pub format: QdqFormat,
    /// The model the bundle was made from (file or folder), for tensors
    /// that stay in it (keep mode: norms, types without sidecars). Its
    /// files must have the sha256 the bundle's manifest records.
    #[arg(long, value_name = "MODEL")]
    pub source: Option<PathBuf>,
    /// Replace the files of a previous export in OUTPUT (only those its
    /// manifest lists).
    #[arg(long)]
    pub force: bool,
    /// No progress or summary on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `--format` of `qdq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QdqFormat {
    /// safetensors, and GGUF when the bundle came from a GGUF.
    Both,
    /// Only model.safetensors.
    Safetensors,
    /// Only model.gguf (bundles made from a GGUF).
    Gguf,
}

impl QdqFormat {
    /// The value as spelled on the command line.
    pub fn name(self) -> &'static str {
        match self {
            QdqFormat::Both => "both",
            QdqFormat::Safetensors => "safetensors",
            QdqFormat::Gguf => "gguf",
        }
    }
}

/// `convert verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// An output folder (with manifest.json) or a single `.weights` file.
    pub path: PathBuf,
    /// Which kernels to run: all (every ISA this CPU has), scalar, avx2,
    /// avx512, neon, sme2.
    #[arg(long, value_enum, default_value = "all")]
    pub isa: IsaArg,
    /// Skip the sha256 check against the manifest (numeric checks only).
    #[arg(long)]
    pub no_hash: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// No progress bar on stderr (it is shown only on a terminal anyway).
    #[arg(long, short)]
    pub quiet: bool,
}

/// `convert inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// A `.weights` file, an output folder, or a model source (GGUF,
    /// safetensors, Hugging Face folder: lists its tensors from the headers).
    pub path: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The dtype source weights are materialized in before any conversion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DtypeArg {
    /// Exact: values pass unchanged.
    #[value(name = "float32", alias = "f32")]
    Float32,
    /// Round every value to bfloat16 (nearest, ties to even). Safe for
    /// checkpoints with values beyond the fp16 range (Gemma).
    #[value(name = "bfloat16", alias = "bf16")]
    BFloat16,
    /// Round every value to float16; fails (exit 2) naming the tensor when
    /// any value is beyond the fp16 range instead of writing inf.
    #[value(name = "float16", alias = "f16")]
    Float16,
}

impl From<DtypeArg> for ggml_quants::TorchDtype {
    fn from(d: DtypeArg) -> Self {
        match d {
            DtypeArg::Float32 => ggml_quants::TorchDtype::Float32,
            DtypeArg::BFloat16 => ggml_quants::TorchDtype::BFloat16,
            DtypeArg::Float16 => ggml_quants::TorchDtype::Float16,
        }
    }
}

/// A u64 in decimal or `0x` hexadecimal.
fn parse_u64(s: &str) -> Result<u64, String> {
    let t = s.trim().replace('_', "");
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse(),
    };
    r.map_err(|e| format!("{s:?} is not a u64 (decimal or 0x hex): {e}"))
}

/// Parse `I/N` (clap value parser): 0 <= I < N <= [`MAX_SHARDS`](crate::manifest::MAX_SHARDS).
pub fn parse_spec(s: &str) -> Result<crate::manifest::ShardSpec, String> {
    use crate::manifest::{ShardSpec, MAX_SHARDS};
    let (i, n) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?}: expected I/N, e.g. 0/4 (I is 0-based)"))?;
    let num = |v: &str, what: &str| {
        v.trim()
            .parse::<usize>()
            .map_err(|_| format!("{s:?}: {what} {v:?} is not a non-negative integer"))
    };
    let (index, count) = (num(i, "I")?, num(n, "N")?);
    if count == 0 || count > MAX_SHARDS {
        return Err(format!("{s:?}: N must be in 1..={MAX_SHARDS}"));
    }
    if index >= count {
        return Err(format!(
            "{s:?}: I is 0-based and must be below N (0..={}); for a 1-based index use I-1 (Slurm: $((SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN)))",
            count - 1
        ));
    }
    Ok(ShardSpec { index, count })
}

/// `--isa` of `verify`.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IsaArg {
    /// Every tier this CPU has.
    All,
    Scalar,
    Avx2,
    Avx512,
    Neon,
    Sme2,
}

impl IsaArg {
    /// The one tier asked for (`None` for `all`).
    pub fn isa(self) -> Option<kernels::Isa> {
        use kernels::Isa;
        Some(match self {
            IsaArg::All => return None,
            IsaArg::Scalar => Isa::Scalar,
            IsaArg::Avx2 => Isa::Avx2,
            IsaArg::Avx512 => Isa::Avx512,
            IsaArg::Neon => Isa::Neon,
            IsaArg::Sme2 => Isa::Sme2,
        })
    }
}

/// `--interleave`: rows per interleave group of a sidecar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InterleaveArg {
    /// R4: groups of 4 rows.
    #[value(name = "4")]
    R4,
    /// R8: groups of 8 rows.
    #[value(name = "8")]
    R8,
}

impl From<InterleaveArg> for weights_file::format::Interleave {
    fn from(i: InterleaveArg) -> Self {
        match i {
            InterleaveArg::R4 => weights_file::format::Interleave::R4,
            InterleaveArg::R8 => weights_file::format::Interleave::R8,
        }
    }
}

/// `--input-scales`: where a `--bits 4` bundle's per-column input scales
/// come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InputScalesArg {
    /// From --imatrix where it has an entry, else estimated from the
    /// model's own weights.
    Auto,
    /// From --imatrix only; every other matrix gets scale 1.
    None,
}

/// `--mix`: which matrices a `--bits 4` bundle keeps at FP16.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MixArg {
    /// The most sensitive matrices FP16 within --max-bpw.
    Auto,
    /// Every eligible matrix CQ4.
    None,
}

fn parse_bpw(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of bits"))?;
    if !(v.is_finite() && v > 0.0 && v <= 64.0) {
        return Err(format!("{s}: bits per weight must be in (0, 64]"));
    }
    Ok(v)
}

/// `--layout`: how a `--bits 4` bundle is named and what comes with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    /// Engine file names, config.txt, tokenizer files and the engine's
    /// manifests (what the engine's toolchain ingests); GGUF sources seen as
    /// their Hugging Face models.
    Engine,
    /// Files named after the source tensors (every matmul in CQ4, padded to
    /// a multiple of 128 columns where needed).
    Source,
}

/// `--bits`: only 4 (CQ4) exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BitsArg {
    /// CQ4 packed panels.
    #[value(name = "4")]
    Four,
}

/// The ggml types sidecar files can hold.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QtypeArg {
    #[value(name = "q8_0")]
    Q8_0,
    #[value(name = "q4_0")]
    Q4_0,
    #[value(name = "q4_1")]
    Q4_1,
    #[value(name = "q5_0")]
    Q5_0,
    #[value(name = "q5_1")]
    Q5_1,
    #[value(name = "q4_k")]
    Q4K,
    #[value(name = "q5_k")]
    Q5K,
    #[value(name = "q6_k")]
    Q6K,
    #[value(name = "q2_k")]
    Q2K,
    #[value(name = "q3_k")]
    Q3K,
    #[value(name = "iq4_nl")]
    Iq4Nl,
    #[value(name = "iq4_xs")]
    Iq4Xs,
    /// llama.cpp's Q4_K_S mixture (Q4_K; Q5_K for the first attn_v and
    /// ffn_down; Q6_K output).
    #[value(name = "q4_k_s")]
    Q4KS,
    /// llama.cpp's Q4_K_M mixture (Q4_K; Q6_K for output and for the
    /// attn_v / ffn_down of the layers llama.cpp's use_more_bits picks).
    #[value(name = "q4_k_m")]
    Q4KM,
    /// llama.cpp's Q5_K_S mixture (Q5_K; Q6_K output).
    #[value(name = "q5_k_s")]
    Q5KS,
    /// llama.cpp's Q5_K_M mixture (Q5_K; Q6_K like Q4_K_M).
    #[value(name = "q5_k_m")]
    Q5KM,
}

impl From<QtypeArg> for crate::mixture::Scheme {
    fn from(q: QtypeArg) -> Self {
        use crate::mixture::Scheme as S;
        use ggml_quants::GgmlType as G;
        match q {
            QtypeArg::Q8_0 => S::Pure(G::Q8_0),
            QtypeArg::Q4_0 => S::Pure(G::Q4_0),
            QtypeArg::Q4_1 => S::Pure(G::Q4_1),
            QtypeArg::Q5_0 => S::Pure(G::Q5_0),
            QtypeArg::Q5_1 => S::Pure(G::Q5_1),
            QtypeArg::Q4K => S::Pure(G::Q4_K),
            QtypeArg::Q5K => S::Pure(G::Q5_K),
            QtypeArg::Q6K => S::Pure(G::Q6_K),
            QtypeArg::Q2K => S::Pure(G::Q2_K),
            QtypeArg::Q3K => S::Pure(G::Q3_K),
            QtypeArg::Iq4Nl => S::Pure(G::IQ4_NL),
            QtypeArg::Iq4Xs => S::Pure(G::IQ4_XS),
            QtypeArg::Q4KS => S::Q4KS,
            QtypeArg::Q4KM => S::Q4KM,
            QtypeArg::Q5KS => S::Q5KS,
            QtypeArg::Q5KM => S::Q5KM,
        }
    }
}

/// Arguments of the conversion (the default command).
///
/// Modes: with no mode flag, every 2-D tensor stored in one of the ggml
/// types Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q2_K, Q3_K, IQ4_NL, IQ4_XS gets a row-interleaved sidecar file
/// and every other tensor is listed in the manifest as staying in the
/// source file (keep mode). `--plain` writes plain FP16/FP32 files.
#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// The model: a .gguf file, a .safetensors file, or a Hugging Face
    /// folder (config.json + model.safetensors or a sharded index).
    #[arg(required = true)]
    pub input: Option<PathBuf>,

    /// The output folder (created if missing; must be empty unless --force).
    #[arg(required = true)]
    pub output: Option<PathBuf>,

    /// Quantize matmul weights to CQ4 packed panels (only 4 is supported):
    /// Hadamard family for ordinary matmul weights, orthogonal family for the
    /// token embedding and lm_head; norms and other small tensors become
    /// plain FP16 (FP32 where fp16 would overflow).
    #[arg(long, value_enum, value_name = "4", conflicts_with_all = ["plain", "qtype"])]
    pub bits: Option<BitsArg>,

    /// With --bits 4: the bundle layout, `engine` (default: what the
    /// engine's toolchain ingests; see docs/FORMAT.md §engine layout) or
    /// `source` (source tensor names).
    #[arg(long, value_enum, requires = "bits")]
    pub layout: Option<LayoutArg>,

    /// With --bits 4 --layout source: tensors already in
    /// Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_NL/IQ4_XS stay in their ggml type as R4/R8 sidecars
    /// instead of being requantized.
    #[arg(long, requires = "bits")]
    pub keep_quant: bool,

    /// With --bits 4: seed of the bundle's random rotations (Hadamard signs
    /// and permutation, orthogonal matrices). Output bytes depend on it.
    #[arg(long, requires = "bits", value_name = "U64", value_parser = parse_u64)]
    pub seed: Option<u64>,

    /// Write every tensor as a plain row-major FP16 file (FP32 where a value
    /// does not fit fp16) instead of keeping or quantizing it.
    #[arg(long, conflicts_with_all = ["qtype", "interleave"])]
    pub plain: bool,

    /// Keep mode: quantize float 2-D weights (matmul, embedding, output) to
    /// this ggml type first, so float models get sidecars too. Tensors already
    /// in one of the twelve sidecar types keep their own type.
    #[arg(long, value_enum, value_name = "TYPE")]
    pub qtype: Option<QtypeArg>,

    /// With --qtype: give tensors whose name matches REGEX (lower case,
    /// matched anywhere in the name, first rule wins) the ggml TYPE
    /// instead (llama-quantize's --tensor-type), e.g. `attn_v=q8_0`.
    /// With --bits 4 --layout source: matching matrices become sidecars of
    /// TYPE instead of CQ4 panels, or plain FP16 with `f16` (a mixture,
    /// e.g. `token_embd=q8_0`; --imatrix applies to them too).
    /// With --bits 4 in the engine layout only `f16` (the engine reads CQ4
    /// panels and FP16): matching matrices are written FP16 instead of CQ4,
    /// e.g. `attn_v=f16` (matched against the source's tensor names).
    /// Repeatable. Rows TYPE's blocks do not divide fall back as in
    /// llama.cpp (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K / Q3_K /
    /// IQ4_XS -> IQ4_NL).
    #[arg(long, value_name = "REGEX=TYPE")]
    pub tensor_type: Vec<String>,

    /// With --bits 4: the precision mixture. `auto` (default) writes the
    /// matrices 4-bit quantization hurts most (attn_v, then ffn_down of the
    /// layers llama.cpp's Q4_K_M favours, then the other ffn_down) as plain
    /// FP16 instead of CQ4, one at a time in that order, while the bundle's
    /// weight files stay within --max-bpw bits per matrix weight; `none`
    /// writes every eligible matrix CQ4 (the engine converter's own policy).
    /// --tensor-type rules come first. docs/FORMAT.md §mixture.
    #[arg(long, value_enum, requires = "bits", value_name = "POLICY")]
    pub mix: Option<MixArg>,

    /// With --bits 4: where the AWQ-style power-of-two input scales of the
    /// CQ4 matrices come from (FORMAT.md §CQ4.16). `auto` (default): from
    /// --imatrix for the matrices it has an entry for, and for every other
    /// CQ4 matrix from a data-free estimate of its mean squared input made
    /// from the model's own weights (the embedding's channel energies
    /// carried through the norms and projections of every layer; FORMAT.md
    /// §CQ4.17), no calibration text needed; models whose decoder it does
    /// not recognise get no estimate. `none`: only --imatrix (scale 1 for
    /// everything else: the engine converter's uncalibrated behaviour).
    #[arg(long, value_enum, requires = "bits", value_name = "SOURCE")]
    pub input_scales: Option<InputScalesArg>,

    /// With --bits 4 --mix auto: the budget, in bits per weight of the
    /// model's matrices, counting every byte of every weight file (headers,
    /// norms, rotations; default 5.0, llama.cpp Q4_1's nominal size).
    #[arg(long, requires = "bits", value_name = "BITS", value_parser = parse_bpw)]
    pub max_bpw: Option<f64>,

    /// With --qtype or --bits 4: llama.cpp's importance matrix
    /// (`llama-imatrix` output, GGUF or legacy .dat). Each weight with an
    /// entry (looked up by its GGUF name, as llama-quantize does; a Hugging
    /// Face source's names are mapped) is quantized importance-weighted:
    /// with --qtype byte-identical to `llama-quantize --imatrix` (Q8_0
    /// ignores it, as ggml does); with --bits 4 every CQ4 matrix with an
    /// entry gets AWQ-style power-of-two input scales (FORMAT.md §CQ4.16).
    /// Weights without an entry (token_embd, output unless collected) are
    /// quantized without, or (--bits 4 --input-scales auto, the default)
    /// with the data-free estimate.
    #[arg(long, value_name = "FILE")]
    pub imatrix: Option<PathBuf>,

    /// With --bits 4: the engine's calibration Hessians
    /// (`hessians.safetensors`, as its converter or `scripts/hessians`
    /// writes them; keys are Hugging Face module paths such as
    /// `model.layers.0.mlp.down_proj`). Every Hadamard-family CQ4 matrix
    /// with an entry is quantized with GPTQ (FORMAT.md §CQ4.18: each
    /// 128-column group's error, as the kernels will reconstruct it, is
    /// compensated in the later columns; deterministic to the byte), and
    /// its input scales come from the entry's diagonal unless --imatrix has
    /// the matrix. Costs about K^3/3 flops per matrix and up to 12 K^2
    /// bytes of memory while it is quantized (K = its input width).
    #[arg(long, requires = "bits", value_name = "FILE")]
    pub hessians: Option<PathBuf>,

    /// Keep mode: rows interleaved per group in sidecar files (4 = R4, 8 =
    /// R8; default 8).
    #[arg(long, value_enum, value_name = "4|8")]
    pub interleave: Option<InterleaveArg>,

    /// Dtype the source weights are materialized in (float32|bfloat16|float16,
    /// aliases f32|bf16|f16).
    #[arg(long, value_enum, default_value = "float32")]
    pub torch_dtype: DtypeArg,

    /// Worker threads (default: all cores). Output bytes never depend on it.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,

    /// Convert only part of the model: shard I (0-based, 0..=N-1) of N.
    /// Every shard computes the same plan from the source headers and the
    /// same partition of the bundle's files into N parts of about equal
    /// estimated CPU cost; each writes its files and a partial manifest
    /// (manifest.shard-I-of-N.json) into OUTPUT, which N processes (on any
    /// machines sharing OUTPUT) may write at once. `convert merge OUTPUT`
    /// then writes manifest.json. Slurm: `--shard
    /// $((SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN))/$SLURM_ARRAY_TASK_COUNT`;
    /// Kubernetes Indexed Job: `--shard $JOB_COMPLETION_INDEX/N`.
    #[arg(long, value_name = "I/N", value_parser = parse_spec, conflicts_with_all = ["force", "resume"])]
    pub shard: Option<crate::manifest::ShardSpec>,

    /// Rerun into an existing bundle: every file whose tensor bytes (sha256
    /// recorded in the manifest), options, plan and tool version are
    /// unchanged, and whose bytes still have the recorded sha256, is kept
    /// as it is; only the rest is converted. The result is byte-identical
    /// to a fresh run. Implies --force.
    #[arg(long)]
    pub resume: bool,

    /// Print the plan (and with --shard, the partition into N shards with
    /// each one's estimated CPU time) from the source headers alone; write
    /// nothing. With --json, as JSON on stdout.
    #[arg(long)]
    pub dry_run: bool,

    /// Replace the bundle an earlier run wrote into the output folder. The new
    /// bundle is built in a staging folder next to the output and swapped in
    /// only when complete (and verified); only files the old manifest lists
    /// are replaced or removed, never other files of the folder.
    #[arg(long)]
    pub force: bool,

    /// Skip the check `convert` runs on what it wrote (the same as `convert
    /// verify --no-hash`: validation, GEMV on every ISA against the oracle;
    /// the manifest's hashes were computed while writing).
    #[arg(long)]
    pub no_verify: bool,

    /// No plan, no progress bar; errors still go to stderr.
    #[arg(long, short)]
    pub quiet: bool,

    /// Print a JSON summary on stdout when done.
    #[arg(long)]
    pub json: bool,

    /// When done, write the bundle's HTML quality report to FILE (as
    /// `convert report OUTPUT -o FILE --source INPUT`: errors against the
    /// source, verify on every ISA). Not with --shard (run `convert
    /// report` after `convert merge`) or --dry-run.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["shard", "dry_run"])]
    pub report: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn dtype_aliases() {
        let names = [["f32", "float32"], ["bf16", "bfloat16"], ["f16", "float16"]];
        let wants = [DtypeArg::Float32, DtypeArg::BFloat16, DtypeArg::Float16];
        for (names, want) in names.into_iter().zip(wants) {
            for s in names {
                let c = Cli::try_parse_from(["convert", "--torch-dtype", s, "a", "b"]).unwrap();
                assert_eq!(c.convert.torch_dtype, want);
            }
        }
        assert!(Cli::try_parse_from(["convert", "--torch-dtype", "int8", "a", "b"]).is_err());
    }

    #[test]
    fn inspect_subcommand() {
        let c = Cli::try_parse_from(["convert", "inspect", "x.weights", "--json"]).unwrap();
        assert!(matches!(
            c.command,
            Some(Command::Inspect(InspectArgs { json: true, .. }))
        ));
        assert!(Cli::try_parse_from(["convert", "only-one"]).is_err());
    }

    #[test]
    fn seed_decimal_or_hex() {
        let c = Cli::try_parse_from([
            "convert",
            "--bits",
            "4",
            "--seed",
            "0x4351_3450_0000_0001",
            "a",
            "b",
        ])
        .unwrap();
        assert_eq!(c.convert.seed, Some(0x4351_3450_0000_0001));
        let c = Cli::try_parse_from(["convert", "--bits", "4", "--seed", "42", "a", "b"]).unwrap();
        assert_eq!(c.convert.seed, Some(42));
        assert!(Cli::try_parse_from(["convert", "--bits", "4", "--seed", "x", "a", "b"]).is_err());
        assert!(
            Cli::try_parse_from(["convert", "--seed", "1", "a", "b"]).is_err(),
            "--seed needs --bits"
        );
    }

    #[test]
    fn report_and_completions_subcommands() {
        let c = Cli::try_parse_from(["convert", "report", "out", "--json", "r.json"]).unwrap();
        let Some(Command::Report(r)) = c.command else {
            panic!("not report: {c:?}");
        };
        assert_eq!(r.output, PathBuf::from("report.html"));
        assert_eq!(r.json, Some(PathBuf::from("r.json")));
        let c = Cli::try_parse_from(["convert", "completions", "zsh"]).unwrap();
        assert!(matches!(
            c.command,
            Some(Command::Completions(CompletionsArgs {
                shell: ShellArg::Zsh
            }))
        ));
        assert!(Cli::try_parse_from(["convert", "completions", "tcsh"]).is_err());
        let c = Cli::try_parse_from(["convert", "a", "b", "--report", "r.html"]).unwrap();
        assert_eq!(c.convert.report, Some(PathBuf::from("r.html")));
    }

    #[test]
    fn threads_and_flags() {
        let c = Cli::try_parse_from([
            "convert",
            "--threads",
            "1",
            "--force",
            "-q",
            "--json",
            "a",
            "b",
        ])
        .unwrap();
        assert_eq!(c.convert.threads, Some(1));
        assert!(c.convert.force && c.convert.quiet && c.convert.json);
    }
}
