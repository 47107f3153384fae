//! Large models without a large machine (issue 16, docs/SCALE_OUT.md):
//! the catalogue, plan and 64-way partition of a Llama-3.1-405B-shaped
//! sharded safetensors folder (real headers, sparse holes for the data, as
//! `scripts/gen_405b_index.py` writes it) in seconds and bounded memory.

mod common;

use std::io::Write;
use std::path::Path;

use common::*;

const HIDDEN: u64 = 16384;
const FFN: u64 = 53248;
const VOCAB: u64 = 128256;
const LAYERS: u64 = 126;
const KV: u64 = 8 * 128;

fn tensors() -> Vec<(String, Vec<u64>)> {
    let mut v = vec![("model.embed_tokens.weight".to_string(), vec![VOCAB, HIDDEN])];
    for i in 0..LAYERS {
        let p = format!("model.layers.{i}.");
        for (n, s) in [
            ("input_layernorm.weight", vec![HIDDEN]),
            ("self_attn.q_proj.weight", vec![HIDDEN, HIDDEN]),
            ("self_attn.k_proj.weight", vec![KV, HIDDEN]),
            ("self_attn.v_proj.weight", vec![KV, HIDDEN]),
            ("self_attn.o_proj.weight", vec![HIDDEN, HIDDEN]),
            ("post_attention_layernorm.weight", vec![HIDDEN]),
            ("mlp.gate_proj.weight", vec![FFN, HIDDEN]),
            ("mlp.up_proj.weight", vec![FFN, HIDDEN]),
            ("mlp.down_proj.weight", vec![HIDDEN, FFN]),
        ] {
            v.push((format!("{p}{n}"), s));
        }
    }
    v.push(("model.norm.weight".into(), vec![HIDDEN]));
    v.push(("lm_head.weight".into(), vec![VOCAB, HIDDEN]));
    v
}

/// The folder: shards of at most ~4.3 GB, each a safetensors header and a
/// hole (`set_len`), the index and config.json. Returns (weights, bytes).
fn write_model(dir: &Path) -> (u64, u64) {
    std::fs::create_dir(dir).unwrap();
    let mut groups: Vec<Vec<(String, Vec<u64>)>> = vec![Vec::new()];
    let mut size = 0u64;
    for (name, shape) in tensors() {
        let n = 2 * shape.iter().product::<u64>();
        if !groups.last().unwrap().is_empty() && size + n > 4_300_000_000 {
            groups.push(Vec::new());
            size = 0;
        }
        groups.last_mut().unwrap().push((name, shape));
        size += n;
    }
    let total = groups.len();
    let mut map = serde_json::Map::new();
    let (mut weights, mut bytes) = (0u64, 0u64);
    for (k, g) in groups.iter().enumerate() {
        let file = format!("model-{:05}-of-{total:05}.safetensors", k + 1);
        let mut header = serde_json::Map::new();
        header.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
        let mut off = 0u64;
        for (name, shape) in g {
            let n = 2 * shape.iter().product::<u64>();
            header.insert(
                name.clone(),
                serde_json::json!({"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}),
            );
            off += n;
            weights += n / 2;
            map.insert(name.clone(), serde_json::json!(file));
        }
        let mut text = serde_json::to_vec(&header).unwrap();
        while !text.len().is_multiple_of(8) {
            text.push(b' ');
        }
        let mut f = std::fs::File::create(dir.join(&file)).unwrap();
        f.write_all(&(text.len() as u64).to_le_bytes()).unwrap();
        f.write_all(&text).unwrap();
        f.set_len(8 + text.len() as u64 + off).unwrap();
        bytes += off;
    }
    let index = serde_json::json!({"metadata": {"total_size": bytes}, "weight_map": map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": HIDDEN, "intermediate_size": FFN, "num_hidden_layers": LAYERS,
        "num_attention_heads": 128, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": VOCAB, "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
        "torch_dtype": "bfloat16"
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    (weights, bytes)
}

#[test]
fn a_405b_model_is_planned_and_partitioned_in_seconds_and_little_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("llama-405b");
    let (weights, bytes) = write_model(&model);
    assert_eq!(weights, 405_853_388_800);
    let out = tmp.path().join("out");
    for opts in [&["--bits", "4"][..], &["--qtype", "q4_k_m"][..]] {
        let mut all = opts.to_vec();
        all.extend(["--dry-run", "--json", "--shard", "0/64"]);
        let t = std::time::Instant::now();
        let o = convert_into(&model, &out, &all);
        let wall = t.elapsed().as_secs_f64();
        assert!(o.status.success(), "{opts:?}: {}", stderr(&o));
        assert!(!out.exists(), "--dry-run wrote {}", out.display());
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(j["tensors"], 1 + 9 * LAYERS + 2);
        assert_eq!(j["source_bytes"], bytes);
        assert!(j["source_files"].as_u64().unwrap() > 100);
        assert!(wall < 20.0, "{opts:?}: {wall:.1} s");
        // The maps are address space, not memory: the data is never read.
        if let Some(rss) = j["peak_rss_kib"].as_u64() {
            assert!(rss < 256 * 1024, "{opts:?}: peak RSS {rss} KiB");
        }
        let shards = j["shards"].as_array().unwrap();
        assert_eq!(shards.len(), 64);
        let loads: Vec<f64> = shards
            .iter()
            .map(|s| s["estimated_cpu_s"].as_f64().unwrap())
            .collect();
        let total = j["estimated_cpu_s"].as_f64().unwrap();
        assert!(loads.iter().all(|&l| l > 0.0), "{opts:?}: an idle shard");
        let tensors: u64 = shards.iter().map(|s| s["tensors"].as_u64().unwrap()).sum();
        assert_eq!(tensors, j["tensors"].as_u64().unwrap());
        let max = loads.iter().cloned().fold(0.0, f64::max);
        if opts[0] == "--qtype" {
            // Many similar items: every shard within a few % of the mean.
            assert!(
                max < total / 64.0 * 1.05,
                "{opts:?}: {max} vs mean {}",
                total / 64.0
            );
        } else {
            // One item (an orthogonal 128256 x 16384 rotation, K MACs per
            // weight) outweighs a 64th of the rest: it is a shard alone.
            let big = 128256.0 * 16384.0 * 16384.0 * 0.065e-9;
            assert!(max >= big && max < big * 1.05, "{opts:?}: {max} vs {big}");
        }
    }
}
