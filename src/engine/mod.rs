//! The engine layout (`--layout engine`, the default with `--bits 4`): what
//! the engine's toolchain ingests (`docs/FORMAT.md` §engine layout).
//!
//! - [`names`]: Hugging Face parameter -> engine file name.
//! - [`policy`]: the engine's precision policy, model family and Gemma
//!   weight transforms.
//! - GGUF sources are first seen as their Hugging Face counterparts
//!   (`model_sources::hf`: names, llama.cpp's q/k permutation and Gemma
//!   norm offset undone, `rope_freqs` dropped).

pub mod config;
pub mod names;
pub mod policy;
pub mod pyjson;
pub mod tokenizer;

use anyhow::Result;
use ggml_quants::Dtype;
use model_sources::hf::{hf_tensor, HfTensor, Undo};
use model_sources::{Catalogue, SourceKind, Tensor};

use crate::extra::{Extra, ExtraContent};
use crate::failure::bad_input;
use crate::materialize::{Affine, Transform};
use names::{engine_name, EngineName};
use policy::Precision;

/// What the engine layout does with one tensor.
#[derive(Debug, Clone)]
pub struct EngineTensor {
    /// The Hugging Face parameter name.
    pub hf_name: String,
    /// Its engine name.
    pub name: EngineName,
    /// Its precision.
    pub precision: Precision,
    /// What happens to its values (undo llama.cpp, then the engine's
    /// transform).
    pub transform: Transform,
    /// The same, as recorded in the manifest (enough to undo it).
    pub record: Vec<serde_json::Value>,
}

/// An engine-layout decision.
#[derive(Debug, Clone)]
pub enum Decision {
    /// Written.
    Write(EngineTensor),
    /// Not written, with the reason.
    Skip(&'static str),
}

/// The Hugging Face `model_type` of the source: `config.json`'s, or for a
/// GGUF its `general.architecture` (llama, qwen2, gemma3, ... are the HF
/// names too).
pub fn model_type(cat: &Catalogue) -> String {
    cat.hf_config
        .as_ref()
        .and_then(|c| {
            c.get("text_config")
                .and_then(|t| t.get("model_type"))
                .or_else(|| c.get("model_type"))
        })
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .or_else(|| cat.architecture.clone())
        .unwrap_or_default()
}

/// Files of a Hugging Face folder the engine converter does not carry
/// verbatim: it deletes them after deriving its own tokenizer files.
pub const REPLACED_AUX_FILES: &[&str] = &[
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "model.safetensors.index.json",
];

/// The engine layout's non-tensor files made at plan time (config and
/// tokenizer files), and the names of the manifests made after the jobs.
pub fn extra_files(cat: &Catalogue) -> Result<Vec<Extra>> {
    let family = policy::family(&model_type(cat));
    let hf = config::hf_config(cat);
    let merged = config::merged(&hf, family);
    let mut v = vec![
        Extra {
            name: "config.txt".into(),
            what: "engine config (key=value)",
            content: ExtraContent::Bytes(config::config_txt(&merged).into_bytes()),
        },
        Extra {
            name: "hf_config.json".into(),
            what: "the Hugging Face config with the engine's runtime keys",
            content: ExtraContent::Bytes(config::hf_config_json(&merged).into_bytes()),
        },
    ];
    if cat.hf_config.is_none() {
        let mut text = pyjson::dumps(&hf, false, true);
        text.push('\n');
        v.push(Extra {
            name: "config.json".into(),
            what: "a Hugging Face config.json rebuilt from the GGUF metadata",
            content: ExtraContent::Bytes(text.into_bytes()),
        });
    }
    for (name, bytes) in tokenizer::files(cat, family)? {
        v.push(Extra {
            name: name.into(),
            what: "engine tokenizer file",
            content: ExtraContent::Bytes(bytes),
        });
    }
    for name in MANIFESTS {
        v.push(Extra {
            name: (*name).into(),
            what: "engine manifest",
            content: ExtraContent::EngineManifest,
        });
    }
    Ok(v)
}

/// The engine's manifests, in the order it writes them.
pub const MANIFESTS: &[&str] = &[
    "conversion_manifest.json",
    "weights_manifest.json",
    "conversion_summary.json",
];

fn at(cat: &Catalogue, t: &Tensor) -> String {
    format!("tensor '{}' in {}", t.name, cat.file_of(t).display())
}

/// Decide one tensor of the engine layout for model `family`.
pub fn decide(cat: &Catalogue, t: &Tensor, family: &str) -> Result<Decision> {
    if let Dtype::Raw(_) = t.dtype {
        return Ok(Decision::Skip(
            "a non-float buffer: not a parameter the engine binds",
        ));
    }
    let (hf_name, undo) = match cat.kind {
        SourceKind::Gguf { .. } => {
            let arch = cat.architecture.as_deref().unwrap_or("");
            match hf_tensor(arch, &t.name, &cat.gguf_metadata) {
                HfTensor::Mapped { name, undo } => (name, undo),
                HfTensor::Dropped(why) => return Ok(Decision::Skip(why)),
                HfTensor::Unknown => (t.name.clone(), Undo::None),
            }
        }
        _ => (t.name.clone(), Undo::None),
    };
    let name = engine_name(&hf_name);
    let precision = policy::precision(&name, &t.shape);
    let engine = policy::transform(family, &name);
    let mut record = Vec::new();
    let mut transform = Transform::NONE;
    match undo {
        Undo::None => {}
        Undo::UnpermuteRows { heads } => {
            if heads == 0 {
                return Err(bad_input(format!(
                    "{}: llama.cpp permuted its rows per head, but the GGUF has no head count",
                    at(cat, t)
                )));
            }
            transform.unpermute_heads = Some(heads);
            record.push(serde_json::json!({
                "op": "unpermute_rows", "heads": heads,
                "why": "llama.cpp's q/k row order undone: HF row h*D + s*D/2 + i <- GGUF row h*D + 2i + s"
            }));
        }
        Undo::Offset(o) => {
            record.push(serde_json::json!({
                "op": "add", "value": -o, "why": "llama.cpp stored this norm plus 1"
            }));
        }
    }
    // The source holds `w + offset`; the engine wants `((w + add) * mul) +
    // then`: one affine on the source value, `add - offset` first (so the
    // offset and a `+ 1` of the engine cancel exactly).
    let offset = match undo {
        Undo::Offset(o) => o,
        _ => 0.0,
    };
    transform.values = Affine {
        add: engine.add - offset,
        ..engine
    };
    if !engine.is_identity() {
        record.push(serde_json::json!({
            "op": "affine", "add": engine.add, "mul": engine.mul, "then": engine.then,
            "formula": "((w + add) * mul) + then, f32", "why": format!("the engine's {family} transform")
        }));
    }
    Ok(Decision::Write(EngineTensor {
        hf_name,
        name,
        precision,
        transform,
        record,
    }))
}

/// The torch spelling of a source dtype the engine's converter would have
/// loaded (ggml quant types, which it never sees, keep their ggml names).
fn torch_dtype(ggml: &str) -> String {
    match ggml {
        "F32" => "torch.float32".into(),
        "F16" => "torch.float16".into(),
        "BF16" => "torch.bfloat16".into(),
        "F64" => "torch.float64".into(),
        other => other.into(),
    }
}

/// Why an FP16 tensor is not CQ4, in the engine's words where it has them.
fn fallback_reason(e: &crate::manifest::Entry, file: &str) -> Option<&'static str> {
    Some(if file.contains("norm") {
        "norm tensor"
    } else if e.hf_name.as_deref().is_some_and(|n| n.ends_with(".bias")) {
        "bias tensor"
    } else if e.shape.len() != 2 {
        "not a 2-D tensor"
    } else if e.shape[1].is_multiple_of(128) {
        // Not one of the engine converter's reasons: convert's mixture.
        "kept at FP16 by the precision mixture (--mix auto or --tensor-type)"
    } else {
        "K is not a multiple of 128 (packed panels need whole groups)"
    })
}

/// One row per converted tensor, shared by the two engine manifests.
fn rows(
    entries: &[crate::manifest::Entry],
    family: &str,
) -> Vec<serde_json::Map<String, serde_json::Value>> {
    use serde_json::json;
    entries
        .iter()
        .filter(|e| e.file.is_some())
        .filter_map(|e| {
            let hf = e.hf_name.clone()?;
            let file = e.file.clone()?;
            let cq4 = e.precision == "CQ4";
            // The engine reports the scale folded into a CQ tensor (its
            // transform's factor); FP16 tensors hold their values as
            // transformed, with factor 1. Its `transform` column is "none"
            // for every tensor it writes (manifest.json records ours).
            let scale = if cq4 {
                e.transforms
                    .iter()
                    .find(|t| t["op"] == "affine")
                    .and_then(|t| t["mul"].as_f64())
                    .unwrap_or(1.0)
            } else {
                1.0
            };
            let embedding =
                file.starts_with("token_embeddings") || file.starts_with("output_weight");
            let mut m = serde_json::Map::new();
            m.insert("adapter_family".into(), json!(family));
            m.insert("adapter_name".into(), json!(hf));
            m.insert(
                "component".into(),
                json!(if embedding { "embedding" } else { "language" }),
            );
            m.insert("hf_name".into(), json!(hf));
            m.insert("output_name".into(), json!(file));
            m.insert("precision".into(), json!(if cq4 { "CQ4" } else { "FP16" }));
            m.insert("qdq_restore".into(), json!("hf_key"));
            m.insert("scale_factor".into(), json!(scale));
            m.insert("shape".into(), json!(e.shape));
            // Hugging Face names whatever the source: the transpiler binds
            // by them (a GGUF's own name stays in manifest.json).
            m.insert("source_name".into(), json!(hf));
            m.insert("source_names".into(), json!([hf]));
            m.insert(
                "status".into(),
                json!(if cq4 { "converted" } else { "fallback" }),
            );
            m.insert("transform".into(), json!("none"));
            m.insert(
                "bits".into(),
                if cq4 {
                    json!(4)
                } else {
                    serde_json::Value::Null
                },
            );
            m.insert("bytes".into(), json!(e.bytes));
            m.insert("dtype".into(), json!(torch_dtype(&e.source_dtype)));
            m.insert(
                "fallback_reason".into(),
                match fallback_reason(e, &file) {
                    Some(r) if !cq4 => json!(r),
                    _ => serde_json::Value::Null,
                },
            );
            // `--hessians`: the matrices quantized with GPTQ (§CQ4.18). The
            // engine's converter expects GPTQ calibration for every CQ
            // matmul (not for embeddings) and says so where it had none.
            let gptq = e.details.as_ref().and_then(|d| d.get("gptq"));
            m.insert("gptq_used".into(), json!(gptq.is_some()));
            m.insert(
                "hessian_missing_reason".into(),
                if cq4 && !embedding && gptq.is_none() {
                    json!("expected GPTQ target had zero samples")
                } else {
                    serde_json::Value::Null
                },
            );
            m.insert(
                "hessian_samples".into(),
                json!(gptq
                    .and_then(|g| g.get("samples"))
                    .and_then(|s| s.as_u64())
                    .unwrap_or(0)),
            );
            m.insert("output_file".into(), json!(file));
            m.insert(
                "policy".into(),
                json!(if cq4 { "convert" } else { "fallback" }),
            );
            m.insert("recognized".into(), json!(!file.contains('~')));
            m.insert("required".into(), json!(true));
            Some(m)
        })
        .collect()
}

/// The engine's three manifests (`docs/FORMAT.md` §engine layout): names
/// and contents, from the bundle's entries.
pub fn manifests(
    model_type: &str,
    entries: &[crate::manifest::Entry],
) -> Vec<(&'static str, Vec<u8>)> {
    use serde_json::{json, Value};
    let family = policy::family(model_type);
    let rows = rows(entries, family);
    const WEIGHTS_KEYS: &[&str] = &[
        "adapter_family",
        "adapter_name",
        "component",
        "hf_name",
        "output_name",
        "precision",
        "qdq_restore",
        "scale_factor",
        "shape",
        "source_name",
        "source_names",
        "status",
        "transform",
    ];
    let weights: Vec<Value> = rows
        .iter()
        .map(|r| {
            Value::Object(
                WEIGHTS_KEYS
                    .iter()
                    .map(|k| ((*k).to_string(), r[*k].clone()))
                    .collect(),
            )
        })
        .collect();
    let conversion: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.remove("output_name");
            Value::Object(r)
        })
        .collect();
    // Counts by a column, in first-seen order (pyjson sorts the keys).
    let count_by = |key: &str, skip_null: bool| {
        let mut m = serde_json::Map::new();
        for r in &rows {
            let v = &r[key];
            if skip_null && v.is_null() {
                continue;
            }
            let k = v.as_str().unwrap_or("none").to_string();
            let n = m.get(&k).and_then(Value::as_u64).unwrap_or(0);
            m.insert(k, json!(n + 1));
        }
        Value::Object(m)
    };
    let total_bytes: u64 = rows.iter().filter_map(|r| r["bytes"].as_u64()).sum();
    // The engine converter's summary has a `gptq` block only when it ran
    // GPTQ; convert does not (yet), so there is none.
    let summary = json!({
        "total_tensors": rows.len(),
        "counts_by_status": count_by("status", false),
        "counts_by_component": count_by("component", false),
        "counts_by_precision": count_by("precision", false),
        "fallback_reasons": count_by("fallback_reason", true),
        "total_bytes": total_bytes,
    });
    // `json.dump` output: no final newline.
    let text = |v: &Value| pyjson::dumps(v, true, true).into_bytes();
    vec![
        ("conversion_manifest.json", text(&Value::Array(conversion))),
        (
            "weights_manifest.json",
            text(&json!({ "weights": weights })),
        ),
        ("conversion_summary.json", text(&summary)),
    ]
}
