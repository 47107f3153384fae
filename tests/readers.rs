//! The readers against independent references: every tensor of every
//! fixture as gguf-py / the safetensors package see it
//! (fixtures/golden/tensors.json, made by scripts/golden_tensors.py).

mod common;

use common::fixture;
use model_sources::gguf::{GgufFile, Value};
use model_sources::{Catalogue, Role, SourceKind};
use sha2::{Digest, Sha256};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn every_fixture_tensor_matches_the_python_packages() {
    let text = std::fs::read_to_string(fixture("golden/tensors.json")).unwrap();
    let golden: serde_json::Value = serde_json::from_str(&text).unwrap();
    let files = golden["files"].as_object().unwrap();
    assert!(
        files.len() >= 20,
        "golden list covers {} files",
        files.len()
    );
    let mut checked = 0;
    for (rel, tensors) in files {
        let cat = Catalogue::open(&fixture(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let want = tensors.as_array().unwrap();
        assert_eq!(cat.tensors.len(), want.len(), "{rel}: tensor count");
        for w in want {
            let name = w["name"].as_str().unwrap();
            let t = cat
                .get(name)
                .unwrap_or_else(|| panic!("{rel}: missing {name}"));
            let shape: Vec<u64> = w["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect();
            assert_eq!(t.shape, shape, "{rel}/{name}: shape");
            assert_eq!(
                t.dtype.to_string(),
                w["dtype"].as_str().unwrap(),
                "{rel}/{name}: dtype"
            );
            let data = cat.data(t);
            assert_eq!(
                data.len() as u64,
                w["n_bytes"].as_u64().unwrap(),
                "{rel}/{name}: bytes"
            );
            assert_eq!(
                hex(&Sha256::digest(data)),
                w["sha256"].as_str().unwrap(),
                "{rel}/{name}: sha256"
            );
            checked += 1;
        }
    }
    assert!(checked >= 200, "checked {checked} tensors");
}

#[test]
fn gguf_variants_load() {
    let v2 = GgufFile::open(&fixture("gguf-variants/v2.gguf")).unwrap();
    assert_eq!(v2.version(), 2);
    for (file, align) in [("align4.gguf", 4), ("align64.gguf", 64), ("v2.gguf", 32)] {
        let g = GgufFile::open(&fixture(&format!("gguf-variants/{file}"))).unwrap();
        assert_eq!(g.alignment(), align, "{file}");
        assert_eq!(g.data_offset() % align, 0, "{file}");
        assert_eq!(g.tensors().len(), 5);
        // The tensor after the 12-byte one sits at the next multiple of the alignment.
        let odd = g.tensor("odd.bias").unwrap();
        let next = g.tensor("blk.0.ffn_up.weight").unwrap();
        assert_eq!(
            next.offset,
            (odd.offset + 12).div_ceil(align) * align,
            "{file}"
        );
    }
    let up = GgufFile::open(&fixture("gguf-variants/upper_key.gguf")).unwrap();
    assert_eq!(
        up.get("General.Name"),
        Some(&Value::String("Upper Case Key".into()))
    );
    assert_eq!(up.get("MyVendor.CONTEXT_Length"), Some(&Value::U32(4096)));
    assert_eq!(
        up.get("tokenizer.ggml.MODEL").and_then(Value::as_str),
        Some("gpt2")
    );
}

#[test]
fn every_metadata_type_and_nested_arrays() {
    let g = GgufFile::open(&fixture("gguf-variants/nested.gguf")).unwrap();
    assert_eq!(g.get("t.u8"), Some(&Value::U8(200)));
    assert_eq!(g.get("t.i8"), Some(&Value::I8(-100)));
    assert_eq!(g.get("t.u16"), Some(&Value::U16(60000)));
    assert_eq!(g.get("t.i16"), Some(&Value::I16(-30000)));
    assert_eq!(g.get("t.u32"), Some(&Value::U32(4_000_000_000)));
    assert_eq!(g.get("t.i32"), Some(&Value::I32(-2_000_000_000)));
    assert_eq!(g.get("t.f32"), Some(&Value::F32(1.5)));
    assert_eq!(g.get("t.bool"), Some(&Value::Bool(true)));
    assert_eq!(g.get("t.str"), Some(&Value::String("h\u{e9}llo".into())));
    assert_eq!(g.get("t.u64"), Some(&Value::U64((1 << 63) + 5)));
    assert_eq!(g.get("t.i64"), Some(&Value::I64(-(1 << 62))));
    assert_eq!(g.get("t.f64"), Some(&Value::F64(-2.25)));
    let nested = g.get("t.nested").unwrap().to_json();
    assert_eq!(nested, serde_json::json!([[1, 2], [3], [4, 5, 6]]));
    let nested_str = g.get("t.nested_str").unwrap().to_json();
    assert_eq!(nested_str, serde_json::json!([["x", "y"], ["z"]]));
}

#[test]
fn roles_of_the_fixture_models() {
    let g = Catalogue::open(&fixture("models/tiny-llama-f32.gguf")).unwrap();
    let hf = Catalogue::open(&fixture("models/tiny-llama-hf-bf16")).unwrap();
    assert_eq!(hf.kind, SourceKind::HfFolder);
    for cat in [&g, &hf] {
        let count = |r: Role| cat.tensors.iter().filter(|t| t.role == r).count();
        assert_eq!(count(Role::Matmul), 14);
        assert_eq!(count(Role::TokenEmbedding), 1);
        assert_eq!(count(Role::Output), 1);
        assert_eq!(count(Role::Norm), 5);
        assert!(!cat.tied_embeddings);
        assert_eq!(cat.architecture.as_deref(), Some("llama"));
    }
    // The same weights in both: GGUF ne order is reversed into [N, K].
    assert_eq!(
        g.get("blk.1.ffn_down.weight").unwrap().shape,
        vec![256, 768]
    );
    assert_eq!(
        hf.get("model.layers.1.mlp.down_proj.weight").unwrap().shape,
        vec![256, 768]
    );
    assert!(hf.aux_files.iter().any(|p| p.ends_with("config.json")));
}

#[test]
fn both_imatrix_formats_give_llama_quantizes_vectors() {
    // The same llama-imatrix run saved as GGUF and as legacy .dat
    // (scripts/make_imatrix_fixtures): the GGUF's sum / count and the
    // .dat's value / ncall are one rounding apart at most.
    use model_sources::imatrix::{read, ImatrixFormat};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/imatrix");
    let g = read(&dir.join("tiny-llama3.imatrix.gguf")).unwrap();
    let d = read(&dir.join("tiny-llama3.imatrix.dat")).unwrap();
    assert_eq!(
        (g.format, d.format),
        (ImatrixFormat::Gguf, ImatrixFormat::Dat)
    );
    assert_eq!(g.entries.len(), 14);
    assert_eq!(
        g.entries.keys().collect::<Vec<_>>(),
        d.entries.keys().collect::<Vec<_>>()
    );
    assert_eq!(g.datasets, ["calibration.txt"]);
    assert_eq!(g.chunk_count, d.chunk_count);
    let mut differ = 0;
    for (name, e) in &g.entries {
        let v = &d.entries[name].values;
        assert_eq!((e.n_mat, e.values.len()), (1, v.len()), "{name}");
        for (a, b) in e.values.iter().zip(v) {
            let ulps = (a.to_bits() as i64 - b.to_bits() as i64).abs();
            assert!(ulps <= 2, "{name}: {a} vs {b}");
            differ += usize::from(ulps != 0);
        }
    }
    assert!(e_nonzero(&g), "values are not all equal");
    eprintln!("{differ} values differ by an ulp or two between the formats");
}

fn e_nonzero(m: &model_sources::imatrix::Imatrix) -> bool {
    m.entries
        .values()
        .all(|e| e.values.iter().any(|&v| v != e.values[0]))
}
