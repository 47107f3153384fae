//! The engine layout (`--bits 4`, `docs/FORMAT.md` §engine layout) against
//! its two independent references: the GGUFs llama.cpp's own
//! `convert_hf_to_gguf.py` made of the tiny Hugging Face models (HF ->
//! bundle must equal GGUF -> bundle), and the output of the engine's own
//! converter (cactus-compute 2.2.2, `fixtures/engine-reference/`, made by
//! `scripts/make_engine_reference`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::*;
use sha2::Digest;

const MODELS: &[&str] = &["llama3", "qwen2", "gemma3"];
const TOKENIZER_FILES: &[&str] = &[
    "vocab.txt",
    "merges.txt",
    "special_tokens.json",
    "tokenizer_config.txt",
    "chat_template.jinja2",
];

fn bundle(tmp: &Path, input: &str, name: &str) -> std::path::PathBuf {
    let out = tmp.join(name);
    let o = convert_into(&fixture(input), &out, &["--bits", "4"]);
    assert!(o.status.success(), "{input}: {}", stderr(&o));
    out
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    folder_contents(dir).into_iter().collect()
}

/// `key=value` lines of a config.txt.
fn config_txt(bytes: &[u8]) -> BTreeMap<String, String> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("not key=value: {l:?}"));
            (k.to_string(), v.to_string())
        })
        .collect()
}

#[test]
fn hf_and_gguf_sources_give_byte_identical_engine_weights() {
    let tmp = tempfile::tempdir().unwrap();
    for m in MODELS {
        let hf = files(&bundle(
            tmp.path(),
            &format!("models/tiny-{m}-hf"),
            &format!("{m}-hf"),
        ));
        let gg = files(&bundle(
            tmp.path(),
            &format!("models/tiny-{m}.gguf"),
            &format!("{m}-gguf"),
        ));
        let weights = |f: &BTreeMap<String, Vec<u8>>| -> BTreeSet<String> {
            f.keys()
                .filter(|n| n.ends_with(".weights"))
                .cloned()
                .collect()
        };
        assert_eq!(weights(&hf), weights(&gg), "{m}: engine file names");
        assert!(weights(&hf).len() >= 19, "{m}: {:?}", weights(&hf));
        for name in weights(&hf) {
            // Whole files: header, CQ4 panel indices, norms, codebook and
            // rotation seeds, FP16 norms.
            assert!(
                hf[&name] == gg[&name],
                "{m}: {name} differs between HF and GGUF sources"
            );
        }
        // The transpiler binds by the rows of weights_manifest.json: the
        // same rows whatever the source.
        assert_eq!(
            String::from_utf8_lossy(&hf["weights_manifest.json"]),
            String::from_utf8_lossy(&gg["weights_manifest.json"]),
            "{m}: weights_manifest.json"
        );
        // The GGUF bundle records how it undid llama.cpp's conventions.
        let man = manifest(&tmp.path().join(format!("{m}-gguf")));
        let ops: BTreeSet<String> = man["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|e| e["transforms"].as_array().cloned().unwrap_or_default())
            .map(|t| t["op"].as_str().unwrap().to_string())
            .collect();
        // Every entry's source hash is its tensor's bytes' sha256, for the
        // CQ4 matrices hashed by their own encode pass (rows in file order)
        // or sixteen at a time beside the jobs (AVX-512, under
        // `SELF_HASHED_PANELS`) and the q / k matrices read in another row
        // order alike.
        for dir in [format!("{m}-gguf"), format!("{m}-hf")] {
            let man = manifest(&tmp.path().join(&dir));
            let src = if dir.ends_with("gguf") {
                format!("models/tiny-{m}.gguf")
            } else {
                format!("models/tiny-{m}-hf")
            };
            let cat = model_sources::Catalogue::open(&fixture(&src)).unwrap();
            for e in man["tensors"].as_array().unwrap() {
                let name = e["tensor"].as_str().unwrap();
                let t = cat.get(name).unwrap();
                let want: String = sha2::Sha256::digest(cat.data(t))
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                assert_eq!(
                    e["source_sha256"].as_str(),
                    Some(&want[..]),
                    "{dir}: {name}"
                );
            }
        }
        match *m {
            "llama3" => assert!(ops.contains("unpermute_rows"), "{m}: {ops:?}"),
            "gemma3" => assert!(
                ops.contains("add") && ops.contains("affine"),
                "{m}: {ops:?}"
            ),
            _ => assert!(
                !ops.contains("unpermute_rows"),
                "{m}: qwen2 is not permuted: {ops:?}"
            ),
        }
    }
}

#[test]
fn gguf_tokenizer_rebuilds_the_hf_tokenizer_files() {
    // llama3 (BPE with merges): every tokenizer file the same from both
    // sources. qwen2's GGUF names a bos token its HF config lacks, and the
    // gemma3 GGUF (SentencePiece) holds scores and types but not the
    // tokenizer.json added-token list: docs/FORMAT.md lists what differs.
    let tmp = tempfile::tempdir().unwrap();
    let hf = files(&bundle(tmp.path(), "models/tiny-llama3-hf", "hf"));
    let gg = files(&bundle(tmp.path(), "models/tiny-llama3.gguf", "gguf"));
    for f in TOKENIZER_FILES {
        assert!(hf.contains_key(*f), "{f} missing");
        assert_eq!(
            String::from_utf8_lossy(&hf[*f]),
            String::from_utf8_lossy(&gg[*f]),
            "llama3 {f}: HF vs GGUF source"
        );
    }
    // The SentencePiece route: vocab.txt has one piece per token id.
    let g = files(&bundle(tmp.path(), "models/tiny-gemma3.gguf", "gemma-gguf"));
    let h = files(&bundle(tmp.path(), "models/tiny-gemma3-hf", "gemma-hf"));
    let lines = |f: &BTreeMap<String, Vec<u8>>| {
        String::from_utf8(f["vocab.txt"].clone())
            .unwrap()
            .lines()
            .count()
    };
    assert_eq!(
        lines(&g),
        lines(&h),
        "gemma3 vocab.txt: one line per token id"
    );
    assert!(lines(&g) > 600);
}

#[test]
fn tokenizer_files_equal_the_engine_converters() {
    let tmp = tempfile::tempdir().unwrap();
    for m in MODELS {
        let ours = files(&bundle(tmp.path(), &format!("models/tiny-{m}-hf"), m));
        for f in TOKENIZER_FILES {
            let reference = fixture(&format!("engine-reference/tiny-{m}-hf/{f}"));
            let want = std::fs::read(&reference).unwrap();
            assert!(
                ours.get(*f) == Some(&want),
                "{m} {f}: differs from the engine converter's {}",
                reference.display()
            );
        }
    }
}

/// Keys the engine converter's config.txt has that ours does not: the
/// defaults transformers' `PretrainedConfig.to_dict()` adds to every
/// config (convert reads config.json as written and adds none of them).
const TRANSFORMERS_DEFAULTS: &[&str] = &[
    "_name_or_path",
    "add_cross_attention",
    "bad_words_ids",
    "begin_suppress_tokens",
    "chunk_size_feed_forward",
    "cross_attention_hidden_size",
    "decoder_start_token_id",
    "diversity_penalty",
    "do_sample",
    "early_stopping",
    "encoder_no_repeat_ngram_size",
    "exponential_decay_length_penalty",
    "finetuning_task",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "id2label",
    "is_decoder",
    "is_encoder_decoder",
    "label2id",
    "length_penalty",
    "max_length",
    "min_length",
    "no_repeat_ngram_size",
    "num_beam_groups",
    "num_beams",
    "num_return_sequences",
    "output_attentions",
    "output_hidden_states",
    "output_scores",
    "prefix",
    "problem_type",
    "pruned_heads",
    "remove_invalid_values",
    "repetition_penalty",
    "return_dict",
    "return_dict_in_generate",
    "sep_token_id",
    "suppress_tokens",
    "task_specific_params",
    "temperature",
    "tf_legacy_loss",
    "tie_encoder_decoder",
    "tie_word_embeddings",
    "tokenizer_class",
    "top_k",
    "top_p",
    "torchscript",
    "typical_p",
    "use_bfloat16",
    "dtype",
    "torch_dtype",
    "transformers_version",
    "architectures",
    "chunk_size",
    "output_router_logits",
    "typical",
    "quantization_config",
];

#[test]
fn config_txt_agrees_with_the_engine_converter() {
    let tmp = tempfile::tempdir().unwrap();
    for m in MODELS {
        let ours = config_txt(
            &files(&bundle(tmp.path(), &format!("models/tiny-{m}-hf"), m))["config.txt"],
        );
        let reference = config_txt(
            &std::fs::read(fixture(&format!("engine-reference/tiny-{m}-hf/config.txt"))).unwrap(),
        );
        let mut agree = 0;
        for (k, v) in &ours {
            match reference.get(k) {
                Some(r) if r == v => agree += 1,
                // 2.2.2 writes 0 (transformers 4.57 has an explicit None);
                // the facts document says bos.
                Some(_) if k == "decoder_start_token_id" => {}
                Some(r) => panic!("{m} config.txt {k}: ours {v:?}, engine {r:?}"),
                None => panic!("{m} config.txt {k}={v}: the engine converter does not write it"),
            }
        }
        for k in reference.keys() {
            assert!(
                ours.contains_key(k) || TRANSFORMERS_DEFAULTS.contains(&k.as_str()),
                "{m} config.txt lacks {k}={} the engine converter writes",
                reference[k]
            );
        }
        // The keys the engine's loader needs are all there.
        for k in [
            "model_type",
            "hidden_dim",
            "num_layers",
            "vocab_size",
            "precision",
        ] {
            if reference.contains_key(k) {
                assert!(ours.contains_key(k), "{m}: {k}");
            }
        }
        assert!(agree >= 15, "{m}: only {agree} keys agree");
    }
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

#[test]
fn engine_manifests_have_the_engine_converters_schema() {
    let tmp = tempfile::tempdir().unwrap();
    for m in MODELS {
        let dir = bundle(tmp.path(), &format!("models/tiny-{m}-hf"), m);
        let ours = files(&dir);
        let refdir = |f: &str| fixture(&format!("engine-reference/tiny-{m}-hf/{f}"));
        for f in ["weights_manifest.json", "conversion_manifest.json"] {
            let o = json(&ours[f]);
            let r = json(&std::fs::read(refdir(f)).unwrap());
            // weights_manifest.json is {"weights": [rows]},
            // conversion_manifest.json a list of rows.
            let rows = |v: &serde_json::Value| -> Vec<serde_json::Value> {
                match v {
                    serde_json::Value::Array(a) => a.clone(),
                    v => v
                        .as_object()
                        .unwrap()
                        .values()
                        .next()
                        .unwrap()
                        .as_array()
                        .unwrap()
                        .clone(),
                }
            };
            let top = |v: &serde_json::Value| -> Vec<String> {
                v.as_object()
                    .map(|o| o.keys().cloned().collect())
                    .unwrap_or_default()
            };
            assert_eq!(top(&o), top(&r), "{m} {f}: top-level keys");
            let keys = |row: &serde_json::Value| -> BTreeSet<String> {
                row.as_object().unwrap().keys().cloned().collect()
            };
            let (or, rr) = (rows(&o), rows(&r));
            for row in &or {
                assert_eq!(keys(row), keys(&rr[0]), "{m} {f}: row keys");
                // Every file a row names is in the bundle.
                let out = row["output_name"]
                    .as_str()
                    .or(row["output_file"].as_str())
                    .unwrap();
                assert!(ours.contains_key(out), "{m} {f}: {out} missing");
            }
            // Row for row the engine's values, except the file name and its
            // size (packed panels, not the engine's legacy CQ layout). The
            // engine also lists model buffers it ignores (status "ignored",
            // no file): the sources convert reads do not hold them.
            let by_hf = |rows: &[serde_json::Value]| -> BTreeMap<String, serde_json::Value> {
                rows.iter()
                    .filter(|r| r["status"] != "ignored")
                    .map(|r| {
                        let mut r = r.as_object().unwrap().clone();
                        for k in ["output_name", "output_file", "bytes"] {
                            r.remove(k);
                        }
                        (
                            r["hf_name"].as_str().unwrap().to_string(),
                            serde_json::Value::Object(r),
                        )
                    })
                    .collect()
            };
            let (ob, rb) = (by_hf(&or), by_hf(&rr));
            assert_eq!(
                ob.keys().collect::<Vec<_>>(),
                rb.keys().collect::<Vec<_>>(),
                "{m} {f}: tensors"
            );
            for (k, v) in &ob {
                assert_eq!(v, &rb[k], "{m} {f}: row {k}");
            }
            // The engine names its files X.weights; convert writes CQ4 as
            // packed panels, X.cq4p.weights (docs/FORMAT.md).
            let stems = |rows: &[serde_json::Value]| -> BTreeSet<String> {
                rows.iter()
                    .filter(|r| r["status"] != "ignored")
                    .map(|r| {
                        let n = r["output_name"]
                            .as_str()
                            .or(r["output_file"].as_str())
                            .unwrap();
                        n.trim_end_matches(".weights")
                            .trim_end_matches(".cq4p")
                            .to_string()
                    })
                    .collect()
            };
            assert_eq!(stems(&or), stems(&rr), "{m} {f}: engine file names");
        }
        // conversion_summary.json: the engine's keys; its counts over the
        // rows that have files.
        let os = json(&ours["conversion_summary.json"]);
        let rs = json(&std::fs::read(refdir("conversion_summary.json")).unwrap());
        let keys = |v: &serde_json::Value| -> BTreeSet<String> {
            v.as_object().unwrap().keys().cloned().collect()
        };
        assert_eq!(keys(&os), keys(&rs), "{m} conversion_summary.json keys");
        assert_eq!(
            os["fallback_reasons"], rs["fallback_reasons"],
            "{m} fallback_reasons"
        );
        assert_eq!(
            os["counts_by_precision"]["CQ4"], rs["counts_by_precision"]["CQ4"],
            "{m}"
        );
        assert_eq!(
            os["counts_by_status"]["fallback"], rs["counts_by_status"]["fallback"],
            "{m}"
        );
        // The project's own manifest keeps a sha256 for every file.
        let man = manifest(&dir);
        for e in man["tensors"].as_array().unwrap() {
            if let Some(f) = e["file"].as_str() {
                assert_eq!(e["sha256"].as_str().unwrap().len(), 64, "{f}");
                assert!(e["hf_name"].is_string(), "{f}: hf_name");
            }
        }
    }
}

/// `--mix auto`: the bundle of a budget keeps at FP16 exactly the matrices
/// the documented greedy order takes (attn_v, then ffn_down of the layers
/// llama.cpp's `use_more_bits` picks, then the other ffn_down, each in
/// source order, each while every byte of every weight file stays within
/// the budget per matrix weight), computed here from the file sizes of the
/// `--mix none` and the all-FP16 bundles; everything else is byte-identical
/// to `--mix none`.
#[test]
fn mix_auto_keeps_the_most_sensitive_matrices_fp16_within_the_budget() {
    let tmp = tempfile::tempdir().unwrap();
    for m in ["llama3", "qwen2"] {
        let input = fixture(&format!("models/tiny-{m}-hf"));
        let run = |name: &str, opts: &[&str]| {
            let out = tmp.path().join(format!("{m}-{name}"));
            let mut all = vec!["--bits", "4"];
            all.extend_from_slice(opts);
            let o = convert_into(&input, &out, &all);
            assert!(o.status.success(), "{m} {opts:?}: {}", stderr(&o));
            out
        };
        let none = run("none", &["--mix", "none"]);
        let every = run("every", &["--max-bpw", "64"]);
        let (mn, me) = (manifest(&none), manifest(&every));
        let entries = |v: &serde_json::Value| v["tensors"].as_array().unwrap().clone();
        let (en, ee) = (entries(&mn), entries(&me));
        let bytes = |es: &[serde_json::Value]| -> u64 {
            es.iter().filter_map(|e| e["bytes"].as_u64()).sum()
        };
        let weights: u64 = en
            .iter()
            .filter(|e| {
                ["matmul", "token_embedding", "output"].contains(&e["role"].as_str().unwrap())
                    && e["shape"].as_array().unwrap().len() == 2
            })
            .map(|e| {
                e["shape"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d.as_u64().unwrap())
                    .product::<u64>()
            })
            .sum();
        // The candidates: what the all-FP16 bundle changed.
        let changed: Vec<usize> = (0..en.len())
            .filter(|&i| en[i]["precision"] != ee[i]["precision"])
            .collect();
        let name = |i: usize| en[i]["tensor"].as_str().unwrap().to_string();
        let is = |i: usize, s: &str| name(i).contains(s);
        assert!(
            changed
                .iter()
                .all(|&i| is(i, "v_proj") || is(i, "down_proj")),
            "{m}: {:?}",
            changed.iter().map(|&i| name(i)).collect::<Vec<_>>()
        );
        assert_eq!(changed.len(), 4, "{m}: two layers of attn_v and ffn_down");
        // Two layers: use_more_bits picks layer 1 only.
        let order: Vec<usize> = [
            ("v_proj", None),
            ("down_proj", Some("layers.1.")),
            ("down_proj", Some("layers.0.")),
        ]
        .iter()
        .flat_map(|(kind, layer)| {
            changed
                .iter()
                .copied()
                .filter(move |&i| is(i, kind) && layer.is_none_or(|l| is(i, l)))
                .collect::<Vec<_>>()
        })
        .collect();
        assert_eq!(order.len(), 4);
        let mut total = bytes(&en);
        let mut steps = vec![(total, vec![])];
        let mut taken = vec![];
        for &i in &order {
            total = total - en[i]["bytes"].as_u64().unwrap() + ee[i]["bytes"].as_u64().unwrap();
            taken.push(i);
            steps.push((total, taken.clone()));
        }
        for (k, (total, want)) in steps.iter().enumerate() {
            // Half a bit above step k's size: takes it, not the next one.
            let budget = (*total as f64 * 8.0 + 0.5) / weights as f64;
            let b = format!("{budget:.17}");
            let dir = run(&format!("b{k}"), &["--max-bpw", &b]);
            let mb = manifest(&dir);
            let eb = entries(&mb);
            let fp16: Vec<usize> = changed
                .iter()
                .copied()
                .filter(|&i| eb[i]["precision"] == ee[i]["precision"])
                .collect();
            let mut want = want.clone();
            want.sort_unstable();
            assert_eq!(fp16, want, "{m} budget {b}");
            assert!(
                bytes(&eb) as f64 * 8.0 <= budget * weights as f64,
                "{m} {b}"
            );
            for i in (0..en.len()).filter(|i| !want.contains(i)) {
                assert_eq!(eb[i]["sha256"], en[i]["sha256"], "{m} {b}: {}", name(i));
            }
            for &i in &want {
                assert_eq!(eb[i]["sha256"], ee[i]["sha256"], "{m} {b}: {}", name(i));
            }
            assert_eq!(mb["options"]["mix"], "auto");
        }
    }
}
