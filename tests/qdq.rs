//! `convert qdq`: the exported model is the quantizer's own
//! dequantization (checked against `cq4`'s encoder run here on the source
//! values), under Hugging Face names and values in model.safetensors (read
//! back with the safetensors crate) and llama.cpp's in model.gguf (read
//! back with the project's GGUF reader, against the source GGUF).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use model_sources::gguf::{GgufFile, Value};

fn bundle(tmp: &Path, input: &str, name: &str, opts: &[&str]) -> PathBuf {
    let out = tmp.join(name);
    let o = convert_into(&fixture(input), &out, opts);
    assert!(o.status.success(), "{input}: {}", stderr(&o));
    out
}

fn qdq(bundle: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "qdq".as_ref(),
        bundle.as_os_str(),
        out.as_os_str(),
        "-q".as_ref(),
    ];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    convert(args)
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Every tensor of a safetensors file as f32 (F32, BF16 or F16).
fn safetensors(path: &Path) -> BTreeMap<String, (Vec<usize>, Vec<f32>)> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(name, t)| {
            let v = match t.dtype() {
                safetensors::Dtype::F32 => f32s(t.data()),
                safetensors::Dtype::BF16 => t
                    .data()
                    .chunks_exact(2)
                    .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect(),
                safetensors::Dtype::F16 => t
                    .data()
                    .chunks_exact(2)
                    .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect(),
                d => panic!("{name}: {d:?}"),
            };
            (name, (t.shape().to_vec(), v))
        })
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// What `cq4`'s encoder reconstructs from `rows` (`n x k`): encode, then
/// its own dequantization, the first `k` of `Kp` columns.
fn quantizer_dequant(family: cq4::Family, rows: &[f32], n: usize, k: usize) -> Vec<f32> {
    let b = cq4::Bundle::new(cq4::DEFAULT_SEED);
    let enc = b.encoder(family, n, k).unwrap();
    let (panels, norms) = enc.encode_tensor(rows).unwrap();
    let kp = enc.kp();
    let mut out = vec![0f32; n * kp];
    enc.dequantize_superblocks(0, &panels, &norms, &mut out)
        .unwrap();
    out.chunks_exact(kp).flat_map(|r| r[..k].to_vec()).collect()
}

#[test]
fn safetensors_export_is_the_quantizers_own_dequantization() {
    let tmp = tempfile::tempdir().unwrap();
    let b = bundle(tmp.path(), "models/tiny-llama3-hf", "b", &["--bits", "4"]);
    let out = tmp.path().join("q");
    let o = qdq(&b, &out, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let src = safetensors(&fixture("models/tiny-llama3-hf/model.safetensors"));
    let got = safetensors(&out.join("model.safetensors"));
    // Every source tensor, under its own (HF) name and shape.
    assert_eq!(
        src.iter()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect::<Vec<_>>(),
        got.iter()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect::<Vec<_>>()
    );
    let mut checked = 0;
    for (name, (shape, values)) in &src {
        let exported = &got[name].1;
        let fam = if name.contains("embed_tokens") || name.contains("lm_head") {
            Some(cq4::Family::Orthogonal)
        } else if shape.len() == 2 {
            Some(cq4::Family::Hadamard)
        } else {
            None
        };
        match fam {
            Some(f) => {
                let (n, k) = (shape[0], shape[1]);
                assert_eq!(
                    bits(exported),
                    bits(&quantizer_dequant(f, values, n, k)),
                    "{name}"
                );
                checked += 1;
            }
            // Norms are FP16 files: exported as the fp16 value, widened.
            None => {
                let want: Vec<f32> = values
                    .iter()
                    .map(|&v| half::f16::from_f32(v).to_f32())
                    .collect();
                assert_eq!(bits(exported), bits(&want), "{name}");
            }
        }
    }
    assert!(checked >= 16, "{checked} CQ4 tensors checked");
    // The folder loads as a Hugging Face model: config and tokenizer along.
    for f in ["config.json", "tokenizer.json", "manifest.json"] {
        assert!(out.join(f).is_file(), "{f}");
    }
    assert!(
        !out.join("model.gguf").exists(),
        "no GGUF metadata for an HF source"
    );
}

#[test]
fn gguf_export_restores_llama_cpp_names_order_rows_and_metadata() {
    let tmp = tempfile::tempdir().unwrap();
    let src_path = fixture("models/tiny-llama3.gguf");
    let b = bundle(tmp.path(), "models/tiny-llama3.gguf", "b", &["--bits", "4"]);
    let out = tmp.path().join("q");
    let o = qdq(&b, &out, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let src = GgufFile::open(&src_path).unwrap();
    let got = GgufFile::open(&out.join("model.gguf")).unwrap();
    // The source's metadata, in order, with file_type F32.
    let mut want_meta = src.metadata().to_vec();
    for (k, v) in want_meta.iter_mut() {
        if k == "general.file_type" {
            *v = Value::U32(0);
        }
    }
    assert_eq!(got.metadata(), &want_meta[..]);
    // The source's tensors in its order (rope_freqs is not in an engine
    // bundle), shapes as ggml dims.
    let names = |f: &GgufFile| {
        f.tensors()
            .iter()
            .map(|t| (t.name.clone(), t.dims.clone()))
            .collect::<Vec<_>>()
    };
    let want: Vec<_> = names(&src)
        .into_iter()
        .filter(|(n, _)| n != "rope_freqs.weight")
        .collect();
    assert_eq!(names(&got), want);
    // Values: the HF export of the same bundle, rows put back in llama.cpp's
    // per-head order; and that HF export equals the export of the bundle
    // made from the HF folder (the two bundles are the same bytes).
    let hf = safetensors(&out.join("model.safetensors"));
    let hb = bundle(tmp.path(), "models/tiny-llama3-hf", "hb", &["--bits", "4"]);
    let hq = tmp.path().join("hq");
    assert!(qdq(&hb, &hq, &[]).status.success());
    let hf_from_hf = safetensors(&hq.join("model.safetensors"));
    for (name, (_, v)) in &hf {
        assert_eq!(
            bits(v),
            bits(&hf_from_hf[name].1),
            "{name}: HF vs GGUF bundle"
        );
    }
    let heads = |key: &str| {
        src.metadata()
            .iter()
            .find(|(k, _)| k == key)
            .unwrap()
            .1
            .as_u64()
            .unwrap()
    };
    for t in got.tensors() {
        let g = f32s(got.tensor_data(t));
        let hf_name = match t.name.as_str() {
            "token_embd.weight" => "model.embed_tokens.weight".to_string(),
            n if n.contains("attn_q") => {
                format!("model.layers.{}.self_attn.q_proj.weight", &n[4..5])
            }
            n if n.contains("attn_k") => {
                format!("model.layers.{}.self_attn.k_proj.weight", &n[4..5])
            }
            _ => continue,
        };
        let h = &hf[&hf_name].1;
        let k = t.dims[0] as usize;
        let rows = t.dims[1] as usize;
        let nh = if t.name.contains("attn_q") {
            heads("llama.attention.head_count")
        } else if t.name.contains("attn_k") {
            heads("llama.attention.head_count_kv")
        } else {
            0
        } as usize;
        for r in 0..rows {
            // llama.cpp: GGUF row h*D + 2i + s holds HF row h*D + s*D/2 + i.
            let gr = match rows.checked_div(nh) {
                None => r,
                Some(d) => {
                    let (hh, rem) = (r / d, r % d);
                    let (s, i) = (rem / (d / 2), rem % (d / 2));
                    hh * d + 2 * i + s
                }
            };
            assert_eq!(
                bits(&g[gr * k..(gr + 1) * k]),
                bits(&h[r * k..(r + 1) * k]),
                "{} row {r}",
                t.name
            );
        }
    }
}

#[test]
fn gemma_transforms_are_undone_in_both_exports() {
    let tmp = tempfile::tempdir().unwrap();
    let b = bundle(tmp.path(), "models/tiny-gemma3.gguf", "b", &["--bits", "4"]);
    let out = tmp.path().join("q");
    assert!(qdq(&b, &out, &[]).status.success());
    let src = GgufFile::open(&fixture("models/tiny-gemma3.gguf")).unwrap();
    let got = GgufFile::open(&out.join("model.gguf")).unwrap();
    let hf = safetensors(&out.join("model.safetensors"));
    let hf_src = safetensors(&fixture("models/tiny-gemma3-hf/model.safetensors"));
    let mut norms = 0;
    for t in got.tensors() {
        if !t.name.ends_with("norm.weight") {
            continue;
        }
        let s = src.tensors().iter().find(|x| x.name == t.name).unwrap();
        let want = f32s(src.tensor_data(s));
        let have = f32s(got.tensor_data(t));
        // Stored as fp16 of ((w + 1) / 16 - 1) etc.: back within fp16's
        // precision of the value llama.cpp stored (w + 1).
        for (a, b) in have.iter().zip(&want) {
            assert!(
                (a - b).abs() <= 1e-2 * b.abs().max(1.0),
                "{}: {a} vs {b}",
                t.name
            );
        }
        norms += 1;
    }
    assert!(norms >= 8, "{norms}");
    // The HF export holds HF values (llama.cpp's +1 undone): compare with
    // the HF checkpoint the GGUF was made from.
    let (w, _) = (&hf["model.norm.weight"].1, ());
    let w0 = &hf_src["model.norm.weight"].1;
    for (a, b) in w.iter().zip(w0) {
        assert!(
            (a - b).abs() <= 1e-2 * b.abs().max(1.0),
            "model.norm.weight: {a} vs {b}"
        );
    }
    // gate/up were multiplied by 16 before CQ4 and are divided back.
    let g = &hf["model.layers.0.mlp.gate_proj.weight"].1;
    let g0 = &hf_src["model.layers.0.mlp.gate_proj.weight"].1;
    let rms = |v: &[f32]| (v.iter().map(|x| (x * x) as f64).sum::<f64>() / v.len() as f64).sqrt();
    let ratio = rms(g) / rms(g0);
    assert!((0.8..1.25).contains(&ratio), "gate_proj scale {ratio}");
}

#[test]
fn plain_bundle_exports_exactly_the_fp16_values() {
    let tmp = tempfile::tempdir().unwrap();
    let src_path = fixture("models/tiny-llama-f32.gguf");
    let b = bundle(tmp.path(), "models/tiny-llama-f32.gguf", "b", &["--plain"]);
    let out = tmp.path().join("q");
    let o = qdq(&b, &out, &["--format", "gguf"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!out.join("model.safetensors").exists());
    let src = GgufFile::open(&src_path).unwrap();
    let got = GgufFile::open(&out.join("model.gguf")).unwrap();
    assert_eq!(got.tensors().len(), src.tensors().len());
    for (t, s) in got.tensors().iter().zip(src.tensors()) {
        assert_eq!((&t.name, &t.dims), (&s.name, &s.dims));
        let want: Vec<f32> = f32s(src.tensor_data(s))
            .iter()
            .map(|&v| half::f16::from_f32(v).to_f32())
            .collect();
        assert_eq!(bits(&f32s(got.tensor_data(t))), bits(&want), "{}", t.name);
    }
}

#[test]
fn bad_requests_exit_2_and_leave_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let hb = bundle(tmp.path(), "models/tiny-llama3-hf", "hb", &["--bits", "4"]);
    // No GGUF metadata in an HF bundle.
    let out = tmp.path().join("q1");
    let o = qdq(&hb, &out, &["--format", "gguf"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("convert_hf_to_gguf"), "{}", stderr(&o));
    assert!(!out.exists());
    // Not a bundle.
    let o = qdq(&fixture("models"), &tmp.path().join("q2"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // Into the bundle itself.
    let o = qdq(&hb, &hb, &["--force"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!hb.join("model.safetensors").exists());
    // A rerun needs --force and replaces only its own files.
    let out = tmp.path().join("q3");
    assert!(qdq(&hb, &out, &[]).status.success());
    std::fs::write(out.join("notes.txt"), b"mine").unwrap();
    assert_eq!(qdq(&hb, &out, &[]).status.code(), Some(2));
    assert!(qdq(&hb, &out, &["--force"]).status.success());
    assert_eq!(std::fs::read(out.join("notes.txt")).unwrap(), b"mine");
}

#[test]
fn keep_bundles_export_with_their_source() {
    // Keep mode leaves norms (and types without sidecars) in the source:
    // --source supplies them, checked against the manifest's digest.
    let tmp = tempfile::tempdir().unwrap();
    let src_path = fixture("models/tiny-llama-Q4_K_M.gguf");
    let b = bundle(tmp.path(), "models/tiny-llama-Q4_K_M.gguf", "b", &[]);
    let out = tmp.path().join("q");
    let o = qdq(&b, &out, &["--format", "gguf"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--source"), "{}", stderr(&o));
    let wrong = fixture("models/tiny-llama-Q6_K.gguf");
    let o = qdq(
        &b,
        &out,
        &["--format", "gguf", "--source", wrong.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("digest"), "{}", stderr(&o));
    let o = qdq(
        &b,
        &out,
        &["--format", "gguf", "--source", src_path.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // Every tensor: ggml's dequantization of the source tensor (sidecars
    // hold the same blocks, interleaved), bit for bit.
    let src = GgufFile::open(&src_path).unwrap();
    let got = GgufFile::open(&out.join("model.gguf")).unwrap();
    assert_eq!(got.tensors().len(), src.tensors().len());
    for (t, s) in got.tensors().iter().zip(src.tensors()) {
        assert_eq!((&t.name, &t.dims), (&s.name, &s.dims));
        let k = s.dims[0] as usize;
        let n: usize = s.dims.iter().product::<u64>() as usize;
        let mut want = vec![0f32; n];
        ggml_quants::dequantize_rows(s.ggml_type, src.tensor_data(s), k, &mut want).unwrap();
        assert_eq!(bits(&f32s(got.tensor_data(t))), bits(&want), "{}", t.name);
    }
}
