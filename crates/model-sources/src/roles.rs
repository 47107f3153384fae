//! What each tensor is for, from its name and shape.
//!
//! Names covered: GGUF (llama.cpp `LLM_TENSOR_*` names, all architectures
//! share them) and Hugging Face names of the llama, qwen2/qwen3,
//! gemma2/gemma3 and phi3 families (and most others, which follow the same
//! `model.layers.N.{self_attn,mlp}.*_proj` pattern).

use serde_json::Value as Json;

/// The role of a tensor in the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// A 2-D (or expert-stacked 3-D) weight used in a matrix multiplication.
    Matmul,
    /// The token embedding table `[vocab, hidden]`.
    TokenEmbedding,
    /// The output projection (lm_head) `[vocab, hidden]`.
    Output,
    /// A normalization weight (1-D).
    Norm,
    /// A bias (1-D).
    Bias,
    /// Any other 1-D tensor.
    Other1d,
    /// Anything else (position embeddings, rope tables, convolution kernels ...).
    Other,
}

impl Role {
    /// A 2-D weight that multiplies activations (matmul, embedding, lm_head).
    pub fn is_matrix(self) -> bool {
        matches!(self, Role::Matmul | Role::TokenEmbedding | Role::Output)
    }

    /// Stable lower-case name used in the manifest and `inspect`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Matmul => "matmul",
            Role::TokenEmbedding => "token_embedding",
            Role::Output => "output",
            Role::Norm => "norm",
            Role::Bias => "bias",
            Role::Other1d => "other_1d",
            Role::Other => "other",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

const EMBEDDING_NAMES: &[&str] = &[
    "token_embd.weight",
    "model.embed_tokens.weight",
    "embed_tokens.weight",
    "transformer.wte.weight",
    "model.language_model.embed_tokens.weight",
    "language_model.model.embed_tokens.weight",
    "transformer.embd.wte.weight",
    "gpt_neox.embed_in.weight",
];

const OUTPUT_NAMES: &[&str] = &[
    "output.weight",
    "lm_head.weight",
    "language_model.lm_head.weight",
    "embed_out.weight",
];

/// Markers of 2-D matmul weights in GGUF and HF names.
const MATMUL_MARKERS: &[&str] = &[
    // GGUF
    "attn_q.",
    "attn_k.",
    "attn_v.",
    "attn_qkv.",
    "attn_output.",
    "attn_q_a.",
    "attn_q_b.",
    "attn_kv_a_mqa.",
    "attn_kv_b.",
    "attn_k_b.",
    "attn_v_b.",
    "ffn_gate.",
    "ffn_up.",
    "ffn_down.",
    "ffn_gate_exps.",
    "ffn_up_exps.",
    "ffn_down_exps.",
    "ffn_gate_shexp.",
    "ffn_up_shexp.",
    "ffn_down_shexp.",
    "ffn_gate_inp.",
    "ssm_in.",
    "ssm_out.",
    // HF
    "q_proj.",
    "k_proj.",
    "v_proj.",
    "o_proj.",
    "qkv_proj.",
    "gate_proj.",
    "up_proj.",
    "down_proj.",
    "gate_up_proj.",
    "dense.",
    "fc1.",
    "fc2.",
    "c_attn.",
    "c_proj.",
    "c_fc.",
    "query_key_value.",
    "dense_h_to_4h.",
    "dense_4h_to_h.",
    "w1.",
    "w2.",
    "w3.",
    "wq.",
    "wk.",
    "wv.",
    "wo.",
    "in_proj.",
    "out_proj.",
    "mlp.gate.",
];

/// The role of one tensor given its name and row-major shape.
pub fn role_of(name: &str, shape: &[u64]) -> Role {
    if shape.len() == 2 && EMBEDDING_NAMES.contains(&name) {
        return Role::TokenEmbedding;
    }
    if shape.len() == 2 && OUTPUT_NAMES.contains(&name) {
        return Role::Output;
    }
    if shape.len() <= 1 {
        let lname = name.to_ascii_lowercase();
        return if lname.ends_with(".bias") || lname.ends_with("_bias") {
            Role::Bias
        } else if lname.contains("norm") || lname.contains("ln_") || lname.contains("layernorm") {
            Role::Norm
        } else {
            Role::Other1d
        };
    }
    let is_weight = name.ends_with(".weight") || name.ends_with("_weight");
    if is_weight && (shape.len() == 2 || shape.len() == 3) {
        let lname = name.to_ascii_lowercase();
        if lname.contains("norm") || lname.contains("embed_positions") || lname.contains("wpe.") {
            return Role::Other;
        }
        if MATMUL_MARKERS.iter().any(|m| lname.contains(m)) {
            return Role::Matmul;
        }
    }
    Role::Other
}

/// Whether the model ties its output projection to the token embedding:
/// `config.json`'s `tie_word_embeddings` when it says so, else "there is an
/// embedding but no output tensor".
pub fn tied_embeddings(roles: &[Role], hf_config: Option<&Json>) -> bool {
    let has_output = roles.contains(&Role::Output);
    let has_embedding = roles.contains(&Role::TokenEmbedding);
    if has_output {
        return false;
    }
    if let Some(tie) = hf_config
        .and_then(|c| c.get("tie_word_embeddings"))
        .and_then(Json::as_bool)
    {
        return tie && has_embedding;
    }
    has_embedding
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gguf_names() {
        assert_eq!(
            role_of("token_embd.weight", &[1024, 256]),
            Role::TokenEmbedding
        );
        assert_eq!(role_of("output.weight", &[1024, 256]), Role::Output);
        assert_eq!(role_of("output_norm.weight", &[256]), Role::Norm);
        assert_eq!(role_of("blk.0.attn_q.weight", &[256, 256]), Role::Matmul);
        assert_eq!(role_of("blk.0.attn_qkv.weight", &[768, 256]), Role::Matmul);
        assert_eq!(role_of("blk.0.attn_q.bias", &[256]), Role::Bias);
        assert_eq!(role_of("blk.0.ffn_down.weight", &[256, 768]), Role::Matmul);
        assert_eq!(role_of("blk.0.post_ffw_norm.weight", &[256]), Role::Norm);
        assert_eq!(role_of("blk.0.attn_q_norm.weight", &[64]), Role::Norm);
        assert_eq!(role_of("rope_freqs.weight", &[32]), Role::Other1d);
        assert_eq!(
            role_of("blk.0.ffn_up_exps.weight", &[8, 512, 256]),
            Role::Matmul
        );
    }

    #[test]
    fn hf_names() {
        for fam in ["q_proj", "k_proj", "v_proj", "o_proj"] {
            let n = format!("model.layers.3.self_attn.{fam}.weight");
            assert_eq!(role_of(&n, &[256, 256]), Role::Matmul, "{n}");
        }
        for fam in ["gate_proj", "up_proj", "down_proj", "gate_up_proj"] {
            let n = format!("model.layers.3.mlp.{fam}.weight");
            assert_eq!(role_of(&n, &[768, 256]), Role::Matmul, "{n}");
        }
        assert_eq!(
            role_of("model.layers.0.self_attn.qkv_proj.weight", &[768, 256]),
            Role::Matmul
        );
        assert_eq!(
            role_of("model.embed_tokens.weight", &[1024, 256]),
            Role::TokenEmbedding
        );
        assert_eq!(role_of("lm_head.weight", &[1024, 256]), Role::Output);
        assert_eq!(role_of("model.norm.weight", &[256]), Role::Norm);
        assert_eq!(
            role_of("model.layers.0.input_layernorm.weight", &[256]),
            Role::Norm
        );
        assert_eq!(
            role_of("model.layers.0.pre_feedforward_layernorm.weight", &[256]),
            Role::Norm
        );
        assert_eq!(
            role_of("model.layers.0.self_attn.q_norm.weight", &[128]),
            Role::Norm
        );
        assert_eq!(
            role_of("model.layers.0.self_attn.q_proj.bias", &[256]),
            Role::Bias
        );
    }

    #[test]
    fn tied_detection() {
        let r = [Role::TokenEmbedding, Role::Matmul];
        assert!(tied_embeddings(&r, None));
        assert!(!tied_embeddings(
            &[Role::TokenEmbedding, Role::Output],
            None
        ));
        let cfg = serde_json::json!({"tie_word_embeddings": false});
        assert!(!tied_embeddings(&r, Some(&cfg)));
    }
}
