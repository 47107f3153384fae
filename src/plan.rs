//! The plan: what happens to every tensor and the name of its file,
//! decided from the catalogue and the options alone (no tensor data read).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use ggml_quants::{Dtype, GgmlType, RawType};
use model_sources::{Catalogue, Role, SourceKind, Tensor};
use weights_file::format::{Interleave, SidecarShape};

use crate::engine::{self, policy, EngineTensor};
use crate::extra::{Extra, ExtraContent};
use crate::failure::bad_input;
use crate::materialize::Transform;
use crate::mixture::{has_sidecar, matching, Override};
use crate::options::{Mode, Options};
use crate::outdir::{self, NameAllocator};

/// Longest row `convert` materializes (values): rows are processed whole,
/// so one row must fit a chunk buffer. Real models have rows of at most a
/// few hundred thousand values.
pub const MAX_ROW_VALUES: u64 = 1 << 26;

/// What happens to one tensor (with the data its writer needs).
#[derive(Debug, Clone, Copy)]
pub enum Action<'o> {
    /// Plain row-major FP16 (FP32 when a value does not fit fp16).
    Plain,
    /// Raw elements copied as they are (integers, bool, f64, fp8, ...).
    Raw(RawType),
    /// A ggml sidecar of type `ty`; `requantize` when the source is float
    /// and is quantized first.
    Sidecar {
        /// The ggml type.
        ty: GgmlType,
        /// Rows per interleave group.
        interleave: Interleave,
        /// Quantized from float by `--qtype`.
        requantize: bool,
    },
    /// Stays in the source file (why: no sidecar of it); only listed in
    /// the manifest.
    Source(Stay),
    /// Not converted (engine layout), with the reason.
    Skip(&'static str),
    /// CQ4 packed panels of `family`, with the bundle's rotations.
    Panels {
        /// The rotation family.
        family: cq4::Family,
        /// Seed, codebooks and rotations shared by the bundle.
        bundle: &'o cq4::Bundle,
    },
}

/// Why keep mode leaves a tensor in the source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stay {
    /// A ggml block type no sidecar kernel serves.
    NoKernel(GgmlType),
    /// 3-D float expert tensor `[n_expert, N, K]` (`--qtype` quantizes
    /// 2-D matrices only; quantized experts get expert sidecars).
    Experts,
    /// Not 2-D (norms, biases, scalars).
    NotMatrix(usize),
    /// A float matrix and no `--qtype`.
    Float,
    /// A 2-D float tensor that is not a weight matrix.
    NotWeights,
    /// A raw (non-ggml) element type.
    Raw(RawType),
}

impl Stay {
    /// Why `t` (keep mode, no sidecar chosen) stays in the source.
    pub fn of(t: &Tensor) -> Stay {
        match t.dtype {
            Dtype::Raw(r) => Stay::Raw(r),
            Dtype::Ggml(g) if !t.dtype.is_float() && !has_sidecar(g) => Stay::NoKernel(g),
            _ if t.shape.len() == 3 && t.role.is_matrix() => Stay::Experts,
            _ if t.shape.len() != 2 => Stay::NotMatrix(t.shape.len()),
            _ if t.role.is_matrix() => Stay::Float,
            _ => Stay::NotWeights,
        }
    }
}

impl std::fmt::Display for Stay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stay::NoKernel(g) => write!(f, "{g}: no sidecar kernel"),
            Stay::Experts => write!(
                f,
                "3-D float expert tensor: --qtype quantizes 2-D matrices only"
            ),
            Stay::NotMatrix(n) => write!(f, "{n}-D, not a matrix"),
            Stay::Float => write!(f, "float matrix, no --qtype"),
            Stay::NotWeights => write!(f, "not a weight matrix"),
            Stay::Raw(r) => write!(f, "raw {r}"),
        }
    }
}

/// The shape of the sidecar keep mode gives `t` when its type has one: a
/// 2-D tensor, or a 3-D expert-stacked matmul weight `[E, N, K]` (the one
/// rule `plan`, `inspect` and the mixtures share).
pub fn sidecar_shape(t: &Tensor) -> Option<SidecarShape> {
    match t.shape.len() {
        2 => SidecarShape::of(&t.shape),
        3 if t.role.is_matrix() => SidecarShape::of(&t.shape),
        _ => None,
    }
}

/// The ggml type of `t`'s sidecar when keep mode keeps its blocks (a
/// sidecar type and a [`sidecar_shape`]).
pub fn kept_sidecar_type(t: &Tensor) -> Option<GgmlType> {
    t.dtype
        .ggml()
        .filter(|g| has_sidecar(*g) && sidecar_shape(t).is_some())
}

/// "hadamard" or "orthogonal".
pub fn family_name(f: cq4::Family) -> &'static str {
    match f {
        cq4::Family::Hadamard => "hadamard",
        cq4::Family::Orthogonal => "orthogonal",
    }
}

impl Action<'_> {
    /// True for the actions `--imatrix` changes: requantized sidecars and
    /// CQ4 panels (AWQ input scales).
    pub fn uses_imatrix(self) -> bool {
        matches!(
            self,
            Action::Sidecar {
                requantize: true,
                ..
            } | Action::Panels { .. }
        )
    }

    /// One line for the plan.
    pub fn describe(self) -> String {
        match self {
            Action::Plain => "plain FP16 (FP32 if out of fp16 range)".into(),
            Action::Raw(t) => format!("raw {t}, copied as stored"),
            Action::Sidecar {
                ty,
                interleave,
                requantize,
            } => format!(
                "{ty} R{} sidecar{}",
                interleave.factor(),
                if requantize {
                    " (quantized from float)"
                } else {
                    ""
                }
            ),
            Action::Source(why) => format!("stays in the source file ({why})"),
            Action::Skip(why) => format!("not converted: {why}"),
            Action::Panels { family, .. } => {
                format!("CQ4 packed panels, {} rotation", family_name(family))
            }
        }
    }

    /// The file-name suffix.
    fn suffix(self) -> String {
        match self {
            Action::Plain | Action::Raw(_) => ".weights".into(),
            Action::Sidecar { ty, interleave, .. } => format!(
                ".{}.r{}.weights",
                ty.name().to_ascii_lowercase(),
                interleave.factor()
            ),
            Action::Source(_) | Action::Skip(_) => String::new(),
            Action::Panels { .. } => ".cq4p.weights".into(),
        }
    }

    /// False for tensors that stay in the source.
    pub fn writes_file(self) -> bool {
        !matches!(self, Action::Source(_) | Action::Skip(_))
    }
}

/// One planned job.
#[derive(Debug)]
pub struct Job<'c> {
    /// The tensor.
    pub tensor: &'c Tensor,
    /// What happens to it.
    pub action: Action<'c>,
    /// Its file in the bundle (empty when it stays in the source).
    pub file: String,
    /// What happens to its values on the way.
    pub transform: Transform,
    /// Engine layout: its Hugging Face name, engine name and transforms.
    pub engine: Option<EngineTensor>,
    /// `--imatrix`: the importance of each column (requantized sidecars
    /// whose tensor has an entry).
    pub imatrix: Option<&'c [f32]>,
    /// `--hessians`: the Hadamard-family CQ4 matrix's Hessian (GPTQ) and
    /// its diagonal (input scales when `--imatrix` has no entry).
    pub hessian: Option<JobHessian<'c>>,
}

/// A matrix's `--hessians` entry.
#[derive(Debug)]
pub struct JobHessian<'c> {
    /// Its Hugging Face module path (the key).
    pub module: String,
    /// The matrix.
    pub matrix: model_sources::hessians::HessianRef<'c>,
    /// Its diagonal (the importance for the input scales).
    pub diag: Vec<f32>,
}

/// The plan of a conversion.
#[derive(Debug)]
pub struct Plan<'c> {
    /// One job per tensor, in source order.
    pub jobs: Vec<Job<'c>>,
    /// Non-tensor files the bundle gets.
    pub extra: Vec<Extra>,
}

impl Plan<'_> {
    /// Every file the bundle will have.
    pub fn file_names(&self) -> Vec<String> {
        self.jobs
            .iter()
            .filter(|j| j.action.writes_file())
            .map(|j| j.file.clone())
            .chain(self.extra.iter().map(|x| x.name.clone()))
            .chain([outdir::MANIFEST.to_string()])
            .collect()
    }
}

/// Decide what happens to every tensor and name its file.
pub fn plan<'c>(cat: &'c Catalogue, opts: &'c Options) -> Result<Plan<'c>> {
    let mut names = NameAllocator::default();
    names.reserve(outdir::MANIFEST);
    let mut extra = Vec::new();
    if !cat.gguf_metadata.is_empty() {
        names.reserve(outdir::GGUF_METADATA);
        extra.push(Extra {
            name: outdir::GGUF_METADATA.to_string(),
            what: "all GGUF key/values of the source",
            content: ExtraContent::GgufMetadata,
        });
    }
    let engine_layout = matches!(opts.mode, Mode::Cq4 { engine: true, .. });
    let engine_extra = if engine_layout {
        engine::extra_files(cat)?
    } else {
        Vec::new()
    };
    for p in &cat.aux_files {
        if let Some(n) = p.file_name() {
            let n = n.to_string_lossy().into_owned();
            // The engine layout writes its own merges.txt, config, ...:
            // those replace the source's copies.
            let replaced = engine::REPLACED_AUX_FILES.contains(&n.as_str())
                || engine_extra.iter().any(|x| x.name == n);
            if engine_layout && replaced {
                continue;
            }
            names.reserve(&n);
            extra.push(Extra {
                name: n,
                what: crate::extra::COPIED,
                content: ExtraContent::Copy(p.clone()),
            });
        }
    }
    for x in engine_extra {
        names.reserve(&x.name);
        extra.push(x);
    }
    let family = policy::family(&engine::model_type(cat));
    let requantized = requantized_types(cat, opts)?;
    // First what each tensor becomes by the layout's rules and
    // `--tensor-type`, then the `--mix auto` upgrades, then the names.
    let mut decided = Vec::with_capacity(cat.tensors.len());
    for (i, t) in cat.tensors.iter().enumerate() {
        decided.push(match &opts.mode {
            Mode::Cq4 {
                engine: true,
                bundle,
                overrides,
                ..
            } => match engine::decide(cat, t, family)? {
                engine::Decision::Skip(why) => (Action::Skip(why), None),
                engine::Decision::Write(mut e) => {
                    let Dtype::Ggml(g) = t.dtype else {
                        unreachable!("engine::decide skips raw tensors")
                    };
                    decodable(cat, t, g)?;
                    let ruled = e.precision != policy::Precision::Fp16
                        && (matching(overrides, &t.name).is_some()
                            || matching(overrides, &e.hf_name).is_some());
                    if ruled {
                        e.precision = policy::Precision::Fp16;
                    }
                    (engine_action(e.precision, bundle), Some(e))
                }
            },
            _ => (
                action_for(cat, t, opts, requantized.get(&i).copied())?,
                None,
            ),
        });
    }
    if let Mode::Cq4 {
        max_bpw: Some(budget),
        overrides,
        ..
    } = &opts.mode
    {
        let actions: Vec<Action> = decided.iter().map(|d| d.0).collect();
        let upgrades = auto_fp16(cat, &actions, overrides, *budget);
        for i in upgrades {
            decided[i].0 = Action::Plain;
            if let Some(e) = &mut decided[i].1 {
                e.precision = policy::Precision::Fp16;
            }
        }
    }
    let mut jobs = Vec::with_capacity(cat.tensors.len());
    for (t, (action, e)) in cat.tensors.iter().zip(decided) {
        let job = match e {
            Some(e) => {
                let file = match e.precision {
                    policy::Precision::Fp16 => e.name.plain_file(),
                    _ => e.name.panel_file(),
                };
                let (stem, ext) = file.split_at(e.name.stem.len());
                let file = names.allocate_exact(stem, ext);
                Job {
                    tensor: t,
                    action,
                    file,
                    transform: e.transform,
                    imatrix: importance(cat, t, action, opts)?,
                    hessian: hessian(cat, t, action, opts)?,
                    engine: Some(e),
                }
            }
            None => {
                let file = if action.writes_file() {
                    names.allocate(&t.name, &action.suffix())
                } else {
                    String::new()
                };
                Job {
                    tensor: t,
                    action,
                    file,
                    transform: Transform::NONE,
                    engine: None,
                    imatrix: importance(cat, t, action, opts)?,
                    hessian: hessian(cat, t, action, opts)?,
                }
            }
        };
        check_size(cat, t, job.action)?;
        jobs.push(job);
    }
    Ok(Plan { jobs, extra })
}

/// `--mix auto`: the tensors (indices into `cat.tensors`) whose
/// Hadamard-family CQ4 panels in `actions` become plain FP16, most sensitive
/// first, each taken when the bundle's weight files still fit `max_bpw` bits
/// per weight of the model's matrices (every byte of every file counted).
/// The order: `attn_v`, then `ffn_down` of the layers `use_more_bits` picks,
/// then the other `ffn_down`, each in source order. Tensors a
/// `--tensor-type` rule matches are left as the rule put them. Decided from
/// shapes alone, so the same for every run.
fn auto_fp16(
    cat: &Catalogue,
    actions: &[crate::plan::Action],
    overrides: &[Override],
    max_bpw: f64,
) -> Vec<usize> {
    use crate::mixture::{kind, layer, use_more_bits, Kind};
    let tensors = &cat.tensors;
    let mut total: u64 = tensors
        .iter()
        .zip(actions)
        .map(|(t, &a)| file_bytes(t, a))
        .fold(0, u64::saturating_add);
    let weights: u64 = tensors
        .iter()
        .zip(actions)
        .filter(|(t, a)| t.shape.len() == 2 && t.role.is_matrix() && a.writes_file())
        .map(|(t, _)| t.n_elements())
        .fold(0, u64::saturating_add);
    let n_layer = tensors
        .iter()
        .filter_map(|t| layer(&t.name))
        .max()
        .map_or(0, |l| l + 1);
    let candidate = |i: usize| {
        let t = &tensors[i];
        let hadamard = matches!(
            actions[i],
            Action::Panels {
                family: cq4::Family::Hadamard,
                ..
            }
        );
        (hadamard && matching(overrides, &t.name).is_none()).then(|| kind(&t.name))
    };
    let more = |i: usize| layer(&tensors[i].name).is_some_and(|l| use_more_bits(l, n_layer));
    let mut order: Vec<usize> = (0..tensors.len())
        .filter(|&i| candidate(i) == Some(Kind::AttnV))
        .collect();
    order.extend((0..tensors.len()).filter(|&i| candidate(i) == Some(Kind::FfnDown) && more(i)));
    order.extend((0..tensors.len()).filter(|&i| candidate(i) == Some(Kind::FfnDown) && !more(i)));
    let budget_bits = max_bpw * weights as f64;
    let mut chosen = Vec::new();
    for i in order {
        let t = &tensors[i];
        let grown = total
            .saturating_sub(file_bytes(t, actions[i]))
            .saturating_add(file_bytes(t, Action::Plain));
        if grown as f64 * 8.0 <= budget_bits {
            total = grown;
            chosen.push(i);
        }
    }
    chosen.sort_unstable();
    chosen
}

/// The action of an engine-layout tensor of `precision`.
fn engine_action(precision: policy::Precision, bundle: &cq4::Bundle) -> Action<'_> {
    match precision {
        policy::Precision::Fp16 => Action::Plain,
        policy::Precision::Hadamard => Action::Panels {
            family: cq4::Family::Hadamard,
            bundle,
        },
        policy::Precision::Orthogonal => Action::Panels {
            family: cq4::Family::Orthogonal,
            bundle,
        },
    }
}

/// The bytes of the file `action` writes for `t` (0 when it writes none).
pub fn file_bytes(t: &Tensor, action: Action) -> u64 {
    use weights_file::format::{Header, Layout, Precision};
    let (n, k) = (t.nrows(), t.ncols());
    let header = match action {
        Action::Plain => Some(Header::plain(
            Precision::Fp16,
            &t.shape,
            t.n_elements().saturating_mul(2),
        )),
        Action::Raw(ty) => Header::raw(ty, &t.shape),
        Action::Sidecar { ty, interleave, .. } => {
            sidecar_shape(t).and_then(|s| Header::sidecar_of(ty, interleave, s))
        }
        Action::Panels { family, .. } => {
            let kp = k.div_ceil(128).saturating_mul(128);
            usize::try_from(n)
                .ok()
                .zip(usize::try_from(kp).ok())
                .and_then(|(n, kp)| cq4::PanelGeometry::new(n, kp, 128).ok())
                .map(|g| Header::panels(&g, family))
        }
        Action::Source(_) | Action::Skip(_) => None,
    };
    header
        .as_ref()
        .and_then(Layout::of)
        .map_or(0, |l| l.file_len)
}

/// The `--imatrix` entry of `t` when it is requantized to a sidecar or
/// quantized to Hadamard-family CQ4 panels: by its name for a GGUF source,
/// by the Hugging Face name of each entry for other sources. An entry of the
/// wrong size is bad input.
fn importance<'c>(
    cat: &Catalogue,
    t: &Tensor,
    action: Action,
    opts: &'c Options,
) -> Result<Option<&'c [f32]>> {
    let Some(im) = &opts.imatrix else {
        return Ok(None);
    };
    if !action.uses_imatrix() {
        return Ok(None);
    }
    let name = match cat.kind {
        SourceKind::Gguf { .. } => Some(t.name.clone()),
        _ => {
            let arch =
                crate::importance::gguf_architecture(cat.architecture.as_deref().unwrap_or(""));
            im.data
                .entries
                .keys()
                .find(|g| {
                    matches!(
                        model_sources::hf::hf_tensor(arch, g, &[]),
                        model_sources::hf::HfTensor::Mapped { ref name, .. } if *name == t.name
                    )
                })
                .cloned()
        }
    };
    let Some(name) = name else { return Ok(None) };
    let k = *t.shape.last().unwrap_or(&0) as usize;
    im.data
        .for_tensor(&name, k, 1)
        .map_err(|why| bad_input(format!("{}: {}: {why}", at(cat, t), im.path.display())))
}

/// `--hessians`: a Hadamard-family CQ4 matrix's entry, looked up by its
/// Hugging Face module path (a GGUF source's names are mapped), with its
/// diagonal. An entry of another width is bad input.
fn hessian<'c>(
    cat: &Catalogue,
    t: &Tensor,
    action: Action,
    opts: &'c Options,
) -> Result<Option<JobHessian<'c>>> {
    let Some(hs) = &opts.hessians else {
        return Ok(None);
    };
    if !matches!(
        action,
        Action::Panels {
            family: cq4::Family::Hadamard,
            ..
        }
    ) {
        return Ok(None);
    }
    let hf = match cat.kind {
        SourceKind::Gguf { .. } => {
            let arch =
                crate::importance::gguf_architecture(cat.architecture.as_deref().unwrap_or(""));
            match model_sources::hf::hf_tensor(arch, &t.name, &[]) {
                model_sources::hf::HfTensor::Mapped { name, .. } => name,
                _ => return Ok(None),
            }
        }
        _ => t.name.clone(),
    };
    let module = hf.strip_suffix(".weight").unwrap_or(&hf);
    let Some(h) = hs.data.get(module) else {
        return Ok(None);
    };
    let k = *t.shape.last().unwrap_or(&0) as usize;
    if h.k != k {
        return Err(bad_input(format!(
            "{}: {}: Hessian '{module}' is {} x {}, the matrix has {k} input columns",
            at(cat, t),
            hs.data.path().display(),
            h.k,
            h.k
        )));
    }
    Ok(Some(JobHessian {
        module: module.to_string(),
        diag: h.diagonal(),
        matrix: h,
    }))
}

fn at(cat: &Catalogue, t: &Tensor) -> String {
    format!("tensor '{}' in {}", t.name, cat.file_of(t).display())
}

/// Zero-sized tensors are bad input in every mode, and so are rows too long
/// to process for the actions that work on whole rows (checked before any
/// file is written).
fn check_size(cat: &Catalogue, t: &Tensor, action: Action<'_>) -> Result<()> {
    if t.n_elements() == 0 {
        return Err(bad_input(format!(
            "{}: shape {:?} has no elements; convert does not write zero-sized tensors",
            at(cat, t),
            t.shape
        )));
    }
    let by_rows = matches!(action, Action::Sidecar { .. } | Action::Panels { .. });
    if by_rows && t.ncols() > MAX_ROW_VALUES {
        return Err(bad_input(format!(
            "{}: rows of {} values are longer than the {MAX_ROW_VALUES} convert processes",
            at(cat, t),
            t.ncols()
        )));
    }
    Ok(())
}

/// Fail early (before any file is written) for types that cannot be decoded.
fn decodable(cat: &Catalogue, t: &Tensor, ty: GgmlType) -> Result<()> {
    if ggml_quants::supports_decode(ty) {
        Ok(())
    } else {
        Err(bad_input(format!(
            "{}: ggml type {ty} cannot be decoded (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)",
            at(cat, t)
        )))
    }
}

/// Plain, or raw for a raw type.
fn plain_or_raw(cat: &Catalogue, t: &Tensor) -> Result<Action<'static>> {
    match t.dtype {
        Dtype::Raw(r) => Ok(Action::Raw(r)),
        Dtype::Ggml(g) => decodable(cat, t, g).map(|()| Action::Plain),
    }
}

/// Whether keep mode quantizes `t` from float (`--qtype`).
fn requantizes(t: &Tensor) -> bool {
    let matrix = t.shape.len() == 2;
    let has = t.dtype.ggml().is_some_and(|g| matrix && has_sidecar(g));
    !has && matrix && t.dtype.is_float() && t.role.is_matrix()
}

/// `--qtype`: the type of every tensor keep mode quantizes, by index
/// (the mixture needs to see them all: it counts layers and attn_v).
fn requantized_types(cat: &Catalogue, opts: &Options) -> Result<BTreeMap<usize, GgmlType>> {
    let Mode::Keep {
        qtype: Some(scheme),
        overrides,
        ..
    } = &opts.mode
    else {
        return Ok(BTreeMap::new());
    };
    let idx: Vec<usize> = (0..cat.tensors.len())
        .filter(|&i| requantizes(&cat.tensors[i]))
        .collect();
    let types = crate::mixture::choose(cat, &idx, *scheme, overrides, has_sidecar)?;
    Ok(idx.into_iter().zip(types).collect())
}

fn action_for<'o>(
    cat: &Catalogue,
    t: &Tensor,
    opts: &'o Options,
    requantized: Option<GgmlType>,
) -> Result<Action<'o>> {
    let matrix = t.shape.len() == 2;
    let sidecar_type = kept_sidecar_type(t);
    // The CQ4-mode `--tensor-type` rule of this tensor, if any.
    let rule = match &opts.mode {
        Mode::Cq4 { overrides, .. } => matching(overrides, &t.name),
        _ => None,
    };
    Ok(match &opts.mode {
        Mode::Plain => plain_or_raw(cat, t)?,
        Mode::Cq4 {
            keep_quant,
            interleave,
            bundle,
            ..
        } => match (sidecar_type.filter(|_| *keep_quant), t.dtype) {
            (_, Dtype::Ggml(g)) if matrix && t.role.is_matrix() && rule.is_some() => {
                decodable(cat, t, g)?;
                cq4_override(cat, t, rule.map_or(g, |o| o.ty), *interleave)?
            }
            (Some(ty), _) => Action::Sidecar {
                ty,
                interleave: *interleave,
                requantize: false,
            },
            (None, Dtype::Ggml(g)) if matrix && t.role.is_matrix() => {
                decodable(cat, t, g)?;
                let family = if matches!(t.role, Role::TokenEmbedding | Role::Output) {
                    cq4::Family::Orthogonal
                } else {
                    cq4::Family::Hadamard
                };
                Action::Panels { family, bundle }
            }
            _ => plain_or_raw(cat, t)?,
        },
        Mode::Keep { interleave, .. } => {
            if let Some(ty) = sidecar_type {
                Action::Sidecar {
                    ty,
                    interleave: *interleave,
                    requantize: false,
                }
            } else if let Some(ty) = requantized {
                Action::Sidecar {
                    ty,
                    interleave: *interleave,
                    requantize: true,
                }
            } else {
                Action::Source(Stay::of(t))
            }
        }
    })
}

/// The action of a CQ4-mode `--tensor-type` rule: plain FP16 for `f16`,
/// else a sidecar of `ty` (after llama.cpp's fallback), requantized.
fn cq4_override<'o>(
    cat: &Catalogue,
    t: &Tensor,
    ty: GgmlType,
    interleave: Interleave,
) -> Result<Action<'o>> {
    if ty == GgmlType::F16 {
        return Ok(Action::Plain);
    }
    let k = t.ncols();
    let f = crate::mixture::fallback(ty, k);
    if !has_sidecar(f) || !k.is_multiple_of(f.block_size() as u64) {
        return Err(bad_input(format!(
            "{}: --tensor-type {ty}: rows of {k} values fit neither {ty} nor its fallback {f}",
            at(cat, t)
        )));
    }
    Ok(Action::Sidecar {
        ty: f,
        interleave,
        requantize: true,
    })
}

/// Human-readable size.
pub fn human_bytes(b: u64) -> String {
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

/// The plan as printed before a conversion starts.
pub fn describe(cat: &Catalogue, plan: &Plan, opts: &Options, out: &Path) -> String {
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
        opts.threads,
        if cat.tied_embeddings { "yes" } else { "no" },
    );
    let mut groups: BTreeMap<String, BTreeMap<&str, (usize, u64)>> = BTreeMap::new();
    for j in &plan.jobs {
        let mut what = j.action.describe();
        if let (
            Action::Sidecar { .. },
            Some(SidecarShape {
                experts: Some(e), ..
            }),
        ) = (j.action, sidecar_shape(j.tensor))
        {
            what += &format!(", {e} experts");
        }
        let e = groups
            .entry(what)
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
    if let Some(im) = &opts.imatrix {
        let requantized: Vec<&Job> = plan
            .jobs
            .iter()
            .filter(|j| j.action.uses_imatrix())
            .collect();
        let with = requantized.iter().filter(|j| j.imatrix.is_some()).count();
        let without: Vec<&str> = requantized
            .iter()
            .filter(|j| j.imatrix.is_none())
            .map(|j| j.tensor.name.as_str())
            .collect();
        s += &format!(
            "  importance matrix: {} ({} entries): {with} of the {} tensors it applies to use it{}\n",
            im.path.display(),
            im.data.entries.len(),
            requantized.len(),
            if without.is_empty() {
                String::new()
            } else {
                format!("; without an entry: {}", without.join(", "))
            }
        );
    }
    for (name, why) in &cat.skipped_files {
        s += &format!("    skipped {name}: {why}\n");
    }
    s
}
