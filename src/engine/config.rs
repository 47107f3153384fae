//! `config.txt` and `hf_config.json` of an engine bundle, from the source's
//! Hugging Face `config.json` or, for a GGUF, from its metadata.

use model_sources::gguf::Value as GgufValue;
use model_sources::Catalogue;
use serde_json::{json, Map, Value};

use crate::engine::pyjson::dumps;

fn meta<'a>(cat: &'a Catalogue, key: &str) -> Option<&'a GgufValue> {
    cat.gguf_metadata
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

fn meta_num(cat: &Catalogue, key: &str) -> Option<Value> {
    match meta(cat, key)? {
        // The shortest decimal that is this f32 (1e-05, not the f64
        // 9.999999747378752e-06 of its bits): what the HF config said.
        GgufValue::F32(f) => Some(json!(f.to_string().parse::<f64>().unwrap_or(f64::from(*f)))),
        GgufValue::F64(f) => Some(json!(*f)),
        v => v.as_u64().map(|u| json!(u)),
    }
}

/// The Hugging Face config of a GGUF source, rebuilt from its metadata
/// (`docs/FORMAT.md` §engine layout, "config from GGUF").
pub fn hf_config_from_gguf(cat: &Catalogue) -> Value {
    let a = cat.architecture.clone().unwrap_or_default();
    let k = |s: &str| format!("{a}.{s}");
    let mut c = Map::new();
    let (class, model_type) = match a.as_str() {
        "llama" => ("LlamaForCausalLM", "llama"),
        "qwen2" => ("Qwen2ForCausalLM", "qwen2"),
        "qwen3" => ("Qwen3ForCausalLM", "qwen3"),
        "gemma3" => ("Gemma3ForCausalLM", "gemma3_text"),
        _ => ("", a.as_str()),
    };
    if !class.is_empty() {
        c.insert("architectures".into(), json!([class]));
    }
    c.insert("model_type".into(), json!(model_type));
    // GGUF does not store the activation: llama.cpp's graph for each
    // architecture fixes it.
    let act = match a.as_str() {
        "llama" | "qwen2" | "qwen3" => Some("silu"),
        "gemma3" => Some("gelu_pytorch_tanh"),
        _ => None,
    };
    if let Some(act) = act {
        c.insert("hidden_act".into(), json!(act));
    }
    let mut put = |hf: &str, v: Option<Value>| {
        if let Some(v) = v {
            c.insert(hf.into(), v);
        }
    };
    let vocab =
        meta_num(cat, &k("vocab_size")).or_else(|| match meta(cat, "tokenizer.ggml.tokens") {
            Some(GgufValue::Array(_, items)) => Some(json!(items.len())),
            _ => None,
        });
    put("vocab_size", vocab);
    // HF key <- GGUF key (`{arch}.` prefixed unless it starts with
    // `tokenizer.`).
    for (hf, gguf) in [
        ("hidden_size", "embedding_length"),
        ("num_hidden_layers", "block_count"),
        ("num_attention_heads", "attention.head_count"),
        ("num_key_value_heads", "attention.head_count_kv"),
        ("intermediate_size", "feed_forward_length"),
        ("max_position_embeddings", "context_length"),
        ("rope_theta", "rope.freq_base"),
        ("head_dim", "attention.key_length"),
        ("rms_norm_eps", "attention.layer_norm_rms_epsilon"),
        ("bos_token_id", "tokenizer.ggml.bos_token_id"),
        ("eos_token_id", "tokenizer.ggml.eos_token_id"),
        ("pad_token_id", "tokenizer.ggml.padding_token_id"),
    ] {
        let key = if gguf.starts_with("tokenizer.") {
            gguf.to_string()
        } else {
            k(gguf)
        };
        put(hf, meta_num(cat, &key));
    }
    put("tie_word_embeddings", Some(json!(cat.tied_embeddings)));
    if a == "gemma3" {
        put(
            "sliding_window",
            meta_num(cat, &k("attention.sliding_window")),
        );
        put(
            "final_logit_softcapping",
            meta_num(cat, &k("final_logit_softcapping")),
        );
        put(
            "rope_local_base_freq",
            Some(meta_num(cat, &k("rope.freq_base_swa")).unwrap_or(json!(10000.0))),
        );
        let layers = meta(cat, &k("block_count"))
            .and_then(|v| v.as_u64())
            .unwrap_or(0);
        let pattern: Vec<Value> = match meta(cat, &k("attention.sliding_window_pattern")) {
            Some(GgufValue::Array(_, items)) => items
                .iter()
                .map(|v| {
                    let sliding = matches!(v, GgufValue::Bool(true));
                    json!(if sliding {
                        "sliding_attention"
                    } else {
                        "full_attention"
                    })
                })
                .collect(),
            other => {
                let period = other.and_then(|v| v.as_u64()).unwrap_or(6).max(1);
                (0..layers)
                    .map(|i| {
                        json!(if i % period == period - 1 {
                            "full_attention"
                        } else {
                            "sliding_attention"
                        })
                    })
                    .collect()
            }
        };
        put("layer_types", Some(Value::Array(pattern)));
    }
    Value::Object(c)
}

/// The model's Hugging Face config: the folder's `config.json`, or the one
/// rebuilt from a GGUF's metadata.
pub fn hf_config(cat: &Catalogue) -> Value {
    cat.hf_config
        .clone()
        .unwrap_or_else(|| hf_config_from_gguf(cat))
}

/// `{**config, **runtime_keys}` with `model_type` = the engine family.
pub fn merged(config: &Value, family: &str) -> Map<String, Value> {
    let mut m = config.as_object().cloned().unwrap_or_default();
    let text = config
        .get("text_config")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_else(|| m.clone());
    let get = |k: &str| text.get(k).filter(|v| !v.is_null()).cloned();
    let first = |keys: &[&str]| keys.iter().find_map(|k| get(k));
    let heads = get("num_attention_heads");
    let mut rt = Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            rt.insert(k.into(), v);
        }
    };
    put("vocab_size", get("vocab_size"));
    put("hidden_dim", get("hidden_size"));
    put("num_layers", get("num_hidden_layers"));
    put("attention_heads", heads.clone());
    put(
        "attention_kv_heads",
        get("num_key_value_heads").or(heads.clone()),
    );
    put("ffn_intermediate_dim", get("intermediate_size"));
    put("context_length", get("max_position_embeddings"));
    put(
        "rope_theta",
        get("rope_theta")
            .or_else(|| {
                text.get("rope_parameters")
                    .and_then(|p| p.get("rope_theta"))
                    .cloned()
            })
            .or(Some(json!(10000.0))),
    );
    let head_dim = get("head_dim").or_else(|| {
        let h = get("hidden_size")?.as_u64()?;
        let n = heads.as_ref()?.as_u64().filter(|n| *n > 0)?;
        Some(json!(h / n))
    });
    put("attention_head_dim", head_dim);
    put(
        "layer_norm_eps",
        first(&[
            "layer_norm_eps",
            "layer_norm_epsilon",
            "rms_norm_eps",
            "norm_eps",
        ])
        .or(Some(json!(1e-6))),
    );
    put(
        "decoder_start_token_id",
        first(&["decoder_start_token_id", "bos_token_id"]).or(Some(json!(0))),
    );
    for k in [
        "num_experts",
        "num_shared_experts",
        "num_top_experts",
        "num_experts_per_tok",
        "moe_every_n_layers",
    ] {
        put(k, get(k).or(Some(json!(0))));
    }
    for k in ["partial_rotary_factor", "layer_types", "conv_L_cache"] {
        put(k, get(k));
    }
    for (k, v) in rt {
        m.insert(k, v);
    }
    m.insert("model_type".into(), json!(family));
    m
}

/// A value as `config.txt` writes it (`None` for values it skips: null and
/// objects).
fn txt_value(v: &Value) -> Option<String> {
    Some(match v {
        Value::Null | Value::Object(_) => return None,
        Value::Bool(b) => if *b { "true" } else { "false" }.into(),
        Value::Number(n) => crate::engine::pyjson::py_number(n),
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .map(|x| match x {
                Value::String(s) => s.clone(),
                Value::Bool(b) => if *b { "True" } else { "False" }.into(),
                Value::Number(n) => crate::engine::pyjson::py_number(n),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(","),
    })
}

/// `config.txt`: `key=value` per key, keys sorted.
pub fn config_txt(merged: &Map<String, Value>) -> String {
    let mut keys: Vec<&String> = merged.keys().collect();
    keys.sort();
    let mut s = String::new();
    for k in keys {
        if let Some(v) = txt_value(&merged[k]) {
            s.push_str(k);
            s.push('=');
            s.push_str(&v);
            s.push('\n');
        }
    }
    s
}

/// `hf_config.json`: the merged dict, indent 2, keys sorted, no final
/// newline (Python's `json.dump`, as the engine's converter writes it).
pub fn hf_config_json(merged: &Map<String, Value>) -> String {
    dumps(&Value::Object(merged.clone()), true, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_txt_of_the_llama_fixture_config() {
        let cfg: Value = serde_json::from_str(
            r#"{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":256,
            "intermediate_size":768,"num_hidden_layers":2,"num_attention_heads":4,
            "num_key_value_heads":2,"vocab_size":1024,"max_position_embeddings":256,
            "rms_norm_eps":1e-05,"rope_theta":10000.0,"tie_word_embeddings":false,
            "torch_dtype":"bfloat16","hidden_act":"silu","bos_token_id":1}"#,
        )
        .unwrap();
        let m = merged(&cfg, "generic");
        let txt = config_txt(&m);
        for line in [
            "architectures=LlamaForCausalLM",
            "attention_head_dim=64",
            "attention_heads=4",
            "attention_kv_heads=2",
            "context_length=256",
            "decoder_start_token_id=1",
            "ffn_intermediate_dim=768",
            "hidden_dim=256",
            "layer_norm_eps=1e-05",
            "model_type=generic",
            "moe_every_n_layers=0",
            "num_layers=2",
            "rope_theta=10000.0",
            "tie_word_embeddings=false",
            "vocab_size=1024",
        ] {
            assert!(txt.lines().any(|l| l == line), "{line} in\n{txt}");
        }
        let keys: Vec<&str> = txt.lines().map(|l| l.split('=').next().unwrap()).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
    }
}
