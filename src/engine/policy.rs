//! The engine's precision policy and its model-specific weight transforms
//! (`docs/FORMAT.md` §engine layout; facts: the engine converter's
//! `policy.py` and `tensor_io.py` / `cli.py`).

use crate::engine::names::EngineName;
use crate::materialize::Affine;

/// What a tensor becomes in an engine bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Plain FP16 (FP32 only where a value does not fit fp16).
    Fp16,
    /// CQ4 packed panels, Hadamard family (2-D matmuls with K % 128 == 0).
    Hadamard,
    /// CQ4 packed panels, orthogonal family (token embedding, lm_head).
    Orthogonal,
}

/// The precision of tensor `name` of shape `shape` (row-major, `[N, K]`):
/// the engine's rules, first match wins. Where the engine writes a legacy
/// CQ file `convert` cannot (an orthogonal tensor with K % 128 != 0) the
/// tensor is FP16 instead.
pub fn precision(name: &EngineName, shape: &[u64]) -> Precision {
    let out = name.plain_file();
    if out.contains("norm") || name.suffix == ".bias" || shape.len() != 2 {
        return Precision::Fp16;
    }
    if out.contains("position") && out.contains("embed") {
        return Precision::Fp16;
    }
    let k = shape[1];
    let embedding = name.is_embedding()
        || out.contains("embed")
        || out.contains("lm_head")
        || out.contains("output_weight");
    if !k.is_multiple_of(128) {
        return Precision::Fp16;
    }
    if embedding {
        Precision::Orthogonal
    } else {
        Precision::Hadamard
    }
}

/// The engine converter's model family of a Hugging Face `model_type`
/// (its `detection.py`): the value `config.txt` gets as `model_type`.
pub fn family(model_type: &str) -> &'static str {
    let t = model_type.to_ascii_lowercase();
    for (needle, family) in [
        ("gemma3", "gemma3"),
        ("gemma4", "gemma4"),
        ("qwen", "qwen"),
        ("lfm2", "lfm2"),
        ("whisper", "whisper"),
        ("moonshine", "moonshine"),
        ("parakeet_tdt", "parakeet_tdt"),
        ("parakeet", "parakeet"),
        ("nomic", "nomic"),
        ("needle", "needle"),
    ] {
        if t.contains(needle) {
            return family;
        }
    }
    if t == "llama" {
        "generic"
    } else {
        "qwen"
    }
}

/// The engine's weight transform of `name` for `family` (Gemma 3 and 4;
/// identity otherwise). Written in terms of the HF value `w`.
pub fn transform(family: &str, name: &EngineName) -> Affine {
    let out = name.plain_file();
    let has = |s: &str| out.contains(s);
    let affine = |add, mul, then| Affine { add, mul, then };
    let block_norm =
        has("input_norm") || has("post_attn_norm") || has("pre_ffn_norm") || has("post_ffn_norm");
    match family {
        "gemma3" => {
            if block_norm {
                affine(1.0, 1.0 / 16.0, -1.0)
            } else if has("output_norm") {
                affine(1.0, 16.0, -1.0)
            } else if has("ffn_gate") || has("ffn_up") {
                affine(0.0, 16.0, 0.0)
            } else if has("token_embeddings") {
                affine(0.0, 1.0 / 16.0, 0.0)
            } else {
                Affine::IDENTITY
            }
        }
        "gemma4" => {
            if block_norm || has("post_per_layer_norm") || has("post_proj_norm") {
                affine(0.0, 1.0 / 16.0, 0.0)
            } else if has("output_norm")
                || has("ffn_gate")
                || has("ffn_up")
                || has("per_layer_gate")
                || has("moe_gate_proj")
                || has("moe_up_proj")
            {
                affine(0.0, 16.0, 0.0)
            } else if has("token_embeddings") || has("output_weight") || has("router_scale") {
                affine(0.0, 1.0 / 16.0, 0.0)
            } else {
                Affine::IDENTITY
            }
        }
        _ => Affine::IDENTITY,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::names::engine_name;

    #[test]
    fn policy_table() {
        use Precision::{Fp16, Hadamard, Orthogonal};
        let cases: [(&str, &[u64], Precision); 8] = [
            ("model.embed_tokens.weight", &[1024, 256], Orthogonal),
            ("lm_head.weight", &[1024, 256], Orthogonal),
            (
                "model.layers.0.self_attn.q_proj.weight",
                &[256, 256],
                Hadamard,
            ),
            (
                "model.layers.0.mlp.down_proj.weight",
                &[576, 1536],
                Hadamard,
            ),
            ("model.layers.0.self_attn.q_proj.weight", &[576, 576], Fp16),
            ("model.embed_tokens.weight", &[49152, 576], Fp16),
            ("model.layers.0.input_layernorm.weight", &[256], Fp16),
            ("model.layers.0.self_attn.q_proj.bias", &[256], Fp16),
        ];
        for (hf, shape, want) in cases {
            assert_eq!(precision(&engine_name(hf), shape), want, "{hf} {shape:?}");
        }
    }

    #[test]
    fn families_and_gemma_transforms() {
        assert_eq!(family("llama"), "generic");
        assert_eq!(family("gemma3_text"), "gemma3");
        assert_eq!(family("qwen2"), "qwen");
        assert_eq!(family("mistral"), "qwen");
        let t = |hf: &str| transform("gemma3", &engine_name(hf));
        assert_eq!(
            t("model.layers.0.input_layernorm.weight").apply(0.5),
            1.5 / 16.0 - 1.0
        );
        assert_eq!(t("model.norm.weight").apply(0.5), 1.5 * 16.0 - 1.0);
        assert_eq!(t("model.layers.0.mlp.gate_proj.weight").apply(0.5), 8.0);
        assert_eq!(t("model.embed_tokens.weight").apply(16.0), 1.0);
        assert!(t("model.layers.0.self_attn.q_norm.weight").is_identity());
        assert!(t("model.layers.0.mlp.down_proj.weight").is_identity());
        assert!(transform("generic", &engine_name("model.norm.weight")).is_identity());
    }
}
