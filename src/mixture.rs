//! Which ggml type each requantized tensor gets (`--qtype`, `--tensor-type`):
//! llama-quantize's rules (`docs/FORMAT.md` §type mixtures; facts:
//! llama.cpp `src/llama-quant.cpp`).
//!
//! - A pure type (`--qtype q4_k`): every tensor that type, as
//!   `llama-quantize --pure`.
//! - A mixture (`--qtype q4_k_m`, ...): llama.cpp's choices for dense
//!   models: the output projection (the token embedding when tied) Q6_K;
//!   `attn_v` and `ffn_down` of the layers `use_more_bits` picks Q6_K (_M)
//!   or of the first layers Q5_K (Q4_K_S).
//! - `--tensor-type REGEX=TYPE` overrides both for tensors whose name (lower
//!   case) the regex matches anywhere; the first matching rule wins.
//! - Then the fallback for rows the type's blocks do not divide: Q4_K ->
//!   Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K / Q3_K / IQ4_XS -> IQ4_NL (as
//!   llama.cpp does).

use anyhow::Result;
use ggml_quants::GgmlType;
use model_sources::{Catalogue, Role, Tensor};
use regex::Regex;

use crate::failure::bad_input;

/// A `--qtype` choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// One type for every tensor.
    Pure(GgmlType),
    /// llama.cpp's Q4_K_S.
    Q4KS,
    /// llama.cpp's Q4_K_M.
    Q4KM,
    /// llama.cpp's Q5_K_S.
    Q5KS,
    /// llama.cpp's Q5_K_M.
    Q5KM,
}

impl Scheme {
    /// The name llama-quantize gives it.
    pub fn name(self) -> String {
        match self {
            Scheme::Pure(t) => t.to_string(),
            Scheme::Q4KS => "Q4_K_S".into(),
            Scheme::Q4KM => "Q4_K_M".into(),
            Scheme::Q5KS => "Q5_K_S".into(),
            Scheme::Q5KM => "Q5_K_M".into(),
        }
    }

    fn default_type(self) -> GgmlType {
        match self {
            Scheme::Pure(t) => t,
            Scheme::Q4KS | Scheme::Q4KM => GgmlType::Q4_K,
            Scheme::Q5KS | Scheme::Q5KM => GgmlType::Q5_K,
        }
    }
}

/// The ggml types that get sidecars: those the kernels serve (and `verify`
/// can check).
pub fn has_sidecar(t: GgmlType) -> bool {
    kernels::QuantFormat::from_ggml(t).is_some()
}

/// [`has_sidecar`] as a list, in ggml's type order.
pub fn sidecar_types() -> Vec<GgmlType> {
    ggml_quants::ALL_TYPES
        .into_iter()
        .filter(|t| has_sidecar(*t))
        .collect()
}

/// One `--tensor-type` rule.
#[derive(Debug, Clone)]
pub struct Override {
    /// The pattern as given.
    pub pattern: String,
    regex: Regex,
    /// The type.
    pub ty: GgmlType,
}

/// Parse `REGEX=TYPE` (the pattern is lower-cased, as llama-quantize does;
/// `types` are the types allowed).
pub fn parse_override(s: &str, types: &[GgmlType]) -> Result<Override> {
    let (p, t) = s.rsplit_once('=').ok_or_else(|| {
        bad_input(format!(
            "--tensor-type {s:?}: expected REGEX=TYPE, e.g. attn_v=q6_k"
        ))
    })?;
    let ty = types
        .iter()
        .copied()
        .find(|g| g.name().eq_ignore_ascii_case(t.trim()))
        .ok_or_else(|| {
            let names: Vec<String> = types
                .iter()
                .map(|g| g.name().to_ascii_lowercase())
                .collect();
            bad_input(format!(
                "--tensor-type {s:?}: type {t:?} is not one convert writes sidecars of ({})",
                names.join(", ")
            ))
        })?;
    let pattern = p.to_ascii_lowercase();
    let regex = Regex::new(&pattern)
        .map_err(|e| bad_input(format!("--tensor-type {s:?}: bad regex: {e}")))?;
    Ok(Override { pattern, regex, ty })
}

/// The first `--tensor-type` rule whose regex matches `name` (lower-cased).
pub fn matching<'o>(overrides: &'o [Override], name: &str) -> Option<&'o Override> {
    let lname = name.to_ascii_lowercase();
    overrides.iter().find(|o| o.regex.is_match(&lname))
}

/// llama.cpp's type for rows of `k` values that `chosen`'s blocks do not
/// divide (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K / Q3_K / IQ4_XS
/// -> IQ4_NL; else `chosen`).
pub fn fallback(chosen: GgmlType, k: u64) -> GgmlType {
    if k.is_multiple_of(chosen.block_size() as u64) {
        return chosen;
    }
    match chosen {
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::IQ4_XS => GgmlType::IQ4_NL,
        other => other,
    }
}

/// `--max-bpw` when not given: llama.cpp Q4_1's nominal bits per weight.
pub const DEFAULT_MAX_BPW: f64 = 5.0;

/// `use_more_bits(i, n)` of llama.cpp: the first and last eighth of the
/// layers and every third in between.
pub fn use_more_bits(i: usize, n: usize) -> bool {
    // `i - n / 8` is only reached when `i >= n / 8`.
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// What a tensor is to the mixture rules, from a GGUF or a Hugging Face
/// name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    AttnV,
    FfnDown,
    Output,
    Other,
}

pub(crate) fn kind(name: &str) -> Kind {
    let n = name.to_ascii_lowercase();
    if n.contains("attn_v.")
        || n.contains("attn_qkv.")
        || n.contains("attn_kv_b.")
        || n.contains("v_proj.")
        || n.contains("qkv_proj.")
    {
        Kind::AttnV
    } else if n.contains("ffn_down") || n.contains("down_proj.") {
        Kind::FfnDown
    } else {
        Kind::Other
    }
}

/// The layer of `blk.N.` / `layers.N.` names.
pub(crate) fn layer(name: &str) -> Option<usize> {
    for pre in ["blk.", "layers."] {
        if let Some(i) = name.find(pre) {
            let rest = &name[i + pre.len()..];
            let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
            if let Ok(v) = digits.parse() {
                return Some(v);
            }
        }
    }
    None
}

/// The type of every tensor `requantized` (indices into `cat.tensors`),
/// by `scheme` and `overrides`, after the fallback. `Err` names a tensor
/// the fallback leaves without a sidecar type.
pub fn choose(
    cat: &Catalogue,
    requantized: &[usize],
    scheme: Scheme,
    overrides: &[Override],
    sidecar: impl Fn(GgmlType) -> bool,
) -> Result<Vec<GgmlType>> {
    let tensors: Vec<&Tensor> = requantized.iter().map(|&i| &cat.tensors[i]).collect();
    let has_output = cat.tensors.iter().any(|t| t.role == Role::Output);
    let kinds: Vec<Kind> = tensors
        .iter()
        .map(|t| match t.role {
            Role::Output => Kind::Output,
            Role::TokenEmbedding if !has_output => Kind::Output,
            _ => kind(&t.name),
        })
        .collect();
    let n_layer = tensors
        .iter()
        .filter_map(|t| layer(&t.name))
        .max()
        .map_or(0, |m| m + 1);
    // llama.cpp counts attn_v tensors in its processing order: by layer
    // (non-block tensors first), then by name.
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| {
        (
            layer(&tensors[a].name).map_or(0, |l| l + 1),
            &tensors[a].name,
        )
            .cmp(&(
                layer(&tensors[b].name).map_or(0, |l| l + 1),
                &tensors[b].name,
            ))
    });
    let n_v = kinds.iter().filter(|k| **k == Kind::AttnV).count();
    let mut i_v = 0;
    let mut types = vec![scheme.default_type(); tensors.len()];
    for &j in &order {
        let t = tensors[j];
        let lname = t.name.to_ascii_lowercase();
        let mixture = match (scheme, kinds[j]) {
            (Scheme::Pure(ty), _) => ty,
            (_, Kind::Output) => GgmlType::Q6_K,
            (Scheme::Q4KS, Kind::AttnV) if i_v < 4 => GgmlType::Q5_K,
            (Scheme::Q4KM | Scheme::Q5KM, Kind::AttnV) if use_more_bits(i_v, n_v) => GgmlType::Q6_K,
            (Scheme::Q4KS, Kind::FfnDown) if layer(&t.name).is_some_and(|l| l < n_layer / 8) => {
                GgmlType::Q5_K
            }
            (Scheme::Q4KM | Scheme::Q5KM, Kind::FfnDown)
                if layer(&t.name).is_some_and(|l| use_more_bits(l, n_layer)) =>
            {
                GgmlType::Q6_K
            }
            (s, _) => s.default_type(),
        };
        if kinds[j] == Kind::AttnV {
            i_v += 1;
        }
        let chosen = matching(overrides, &lname).map_or(mixture, |o| o.ty);
        let k = t.ncols();
        let fallback = fallback(chosen, k);
        let at = format!("tensor '{}' in {}", t.name, cat.file_of(t).display());
        if !sidecar(fallback) {
            return Err(bad_input(format!(
                "{at}: row length {k} is not a multiple of the {chosen} block size {}; llama.cpp falls back to {fallback}, which convert writes no sidecar of: choose another --qtype or a --tensor-type for it",
                chosen.block_size()
            )));
        }
        if !k.is_multiple_of(fallback.block_size() as u64) {
            return Err(bad_input(format!(
                "{at}: row length {k} is not a multiple of the {chosen} block size {}{}: no ggml type of this --qtype fits; choose another --qtype or a --tensor-type for it",
                chosen.block_size(),
                if fallback != chosen {
                    format!(" nor of its fallback {fallback}'s {}", fallback.block_size())
                } else {
                    String::new()
                }
            )));
        }
        types[j] = fallback;
    }
    Ok(types)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_more_bits_is_llama_cpps() {
        let picked = |n: usize| (0..n).filter(|&i| use_more_bits(i, n)).collect::<Vec<_>>();
        assert_eq!(picked(2), [1]);
        assert_eq!(
            picked(32),
            [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
        );
    }

    #[test]
    fn names_of_both_conventions() {
        assert_eq!(kind("blk.3.attn_v.weight"), Kind::AttnV);
        assert_eq!(kind("model.layers.3.self_attn.v_proj.weight"), Kind::AttnV);
        assert_eq!(kind("model.layers.3.mlp.down_proj.weight"), Kind::FfnDown);
        assert_eq!(kind("blk.0.attn_q.weight"), Kind::Other);
        assert_eq!(layer("model.layers.12.mlp.up_proj.weight"), Some(12));
        assert_eq!(layer("output.weight"), None);
    }

    #[test]
    fn overrides_parse_like_llama_quantize() {
        let types = [GgmlType::Q8_0, GgmlType::Q6_K];
        let o = parse_override("ATTN_V=Q8_0", &types).unwrap();
        assert_eq!((o.pattern.as_str(), o.ty), ("attn_v", GgmlType::Q8_0));
        assert!(o.regex.is_match("blk.0.attn_v.weight"));
        assert!(parse_override("attn_v", &types).is_err());
        assert!(parse_override("attn_v=q4_1", &types).is_err());
        assert!(parse_override("(=q8_0", &types).is_err());
    }
}
