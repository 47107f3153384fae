//! The data-free importance estimate of a model (FORMAT.md §CQ4.17): finds
//! the decoder's tensors in the catalogue by their llama.cpp names (a
//! Hugging Face checkpoint's names are mapped), streams them through the
//! dtype policy into [`cq4::importance::estimate`], and hands each CQ4
//! matrix its input importance.

use std::collections::HashMap;

use anyhow::Result;
use ggml_quants::TorchDtype;
use model_sources::{Catalogue, SourceKind, Tensor};

use crate::materialize::{self, Affine, Transform};
use cq4::importance::{Part, Shape, Source};

/// Each matrix's estimated input importance (`K` values), by tensor name.
#[derive(Debug, Default)]
pub struct Estimate {
    by_name: HashMap<String, Vec<f32>>,
    /// AWQ column sums made while the estimate read a matrix: by tensor
    /// name, the value map they were made under and the sums.
    column_sums: HashMap<String, (Affine, Vec<f64>)>,
}

impl Estimate {
    /// The importance of tensor `name`'s input columns, if estimated.
    pub fn get(&self, name: &str) -> Option<&[f32]> {
        self.by_name.get(name).map(Vec::as_slice)
    }

    /// Tensor `name`'s AWQ column sums (§CQ4.16) of its values under
    /// `tf`, if the estimate made them while it read the tensor: the same
    /// sums, bit for bit, as a pass of [`cq4::awq::ColumnSums`] over the
    /// tensor's rows under `tf` (the same values, rows in the same order).
    pub fn column_sums(&self, name: &str, tf: &Transform) -> Option<&[f64]> {
        match self.column_sums.get(name) {
            Some((a, sums)) if tf.unpermute_heads.is_none() && *a == tf.values => Some(sums),
            _ => None,
        }
    }

    /// Matrices with an estimate.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }
}

/// llama.cpp's architecture name of a Hugging Face `model_type`.
pub fn gguf_architecture(model_type: &str) -> &str {
    match model_type {
        "gemma3_text" => "gemma3",
        t => t,
    }
}

/// Gemma's RMS norms multiply by `1 + w`; a GGUF stores that sum, a
/// Hugging Face checkpoint stores `w`.
fn gemma(arch: &str) -> bool {
    arch.starts_with("gemma")
}

/// The catalogue seen through llama.cpp's tensor names.
struct Model<'c> {
    cat: &'c Catalogue,
    dtype: TorchDtype,
    arch: String,
    index: HashMap<&'c str, &'c Tensor>,
    /// Matrices whose AWQ column sums are made while they are read, under
    /// this value map, by tensor name.
    sums_wanted: &'c HashMap<String, Affine>,
    /// Those sums.
    column_sums: HashMap<String, (Affine, Vec<f64>)>,
    /// Whether the token embedding's value map carried every value of it
    /// exactly (`Affine::carries_exactly`), once it was read.
    embedding_mapped_exactly: bool,
}

impl<'c> Model<'c> {
    fn new(
        cat: &'c Catalogue,
        dtype: TorchDtype,
        sums_wanted: &'c HashMap<String, Affine>,
    ) -> Self {
        let arch = gguf_architecture(cat.architecture.as_deref().unwrap_or("")).to_string();
        let index = cat.tensors.iter().map(|t| (t.name.as_str(), t)).collect();
        Model {
            cat,
            dtype,
            arch,
            index,
            sums_wanted,
            column_sums: HashMap::new(),
            embedding_mapped_exactly: false,
        }
    }

    /// The tensor llama.cpp names `gguf`.
    fn tensor(&self, gguf: &str) -> Option<&'c Tensor> {
        match self.cat.kind {
            SourceKind::Gguf { .. } => self.index.get(gguf).copied(),
            _ => match model_sources::hf::hf_tensor(&self.arch, gguf, &[]) {
                model_sources::hf::HfTensor::Mapped { name, .. } => {
                    self.index.get(name.as_str()).copied()
                }
                _ => None,
            },
        }
    }

    fn gguf_name(part: Part) -> String {
        match part {
            Part::TokenEmbedding => "token_embd.weight".into(),
            Part::OutputNorm => "output_norm.weight".into(),
            Part::AttnNorm(l) => format!("blk.{l}.attn_norm.weight"),
            Part::AttnV(l) => format!("blk.{l}.attn_v.weight"),
            Part::AttnOutput(l) => format!("blk.{l}.attn_output.weight"),
            Part::PostAttnNorm(l) => format!("blk.{l}.post_attention_norm.weight"),
            Part::FfnNorm(l) => format!("blk.{l}.ffn_norm.weight"),
            Part::FfnGate(l) => format!("blk.{l}.ffn_gate.weight"),
            Part::FfnUp(l) => format!("blk.{l}.ffn_up.weight"),
            Part::FfnDown(l) => format!("blk.{l}.ffn_down.weight"),
            Part::PostFfwNorm(l) => format!("blk.{l}.post_ffw_norm.weight"),
        }
    }
}

impl Source for Model<'_> {
    type Error = anyhow::Error;

    fn vector(&mut self, part: Part) -> Result<Option<Vec<f32>>> {
        let Some(t) = self.tensor(&Self::gguf_name(part)) else {
            return Ok(None);
        };
        if t.shape.len() != 1 {
            return Ok(None);
        }
        let mut v = Vec::with_capacity(t.n_elements() as usize);
        materialize::values(self.cat, t, self.dtype, Transform::NONE, |x| {
            v.extend_from_slice(x);
            Ok(())
        })?;
        // A Hugging Face Gemma checkpoint stores w; the model multiplies by
        // f32(w + 1), the value a GGUF stores.
        if gemma(&self.arch) && !matches!(self.cat.kind, SourceKind::Gguf { .. }) {
            for x in &mut v {
                *x += 1.0;
            }
        }
        Ok(Some(v))
    }

    fn matrix(
        &mut self,
        part: Part,
        each: &mut dyn FnMut(&[f32], usize),
    ) -> Result<Option<(usize, usize)>> {
        let Some(t) = self.tensor(&Self::gguf_name(part)) else {
            return Ok(None);
        };
        if t.shape.len() != 2 || t.dtype.ggml().is_none() {
            return Ok(None);
        }
        let k = t.ncols() as usize;
        // The matrix's AWQ column sums from the same rows while they are in
        // cache (its conversion then skips its own pass over the source);
        // the embedding's are the estimate's own sums, unmapped or scaled
        // (see `estimate`), so only whether its map is exact is tracked.
        let wanted = self.sums_wanted.get(&t.name).copied();
        let own = part == Part::TokenEmbedding && wanted.is_some_and(reuses_estimate_sums);
        let mut awq = wanted
            .filter(|_| !own)
            .map(|a| (a, materialize::ColumnSumsUnder::new(a, k)));
        let mut exact = true;
        materialize::rows(self.cat, t, self.dtype, 1, Transform::NONE, |_, rows| {
            each(rows, k);
            if let Some((_, sums)) = &mut awq {
                sums.add(rows);
            }
            if let (true, Some(a)) = (own, wanted) {
                exact &= a.carries_exactly(rows);
            }
            Ok(())
        })?;
        if part == Part::TokenEmbedding {
            self.embedding_mapped_exactly = exact;
        }
        if let Some((a, s)) = awq {
            self.column_sums.insert(t.name.clone(), (a, s.into_sums()));
        }
        Ok(Some((t.nrows() as usize, k)))
    }
}

/// Whether the embedding's AWQ sums under `map` come from the estimate's
/// own column sums: the identity, or a power-of-two scaling.
fn reuses_estimate_sums(map: Affine) -> bool {
    map.is_identity() || map.pow2_exponent().is_some()
}

/// A config value as a count.
fn count(cfg: &serde_json::Value, key: &str) -> Option<usize> {
    cfg.get(key)
        .or_else(|| cfg.get("text_config").and_then(|t| t.get(key)))
        .and_then(serde_json::Value::as_u64)
        .map(|v| v as usize)
}

/// Make the estimate. `Ok(Err(why))` when the model has no decoder the
/// estimate understands (the conversion then goes on without it).
///
/// `sums_wanted`: matrices (by tensor name, with the value map of their
/// conversion) whose AWQ column sums are made from the same reads; see
/// [`Estimate::column_sums`].
pub fn estimate(
    cat: &Catalogue,
    dtype: TorchDtype,
    sums_wanted: &HashMap<String, Affine>,
) -> Result<Result<Estimate, String>> {
    let mut model = Model::new(cat, dtype, sums_wanted);
    let cfg = crate::engine::config::hf_config(cat);
    let Some(n_head) = count(&cfg, "num_attention_heads") else {
        return Ok(Err("the model's head count is not known".into()));
    };
    let n_kv_head = count(&cfg, "num_key_value_heads").unwrap_or(n_head);
    let mut n_layer = 0;
    while model
        .tensor(&Model::gguf_name(Part::AttnNorm(n_layer)))
        .is_some()
    {
        n_layer += 1;
    }
    if n_layer == 0 {
        return Ok(Err("no decoder layers found by name".into()));
    }
    let shape = Shape {
        n_layer,
        n_head,
        n_kv_head,
        embedding_scaled: gemma(&model.arch),
        // Post-norms when the model has a norm after attention that is not
        // the MLP's input norm (a Llama checkpoint's Hugging Face name for
        // `ffn_norm` is `post_attention_layernorm`: the same tensor).
        post_norms: match (
            model.tensor(&Model::gguf_name(Part::PostAttnNorm(0))),
            model.tensor(&Model::gguf_name(Part::FfnNorm(0))),
        ) {
            (Some(p), Some(f)) => !std::ptr::eq(p, f),
            (Some(_), None) => true,
            (None, _) => false,
        },
    };
    let imp = match cq4::importance::estimate(&mut model, &shape)? {
        Ok(i) => i,
        Err(skip) => return Ok(Err(skip.to_string())),
    };
    let mut by_name = HashMap::new();
    let mut put = |gguf: String, a: &[f64]| {
        if let Some(t) = model.tensor(&gguf) {
            if t.shape.len() == 2 && t.ncols() as usize == a.len() {
                by_name.insert(t.name.clone(), cq4::importance::to_f32(a));
            }
        }
    };
    for (l, li) in imp.layers.iter().enumerate() {
        for k in ["attn_q", "attn_k", "attn_v"] {
            put(format!("blk.{l}.{k}.weight"), &li.attn_in);
        }
        put(format!("blk.{l}.attn_output.weight"), &li.attn_output_in);
        for k in ["ffn_gate", "ffn_up"] {
            put(format!("blk.{l}.{k}.weight"), &li.ffn_in);
        }
        put(format!("blk.{l}.ffn_down.weight"), &li.ffn_down_in);
    }
    // The output projection's input: lm_head, or the tied embedding.
    if model.tensor("output.weight").is_some() {
        put("output.weight".into(), &imp.output);
    } else if cat.tied_embeddings {
        put("token_embd.weight".into(), &imp.output);
    }
    // The embedding's AWQ sums: the estimate's own column sums (the same
    // additions in the same order), times 4^e under a map `v * 2^e` that
    // carried every value exactly (`materialize::ColumnSumsUnder`: then the
    // mapped sums are exactly those); under a map that did not, none (its
    // conversion makes its own pass).
    let embedding = model.tensor(&Model::gguf_name(Part::TokenEmbedding));
    let exact = model.embedding_mapped_exactly;
    let mut column_sums = model.column_sums;
    if let Some(t) = embedding {
        if let Some(&a) = sums_wanted.get(&t.name) {
            if reuses_estimate_sums(a) && exact {
                let mut sums = imp.embedding_column_sums;
                let scale = a.pow2_exponent().map_or(1.0, |e| 4f64.powi(e));
                sums.iter_mut().for_each(|s| *s *= scale);
                column_sums.insert(t.name.clone(), (a, sums));
            }
        }
    }
    Ok(Ok(Estimate {
        by_name,
        column_sums,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AWQ column sums the estimate hands over are those of a pass of
    /// their own over the tensor, bit for bit: the tied embedding's (the
    /// estimate's own sums), a matrix's unmapped and a matrix's under a
    /// value map; a tensor asked for under another transform gets none.
    #[test]
    fn handed_over_column_sums_equal_a_pass_of_their_own() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/models/tiny-qwen2.gguf");
        let cat = Catalogue::open(&path).unwrap();
        assert!(cat.tied_embeddings);
        let x16 = Affine {
            add: 0.0,
            mul: 16.0,
            then: 0.0,
        };
        let by16 = Affine {
            add: 0.0,
            mul: 1.0 / 16.0,
            then: 0.0,
        };
        let shifted = Affine {
            add: 1.0,
            mul: 16.0,
            then: -1.0,
        };
        // The embedding unmapped, under Gemma's /16 (its sums scaled) and
        // under a map that is no scaling (summed mapped in the pass).
        for embedding in [Affine::IDENTITY, by16, shifted] {
            let wanted: HashMap<String, Affine> = [
                ("token_embd.weight", embedding),
                ("blk.0.ffn_up.weight", Affine::IDENTITY),
                ("blk.1.ffn_gate.weight", x16),
            ]
            .into_iter()
            .map(|(n, a)| (n.to_string(), a))
            .collect();
            let est = estimate(&cat, TorchDtype::Float32, &wanted)
                .unwrap()
                .unwrap();
            for (name, a) in &wanted {
                let t = cat.get(name).unwrap();
                // The reference: every value mapped, then summed.
                let mut own = cq4::awq::ColumnSums::new(t.ncols() as usize);
                let tf = Transform {
                    unpermute_heads: None,
                    values: *a,
                };
                materialize::rows(
                    &cat,
                    t,
                    TorchDtype::Float32,
                    1,
                    Transform::NONE,
                    |_, rows| {
                        own.add_rows_mapped(rows, |src, out| a.map_into(src, out));
                        Ok(())
                    },
                )
                .unwrap();
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                let got = est.column_sums(name, &tf).unwrap();
                assert_eq!(bits(got), bits(own.sums()), "{name}");
                assert!(est.column_sums(name, &Transform::NONE).is_none() || a.is_identity());
            }
        }
    }
}
