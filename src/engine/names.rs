//! Engine file names of Hugging Face parameters (`docs/FORMAT.md` §engine
//! layout; the engine converter's naming rules).

/// A tensor's name in the engine bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineName {
    /// The file stem (`layer_0_attn_q`, `token_embeddings`).
    pub stem: String,
    /// `.weights`, or `.bias` for biases.
    pub suffix: &'static str,
    /// Whether the name matched a rule (false: the generic fallback).
    pub recognized: bool,
}

impl EngineName {
    /// The file name for a plain (FP16) file.
    pub fn plain_file(&self) -> String {
        format!("{}{}", self.stem, self.suffix)
    }

    /// The file name for a CQ4 packed-panel file (`X.weights` ->
    /// `X.cq4p.weights`).
    pub fn panel_file(&self) -> String {
        format!("{}.cq4p.weights", self.stem)
    }

    /// True for the token embedding and the output projection.
    pub fn is_embedding(&self) -> bool {
        self.stem == "token_embeddings" || self.stem == "output_weight"
    }
}

const EMBEDDINGS: &[&str] = &[
    "model.embed_tokens.weight",
    "model.language_model.embed_tokens.weight",
    "model.text_model.embed_tokens.weight",
    "embed_tokens.weight",
    "transformer.wte.weight",
];
const OUTPUTS: &[&str] = &[
    "lm_head.weight",
    "output.weight",
    "transformer.lm_head.weight",
];
const FINAL_NORMS: &[&str] = &[
    "model.norm.weight",
    "norm.weight",
    "model.language_model.norm.weight",
    "final_layernorm.weight",
];
const LAYER_PREFIXES: &[&str] = &[
    "model.language_model.layers.",
    "model.text_model.layers.",
    "model.layers.",
    "layers.",
    "transformer.h.",
];
const LAYER_SUFFIXES: &[(&str, &str)] = &[
    ("self_attn.q_proj.weight", "attn_q"),
    ("self_attn.k_proj.weight", "attn_k"),
    ("self_attn.v_proj.weight", "attn_v"),
    ("self_attn.o_proj.weight", "attn_output"),
    ("input_layernorm.weight", "input_norm"),
    ("post_attention_layernorm.weight", "post_attn_norm"),
    ("pre_feedforward_layernorm.weight", "pre_ffn_norm"),
    ("post_feedforward_layernorm.weight", "post_ffn_norm"),
    ("self_attn.q_norm.weight", "attn_q_norm"),
    ("self_attn.k_norm.weight", "attn_k_norm"),
    ("mlp.gate_proj.weight", "ffn_gate"),
    ("mlp.up_proj.weight", "ffn_up"),
    ("mlp.down_proj.weight", "ffn_down"),
];

/// dots -> `_`, and a trailing `.weight` / `.bias` cut off.
fn flat(name: &str) -> (String, &'static str) {
    if let Some(stem) = name.strip_suffix(".bias") {
        (stem.replace('.', "_"), ".bias")
    } else {
        let stem = name.strip_suffix(".weight").unwrap_or(name);
        (stem.replace('.', "_"), ".weights")
    }
}

/// The engine name of HF parameter `hf`.
pub fn engine_name(hf: &str) -> EngineName {
    let fixed = |stem: &str| EngineName {
        stem: stem.into(),
        suffix: ".weights",
        recognized: true,
    };
    if EMBEDDINGS.contains(&hf) {
        return fixed("token_embeddings");
    }
    if OUTPUTS.contains(&hf) {
        return fixed("output_weight");
    }
    if FINAL_NORMS.contains(&hf) {
        return fixed("output_norm");
    }
    for prefix in LAYER_PREFIXES {
        let Some(rest) = hf.strip_prefix(prefix) else {
            continue;
        };
        let Some((layer, tail)) = rest.split_once('.') else {
            continue;
        };
        if layer.is_empty() || !layer.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Some((_, short)) = LAYER_SUFFIXES.iter().find(|(s, _)| *s == tail) {
            return fixed(&format!("layer_{layer}_{short}"));
        }
        let (stem, suffix) = flat(tail);
        return EngineName {
            stem: format!("layer_{layer}_{stem}"),
            suffix,
            recognized: true,
        };
    }
    let (stem, suffix) = flat(hf);
    EngineName {
        stem,
        suffix,
        recognized: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_naming_table() {
        for (hf, file) in [
            ("model.embed_tokens.weight", "token_embeddings.weights"),
            ("lm_head.weight", "output_weight.weights"),
            ("model.norm.weight", "output_norm.weights"),
            (
                "model.layers.0.self_attn.q_proj.weight",
                "layer_0_attn_q.weights",
            ),
            (
                "model.layers.11.mlp.down_proj.weight",
                "layer_11_ffn_down.weights",
            ),
            (
                "model.layers.3.input_layernorm.weight",
                "layer_3_input_norm.weights",
            ),
            (
                "model.layers.3.post_attention_layernorm.weight",
                "layer_3_post_attn_norm.weights",
            ),
            (
                "model.layers.0.self_attn.q_norm.weight",
                "layer_0_attn_q_norm.weights",
            ),
            (
                "model.layers.0.self_attn.q_proj.bias",
                "layer_0_self_attn_q_proj.bias",
            ),
            (
                "model.language_model.layers.2.mlp.up_proj.weight",
                "layer_2_ffn_up.weights",
            ),
            (
                "model.layers.0.mlp.router.weight",
                "layer_0_mlp_router.weights",
            ),
        ] {
            let n = engine_name(hf);
            assert_eq!(n.plain_file(), file, "{hf}");
            assert!(n.recognized, "{hf}");
        }
        let n = engine_name("position_ids");
        assert_eq!(n.plain_file(), "position_ids.weights");
        assert!(!n.recognized);
        assert_eq!(
            engine_name("model.layers.0.self_attn.q_proj.weight").panel_file(),
            "layer_0_attn_q.cq4p.weights"
        );
    }
}
